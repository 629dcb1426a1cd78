"""kill -9 of the control plane while clients send audited requests (issue 27, point 6: "every
request that changes state ... appends a record"): every request a client got an answer to
before the kill has its record after the restart, and the chain is intact.

``CLIENTS`` threads send cancels of jobs that do not exist (404, a refusal, recorded with the
job's id as its target) and, every fifth request, a submission (201, recorded with the new
job's id); once ``BEFORE_KILL`` requests are answered, and while the threads still send, the
server is SIGKILLed. A request whose connection broke may or may not be recorded (the client
cannot tell whether it was carried out); one answered must be.
"""

from __future__ import annotations

import itertools
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import pytest
from e2e_support import KibanServer, eventually, job_manifest

pytestmark = pytest.mark.e2e

CLIENTS = int(os.environ.get("KIBAN_AUDIT_KILL_CLIENTS", "8"))
BEFORE_KILL = int(os.environ.get("KIBAN_AUDIT_KILL_REQUESTS", "200"))
"""Requests answered before the kill (the clients keep sending until it)."""


@dataclass(frozen=True)
class Answered:
    """A request a client got an answer to: what its record must name."""

    path: str
    target: str
    status: int


class Clients:
    """Threads sending audited requests until ``stop`` is set (or the server is gone)."""

    def __init__(self, server: KibanServer) -> None:
        self.url = server.url
        self.headers = {"Authorization": f"Bearer {server.token}"}
        self.answered: list[Answered] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def count(self) -> int:
        with self.lock:
            return len(self.answered)

    def send(self, client_no: int) -> None:
        with httpx.Client(base_url=self.url, headers=self.headers, timeout=60) as client:
            for n in itertools.count():
                if self.stop.is_set():
                    return
                try:
                    answered = self._one(client, f"c{client_no}-{n}", submit=n % 5 == 4)
                except httpx.HTTPError:
                    return  # the server is gone: this request may or may not be recorded
                with self.lock:
                    self.answered.append(answered)

    def _one(self, client: httpx.Client, name: str, submit: bool) -> Answered:
        if submit:
            path = "/api/v1/jobs"
            answer = client.post(path, json=job_manifest(f"audit-{name}", ["true"], gpu=1))
            assert answer.status_code == 201, answer.text
            return Answered(path, answer.json()["id"], 201)
        job_id = f"absent-{name}"
        path = f"/api/v1/jobs/{job_id}/cancel"
        answer = client.post(path)
        assert answer.status_code == 404, answer.text
        return Answered(path, job_id, 404)


def test_every_answered_request_is_recorded_across_a_kill_9(kiban: KibanServer) -> None:
    clients = Clients(kiban)
    pool = ThreadPoolExecutor(max_workers=CLIENTS)
    sending = [pool.submit(clients.send, k) for k in range(CLIENTS)]
    try:
        eventually(lambda: clients.count() >= BEFORE_KILL, timeout=300, what="requests answered")
        kiban.kill()  # while the clients are still sending
    finally:
        clients.stop.set()
        for future in sending:
            future.result(timeout=120)
        pool.shutdown()
    answered = list(clients.answered)
    assert len(answered) >= BEFORE_KILL

    kiban.start()
    with httpx.Client(
        base_url=kiban.url, headers={"Authorization": f"Bearer {kiban.token}"}, timeout=60
    ) as admin:
        log = admin.get("/api/v1/audit", params={"limit": 10000})
        assert log.status_code == 200, log.text
        records = {(r["path"], r["target"]): r for r in log.json()}
    missing = [a for a in answered if (a.path, a.target) not in records]
    assert not missing, (
        f"{len(missing)} of {len(answered)} answered requests have no audit record, "
        f"e.g. {missing[:5]}"
    )
    for request in answered:
        record = records[(request.path, request.target)]
        assert (record["method"], record["status"]) == ("POST", request.status), record
    assert "intact" in kiban.ok("audit", "--verify")
