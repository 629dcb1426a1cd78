"""A node agent's report costs what changed: one like the last adds no history or event, counts
the streaks in one statement and leaves the reading's JSON alone, while every reader still sees
the latest reading at its latest time (both stores)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import event, func, select
from sqlalchemy.orm import Session

from kiban.health.conditions import CheckType
from kiban.health.readings import GpuReading, NodeReading
from kiban.health.report import NodeHealthReport
from kiban.observability.idle_tracker import read_use
from kiban.platform import Platform
from kiban.services import node_health
from kiban.store.models import Event
from kiban.store.models_nodes import NodeCondition, NodeConditionChange, NodeReadingRow
from kiban.testing import ManualClock
from kiban.testing.health_reports import health_report

NODE = "node-1"
ECC = {CheckType.GPU_ECC: "GPU 0: 2 volatile uncorrectable ECC errors"}


def report(at: float, utilization: float = 40.0, faults: Any = None) -> NodeHealthReport:
    gpus = (GpuReading(index=0, uuid="GPU-0", utilization_percent=utilization, power_w=300.0),)
    reading = NodeReading(node=NODE, taken_at=at, nvml_available=True, gpus=gpus)
    return health_report(NODE, at, faults, interval_s=5).model_copy(update={"reading": reading})


def ingest(platform: Platform, sent: NodeHealthReport, at: float) -> None:
    with platform.sessions() as session:
        node_health.ingest(session, NODE, sent, at)
        session.commit()


@contextmanager
def statements(session: Session) -> Iterator[list[tuple[str, int]]]:
    """Each statement the session's engine runs meanwhile, with its count of parameter sets."""
    seen: list[tuple[str, int]] = []

    def record(conn: Any, cursor: Any, sql: str, params: Any, context: Any, many: bool) -> None:
        seen.append((" ".join(sql.split()), len(params) if many else 1))

    engine = session.get_bind()
    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


def set_clause(sql: str) -> str:
    """What an UPDATE statement sets."""
    return sql.split(" SET ", 1)[1].split(" WHERE ", 1)[0]


def counts(platform: Platform) -> tuple[int, int, dict[str, int]]:
    with platform.sessions() as session:
        history = session.scalar(select(func.count()).select_from(NodeConditionChange))
        events = session.scalar(
            select(func.count()).select_from(Event).where(Event.object_kind == "Node")
        )
        streaks = session.execute(
            select(NodeCondition.type, NodeCondition.streak).where(NodeCondition.node == NODE)
        )
        return history or 0, events or 0, {kind: streak for kind, streak in streaks}


def test_an_unchanged_report_adds_no_history_or_event_and_counts_streaks_in_one_statement(
    platform: Platform, clock: ManualClock
) -> None:
    t = clock.now()
    ingest(platform, report(t, faults=ECC), t)
    ingest(platform, report(t + 5, faults=ECC), t + 5)
    history, events, streaks = counts(platform)
    assert set(streaks.values()) == {2}

    with platform.sessions() as session, statements(session) as seen:
        node_health.ingest(session, NODE, report(t + 10, faults=ECC), t + 10)
        session.commit()

    assert counts(platform) == (history, events, {kind: 3 for kind in streaks})
    writes = [(sql, n) for sql, n in seen if sql.startswith(("UPDATE", "INSERT"))]
    condition_writes = [(sql, n) for sql, n in writes if "node_conditions" in sql]
    assert len(condition_writes) == 1 and condition_writes[0][1] == 1, writes
    assert "node_conditions.streak +" in set_clause(condition_writes[0][0])
    reading_writes = [sql for sql, _ in writes if "node_readings" in sql]
    assert len(reading_writes) == 1 and "reading" not in set_clause(reading_writes[0])
    with platform.sessions() as session:
        row = session.get_one(NodeCondition, (NODE, CheckType.GPU_ECC.value))
        assert (row.last_transition_time, row.updated_at) == (t, t + 10)


def test_a_change_after_unchanged_reports_is_history_an_event_and_a_new_streak(
    platform: Platform, clock: ManualClock
) -> None:
    t = clock.now()
    for k in range(3):
        ingest(platform, report(t + 5 * k), t + 5 * k)
    history, events, _ = counts(platform)
    ingest(platform, report(t + 15, faults=ECC), t + 15)
    ingest(platform, report(t + 20, faults=ECC), t + 20)
    after, events_after, streaks = counts(platform)
    assert (after, events_after) == (history + 1, events + 1)
    assert streaks[CheckType.GPU_ECC.value] == 2
    assert {s for kind, s in streaks.items() if kind != CheckType.GPU_ECC.value} == {5}
    with platform.sessions() as session:
        row = session.get_one(NodeCondition, (NODE, CheckType.GPU_ECC.value))
        assert (row.status, row.last_transition_time, row.message) == (
            "True",
            t + 15,
            ECC[CheckType.GPU_ECC],
        )


def test_the_stored_reading_is_the_latest_for_describe_and_the_metrics(
    platform: Platform, api: TestClient, clock: ManualClock
) -> None:
    t = clock.now()
    ingest(platform, report(t, utilization=40.0), t)
    ingest(platform, report(t + 5, utilization=40.0), t + 5)  # only its time moved

    shown = api.get(f"/api/v1/nodes/{NODE}/health").json()["reading"]
    assert NodeReading.model_validate(shown) == report(t + 5).reading
    with platform.sessions() as session:
        use = read_use(session, [NODE])[NODE]
        assert (use.taken_at, use.utilization) == (t + 5, {0: 40.0})

    ingest(platform, report(t + 10, utilization=3.0), t + 10)  # a value changed
    shown = api.get(f"/api/v1/nodes/{NODE}/health").json()["reading"]
    assert NodeReading.model_validate(shown) == report(t + 10, utilization=3.0).reading
    with platform.sessions() as session:
        use = read_use(session, [NODE])[NODE]
        assert (use.taken_at, use.utilization) == (t + 10, {0: 3.0})
        row = session.get_one(NodeReadingRow, NODE)
        assert node_health.stored_reading(row).taken_at == t + 10


def test_rows_the_session_already_holds_show_what_a_report_wrote(
    platform: Platform, clock: ManualClock
) -> None:
    t = clock.now()
    ingest(platform, report(t, faults=ECC), t)
    with platform.sessions() as session:
        condition = session.get_one(NodeCondition, (NODE, CheckType.GPU_ECC.value))
        held = session.get_one(NodeReadingRow, NODE)
        assert (condition.streak, held.taken_at) == (1, t)
        node_health.ingest(session, NODE, report(t + 5, faults=ECC), t + 5)
        assert (condition.streak, condition.updated_at, held.taken_at) == (2, t + 5, t + 5)
        node_health.ingest(session, NODE, report(t + 10), t + 10)
        assert (condition.status, condition.streak) == ("False", 1)
        session.commit()
