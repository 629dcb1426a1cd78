"""kill -9 of the control plane while clients submit jobs concurrently and jobs run (issue 21:
"lost no accepted submission, stored none twice, launched none twice and left no orphan").

Each round: ``RUNNING`` jobs wait for a file; ``CLIENTS`` threads submit ``SUBMISSIONS`` jobs of
1 GPU each (a few at a time fit beside the running ones, so some launch around the kill);
halfway through, the server is SIGKILLed and started again, and the clients go on against it.
Then, from the store itself:

- every submission answered 201 is stored exactly once, under the id it was answered with;
- one that never reached the server (connection refused), or was answered anything but 201,
  is not stored; one whose connection broke may be stored, once at most;
- no job has more than one attempt, and no two processes of a job's replica ever ran at once
  (each prints ``up PID`` and ``down PID`` to its log); the running jobs kept their replicas
  (same pid, launched once) through every kill;
- every live replica process belongs to a job the store says holds resources, at its attempt.

CI runs it small, on SQLite and PostgreSQL. A bigger run by hand, e.g. the issue's::

    KIBAN_KILL_SUBMISSIONS=1000 KIBAN_KILL_RUNNING=20 KIBAN_KILL_ROUNDS=4 \\
        pytest tests/e2e/test_kill_during_submissions.py
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import pytest
from e2e_support import KibanServer, StartKiban, eventually, job_manifest
from sqlalchemy import select

from kiban.devtools.postgres import ThrowawayPostgres
from kiban.store.db import default_url, make_engine, session_factory
from kiban.store.models import Job, Replica

pytestmark = pytest.mark.e2e

SUBMISSIONS = int(os.environ.get("KIBAN_KILL_SUBMISSIONS", "200"))  # per round
RUNNING = int(os.environ.get("KIBAN_KILL_RUNNING", "5"))
ROUNDS = int(os.environ.get("KIBAN_KILL_ROUNDS", "2"))
CLIENTS = int(os.environ.get("KIBAN_KILL_CLIENTS", "16"))
HOLDS_RESOURCES = ("Admitted", "Running", "Stopping")
SHORT = ["sh", "-c", 'echo "up $$"; sleep 0.2; echo "down $$"']
"""What the submitted jobs run: a fifth of a second, saying when it starts and ends."""

WAIT_FOR_RELEASE = """
import pathlib, sys, time
release = pathlib.Path(sys.argv[1])
print("started", flush=True)
while not release.exists():
    time.sleep(0.2)
print("released", flush=True)
"""


@dataclass
class Outcome:
    """What a client saw of one submission."""

    name: str
    status: int | None = None  # the HTTP status, if answered
    job_id: str | None = None  # when answered 201
    error: str | None = None  # the exception, if not answered
    connected: bool = True  # False: refused at connect, so never received

    @property
    def may_be_stored(self) -> bool:
        """Whether the store may hold it (the client cannot tell, or it was accepted)."""
        return self.status == 201 or (self.status is None and self.connected)


class Clients:
    """``CLIENTS`` threads submitting; after an error each waits for the server to be back."""

    def __init__(self, server: KibanServer) -> None:
        self.server = server
        self.up = threading.Event()
        self.up.set()
        self.url = server.url
        self.outcomes: list[Outcome] = []
        self.lock = threading.Lock()

    def answered(self) -> int:
        with self.lock:
            return sum(1 for o in self.outcomes if o.status is not None)

    def restarted(self) -> None:
        self.url = self.server.url
        self.up.set()

    def _submit_all(self, names: list[str]) -> None:
        client: httpx.Client | None = None
        headers = {"Authorization": f"Bearer {self.server.token}"}
        for name in names:
            self.up.wait(timeout=180)
            if client is None:
                client = httpx.Client(base_url=self.url, headers=headers, timeout=60)
            outcome = Outcome(name)
            manifest = job_manifest(name, SHORT, gpu=1)
            try:
                answer = client.post("/api/v1/jobs", json=manifest)
                outcome.status = answer.status_code
                if answer.status_code == 201:
                    outcome.job_id = answer.json()["id"]
            except httpx.HTTPError as exc:
                outcome.error = f"{type(exc).__name__}: {exc}"
                outcome.connected = not isinstance(exc, httpx.ConnectError)
                client.close()
                client = None
            with self.lock:
                self.outcomes.append(outcome)
        if client is not None:
            client.close()

    def run(self, names: list[str]) -> Callable[[], None]:
        """Start submitting ``names``; returns a function that waits for the end."""
        pool = ThreadPoolExecutor(max_workers=CLIENTS)
        futures = [pool.submit(self._submit_all, names[i::CLIENTS]) for i in range(CLIENTS)]

        def wait() -> None:
            for future in futures:
                future.result(timeout=600)
            pool.shutdown()

        return wait


def store_rows(url: str) -> tuple[dict[str, list[Job]], dict[str, list[Replica]]]:
    engine = make_engine(url)
    try:
        with session_factory(engine)() as session:
            jobs: dict[str, list[Job]] = {}
            for job in session.scalars(select(Job)):
                jobs.setdefault(job.name, []).append(job)
            replicas: dict[str, list[Replica]] = {}
            for replica in session.scalars(select(Replica)):
                replicas.setdefault(replica.job_id, []).append(replica)
            session.expunge_all()
            return jobs, replicas
    finally:
        engine.dispose()


def launched_attempts(server: KibanServer, job_id: str) -> dict[str, list[int]]:
    """Per rank, the attempts launched (each launch writes its pid file in its attempt's
    directory; the log holds the job's output alone)."""
    found: dict[str, list[int]] = {}
    for pid_file in sorted((server.home / "jobs" / job_id).glob("attempt-*/rank-*.pid")):
        attempt = int(pid_file.parent.name.removeprefix("attempt-"))
        found.setdefault(pid_file.stem, []).append(attempt)
    return found


def overlaps(log: str) -> list[str]:
    """Processes of ``SHORT`` that ran at once: one started after another and before that one
    ended. (A launch cut short by the kill and undone at the restart has no ``down``.)"""
    events = re.findall(r"^(up|down) (\d+)$", log, re.M)
    found = []
    for i, (what, pid) in enumerate(events):
        if what == "up" and ("down", pid) in events[i:]:
            end = events.index(("down", pid), i)
            found += [f"{pid} and {other}" for kind, other in events[i + 1 : end] if kind == "up"]
    return found


def orphans(server: KibanServer, db_url: str) -> list[str]:
    """Live replica processes whose job the store does not have holding resources at their
    attempt."""
    jobs, _ = store_rows(db_url)
    holding = {
        (job.id, str(job.attempt))
        for rows in jobs.values()
        for job in rows
        if job.state in HOLDS_RESOURCES
    }
    found = []
    for proc in server.replica_processes():
        try:
            env = proc.environ()
        except Exception:  # it ended meanwhile
            continue
        key = (env.get("KIBAN_JOB_ID", ""), env.get("KIBAN_ATTEMPT", ""))
        if key not in holding:
            found.append(f"pid {proc.pid} of job {key[0]} attempt {key[1]}")
    return found


def check_round(server: KibanServer, db_url: str, outcomes: list[Outcome], prefix: str) -> None:
    jobs, _ = store_rows(db_url)
    submitted = {o.name for o in outcomes}
    assert len(submitted) == len(outcomes) == SUBMISSIONS
    accepted = [o for o in outcomes if o.status == 201]
    assert accepted, "no submission was accepted"
    for outcome in outcomes:
        stored = jobs.get(outcome.name, [])
        if outcome.status == 201:
            assert [j.id for j in stored] == [outcome.job_id], (outcome, stored)
        elif outcome.may_be_stored:
            assert len(stored) <= 1, (outcome, [j.id for j in stored])
        else:
            assert stored == [], (outcome, [j.id for j in stored])
    strays = [name for name in jobs if name.startswith(prefix) and name not in submitted]
    assert strays == []
    for rows in jobs.values():
        for job in rows:
            assert job.attempt == 1, (job.id, job.state, job.attempt)
            for rank, attempts in launched_attempts(server, job.id).items():
                assert set(attempts) <= {1}, (job.id, rank, attempts)
            assert not overlaps(server.log_text(job.id)), (job.id, server.log_text(job.id))


def run_rounds(server: KibanServer, db_url: str) -> None:
    script = server.workdir / "wait_for_release.py"
    script.write_text(WAIT_FOR_RELEASE)
    release = server.workdir / "release"
    command = ["python", str(script), str(release)]
    running = [
        server.client.submit(job_manifest(f"hold-{i}", command, gpu=1))["id"]
        for i in range(RUNNING)
    ]
    pids = {}
    for job_id in running:
        (replica,) = server.wait_for_state(job_id, "Running", timeout=120)["replicas"]
        pids[job_id] = replica["pid"]
    eventually(
        lambda: all("started" in server.log_text(j) for j in running),
        timeout=120,
        what="the running jobs to start",
    )
    for round_ in range(ROUNDS):
        prefix = f"k{round_}-"
        clients = Clients(server)
        wait = clients.run([f"{prefix}{i:05d}" for i in range(SUBMISSIONS)])
        eventually(
            lambda clients=clients: clients.answered() >= SUBMISSIONS // 2,
            timeout=300,
            what="half the submissions to be answered",
        )
        clients.up.clear()
        server.kill()
        server.start()
        clients.restarted()
        wait()
        check_round(server, db_url, clients.outcomes, prefix)
        for job_id in running:
            job = server.job(job_id)
            assert (job["state"], job["attempt"]) == ("Running", 1), job
            assert [r["pid"] for r in job["replicas"]] == [pids[job_id]], job
        eventually(
            lambda: not orphans(server, db_url),
            timeout=60,
            what="no orphan replica",
        )
    release.touch()
    for job_id in running:
        server.wait_for_state(job_id, "Succeeded", timeout=120)
        log = server.log_text(job_id)
        assert launched_attempts(server, job_id) == {"rank-0": [1]}
        assert log.count("started") == log.count("released") == 1, log


def start(start_kiban: StartKiban, extra_args: list[str]) -> KibanServer:
    gpus = 4
    nodes = (RUNNING + 3 + gpus - 1) // gpus  # room for the running jobs and 3 more
    return start_kiban(nodes=nodes, gpus_per_node=gpus, extra_args=extra_args)


def test_kill_9_during_submissions_on_sqlite(start_kiban: StartKiban) -> None:
    server = start(start_kiban, [])
    run_rounds(server, default_url(server.home))


@pytest.mark.postgres
def test_kill_9_during_submissions_on_postgresql(
    start_kiban: StartKiban, postgres_server: ThrowawayPostgres
) -> None:
    db_url = postgres_server.create_database(f"kill_{int(time.time() * 1000) % 10**9}")
    server = start(start_kiban, ["--db", db_url])
    run_rounds(server, db_url)
