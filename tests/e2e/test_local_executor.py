"""The local executor end to end: a real ``kiban up``, real replica processes, the real CLI."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest
from e2e_support import KibanServer, StartKiban, eventually, job_manifest, job_processes

from kiban.domain.manifests import parse_job_manifest
from kiban.domain.service_replica import SERVICE_LABEL
from kiban.executors.base import Capability, LaunchRequest, ReplicaRef
from kiban.executors.local import LocalExecutor
from kiban.executors.local.executor import process_handle
from kiban.scheduler.decisions import ReplicaPlacement

pytestmark = pytest.mark.e2e

ENV_DUMP = """
import json, os, pathlib
keys = ["MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "KIBAN_JOB_ID", "KIBAN_JOB_NAME",
        "KIBAN_CHECKPOINT_DIR", "KIBAN_NODE", "KIBAN_TASK", "KIBAN_REPLICA_INDEX",
        "KIBAN_ATTEMPT", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"]
env = {k: os.environ.get(k) for k in keys}
ckpt = pathlib.Path(os.environ["KIBAN_CHECKPOINT_DIR"])
env["checkpoint_dir_exists"] = ckpt.is_dir()
(ckpt / f"rank-{os.environ['RANK']}").write_text(os.environ["KIBAN_NODE"])
print("ENV " + json.dumps(env), flush=True)
"""


def write_script(server: KibanServer, name: str, source: str) -> str:
    (server.workdir / name).write_text(textwrap.dedent(source).lstrip())
    return name


def env_of(server: KibanServer, job_id: str, rank: int) -> dict[str, object]:
    lines = [line for line in server.log_text(job_id, rank).splitlines() if line.startswith("ENV ")]
    assert len(lines) == 1, f"rank {rank} log:\n{server.log_text(job_id, rank)}"
    return dict(json.loads(lines[0].removeprefix("ENV ")))


def launched_attempts(server: KibanServer, job_id: str) -> list[int]:
    """The attempts launched: each has a directory (the log holds the job's output only)."""
    found = (server.home / "jobs" / job_id).glob("attempt-*")
    return sorted(int(p.name.removeprefix("attempt-")) for p in found)


def test_every_replica_gets_its_multi_node_environment(kiban: KibanServer) -> None:
    script = write_script(kiban, "envdump.py", ENV_DUMP)
    job_id = kiban.run_job("python", script, options=["--nodes", "3", "--gpus", "2"])
    kiban.wait_for_state(job_id, "Succeeded")
    job = kiban.json("describe", job_id)
    replicas = {r["rank"]: r for r in job["replicas"]}
    assert sorted(replicas) == [0, 1, 2]

    envs = {rank: env_of(kiban, job_id, rank) for rank in range(3)}
    assert [e["RANK"] for e in envs.values()] == ["0", "1", "2"]
    assert {e["WORLD_SIZE"] for e in envs.values()} == {"3"}
    assert {e["MASTER_ADDR"] for e in envs.values()} == {"127.0.0.1"}
    assert {e["MASTER_PORT"] for e in envs.values()} == {str(job["masterPort"])}
    assert {e["KIBAN_JOB_ID"] for e in envs.values()} == {job_id}
    assert {e["KIBAN_JOB_NAME"] for e in envs.values()} == {job["name"]}
    assert {e["KIBAN_ATTEMPT"] for e in envs.values()} == {"1"}
    # Each replica is on its own node, with its own index, and sees exactly its two GPUs.
    assert len({e["KIBAN_NODE"] for e in envs.values()}) == 3
    assert [e["KIBAN_REPLICA_INDEX"] for e in envs.values()] == ["0", "1", "2"]
    for rank, env in envs.items():
        placed = replicas[rank]
        assert env["KIBAN_NODE"] == placed["node"]
        gpus = ",".join(map(str, placed["gpuIds"]))
        assert len(placed["gpuIds"]) == 2
        assert env["CUDA_VISIBLE_DEVICES"] == gpus
        assert env["NVIDIA_VISIBLE_DEVICES"] == gpus
        assert env["checkpoint_dir_exists"] is True
    # One checkpoint directory, shared by the whole job: every rank wrote into the same one.
    (checkpoint_dir,) = {e["KIBAN_CHECKPOINT_DIR"] for e in envs.values()}
    assert job_id in str(checkpoint_dir)
    written = sorted(p.name for p in Path(str(checkpoint_dir)).iterdir())
    assert written == ["rank-0", "rank-1", "rank-2"]


def test_gang_is_all_or_nothing(start_kiban: StartKiban) -> None:
    server = start_kiban(
        nodes=None,
        config={
            "nodes": [{"name": f"small-{i}", "gpus": 2} for i in range(3)],
            "queues": [{"name": "train"}, {"name": "probe"}],
        },
    )
    nodes = server.json("nodes")
    assert sorted((n["name"], n["gpus"]) for n in nodes) == [
        ("small-0", 2),
        ("small-1", 2),
        ("small-2", 2),
    ]
    # Cordoned, small-2 may come back: the gang could start some day, and waits.
    server.ok("cordon", "small-2")

    gang = server.submit(
        job_manifest("gang", ["sh", "-c", "echo started"], replicas=3, gpu=2, queue="train")
    )

    def waiting_reason() -> dict[str, object] | None:
        reason = server.job(gang).get("reason")
        return reason if reason and reason["code"] == "InsufficientCapacity" else None

    eventually(waiting_reason, what="the gang to wait with InsufficientCapacity")
    # The loop keeps going meanwhile: a job of another queue runs to completion.
    probe = server.run_job("true", options=["--queue", "probe"])
    server.wait_for_state(probe, "Succeeded")

    described = server.json("describe", gang)
    assert described["state"] == "Pending"
    assert described["reason"]["code"] == "InsufficientCapacity"
    assert described["reason"]["details"] == {
        "flavor": "default",
        "gang_size": 3,
        "placeable_now": 2,
        "free_gpus": 4,
        "needed_gpus": 6,
    }
    assert "needs 3 replicas together" in described["reason"]["message"]
    assert not described["replicas"]
    # Nothing was started, not even part of the gang.
    assert not list((server.home / "jobs" / gang).glob("attempt-*"))
    assert not list((server.home / "jobs" / gang).glob("rank-*.log"))
    assert job_processes(gang) == []


CANCEL_REPLICA = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, lambda *_: print("replica: SIGTERM ignored", flush=True))
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('grandchild: up', flush=True); time.sleep(600)"])
print(f"replica: up, grandchild {child.pid}", flush=True)
while True:
    time.sleep(0.1)
"""


def test_cancel_leaves_no_process_behind(kiban: KibanServer) -> None:
    script = write_script(kiban, "stubborn.py", CANCEL_REPLICA)
    job_id = kiban.submit(job_manifest("stubborn", ["python", script], terminationGracePeriod="2s"))
    kiban.wait_for_state(job_id, "Running")
    eventually(lambda: "grandchild: up" in kiban.log_text(job_id), what="the grandchild to start")
    # shim, replica and grandchild all carry the job's id in their environment
    assert len(job_processes(job_id)) >= 3

    done = kiban.cli("cancel", job_id)
    assert done.returncode == 0, done.stderr
    kiban.wait_for_state(job_id, "Cancelled")
    eventually(lambda: not job_processes(job_id), timeout=30, what="no process of the job")

    reasons = [e["reason"] for e in kiban.events(job_id)]
    assert "Killed" in reasons, reasons  # then killed after the grace period


POLITE_REPLICA = """
import signal, sys, time
def stop(*_):
    print("replica: got SIGTERM, saving and exiting", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print("replica: up", flush=True)
while True:
    time.sleep(0.1)
"""


def test_cancel_asks_replicas_to_stop_before_the_grace_period_ends(kiban: KibanServer) -> None:
    script = write_script(kiban, "polite.py", POLITE_REPLICA)
    job_id = kiban.submit(job_manifest("polite", ["python", script], terminationGracePeriod="5m"))
    kiban.wait_for_state(job_id, "Running")
    eventually(lambda: "replica: up" in kiban.log_text(job_id), what="the replica to start")
    assert kiban.cli("cancel", job_id).returncode == 0
    # well within the 5 minutes of grace: the replica is told at once and ends by itself
    eventually(
        lambda: "got SIGTERM" in kiban.log_text(job_id), timeout=20, what="SIGTERM to arrive"
    )
    kiban.wait_for_state(job_id, "Cancelled")
    assert "Killed" not in [e["reason"] for e in kiban.events(job_id)]


def test_a_task_without_gpus_sees_none(kiban: KibanServer) -> None:
    job_id = kiban.run_job(
        "python",
        "-c",
        "import os; print('CUDA=%r NVIDIA=%r' % (os.environ.get('CUDA_VISIBLE_DEVICES'), "
        "os.environ.get('NVIDIA_VISIBLE_DEVICES')))",
    )
    kiban.wait_for_state(job_id, "Succeeded")
    assert "CUDA='' NVIDIA='none'" in kiban.log_text(job_id)


WAIT_FOR_FILE = """
import os, pathlib, sys, time
release = pathlib.Path(sys.argv[1])
print(f"waiting for {release} in pid {os.getpid()}", flush=True)
while not release.exists():
    time.sleep(0.1)
print("released", flush=True)
"""


@pytest.mark.parametrize("how", ["sigkill", "sigterm"])
def test_restarted_server_readopts_a_running_job(kiban: KibanServer, how: str) -> None:
    script = write_script(kiban, "wait_for_file.py", WAIT_FOR_FILE)
    release = kiban.workdir / "release"
    job_id = kiban.run_job("python", script, str(release))
    before = kiban.wait_for_state(job_id, "Running")
    (replica,) = before["replicas"]
    shim = psutil.Process(replica["pid"])
    eventually(lambda: "waiting for" in kiban.log_text(job_id), what="the replica to start")

    if how == "sigkill":
        kiban.kill()
    else:
        kiban.stop()
    assert shim.is_running() and shim.status() != psutil.STATUS_ZOMBIE

    kiban.start()
    # Let the new control plane settle the job a few times: a probe job that goes through
    # admission, launch and completion needs several passes, each of which observes our job.
    probe = kiban.run_job("true")
    kiban.wait_for_state(probe, "Succeeded")
    after = kiban.json("describe", job_id)
    assert after["state"] == "Running", after
    assert after["attempt"] == 1
    assert [r["pid"] for r in after["replicas"]] == [replica["pid"]]
    assert shim.is_running()

    release.touch()
    kiban.wait_for_state(job_id, "Succeeded")
    log = kiban.log_text(job_id)
    assert launched_attempts(kiban, job_id) == [1], log
    assert log.count("released") == 1


EXIT_WHEN_RELEASED = """
import pathlib, sys, time
release = pathlib.Path(sys.argv[1])
print("waiting", flush=True)
while not release.exists():
    time.sleep(0.1)
sys.exit(int(release.read_text() or 0))
"""


@pytest.mark.parametrize("code", [0, 4])
def test_a_replica_that_ends_while_the_server_is_down_is_settled(
    kiban: KibanServer, code: int
) -> None:
    script = write_script(kiban, "exit_when_released.py", EXIT_WHEN_RELEASED)
    release = kiban.workdir / "release"
    job_id = kiban.run_job("python", script, str(release), options=["--nodes", "2"])
    kiban.wait_for_state(job_id, "Running")
    eventually(
        lambda: all("waiting" in kiban.log_text(job_id, r) for r in (0, 1)),
        what="both replicas to start",
    )

    kiban.kill()
    release.write_text(str(code))
    exits = [kiban.home / "jobs" / job_id / "attempt-1" / f"rank-{r}.exit" for r in (0, 1)]
    eventually(lambda: all(p.exists() for p in exits), what="the shims to record the exits")
    eventually(lambda: not job_processes(job_id), what="the replicas to end")

    kiban.start()
    job = kiban.wait_for_state(job_id, "Succeeded" if code == 0 else "Failed")
    assert [r["exitCode"] for r in job["replicas"]] == [code, code]
    assert [r["state"] for r in job["replicas"]] == ["Exited", "Exited"]
    assert launched_attempts(kiban, job_id) == [1]
    for rank in (0, 1):
        assert kiban.log_text(job_id, rank).count("waiting") == 1


def test_max_runtime_stops_the_job(kiban: KibanServer) -> None:
    job_id = kiban.submit(
        job_manifest("forever", ["sleep", "600"], maxRuntime="2s", terminationGracePeriod="1s")
    )
    job = kiban.wait_for_state(job_id, "Failed")
    assert "maxRuntime" in (job["message"] or ""), job
    assert "DeadlineExceeded" in [e["reason"] for e in kiban.events(job_id)]
    eventually(lambda: not job_processes(job_id), timeout=30, what="no process of the job")


def test_nonzero_exit_fails_the_job(kiban: KibanServer) -> None:
    job_id = kiban.run_job("sh", "-c", "echo about to fail; exit 3")
    job = kiban.wait_for_state(job_id, "Failed")
    messages = [e["message"] for e in kiban.events(job_id)]
    assert any(re.search(r"exit(ed with)? code 3\b", m) for m in messages), messages
    assert "code 3" in (job["message"] or "")
    assert "about to fail" in kiban.log_text(job_id)


def test_missing_command_fails_with_command_not_found(kiban: KibanServer) -> None:
    job_id = kiban.run_job("kiban-e2e-no-such-command", "--flag")
    job = kiban.wait_for_state(job_id, "Failed")
    texts = [job["message"] or ""] + [e["message"] for e in kiban.events(job_id)]
    assert any("command not found" in t and "kiban-e2e-no-such-command" in t for t in texts), texts
    assert job_processes(job_id) == []


def test_on_failure_restarts_up_to_the_backoff_limit(kiban: KibanServer) -> None:
    job_id = kiban.submit(
        job_manifest(
            "flaky",
            ["sh", "-c", 'echo "run of attempt $KIBAN_ATTEMPT"; exit 1'],
            restartPolicy="OnFailure",
            backoffLimit=1,
            terminationGracePeriod="1s",
        )
    )
    job = kiban.wait_for_state(job_id, "Failed")
    assert job["attempt"] == 2
    log = kiban.log_text(job_id)
    assert launched_attempts(kiban, job_id) == [1, 2], log
    assert "run of attempt 1" in log and "run of attempt 2" in log
    reasons = [e["reason"] for e in kiban.events(job_id)]
    assert reasons.count("Restarting") == 1, reasons


TORCH_SCRIPT = """
import os
print("torch-env RANK=%s WORLD_SIZE=%s LOCAL_RANK=%s" % (
    os.environ["RANK"], os.environ["WORLD_SIZE"], os.environ["LOCAL_RANK"]), flush=True)
"""


@pytest.mark.timeout(300)
def test_torchrun_launcher_spans_replicas_and_processes(kiban: KibanServer) -> None:
    pytest.importorskip("torch", reason="the torchrun launcher needs PyTorch")
    script = write_script(kiban, "show_rank.py", TORCH_SCRIPT)
    job_id = kiban.submit(
        job_manifest(
            "torchrun",
            ["python", script],
            replicas=2,
            launcher="torchrun",
            task={"nprocPerNode": 2},
            terminationGracePeriod="5s",
        )
    )
    kiban.wait_for_state(job_id, "Succeeded", timeout=240)
    seen = []
    for rank in (0, 1):
        for match in re.finditer(
            r"torch-env RANK=(\d+) WORLD_SIZE=(\d+) LOCAL_RANK=(\d+)", kiban.log_text(job_id, rank)
        ):
            seen.append((rank, *map(int, match.groups())))
    assert sorted(s[1] for s in seen) == [0, 1, 2, 3], seen
    assert {s[2] for s in seen} == {4}
    for node_rank in (0, 1):
        assert sorted(s[3] for s in seen if s[0] == node_rank) == [0, 1], seen
        # torchrun numbers a node's processes after the nodes before it
        assert sorted(s[1] for s in seen if s[0] == node_rank) == [2 * node_rank, 2 * node_rank + 1]


def test_replica_python_is_the_servers(kiban: KibanServer) -> None:
    """``python`` in a job is the interpreter kiban runs under (its bin dir is first on PATH)."""
    job_id = kiban.run_job("python", "-c", "import sys; print('exe', sys.executable)")
    kiban.wait_for_state(job_id, "Succeeded")
    line = next(x for x in kiban.log_text(job_id).splitlines() if x.startswith("exe "))
    assert Path(line.split(" ", 1)[1]).parent == Path(sys.executable).parent
    assert os.path.basename(line.split(" ", 1)[1]).startswith("python")


def test_stop_never_signals_a_reused_pid(tmp_path: Path) -> None:
    """A replica that ended long ago: its pid may now be another job's group leader."""
    stranger = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        started = psutil.Process(stranger.pid).create_time()
        executor = LocalExecutor(tmp_path / "home", [])
        gone = ReplicaRef("old-job", 1, "worker", 0, 0, process_handle(stranger.pid, started - 100))
        executor.stop(gone, force=True)
        executor.stop(gone, force=False)
        assert not executor.group_alive(gone)
        assert stranger.poll() is None, "the stranger's group was signalled"
        # the same pid with its real start time is the replica itself: stop it
        own = ReplicaRef("old-job", 1, "worker", 0, 0, process_handle(stranger.pid, started))
        assert executor.group_alive(own)
        executor.stop(own, force=True)
        assert stranger.wait(timeout=30) == -signal.SIGKILL
    finally:
        stranger.kill()
        stranger.wait(timeout=30)


LISTEN_ON_SOCKET = """
import os, socket, time
path = os.environ.get("KIBAN_REPLICA_SOCKET")
print("SOCKET", path, flush=True)
if path:
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen()
time.sleep(60)
"""


def launch_script(
    executor: LocalExecutor,
    workdir: Path,
    job_id: str,
    source: str,
    labels: dict[str, str] | None = None,
) -> ReplicaRef:
    """One replica of a one-task job that runs ``source`` as a Python script, launched by the
    executor alone (no control plane); the caller stops it."""
    script = workdir / f"{job_id}.py"
    script.write_text(source)
    document = {
        "apiVersion": "kiban/v1",
        "kind": "Job",
        "metadata": {"name": "script"},
        "spec": {
            "tasks": [{"name": "server", "replicas": 1, "command": ["python", script.name]}],
            "workingDir": str(workdir),
        },
    }
    spec = parse_job_manifest(document).spec
    placement = ReplicaPlacement("server", 0, 0, "node-0", (), 1000, 2**30)
    request = LaunchRequest(job_id, "script", "t", 1, spec, (placement,), 29500, labels or {})
    (up,) = executor.launch(request)
    return ReplicaRef(job_id, 1, "server", 0, 0, up.handle)


def test_a_service_replica_that_listens_on_its_socket_is_reached_there(tmp_path: Path) -> None:
    """The local executor offers a service's replica a Unix socket; once the replica listens
    there, its address is that socket (cheaper for the router than loopback TCP)."""
    home = tmp_path / "h"
    executor = LocalExecutor(home, [])
    refs: list[ReplicaRef] = []
    try:
        for job_id, labels in (("plain-abc123", {}), ("svc-abc123", {SERVICE_LABEL: "svc"})):
            refs.append(launch_script(executor, tmp_path, job_id, LISTEN_ON_SOCKET, labels))
        plain, service = refs
        socket_path = home / "jobs" / "svc-abc123" / "attempt-1" / "rank-0.sock"
        eventually(
            lambda: executor.replica_address(service, 8080) == f"unix:{socket_path}",
            what="the service replica to listen on its socket",
        )
        assert executor.replica_address(plain, 8080) == "127.0.0.1:8080"
        plain_log = home / "jobs" / "plain-abc123" / "rank-0.log"
        eventually(
            lambda: "SOCKET None" in plain_log.read_text(),
            what="the plain replica to report that it was offered no socket",
        )
    finally:
        for ref in refs:
            executor.stop(ref, force=True)


BURN_IN_A_GRANDCHILD = """
import subprocess, sys
burn = "import time\\nend = time.process_time() + 0.6\\nwhile time.process_time() < end: pass\\n"
subprocess.run([sys.executable, "-c", burn + "time.sleep(60)"])
"""


def test_a_replicas_cpu_use_counts_every_process_under_it(tmp_path: Path) -> None:
    """What the autoscaler's cpu metric reads: the CPU seconds of the replica's whole tree
    (here a grandchild does the work), and nothing once the replica is gone."""
    executor = LocalExecutor(tmp_path / "h", [])
    assert Capability.CPU_USAGE in executor.capabilities
    ref = launch_script(executor, tmp_path, "burn-abc123", BURN_IN_A_GRANDCHILD)
    try:
        used = eventually(
            lambda: (executor.replica_cpu_seconds(ref) or 0.0) >= 0.6 or None,
            timeout=60,
            what="the grandchild's 0.6 s of CPU to count",
        )
        assert used
        settled = executor.replica_cpu_seconds(ref)
        assert settled is not None and settled < 5.0  # it sleeps now: no more than it did
    finally:
        executor.stop(ref, force=True)
    eventually(lambda: executor.replica_cpu_seconds(ref) is None, what="the replica to be gone")


PRINT_WHERE_TO_LISTEN = """
import os
env = os.environ
print("HOST", env.get("KIBAN_REPLICA_HOST"), "SOCKET", env.get("KIBAN_REPLICA_SOCKET"))
"""


def test_where_a_replica_listens_is_not_inherited_from_the_servers_shell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shell that set these must not expose a local model server to the network, nor give a
    plain job a socket path: kiban decides them per replica."""
    monkeypatch.setenv("KIBAN_REPLICA_HOST", "0.0.0.0")
    monkeypatch.setenv("KIBAN_REPLICA_SOCKET", "/tmp/stray.sock")
    home = tmp_path / "h"
    executor = LocalExecutor(home, [])
    ref = launch_script(executor, tmp_path, "plain-abc123", PRINT_WHERE_TO_LISTEN)
    log = home / "jobs" / "plain-abc123" / "rank-0.log"
    try:
        line = eventually(
            lambda: next((x for x in log.read_text().splitlines() if x.startswith("HOST")), None),
            what="the replica's line",
        )
    finally:
        executor.stop(ref, force=True)
    assert line == "HOST None SOCKET None"


JOB_TOKEN_PROBE = """
import json, os, time
os.environ["KIBAN_HOME"] = "/nonexistent"  # so the admin token in the kiban home is not used
from kiban.sdk.client import ApiError, Client
client = Client()
for _ in range(100):  # the loop marks the job Running just after it starts the process
    try:
        client.checkpoint()
        break
    except ApiError as exc:
        if exc.status != 409:
            raise
        time.sleep(0.1)
try:
    client.jobs()
    listed = "allowed"
except ApiError as exc:
    listed = exc.status
print("TOKEN " + json.dumps({"me": client.whoami(), "listed": listed}), flush=True)
"""


def test_a_job_reaches_the_api_as_itself_and_no_further(kiban: KibanServer) -> None:
    script = write_script(kiban, "token_probe.py", JOB_TOKEN_PROBE)
    job_id = kiban.run_job("python", script)
    kiban.wait_for_state(job_id, "Succeeded")
    (line,) = [x for x in kiban.log_text(job_id).splitlines() if x.startswith("TOKEN ")]
    seen = json.loads(line.removeprefix("TOKEN "))
    assert seen["me"]["jobId"] == job_id and seen["me"]["isAdmin"] is False
    assert seen["listed"] == 403  # its token reads its own job only
    reasons = [e["reason"] for e in kiban.client.events(job_id)]
    assert "Checkpointed" in reasons
