"""The text writer of the large families: what Prometheus's own parser reads back."""

from __future__ import annotations

import math

from prometheus_client.parser import text_string_to_metric_families

from kiban.observability.exposition import Family, render


def parsed(*families: Family) -> dict[str, list[tuple[dict[str, str], float]]]:
    text = render(families).decode()
    return {
        f.name: [(s.labels, s.value) for s in f.samples]
        for f in text_string_to_metric_families(text)
    }


def test_values_labels_and_escapes_read_back() -> None:
    odd = 'a "quoted" \\ back\nslash'
    gauge = Family("kiban_x", "help with \\ and\nnewline", labels=("node", "kind"))
    gauge.add(("n1", "plain"), 3)
    gauge.add((odd, "odd"), 0.25)
    gauge.add(("n2", "inf"), math.inf)
    gauge.ones = [("n3", "one"), (odd, "one")]
    counter = Family("kiban_y", "a counter", "counter", ("queue",))
    counter.add(("q",), 7)
    single = Family("kiban_z", "no labels")
    single.add((), 1.5)
    families = parsed(gauge, counter, single)
    assert families["kiban_x"] == [
        ({"node": "n1", "kind": "plain"}, 3.0),
        ({"node": odd, "kind": "odd"}, 0.25),
        ({"node": "n2", "kind": "inf"}, math.inf),
        ({"node": "n3", "kind": "one"}, 1.0),
        ({"node": odd, "kind": "one"}, 1.0),
    ]
    assert families["kiban_y"] == [({"queue": "q"}, 7.0)]
    assert families["kiban_z"] == [({}, 1.5)]


def test_a_counter_is_typed_with_its_total() -> None:
    counter = Family("kiban_y", "a counter", "counter", ("queue",))
    counter.add(("q",), 7)
    text = render([counter]).decode()
    assert "# TYPE kiban_y_total counter\n" in text
    assert 'kiban_y_total{queue="q"} 7\n' in text
