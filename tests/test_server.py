"""``kiban up``'s start-up (``kiban.server.serve``): Ctrl-C while it starts stops what was started,
says so in one line and exits 130; nothing is left running, locked or pointing at a dead port."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from kiban import server
from kiban.control.ownership import Ownership
from kiban.server import INTERRUPTED_EXIT, STARTUP_INTERRUPTED, ServerOptions, prepare, serve


def interrupt(*_: Any, **__: Any) -> Any:
    raise KeyboardInterrupt


@pytest.mark.parametrize("where", ["start_platform", "create_app"])
def test_ctrl_c_while_starting_stops_everything_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    home = tmp_path / "home"
    before = {t.name for t in threading.enumerate()}
    if where == "create_app":  # after the store, the executor and the router were started
        monkeypatch.setattr(server, "create_app", interrupt)
    else:
        real = server.build_platform

        def built_then_interrupted(**kwargs: Any) -> Any:
            real(**kwargs).close()
            raise KeyboardInterrupt

        monkeypatch.setattr(server, "build_platform", built_then_interrupted)
    with pytest.raises(SystemExit) as stopped:
        serve(ServerOptions(home=home, port=0, router_port=0, nodes=1))
    assert stopped.value.code == INTERRUPTED_EXIT
    assert capsys.readouterr().err.strip().splitlines()[-1] == STARTUP_INTERRUPTED
    assert not (home / "url").exists()  # no url file pointing at a port nobody serves
    left = {t.name for t in threading.enumerate() if t.is_alive()} - before
    assert not {name for name in left if name.startswith("kiban")}, left
    Ownership.claim_home(home).release()  # the home is free again


needs_two_cpus = pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="thread affinity on two CPUs or more (Linux)",
)


def affinity(thread: threading.Thread) -> set[int]:
    assert thread.native_id is not None
    return os.sched_getaffinity(thread.native_id)


@needs_two_cpus
def test_the_event_loop_and_the_submission_writer_share_one_cpu_the_control_loop_keeps_all(
    tmp_path: Path,
) -> None:
    """A submission hands the interpreter lock from the event loop to the writer and back: the
    two threads are kept on one CPU (on two, a fresh server's CPU per submission came in two
    modes); the control loop, which works beside them, keeps every CPU."""
    every_cpu = os.sched_getaffinity(0)
    home = tmp_path / "home"
    options = ServerOptions(home=home, port=0, router_port=0, nodes=1, node_agent=False)
    ownership = Ownership.claim_home(home)
    app, sock = prepare(options, ownership)
    token = (home / "token").read_text().strip()
    job = {
        "apiVersion": "kiban/v1",
        "kind": "Job",
        "metadata": {"name": "one-cpu"},
        "spec": {"tasks": [{"name": "w", "replicas": 1, "command": ["true"]}]},
    }
    try:
        with TestClient(app, headers={"Authorization": f"Bearer {token}"}) as client:
            answer = client.post("/api/v1/jobs", json=job)
            assert answer.status_code == 201, answer.text
            threads = {t.name: t for t in threading.enumerate()}
            loop_cpus = affinity(threads["kiban-control-loop"])
            writer_cpus = affinity(threads["kiban-submissions"])
            event_loop = {t.native_id for t in threading.enumerate()} - {
                threading.main_thread().native_id
            }
            assert loop_cpus == every_cpu
            assert len(writer_cpus) == 1
            # the event loop (TestClient's portal thread) is on the writer's CPU
            assert any(
                os.sched_getaffinity(tid) == writer_cpus for tid in event_loop if tid is not None
            )
    finally:
        sock.close()
    assert os.sched_getaffinity(0) == every_cpu  # the test's own thread was not moved


def test_affinity_can_be_left_to_the_scheduler(tmp_path: Path) -> None:
    """``one_cpu=False``: every thread keeps every CPU (to compare, or where the operator
    places the process)."""
    home = tmp_path / "home"
    options = ServerOptions(
        home=home, port=0, router_port=0, nodes=1, node_agent=False, one_cpu=False
    )
    ownership = Ownership.claim_home(home)
    app, sock = prepare(options, ownership)
    token = (home / "token").read_text().strip()
    try:
        with TestClient(app, headers={"Authorization": f"Bearer {token}"}) as client:
            assert client.get("/api/v1/whoami").status_code == 200
            every_cpu = os.sched_getaffinity(0)
            assert all(affinity(t) == every_cpu for t in threading.enumerate() if t.native_id)
    finally:
        sock.close()
