"""``kiban bench usage``: ``kiban usage --by user --since 90d``'s report over a million usage
records, on PostgreSQL and on SQLite, each aggregated in the store (``usage_report``) beside
the same records read out and folded in Python (what the report would cost without it).

The records are written by the database itself (``generate_series`` on PostgreSQL, a recursive
CTE on SQLite) from their row number, so both stores hold the same ones: spread over
``days`` days, 1 to 8 GPUs, 10 minutes to 12 hours each, ``tenants`` x ``members`` users, a
tenth preempted and a fiftieth lost with a node, the newest ones still open.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, func, select, text
from sqlalchemy.orm import Session

from kiban.bench.machine import describe_machine
from kiban.bench.submit import postgres_missing
from kiban.services.accounting import HOUR, UsageGroup, usage_report
from kiban.services.auth import Principal
from kiban.store.db import make_engine, migrate
from kiban.store.models_accounting import UsageRecord

ADMIN = Principal(name="bench", tenant=None, is_admin=True)
NOW = 1_790_000_000.0  # a fixed "now": the records end before it, or are open at it
DAY = 24 * HOUR

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class UsageBenchOptions:
    records: int = 1_000_000
    days: int = 100
    since_days: int = 90
    tenants: int = 20
    members: int = 10
    rounds: int = 5
    stores: tuple[str, ...] = ("postgresql", "sqlite")

    def __post_init__(self) -> None:
        for name in ("records", "days", "since_days", "tenants", "members", "rounds"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1")
        unknown = set(self.stores) - {"postgresql", "sqlite"}
        if unknown or not self.stores:
            raise ValueError(f"--stores must name postgresql and/or sqlite, not {self.stores!r}")


def _fill_sql(options: UsageBenchOptions, sqlite: bool) -> str:
    """One INSERT ... SELECT writing every record from its row number ``n``."""
    span = options.days * DAY
    users = options.tenants * options.members
    # started: spread over the span, newest at NOW - 600; duration 10 min .. 12 h.
    started = f"({NOW} - 600 - ((n * 7919) % {int(span)}))"
    duration = f"(600 + ((n * 104729) % {int(12 * HOUR - 600)}))"
    ended = f"CASE WHEN {started} + {duration} >= {NOW} THEN NULL ELSE {started} + {duration} END"
    outcome = (
        f"CASE WHEN {started} + {duration} >= {NOW} THEN NULL "
        "WHEN n % 10 = 0 THEN 'preempted' WHEN n % 50 = 1 THEN 'node-lost' "
        "WHEN n % 7 = 0 THEN 'failed' ELSE 'succeeded' END"
    )
    gpus = "(1 + (n % 8))"
    user = f"(n % {users})"
    select_part = (
        "SELECT 'job', 'j' {c} n, 1, 't' {c} ({u} / {m}), 'u' {c} {u}, 'q' {c} ({u} / {m}), "
        "CASE WHEN n % 3 = 0 THEN 'a100' ELSE 'h100' END, {g}, 4000 * {g}, {g} * 68719476736, "
        "{s}, {e}, CASE WHEN {e} IS NULL THEN NULL ELSE {g} * {d} END, {o}"
    ).format(
        c="||",
        u=user,
        m=options.members,
        g=gpus,
        s=started,
        e=ended,
        d=duration,
        o=outcome,
    )
    columns = (
        "kind, job_id, attempt, tenant, member, queue, flavor, gpus, cpu_millis, memory, "
        "started_at, ended_at, gpu_seconds, outcome"
    )
    if sqlite:
        return (
            f"WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq "
            f"WHERE n < {options.records}) "
            f"INSERT INTO usage_records ({columns}) {select_part} FROM seq"
        )
    return (
        f"INSERT INTO usage_records ({columns}) {select_part} "
        f"FROM generate_series(1::bigint, {options.records}::bigint) AS n"
    )


def fill(engine: Engine, options: UsageBenchOptions) -> float:
    """Write the records (and have the planner's statistics taken); seconds it took."""
    sqlite = engine.dialect.name == "sqlite"
    began = time.perf_counter()
    with engine.begin() as connection:
        connection.execute(text(_fill_sql(options, sqlite)))
    with engine.connect() as connection:
        connection.execution_options(isolation_level="AUTOCOMMIT").execute(
            text("ANALYZE" if sqlite else "VACUUM ANALYZE usage_records")
        )
    return time.perf_counter() - began


def report_in_store(session: Session, since: float) -> dict[str, float]:
    """GPU-hours per user, aggregated by the store (what ``kiban usage`` runs)."""
    report = usage_report(session, ADMIN, by=UsageGroup.USER, since=since, until=NOW, now=NOW)
    return {f"{r.tenant}/{r.key}": r.gpu_hours for r in report.rows}


def report_in_python(session: Session, since: float) -> dict[str, float]:
    """The same GPU-hours per user, from every record in the window read out and folded here."""
    query = select(
        UsageRecord.tenant,
        UsageRecord.member,
        UsageRecord.gpus,
        UsageRecord.started_at,
        UsageRecord.ended_at,
    ).where(
        UsageRecord.started_at < NOW,
        (UsageRecord.ended_at.is_(None)) | (UsageRecord.ended_at > since),
    )
    totals: dict[str, float] = {}
    for tenant, member, gpus, started, ended in session.execute(query):
        held = min(NOW if ended is None else ended, NOW) - max(started, since)
        key = f"{tenant}/{member}"
        totals[key] = totals.get(key, 0.0) + gpus * held / HOUR
    return totals


def _timed(
    engine: Engine, how: Callable[[Session, float], dict[str, float]], since: float, rounds: int
) -> tuple[list[float], dict[str, float]]:
    times = []
    result: dict[str, float] = {}
    with Session(engine) as session:
        how(session, since)  # warm: the table's pages in the store's cache
        for _ in range(rounds):
            began = time.perf_counter()
            result = how(session, since)
            times.append(time.perf_counter() - began)
    return times, result


def _measure_store(
    store: str, url: str, options: UsageBenchOptions, say: Progress
) -> dict[str, Any]:
    engine = make_engine(url)
    try:
        migrate(engine)
        say(f"{store}: writing {options.records:,} usage records")
        fill_s = fill(engine, options)
        since = NOW - options.since_days * DAY
        say(f"{store}: timing the report, {options.rounds} rounds each way")
        in_store, by_store = _timed(engine, report_in_store, since, options.rounds)
        in_python, by_python = _timed(engine, report_in_python, since, options.rounds)
        agree = by_store.keys() == by_python.keys() and all(
            abs(by_store[k] - by_python[k]) <= 1e-6 * max(1.0, by_python[k]) for k in by_store
        )
        if not agree:
            raise RuntimeError(f"{store}: the store's report and Python's fold disagree")
        with Session(engine) as session:
            in_window = session.scalar(
                select(func.count())
                .select_from(UsageRecord)
                .where(
                    UsageRecord.started_at < NOW,
                    (UsageRecord.ended_at.is_(None)) | (UsageRecord.ended_at > since),
                )
            )
        return {
            "store": store,
            "fill_s": round(fill_s, 2),
            "records_in_window": int(in_window or 0),
            "users": len(by_store),
            "report_s": round(statistics.median(in_store), 4),
            "report_s_all": [round(t, 4) for t in in_store],
            "python_fold_s": round(statistics.median(in_python), 4),
            "ratio_python_over_store": round(
                statistics.median(in_python) / statistics.median(in_store), 2
            ),
        }
    finally:
        engine.dispose()


def run_usage_bench(options: UsageBenchOptions, say: Progress | None = None) -> dict[str, Any]:
    """Time the report on each store; a store that cannot run here is ``{"skipped": why}``."""
    from kiban.devtools.postgres import ThrowawayPostgres

    tell = say or (lambda _line: None)
    results: list[dict[str, Any]] = []
    with ExitStack() as stack:
        for store in options.stores:
            if store == "postgresql":
                missing = postgres_missing()
                if missing is not None:
                    results.append({"store": store, "skipped": missing})
                    continue
                server = stack.enter_context(ThrowawayPostgres())
                url = server.create_database("bench_usage")
            else:
                home = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kiban-usage-")))
                url = f"sqlite:///{home / 'kiban.db'}"
            results.append(_measure_store(store, url, options, tell))
    measured = [r for r in results if "skipped" not in r]
    report: dict[str, Any] = {
        "benchmark": "usage",
        "query": f"kiban usage --by user --since {options.since_days}d",
        "records": options.records,
        "days": options.days,
        "rounds": options.rounds,
        "stores": results,
        "machine": describe_machine(),
    }
    by_store = {r["store"]: r for r in measured}
    if "postgresql" in by_store and "sqlite" in by_store:
        report["ratio_sqlite_over_postgresql"] = round(
            by_store["sqlite"]["report_s"] / by_store["postgresql"]["report_s"], 2
        )
    return report


def usage_table(report: dict[str, Any]) -> Any:
    """The report for people: one row per store, the machine below."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(
        title=f"{report['query']} over {report['records']:,} records "
        f"(median of {report['rounds']})",
        box=None,
        header_style="bold",
    )
    for column in (
        "STORE",
        "IN WINDOW",
        "USERS",
        "REPORT (store)",
        "FOLD IN PYTHON",
        "RATIO",
        "FILL",
    ):
        table.add_column(column)
    for r in report["stores"]:
        if "skipped" in r:
            table.add_row(r["store"], f"skipped: {r['skipped']}", "", "", "", "", "")
            continue
        table.add_row(
            r["store"],
            f"{r['records_in_window']:,}",
            str(r["users"]),
            f"{r['report_s'] * 1000:.0f} ms",
            f"{r['python_fold_s'] * 1000:.0f} ms",
            f"{r['ratio_python_over_store']:.1f}x",
            f"{r['fill_s']:.1f} s",
        )
    machine = report["machine"]
    lines: list[Any] = [table]
    if "ratio_sqlite_over_postgresql" in report:
        lines.append(
            Text(f"SQLite takes {report['ratio_sqlite_over_postgresql']:.2f}x PostgreSQL's time")
        )
    lines.append(
        Text(
            f"machine: {machine['cpu_model']}, {machine['cores']} cores, "
            f"{machine['memory_gib']} GiB, {machine['python']}"
        )
    )
    return Group(*lines)
