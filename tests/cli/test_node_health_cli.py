"""``kiban nodes`` with conditions and who cordoned, ``kiban describe node`` and ``kiban health
check``, in-process against the app over a store filled here (see conftest.py).

``POST /nodes/{name}/health/check`` is the remediation side's endpoint, not on this branch: the
``health check`` tests mount a stand-in that answers in the contract's shape
(``{"node", "taken_at", "conditions"}``; 409 for a node without an agent); the end-to-end test
after the merge runs the real one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from cli_support import Run, flat, in_process, one_error_line
from fastapi import APIRouter

from kiban.api.app import create_app
from kiban.api.deps import PlatformDep, PrincipalDep
from kiban.cli import render
from kiban.health.conditions import CheckType, ConditionStatus
from kiban.health.readings import GpuReading, NodeReading, XidEvent
from kiban.platform import Platform
from kiban.services.errors import Conflict
from kiban.testing import ManualClock
from kiban.testing.node_health_rows import NodeHealthRows

ECC, XID, PCIE, THERMAL = (
    CheckType.GPU_ECC,
    CheckType.GPU_XID,
    CheckType.GPU_PCIE,
    CheckType.GPU_THERMAL,
)
TRUE, FALSE, UNKNOWN = ConditionStatus.TRUE, ConditionStatus.FALSE, ConditionStatus.UNKNOWN

# The SDK gives a check 45 s (the server waits 30 s for the agent); Starlette's test client
# warns about per-request timeouts, which it does not apply.
pytestmark = pytest.mark.filterwarnings("ignore:You should not use the 'timeout' argument")


@pytest.fixture(autouse=True)
def cli_now(clock: ManualClock, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(render, "current_time", clock.now)


def rows_by_name(out: str) -> tuple[list[str], dict[str, str]]:
    """The header's words, and each row's text by its first word (whitespace collapsed)."""
    lines = out.strip().splitlines()
    return lines[0].split(), {line.split()[0]: " ".join(line.split()[1:]) for line in lines[1:]}


@pytest.fixture
def sick(platform: Platform, clock: ManualClock) -> NodeHealthRows:
    """node-0: GpuEcc failing (cordoned and drained for it), GpuXid unknown, GpuPcie fine; a
    reading of two GPUs, one of them lost."""
    t = clock.now()
    gpus = (
        GpuReading(
            index=0,
            ecc_volatile_uncorrectable=2,
            ecc_aggregate_uncorrectable=5,
            remapped_rows_correctable=1,
            remapped_rows_uncorrectable=0,
            remap_pending=True,
            pcie_link_gen=3,
            pcie_link_gen_max=5,
            pcie_link_width=16,
            pcie_link_width_max=16,
            xids=(XidEvent(code=48, at=t - 7), XidEvent(code=13, at=t - 6)),
            utilization_percent=97.0,
            memory_used_mib=1200.0,
            memory_free_mib=80000.0,
            temperature_c=61.0,
            power_w=310.5,
        ),
        GpuReading(index=1, lost=True, responding=False, error="GPU is lost"),
    )
    reading = NodeReading(
        node="node-0", taken_at=t - 5, nvml_available=True, driver_version="550.54", gpus=gpus
    )
    rows = NodeHealthRows(platform, "node-0")
    rows.condition(PCIE, FALSE, at=t - 600, reason="LinkOk")
    rows.condition(ECC, TRUE, at=t - 60, reason="UncorrectableEcc", message="GPU 0: 2 DBE")
    rows.condition(XID, UNKNOWN, at=t - 30, reason="CheckTimedOut", message="no answer in 10s")
    rows.action("cordon", ECC, at=t - 59, reading="GPU 0: 2 DBE", detail="no new work")
    rows.action("drain", ECC, at=t - 58, rule="rules[1]", outcome="suppressed", detail="breaker")
    rows.reading(reading).agent("10.0.0.7:9400", reported_at=t - 5)
    rows.cordoned_by("remediation")
    return rows


def test_nodes_shows_conditions_and_who_cordoned(kiban: Run, sick: NodeHealthRows) -> None:
    assert kiban("cordon", "node-1").code == 0
    done = kiban("nodes")
    assert done.code == 0, done.err
    header, rows = rows_by_name(done.out)
    assert header[6:9] == ["STATUS", "CONDITIONS", "LABELS"]
    assert rows["node-0"].split()[5:8] == ["Cordoned", "(remediation)", "GpuEcc,GpuXid?"]
    assert rows["node-1"].split()[5:8] == ["Cordoned", "(admin)", "ok"]
    assert rows["node-2"].split()[5:7] == ["Ready", "ok"]
    listed = {n["name"]: n for n in json.loads(kiban("nodes", "-o", "json").out)}
    assert listed["node-0"]["cordonSource"] == "remediation"
    assert [c["type"] for c in listed["node-0"]["conditions"]] == ["GpuEcc", "GpuXid"]


def test_describe_node_shows_checks_readings_history_and_actions(
    kiban: Run, sick: NodeHealthRows, clock: ManualClock
) -> None:
    done = kiban("describe", "node", "node-0")
    assert done.code == 0, done.err
    lines = [" ".join(line.split()) for line in done.out.splitlines()]
    at = render.when
    t = clock.now()
    expected = [
        "Node node-0",
        "Capacity 2 GPUs, 8 CPUs, 32 GiB of memory",
        "Allocated 0 of 2 GPUs (2 free)",
        "Status Cordoned (remediation): no new work; the health rules lift it after enough "
        "healthy checks",
        f"Agent 10.0.0.7:9400, last report {at(t - 5)} (5s ago)",
        "Conditions GpuEcc,GpuXid?",
        "CHECK STATUS REASON SINCE MESSAGE",
        f"GpuEcc True UncorrectableEcc {at(t - 60)} (1m00s ago) GPU 0: 2 DBE",
        f"GpuPcie False LinkOk {at(t - 600)} (10m00s ago) -",
        f"GpuXid Unknown CheckTimedOut {at(t - 30)} (30s ago) no answer in 10s",
        f"Readings taken {at(t - 5)} (5s ago), driver 550.54",
        "GPU UTIL MEMORY TEMP POWER ECC DBE REMAPPED PCIE XIDS STATE",
        "0 97% 1200/81200 MiB 61C 310.5W 2/5 1/0 pending gen3 x16 (max gen5 x16) 48,13 ok",
        "1 - - - - - - - - lost: GPU is lost",
        "History newest first",
        "TIME CHECK STATUS REASON MESSAGE",
        f"{at(t - 30)} GpuXid Unknown CheckTimedOut no answer in 10s",
        f"{at(t - 60)} GpuEcc True UncorrectableEcc GPU 0: 2 DBE",
        f"{at(t - 600)} GpuPcie False LinkOk -",
        "Actions newest first",
        "TIME ACTION CHECK RULE OUTCOME READING DETAIL",
        f"{at(t - 58)} drain GpuEcc rules[1] suppressed - breaker",
        f"{at(t - 59)} cordon GpuEcc rules[0] done GPU 0: 2 DBE no new work",
    ]
    assert [line for line in lines if not line.startswith("Labels")] == expected


def test_describe_node_says_when_its_agent_is_stale_and_what_it_lacks(
    kiban: Run, sick: NodeHealthRows, clock: ManualClock
) -> None:
    clock.advance(120)
    assert "STALE: not reported within the agent timeout" in flat(
        kiban("describe", "node", "node-0").out
    )
    bare = flat(kiban("describe", "node", "node-1").out)
    assert "Agent none has reported" in bare
    assert "Conditions none reported (no check has run)" in bare
    assert "Readings none yet" in bare and "Actions none taken" in bare


def test_describe_node_shows_the_newest_changes_unless_wide(kiban: Run, platform: Platform) -> None:
    rows = NodeHealthRows(platform, "node-2")
    for i in range(25):
        rows.condition(ECC, TRUE if i % 2 else FALSE, at=1000.0 + i, reason=f"Ecc{i}")
    table = kiban("describe", "node", "node-2").out
    assert "History the newest 20 of 25 (-o wide: all)" in flat(table)
    assert table.count(" GpuEcc ") == 20 + 1  # the changes and the condition
    assert kiban("describe", "node", "node-2", "-o", "wide").out.count(" GpuEcc ") == 25 + 1


def test_describe_node_as_json_is_the_node_with_its_health(
    kiban: Run, sick: NodeHealthRows
) -> None:
    document = json.loads(kiban("describe", "node", "node-0", "-o", "json").out)
    assert (document["name"], document["cordonSource"]) == ("node-0", "remediation")
    assert document["health"]["agent"]["address"] == "10.0.0.7:9400"
    assert [a["action"] for a in document["health"]["actions"]] == ["drain", "cordon"]


def test_describe_an_unknown_node_names_it(kiban: Run) -> None:
    one_error_line(kiban("describe", "node", "node-9"), "node node-9 not found")
    one_error_line(kiban("describe", "node"), "name the node: kiban describe node NAME")


# -- kiban health check ------------------------------------------------------------------------
def condition(check: CheckType, status: ConditionStatus, reason: str = "") -> dict[str, Any]:
    return {
        "type": check.value,
        "status": status.value,
        "reason": reason or ("Ok" if status is FALSE else "Problem"),
        "message": "" if status is FALSE else f"{check.value} says so",
        "lastTransitionTime": 1000.0,
    }


Answers = dict[str, list[dict[str, Any]]]
"""What the stand-in's agents answer: per node, its conditions (a node not in it has none)."""


def stand_in(answers: Answers) -> APIRouter:
    """``POST /nodes/{name}/health/check`` as the contract says it answers, over ``answers``."""
    router = APIRouter(prefix="/api/v1")

    @router.post("/nodes/{name}/health/check")
    def check(name: str, platform: PlatformDep, principal: PrincipalDep) -> dict[str, Any]:
        principal.require_admin()
        if name not in answers:
            raise Conflict(f"node {name} has no health agent: nothing reported for it")
        return {"node": name, "taken_at": platform.clock.now(), "conditions": answers[name]}

    return router


@pytest.fixture
def answers() -> Answers:
    return {
        "node-0": [condition(ECC, TRUE, "UncorrectableEcc"), condition(PCIE, FALSE)],
        "node-1": [condition(ECC, FALSE), condition(THERMAL, TRUE, "ThermalThrottle")],
    }


@pytest.fixture
def health_as(
    platform: Platform,
    answers: Answers,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Callable[[str], Run]:
    """``health_as(token)("check", "node-0")``: ``kiban health ...`` with ``token`` against
    the app with the stand-in."""
    app = create_app(platform)
    app.include_router(stand_in(answers))
    # First of the routes: once the real endpoint is merged, the stand-in still answers here.
    app.router.routes.insert(0, app.router.routes.pop())

    def with_token(token: str) -> Run:
        return in_process(app, token, monkeypatch, capsys, "health")

    return with_token


@pytest.fixture
def health(health_as: Callable[[str], Run], admin_token: str) -> Run:
    return health_as(admin_token)


def test_checking_a_failing_node_prints_its_conditions_and_exits_1(health: Run) -> None:
    done = health("check", "node-0")
    assert done.code == 1, done
    assert flat(done.out) == (
        "CHECK STATUS REASON MESSAGE GpuEcc True UncorrectableEcc GpuEcc says so GpuPcie False Ok -"
    )
    assert "node node-0: failing" in done.err


def test_a_warning_alone_does_not_fail_the_check(health: Run) -> None:
    done = health("check", "node-1")
    assert done.code == 0, done
    assert "GpuThermal True ThermalThrottle" in flat(done.out)
    assert "node node-1: warning" in done.err
    answer = json.loads(health("check", "node-1", "-o", "json").out)
    assert [c["type"] for c in answer["conditions"]] == ["GpuEcc", "GpuThermal"]


def test_a_node_without_an_agent_is_one_error_line(health: Run) -> None:
    one_error_line(health("check", "node-2"), "node node-2 has no health agent")


def test_checking_every_node_summarizes_and_exits_1_when_one_fails(
    health: Run, answers: Answers
) -> None:
    done = health("check")
    assert done.code == 1, done
    header, rows = rows_by_name(done.out)
    assert header == ["NODE", "RESULT", "CONDITIONS", "CHECKED"]
    assert rows == {
        "node-0": "failing GpuEcc 0s ago",
        "node-1": "warning GpuThermal 0s ago",
        "node-2": "no agent node node-2 has no health agent: nothing reported for it -",
    }
    listed = json.loads(health("check", "-o", "json").out)
    assert [(r["node"], r["verdict"]) for r in listed] == [
        ("node-0", "failing"),
        ("node-1", "warning"),
        ("node-2", "no agent"),
    ]
    answers["node-0"] = [condition(ECC, FALSE), condition(XID, UNKNOWN, "NvmlUnavailable")]
    healed = health("check")
    assert healed.code == 0, healed
    assert rows_by_name(healed.out)[1]["node-0"] == "unknown GpuXid? 0s ago"


def test_a_member_is_refused_once_not_per_node(health_as: Callable[[str], Run], kiban: Run) -> None:
    assert kiban("admin", "create-tenant", "vision").code == 0
    token = kiban("admin", "create-token", "vision", "alice").out.strip()
    member = health_as(token)
    one_error_line(member("check"), "this needs an admin token")
    one_error_line(member("check", "node-0"), "this needs an admin token")


def test_checking_every_node_when_none_has_an_agent_fails(health: Run, answers: Answers) -> None:
    answers.clear()
    done = health("check")
    assert done.code == 1
    assert "error: no node has a health agent (kiban node-agent) to run its checks" in done.err
