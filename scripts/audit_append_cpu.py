"""CPU per audit record appended, in-process: this process's and the PostgreSQL backend's.

Appends batches of 1 and 32 records (``kiban.services.audit.append``, one transaction each,
as the audit writer commits them) to a throwaway PostgreSQL server (and a SQLite file), and
prints the CPU each record cost: this process's in ``append`` alone (what a submission's
transaction adds) and with its commit (``time.process_time``) and, on PostgreSQL,
the server backend's (its ``/proc/<pid>/stat``, read by this process, which runs as the same
user or root). Runs against whichever kiban ``PYTHONPATH`` names, so main's sources and a
branch's can be compared side by side: ``PYTHONPATH=src python scripts/audit_append_cpu.py``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import Engine, text

from kiban.devtools.postgres import ThrowawayPostgres
from kiban.domain.audit import AuditAction, AuditEntry, AuditOutcome
from kiban.services import audit
from kiban.store.db import make_engine, migrate, session_factory

TICKS = os.sysconf("SC_CLK_TCK")


def entry(n: int) -> AuditEntry:
    return AuditEntry(
        at=1_700_000_000.0 + n / 1000,
        member="alice",
        role="member",
        tenant="vision",
        source="127.0.0.1",
        method="POST",
        path="/api/v1/jobs",
        action=AuditAction.JOBS_SUBMIT,
        target=f"train-{n}-abc123",
        status=201,
        outcome=AuditOutcome.SUCCEEDED,
    )


def backend_cpu_s(pid: int | None) -> float:
    """The CPU seconds (user + system) the PostgreSQL backend ``pid`` has used (0: none)."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def measure(engine: Engine, batch: int, records: int) -> dict[str, float]:
    sessions = session_factory(engine)
    n = 0
    with sessions() as session:  # one connection, kept: its backend is the one measured
        pid = None
        if engine.dialect.name == "postgresql":
            pid = session.execute(text("SELECT pg_backend_pid()")).scalar_one()
        session.commit()
        for _warm in range(20):  # warm up: statement caches, the head's cache if any
            audit.append(session, [entry(n + i) for i in range(batch)])
            session.commit()
            n += batch
        client0, server0, wall0 = time.process_time(), backend_cpu_s(pid), time.perf_counter()
        appending = 0.0
        for _ in range(records // batch):
            entries = [entry(n + i) for i in range(batch)]
            session.connection()  # the transaction is open already, as a submission's is
            start = time.process_time()
            audit.append(session, entries)
            appending += time.process_time() - start
            session.commit()
            n += batch
        client = time.process_time() - client0
        server = backend_cpu_s(pid) - server0
        wall = time.perf_counter() - wall0
        assert audit.verify(session).intact
    done = (records // batch) * batch
    return {
        "batch": batch,
        "records": done,
        "append_ms": round(appending / done * 1000, 4),
        "client_ms": round(client / done * 1000, 4),
        "server_ms": round(server / done * 1000, 4),
        "wall_ms": round(wall / done * 1000, 4),
    }


def main() -> None:
    records = int(sys.argv[1]) if len(sys.argv) > 1 else 3200
    results = []
    with ThrowawayPostgres() as pg, tempfile.TemporaryDirectory() as home:
        urls = {"postgresql": pg.create_database("audit_cpu"), "sqlite": f"sqlite:///{home}/k.db"}
        for store, url in urls.items():
            engine = make_engine(url)
            migrate(engine)
            for batch in (1, 32):
                results.append({"store": store, **measure(engine, batch, records)})
            engine.dispose()
    print(json.dumps({"audit_append_cpu": results, "load": os.getloadavg()}))
    print(
        f"{'store':<11} {'batch':>5} {'append ms':>10} {'client ms':>10} {'server ms':>10}"
        f" {'wall ms':>8}"
    )
    for r in results:
        print(
            f"{r['store']:<11} {r['batch']:>5} {r['append_ms']:>10.4f} {r['client_ms']:>10.4f}"
            f" {r['server_ms']:>10.4f} {r['wall_ms']:>8.4f}"
        )


if __name__ == "__main__":
    main()
