"""``kiban bench kube``'s pure parts: options, the pods of the client phases, what a watch
notes, the headline figures and the table (the kube tier runs the whole benchmark)."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console

from kiban.bench.kube import (
    PHASE_LABEL,
    KubeBenchOptions,
    cpu_ms_per_pod,
    phase_result,
    raw_pod_bodies,
    summarize,
)
from kiban.bench.kubeload import WatchResult
from kiban.bench.report import kube_table


def test_options_refuse_pods_that_cannot_fit() -> None:
    KubeBenchOptions(nodes=10, pods=20, gpus_per_pod=4)
    with pytest.raises(ValueError, match="do not fit"):
        KubeBenchOptions(nodes=10, pods=11, gpus_per_pod=8)
    with pytest.raises(ValueError, match="at least 1"):
        KubeBenchOptions(nodes=0)


def test_raw_pods_are_kibans_manifest_bound_only_for_raw() -> None:
    options = KubeBenchOptions(nodes=3, pods=6, gpus_per_pod=4)
    nodes = ["n0", "n1", "n2"]
    raw = raw_pod_bodies(options, nodes, "raw")
    assert [b["spec"]["nodeName"] for b in raw] == ["n0", "n0", "n1", "n1", "n2", "n2"]
    assert len({b["metadata"]["name"] for b in raw}) == 6
    assert all(b["metadata"]["labels"] == {PHASE_LABEL: "raw"} for b in raw)
    container = raw[0]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert any(t["key"] == "nvidia.com/gpu" for t in raw[0]["spec"]["tolerations"])
    scheduled = raw_pod_bodies(options, nodes, "kube-scheduler")
    assert all("nodeName" not in b["spec"] for b in scheduled)
    assert "schedulerName" not in scheduled[0]["spec"]  # the default scheduler's


def event(kind: str, uid: str, node: str | None = None, phase: str = "Pending") -> Any:
    return {
        "type": kind,
        "object": {
            "metadata": {"uid": uid, "resourceVersion": "1"},
            "spec": {"nodeName": node} if node else {},
            "status": {"phase": phase},
        },
    }


def test_a_watch_notes_first_sight_binding_and_running_until_the_target() -> None:
    seen = WatchResult(target=2)
    assert not seen.apply(event("ADDED", "a"), 1.0)
    assert not seen.apply(event("MODIFIED", "a", "n0"), 2.0)
    assert not seen.apply(event("MODIFIED", "a", "n0", "Running"), 3.0)
    assert not seen.apply(event("MODIFIED", "a", "n0", "Running"), 9.0)  # the first time stays
    assert not seen.apply(event("DELETED", "b", "n1", "Running"), 4.0)
    assert seen.apply(event("ADDED", "b", "n1", "Running"), 5.0)
    assert seen.seen == {"a": 1.0, "b": 5.0}
    assert seen.bound == {"a": 2.0, "b": 5.0}
    assert seen.running == {"a": 3.0, "b": 5.0}
    result = phase_result(seen, 0.5, {"n0", "n1"})
    assert result["seconds"] == 4.5 and result["pods_per_s"] == round(2 / 4.5, 1)
    assert (result["first_created_s"], result["last_created_s"]) == (0.5, 4.5)
    assert result["pods_on_fake_nodes"]
    assert not phase_result(seen, 0.5, {"n0"})["pods_on_fake_nodes"]
    backlog = phase_result(seen, 0.5, {"n0", "n1"}, timed_from=2.0)
    assert backlog["seconds"] == 3.0 and backlog["last_created_s"] == 4.5


def report(gang: float, jobs: float, raw: float, sched: float) -> dict[str, Any]:
    def entry(pods_per_s: float) -> dict[str, Any]:
        return {
            "pods_per_s": pods_per_s,
            "seconds": 1000 / pods_per_s,
            "last_created_s": 1.0,
            "create_pods_per_s": raw,
            "create_s": 1000 / raw,
        }

    phases = {
        "raw": entry(raw * 0.9),
        "kube_scheduler": entry(sched),
        "kube_scheduler_backlog": entry(sched * 2),
        "kiban_gang": entry(gang),
        "kiban_jobs": entry(jobs),
    }
    return phases


def test_summary_takes_the_slower_kiban_phase_against_both_goals() -> None:
    summary = summarize(report(gang=400.0, jobs=300.0, raw=350.0, sched=100.0))
    assert summary["kiban_pods_per_s"] == 300.0
    assert summary["kiban_vs_raw"] == round(300 / 350, 3)
    assert summary["kiban_vs_kube_scheduler"] == 3.0
    assert summary["goals_met"] == {"kiban_vs_raw": True, "kiban_vs_kube_scheduler": True}
    assert summary["raw_running_pods_per_s"] == 315.0
    assert summary["kube_scheduler_backlog_pods_per_s"] == 200.0
    slow = summarize(report(gang=400.0, jobs=30.0, raw=100.0, sched=80.0))
    assert slow["goals_met"] == {"kiban_vs_raw": False, "kiban_vs_kube_scheduler": False}


def test_table_shows_every_phase_the_goals_and_the_machine() -> None:
    data = report(gang=80.0, jobs=30.0, raw=100.0, sched=78.0)
    data.update(summarize(data))
    data["settings"] = {
        "nodes": 1000,
        "gpus_per_node": 8,
        "pods": 1000,
        "gpus_per_pod": 8,
        "workers": 8,
        "control_plane_setup_s": 14.5,
        "control_plane_rss_mb": {"etcd": 146.0, "kube-apiserver": 830.0},
    }
    data["machine"] = {
        "cpu_model": "AMD EPYC",
        "cores": 2,
        "memory_gib": 23.5,
        "python": "CPython 3.11.7",
        "os": "Linux",
        "load_average_1m": 7.3,
        "load_average_after": 9.9,
    }
    out = io.StringIO()
    Console(file=out, width=200).print(kube_table(data))
    text = out.getvalue()
    for label in ("raw create", "raw to Running", "kube-scheduler, backlog", "single jobs"):
        assert label in text
    assert "load average 7.3 -> 9.9" in text
    assert "kube-apiserver 830 MB" in text
    assert ">= 0.8 of raw create" in text


def test_cpu_per_pod_is_each_process_over_the_phase() -> None:
    before = {"this process": 1.0, "kube-apiserver": 10.0}
    after = {"this process": 3.0, "kube-apiserver": 14.0, "kube-scheduler": 0.5}
    assert cpu_ms_per_pod(before, after, 1000) == {
        "this process": 2.0,
        "kube-apiserver": 4.0,
        "kube-scheduler": 0.5,  # started during the phase
    }
