"""One control plane per home and per database, with real ``kiban up`` processes: a second one is
refused at once naming the first (which keeps its nodes and runs jobs), and after a kill -9 of
the first a new one starts without any clean-up."""

from __future__ import annotations

import socket
import uuid
from pathlib import Path

import psutil
import pytest
from e2e_support import CLI_TIMEOUT, KibanServer, StartKiban, cli_env, eventually, run_cli
from sqlalchemy import create_engine, text

from kiban.control.ownership import LOCK_FILE
from kiban.devtools.postgres import ThrowawayPostgres
from kiban.store.lease import ADVISORY_KEY

pytestmark = pytest.mark.e2e

SLEEPER = ("python3", "-c", "import time; time.sleep(600)")


def second_up(home: Path, *extra: str) -> tuple[int, str]:
    """``kiban up`` of a one-node, one-GPU platform on ``home``: its exit code and stderr."""
    done = run_cli(
        ["up", "--home", home, "--port", "0", "--nodes", "1", "--gpus-per-node", "1", *extra],
        env=cli_env(home),
        cwd=home.parent,
        timeout=CLI_TIMEOUT,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, done.stderr


def still_serves(server: KibanServer) -> None:
    """Its three 2-GPU nodes are listed, and a job that needs a whole 2-GPU node runs."""
    nodes = [(n["name"], n["gpus"]) for n in server.json("nodes")]
    assert nodes == [("node-0", 2), ("node-1", 2), ("node-2", 2)]
    job = server.run_job("python3", "-c", "print('mine')", options=["--gpus", "2"])
    server.wait_for_state(job, "Succeeded")


def test_a_second_up_on_a_home_is_refused_and_after_kill_9_a_new_one_starts(
    kiban: KibanServer,
) -> None:
    assert kiban.proc is not None
    url = kiban.url
    code, stderr = second_up(kiban.home)
    assert code == 1
    assert (
        f"home {kiban.home} is in use by another kiban control plane (pid {kiban.proc.pid} at "
        f"{url}, since " in stderr
    ), stderr
    assert kiban.url == url  # the url file is the first one's still
    still_serves(kiban)

    running = kiban.run_job(*SLEEPER)
    kiban.wait_for_state(running, "Running")
    kiban.kill()  # SIGKILL: no clean-up; the job's replica lives on
    # The job is Running once its shim is started; the shim starts the replica a moment later
    # (as root, in the tenant user's environment) and carries on without the server.
    eventually(
        lambda: any(p.is_running() for p in kiban.replica_processes()),
        what="the replica, running on without its control plane",
    )
    kiban.start()  # the same home: the lock died with its holder
    assert kiban.job(running)["state"] == "Running"  # adopted by the new control plane
    kiban.ok("cancel", running)


def lock_holders(url: str) -> list[int]:
    """Backend pids holding kiban's advisory lock in the database."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            query = text(
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
                "AND classid::bigint = :high AND objid::bigint = :low"
            )
            params = {"high": ADVISORY_KEY >> 32, "low": ADVISORY_KEY & 0xFFFFFFFF}
            return list(connection.scalars(query, params))
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_two_control_planes_on_one_database_the_second_is_refused(
    start_kiban: StartKiban, postgres_server: ThrowawayPostgres, tmp_path: Path
) -> None:
    database = postgres_server.create_database(f"o_{uuid.uuid4().hex[:12]}")
    first = start_kiban(nodes=3, gpus_per_node=2, extra_args=["--db", database])
    assert first.proc is not None
    other = tmp_path / "other-home"
    code, stderr = second_up(other, "--db", database)
    assert code == 1
    holder = f"kiban {first.proc.pid}@{socket.gethostname()} {first.url}"
    assert f"is in use by {holder}, connected from" in stderr, stderr
    assert "two control planes on one database would both schedule its jobs" in stderr
    assert sorted(p.name for p in other.iterdir()) == [LOCK_FILE]  # it started nothing
    still_serves(first)

    done = first.run_job("python3", "-c", "print('before')")
    first.wait_for_state(done, "Succeeded")
    first.kill()
    assert psutil.pid_exists(first.proc.pid) is False
    # at once: a holder that has ended is waited for while PostgreSQL closes its session
    second = start_kiban(nodes=3, gpus_per_node=2, extra_args=["--db", database])
    assert second.proc is not None
    assert lock_holders(database)  # held again, by the new one
    assert second.job(done)["state"] == "Succeeded"  # the same store, now this one's
    still_serves(second)
