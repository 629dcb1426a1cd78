"""Trace files: both formats load; bad input names the file, line and column; window and load."""

from __future__ import annotations

from pathlib import Path

import pytest
from sim_support import write_csv

from kiban.sim.cluster import SHARED_QUEUE, read_quotas, scaled_quotas, synthetic, with_quotas
from kiban.sim.run import SimOptions
from kiban.sim.traces import (
    TraceError,
    compress,
    cut_window,
    load_trace,
    parse_window,
    sniff_format,
)

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "traces"
PHILLY_HEADER = "timestamp,duration,num_gpus,gpu_time,cluster"


def test_the_philly_format_loads_sorted_by_submit_time(tmp_path: Path) -> None:
    path = tmp_path / "philly.csv"
    path.write_text(
        f"{PHILLY_HEADER}\n2017-10-09 07:01:55,66.0,1,66.0,11cb48\n"
        "2017-10-09 06:13:03,2951.0,8,23608.0,6214e9\n"
    )
    assert sniff_format(path) == "philly"
    first, second = load_trace(path)
    assert (first.line, first.gpus, first.tenant, first.duration_s) == (3, 8, "6214e9", 2951.0)
    assert second.submit_s - first.submit_s == 48 * 60 + 52
    assert first.time_limit_s is None


def test_the_generic_csv_takes_durations_shapes_and_limits(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "t.csv", ["5,2h,16,vision,high,2,8,3h", "0,90,1,nlp,,,,"])
    assert sniff_format(path) == "csv"
    nlp, vision = load_trace(path)
    assert (nlp.tenant, nlp.priority, nlp.nodes) == ("nlp", None, None)
    assert (vision.duration_s, vision.nodes, vision.gpus_per_node) == (7200.0, 2, 8)
    assert (vision.priority, vision.time_limit_s) == ("high", 10800.0)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("0,ten,1,t,,,,", r"line 2, column duration: .*'ten'"),
        ("0,-5,1,t,,,,", r"line 2, column duration: must be a positive"),
        ("0,10,1.5,t,,,,", r"line 2, column gpus: must be a whole number"),
        ("0,10,0,t,,,,", r"line 2, column gpus: must be a whole number of at least 1"),
        ("yesterday,10,1,t,,,,", r"line 2, column submit_time: not a timestamp"),
        ("0,10,1,,,,,", r"line 2, column tenant: must not be empty"),
        ("0,10,4,t,,2,1,", r"line 2: nodes x gpus_per_node = 2, but gpus = 4"),
        ("0,10,4,t,,2,,", r"line 2: give both nodes and gpus_per_node"),
        ("0,10,1,t", r"line 2: 4 fields where the header has 8"),
    ],
)
def test_a_bad_cell_names_file_line_and_column(tmp_path: Path, row: str, message: str) -> None:
    path = write_csv(tmp_path / "bad.csv", [row])
    with pytest.raises(TraceError, match=f"{path}, {message}"):
        load_trace(path, "csv")


def test_a_bad_user_names_file_line_and_column(tmp_path: Path) -> None:
    header = "submit_time,duration,gpus,tenant,user"
    path = write_csv(tmp_path / "bad.csv", ["0,10,1,t,alice", "1,10,1,t," + "b" * 129], header)
    with pytest.raises(TraceError, match=f"{path}, line 3, column user: must be at most 128"):
        load_trace(path, "csv")


def test_a_missing_or_unknown_column_is_refused(tmp_path: Path) -> None:
    missing = write_csv(tmp_path / "m.csv", ["0,10,1"], header="submit_time,duration,gpus")
    with pytest.raises(TraceError, match="line 1: no column tenant"):
        load_trace(missing, "csv")
    typo = write_csv(
        tmp_path / "u.csv", ["0,10,1,t,1"], header="submit_time,duration,gpus,tenant,priorty"
    )
    with pytest.raises(TraceError, match="unknown column priorty"):
        load_trace(typo, "csv")
    with pytest.raises(TraceError, match="no column timestamp"):
        load_trace(missing, "philly")


def test_an_unreadable_or_empty_trace_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot read the trace"):
        load_trace(tmp_path / "nothing.csv", "csv")
    empty = write_csv(tmp_path / "e.csv", [])
    with pytest.raises(TraceError, match="no jobs"):
        load_trace(empty, "csv")


def test_window_cuts_on_the_trace_clock_and_load_compresses_arrivals(tmp_path: Path) -> None:
    rows = [f"{100 + 3600 * h},60,1,t,,,," for h in range(10)]
    records = load_trace(write_csv(tmp_path / "t.csv", rows), "csv")
    assert parse_window("1h:3h") == (3600.0, 10800.0)
    assert parse_window(":2h") == (None, 7200.0)
    cut = cut_window(records, 3600.0, 10800.0)
    assert [r.submit_s for r in cut] == [3700.0, 7300.0]
    faster = compress(records, 2.0)
    assert [r.submit_s for r in faster[:3]] == [100.0, 1900.0, 3700.0]
    assert [r.duration_s for r in faster] == [r.duration_s for r in records]
    for bad in ("3h", "3h:1h", "x:1h"):
        with pytest.raises(ValueError, match="--window"):
            parse_window(bad)
    with pytest.raises(ValueError, match="--load"):
        compress(records, 0)


def test_quotas_from_a_team_file_make_queues_in_one_cohort(tmp_path: Path) -> None:
    path = tmp_path / "vc.csv"
    path.write_text("vc,node num\nvision,4\nnlp,2\n")
    cluster = with_quotas(synthetic(6, 8), read_quotas(path), 8)
    queues, queue_of = cluster.layout(["vision", "nlp", "speech"])
    nominal = {q.name: q.nominal for q in queues}
    assert nominal == {
        "nlp": {"default": 16},
        "vision": {"default": 32},
        SHARED_QUEUE: {"default": 0},
    }
    assert {q.cohort for q in queues} == {"teams"}
    assert queue_of == {"vision": "vision", "nlp": "nlp", "speech": SHARED_QUEUE}
    path.write_text("vc,node num\nvision,four\n")
    with pytest.raises(TraceError, match=r"vc.csv, line 2, column node num: not a node count"):
        read_quotas(path)


def test_the_shared_helios_quotas_are_eleven_teams_of_2816_gpus() -> None:
    path = SHARED / "philly_vc_helios_artifact.csv"
    if not path.is_file():
        pytest.skip(f"the shared traces are not here: {path}")
    quotas = read_quotas(path)
    assert len(quotas) == 11
    assert sum(quotas.values()) * 8 == 2816


def test_scaled_quotas_follow_the_cluster_and_add_up_to_it_exactly() -> None:
    """Hand-computed: 4 and 2 nodes of 6 scaled to 5 GPUs are 3.33 and 1.67 GPUs; floors 3 and
    1, and the one GPU left goes to the larger remainder (nlp's 0.67)."""
    assert scaled_quotas({"vision": 4, "nlp": 2}, 5) == {"vision": 3, "nlp": 2}
    assert scaled_quotas({"a": 1, "b": 1, "c": 1}, 4) == {"a": 2, "b": 1, "c": 1}  # ties by name
    assert scaled_quotas({"vision": 4, "nlp": 2}, 48) == {"vision": 32, "nlp": 16}
    with pytest.raises(ValueError, match="no nodes to scale"):
        scaled_quotas({"vision": 0}, 8)


def test_scale_quotas_make_the_team_queues_share_the_simulated_cluster(tmp_path: Path) -> None:
    path = tmp_path / "vc.csv"
    path.write_text("vc,node num\nvision,64\nnlp,32\n")
    cluster = with_quotas(synthetic(3, 8), read_quotas(path), 8, scale=True)
    nominal = {q.name: q.nominal for q in cluster.queues}
    assert nominal == {
        "nlp": {"default": 8},
        "vision": {"default": 16},
        SHARED_QUEUE: {"default": 0},
    }
    assert "scaled to the cluster" in cluster.description


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"nodes": 4, "scale_quotas": True}, "--scale-quotas needs --quotas-from"),
        ({"quotas_from": Path("vc.csv"), "scale_quotas": True}, "--scale-quotas needs the cluster"),
    ],
)
def test_scale_quotas_without_what_it_scales_is_refused(
    options: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        SimOptions(trace=Path("t.csv"), **options)  # type: ignore[arg-type]
