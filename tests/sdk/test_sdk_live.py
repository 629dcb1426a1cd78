"""The SDK against a live server: what the README shows (a job file's relative script found
where it was submitted from), and ``wait``, ``describe``, ``cancel``, ``logs(follow=True)``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_support import KibanServer, readable_dir, remove_fresh

from kiban.sdk import Client

pytestmark = pytest.mark.e2e

JOB_FILE = """\
apiVersion: kiban/v1
kind: Job
metadata: {name: readme}
spec:
  tasks:
    - name: worker
      resources: {cpu: 1, memory: 256Mi}
      command: [python, train.py]
"""


@pytest.fixture
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A working directory the job's user may enter (as root, a tenant's own user runs it)."""
    path = readable_dir(tmp_path_factory, "sdk")
    yield path
    remove_fresh(path)


def sdk(live: KibanServer) -> Client:
    return Client(url=live.url, token=live.token)


def test_the_readme_example_runs_its_script_where_it_was_submitted(
    live: KibanServer, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Client.submit set no working directory: train.py was looked for in the job's home.
    project = workdir / "project"
    project.mkdir(mode=0o755)
    (project / "train.py").write_text("print('trained in', __import__('os').getcwd())\n")
    (project / "job.yaml").write_text(JOB_FILE)
    monkeypatch.chdir(project)
    with sdk(live) as kiban:
        job = kiban.submit(Path("job.yaml").read_text())  # the README's open("job.yaml").read()
        done = kiban.wait(job["id"], timeout=120)
        assert done["state"] == "Succeeded", (done, live.log_text(job["id"]))
        output = b"".join(kiban.logs(job["id"])).decode()
        assert f"trained in {project}" in output
        assert kiban.job(job["id"])["spec"]["spec"]["workingDir"] == str(project)


def test_wait_times_out_then_cancel_and_describe(live: KibanServer, workdir: Path) -> None:
    with sdk(live) as kiban:
        job = kiban.submit(
            {
                "apiVersion": "kiban/v1",
                "kind": "Job",
                "metadata": {"name": "sleeper"},
                "spec": {"tasks": [{"command": ["sleep", "300"]}]},
            },
            working_dir=workdir,
        )
        seen: list[str] = []
        started = time.monotonic()
        with pytest.raises(TimeoutError, match=f"job {job['id']} is "):
            kiban.wait(
                job["id"], timeout=1.5, interval=0.2, progress=lambda j: seen.append(j["state"])
            )
        assert time.monotonic() - started < 60
        assert seen and set(seen) <= {"Pending", "Admitted", "Running"}
        assert kiban.cancel(job["id"])["state"] in ("Stopping", "Cancelled")
        ended = kiban.wait(job["id"], timeout=120)
        assert ended["state"] == "Cancelled"
        described = kiban.describe(job["id"])
        assert described["state"] == "Cancelled"
        assert described["spec"]["spec"]["workingDir"] == str(workdir)
        reasons = [e["reason"] for e in described["events"]]
        assert reasons[0] == "Submitted" and "Cancelled" in " ".join(reasons)


def test_logs_follow_streams_until_the_job_ends(live: KibanServer, workdir: Path) -> None:
    script = "for i in 1 2 3 4; do echo line $i; sleep 0.3; done; echo done"
    with sdk(live) as kiban:
        job = kiban.submit(
            {
                "apiVersion": "kiban/v1",
                "kind": "Job",
                "metadata": {"name": "talker"},
                "spec": {"tasks": [{"command": ["sh", "-c", script]}]},
            },
            working_dir=workdir,
        )
        text = b"".join(kiban.logs(job["id"], follow=True)).decode()
        # The iterator ends with the job: by then its state is final.
        assert kiban.job(job["id"])["state"] == "Succeeded"
    lines = [line for line in text.splitlines() if not line.startswith("=== kiban")]
    assert lines == ["line 1", "line 2", "line 3", "line 4", "done"]
