"""The policy's ``idleGpus`` section: defaults, durations as the rest of the policy writes
them, and bad values refused naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from kiban.domain.cluster import parse_policy
from kiban.domain.errors import SpecError


def test_defaults_and_durations() -> None:
    assert parse_policy({}).idle_gpus.utilization_percent == 5.0
    assert parse_policy({}).idle_gpus.window == 1800.0
    idle = parse_policy({"idleGpus": {"utilizationPercent": 10, "window": "1h"}}).idle_gpus
    assert (idle.utilization_percent, idle.window) == (10.0, 3600.0)


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ({"utilizationPercent": 101}, "idleGpus.utilizationPercent"),
        ({"utilizationPercent": -1}, "idleGpus.utilizationPercent"),
        ({"utilizationPercent": "lots"}, "idleGpus.utilizationPercent"),
        ({"window": 0}, "idleGpus.window"),
        ({"window": "soon"}, "idleGpus.window"),
        ({"windowSeconds": 60}, "idleGpus.windowSeconds"),
    ],
)
def test_bad_values_name_the_field(section: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_policy({"idleGpus": section})
    assert [p.field for p in caught.value.problems] == [field]
