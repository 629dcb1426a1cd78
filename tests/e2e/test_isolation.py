"""Local jobs of one tenant cannot read kiban's secrets nor another tenant's files, when kiban
runs as root (as CI does): each tenant's jobs run as a user of its own.

A job of tenant A tries to read the admin token, the store, a running job of tenant B's log,
checkpoint directory and environment (its job token), and fails at each; its own checkpoint
and working directories it can write.
"""

from __future__ import annotations

import json
import signal
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2e_support import (
    AS_ROOT,
    KIBAN,
    KibanServer,
    cli_env,
    eventually,
    fresh_dir,
    job_manifest,
    remove_fresh,
)

from kiban.sdk.client import Client

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.root,
    pytest.mark.skipif(
        not AS_ROOT,
        reason="isolation of local jobs needs kiban to run as root (it makes a user per "
        "tenant); unprivileged, jobs run as kiban's user and can read what it can",
    ),
]

VICTIM = """
import os, pathlib, pwd, sys, time
ckpt = pathlib.Path(os.environ["KIBAN_CHECKPOINT_DIR"])
(ckpt / "weights.txt").write_text("tenant b's weights")
user = pwd.getpwuid(os.getuid()).pw_name
print("VICTIM", os.getpid(), user, "tenant b's private log line", flush=True)
release = pathlib.Path(sys.argv[1])
deadline = time.monotonic() + 120
while not release.exists() and time.monotonic() < deadline:
    time.sleep(0.1)
"""

PROBE = """
import json, os, pwd, sys
home, victim_job, victim_pid = sys.argv[1:4]
reads = {
    "admin token": f"{home}/token",
    "store": f"{home}/kiban.db",
    "url": f"{home}/url",
    "other tenant's log": f"{home}/jobs/{victim_job}/rank-0.log",
    "other tenant's log times": f"{home}/jobs/{victim_job}/rank-0.times",
    "other tenant's checkpoint": f"{home}/checkpoints/{victim_job}/weights.txt",
    "other tenant's environment": f"/proc/{victim_pid}/environ",
}
listings = {
    "home": home,
    "jobs": f"{home}/jobs",
    "other tenant's checkpoint directory": f"{home}/checkpoints/{victim_job}",
}
seen = {}
for what, path in reads.items():
    try:
        with open(path, "rb") as handle:
            seen[what] = "read " + repr(handle.read(100))
    except OSError as exc:
        seen[what] = type(exc).__name__
for what, path in listings.items():
    try:
        seen["list " + what] = "listed " + ",".join(os.listdir(path))
    except OSError as exc:
        seen["list " + what] = type(exc).__name__
own = {"own checkpoint directory": os.environ["KIBAN_CHECKPOINT_DIR"], "own working directory": "."}
for what, directory in own.items():
    try:
        with open(os.path.join(directory, "mine.txt"), "w") as handle:
            handle.write("mine")
        seen[what] = "written"
    except OSError as exc:
        seen[what] = type(exc).__name__
try:
    with open("/dev/stdout", "w") as again:  # its own output, opened again
        again.write("AGAIN its own output\\n")
    seen["own output opened again"] = "written"
except OSError as exc:
    seen["own output opened again"] = type(exc).__name__
held = []
for fd in os.listdir("/proc/self/fd"):
    try:
        held.append(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        pass
seen["holds of the home"] = sorted(t for t in held if t.startswith(home))
seen["user"] = pwd.getpwuid(os.getuid()).pw_name
seen["groups"] = sorted(os.getgroups())
seen["gid"] = os.getgid()
print("PROBE " + json.dumps(seen), flush=True)
"""


def member(kiban: KibanServer, tenant: str) -> Client:
    """A member of a new tenant with a queue of its own."""
    admin = kiban.client
    admin.create_tenant(tenant)
    admin.create_queue(f"{tenant}-q", tenant=tenant)
    return Client(url=kiban.url, token=admin.create_token(tenant, f"{tenant}-member"))


def line_of(kiban: KibanServer, job_id: str, prefix: str) -> str | None:
    return next((x for x in kiban.log_text(job_id).splitlines() if x.startswith(prefix)), None)


def test_a_job_cannot_read_the_token_nor_another_tenants_files(kiban: KibanServer) -> None:
    (kiban.workdir / "victim.py").write_text(textwrap.dedent(VICTIM))
    (kiban.workdir / "probe.py").write_text(textwrap.dedent(PROBE))
    release = kiban.workdir / "release"
    team_a, team_b = member(kiban, "team-a"), member(kiban, "team-b")
    try:
        victim = team_b.submit(
            job_manifest(
                "victim",
                ["python", "victim.py", str(release)],
                queue="team-b-q",
                workingDir=str(kiban.workdir),
            )
        )["id"]
        kiban.wait_for_state(victim, "Running")
        line = eventually(lambda: line_of(kiban, victim, "VICTIM"), what="the victim's line")
        _, victim_pid, victim_user, *_ = line.split()
        assert victim_user == "kiban-team-b"

        # no workingDir: it works in a directory of its own (its script named by full path);
        # sent to the API as it is (the SDK, as the CLI, would add the current directory)
        probe = team_a._request(
            "POST",
            "/api/v1/jobs",
            json=job_manifest(
                "probe",
                ["python", str(kiban.workdir / "probe.py"), str(kiban.home), victim, victim_pid],
                queue="team-a-q",
            ),
        )["id"]
        kiban.wait_for_state(probe, "Succeeded")
        line = eventually(lambda: line_of(kiban, probe, "PROBE"), what="the probe's line")
        seen: dict[str, Any] = json.loads(line.removeprefix("PROBE "))
    finally:
        release.touch()
        team_a.close()
        team_b.close()

    assert seen.pop("user") == "kiban-team-a"
    assert seen.pop("groups") in ([], [seen["gid"]])  # its own group, no other
    seen.pop("gid")
    assert seen == {
        "admin token": "PermissionError",
        "store": "PermissionError",
        "url": "PermissionError",
        "other tenant's log": "PermissionError",
        "other tenant's log times": "PermissionError",
        "other tenant's checkpoint": "PermissionError",
        "other tenant's environment": "PermissionError",
        "list home": "PermissionError",
        "list jobs": "PermissionError",
        "list other tenant's checkpoint directory": "PermissionError",
        "own checkpoint directory": "written",
        "own working directory": "written",
        "own output opened again": "written",
        "holds of the home": [],  # neither its log nor its log's times: the shim writes them
    }
    probe_log = kiban.log_text(probe)
    assert "AGAIN its own output" in probe_log
    assert kiban.token not in probe_log and "tenant b's" not in probe_log
    kiban.wait_for_state(victim, "Succeeded")
    # kiban itself still reads every job's log and checkpoint
    assert "tenant b's private log line" in kiban.log_text(victim)
    weights = kiban.home / "checkpoints" / victim / "weights.txt"
    assert weights.read_text() == "tenant b's weights"


TRAP = """
import os, pathlib
try:
    pathlib.Path({marker!r}).write_text(str(os.getuid()))
except OSError:
    pass
"""


def test_a_job_cannot_make_kiban_run_its_code_as_root(kiban: KibanServer) -> None:
    """Each replica's shim runs as root: a job's working directory, its PYTHONPATH or
    LD_PRELOAD must not reach it. Here a ``kiban`` package in both would write a file where
    only root may (before, the shim imported it from the job's working directory)."""
    trap = kiban.workdir / "trap"
    (trap / "kiban").mkdir(parents=True)
    marker = trap / "ran-as-root"
    (trap / "kiban" / "__init__.py").write_text(TRAP.format(marker=str(marker)))
    job_id = kiban.submit(
        job_manifest(
            "trap",
            ["python", "-c", "import kiban; print('imported', kiban.__file__)"],
            workingDir=str(trap),
            task={"env": {"PYTHONPATH": str(trap)}},
        )
    )
    kiban.wait_for_state(job_id, "Succeeded")
    assert f"imported {trap}/kiban/__init__.py" in kiban.log_text(job_id)  # the job's own
    assert not marker.exists(), f"kiban ran the job's code as uid {marker.read_text()}"


def test_a_job_whose_working_directory_its_user_cannot_enter_fails_saying_so(
    kiban: KibanServer,
) -> None:
    private = kiban.workdir / "private"
    private.mkdir(mode=0o700)
    job_id = kiban.submit(job_manifest("private", ["true"], workingDir=str(private)))
    job = kiban.wait_for_state(job_id, "Failed")
    assert job["message"].startswith(f"the working directory {private} is out of reach of kiban-")
    assert f"chmod o+x {private}" in job["message"]


def start_multi_tenant(home: Path, log: Path) -> subprocess.Popen[bytes]:
    args = ["up", "--home", str(home), "--port", "0", "--nodes", "1", "--multi-tenant"]
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [str(KIBAN), *args],
            env=cli_env(home),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def up() -> bool:
        assert proc.poll() is None, log.read_text()
        return "kiban is up" in log.read_text() and (home / "url").exists()

    eventually(up, timeout=90, what="kiban up --multi-tenant")
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=30)


def test_multi_tenant_keeps_the_admin_token_out_of_the_home(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    base = fresh_dir(tmp_path_factory, "multi")
    home, log = base / "home", base / "server.log"
    proc = start_multi_tenant(home, log)
    try:
        first = log.read_text()
        assert not (home / "token").exists()
        token = first.split("keep it (as KIBAN_TOKEN): ", 1)[1].split()[0]
        url = (home / "url").read_text().strip()
        whoami = httpx.get(f"{url}/api/v1/whoami", headers={"Authorization": f"Bearer {token}"})
        assert whoami.status_code == 200 and whoami.json()["isAdmin"] is True
    finally:
        stop(proc)
    log.write_text("")
    proc = start_multi_tenant(home, log)  # again: no new admin token, the first one still works
    try:
        again = log.read_text()
        assert "keep it" not in again and token not in again, again
        assert "not kept in the home" in again
        assert not (home / "token").exists()
        url = (home / "url").read_text().strip()
        whoami = httpx.get(f"{url}/api/v1/whoami", headers={"Authorization": f"Bearer {token}"})
        assert whoami.status_code == 200
    finally:
        stop(proc)
        remove_fresh(base)
