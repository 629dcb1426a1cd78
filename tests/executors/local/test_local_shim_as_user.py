"""The shim as kiban runs it as root: the command runs as the tenant's user with the job's own
environment, its output relayed into the log with its times noted, and nothing of the log or
its marks within the command's reach (it could forge another job's times with them)."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

from kiban.executors.local.log_index import INDEX_FD_ENV, LogMarks, marks_path

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="running a command as another user needs root"
)

COMMAND = """
import json, os
print("out", flush=True)
with open("/dev/stdout", "w") as again:  # its own output, opened again
    again.write("again\\n")
fds = {}
for name in os.listdir("/proc/self/fd"):
    try:
        fds[name] = os.readlink(f"/proc/self/fd/{name}")
    except OSError:
        pass
print(json.dumps({
    "uid": os.getuid(),
    "secret": os.environ.get("JOB_SECRET"),
    "index": os.environ.get("KIBAN_LOG_INDEX_FD"),
    "fds": fds,
}), flush=True)
"""


def test_the_command_runs_as_the_user_and_its_output_is_relayed_beyond_its_reach(
    tmp_path: Path,
) -> None:
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user nobody on this machine")
    log = tmp_path / "rank-0.log"
    exit_file = tmp_path / "rank-0.exit"
    env_file = tmp_path / "rank-0.env"
    env_file.write_text(json.dumps({"JOB_SECRET": "s3cret", "PATH": "/usr/bin:/bin"}))
    user = f"{nobody.pw_uid}:{nobody.pw_gid}"
    with open(log, "ab") as out, open(marks_path(log), "ab") as marks:
        done = subprocess.run(
            [
                *(sys.executable, "-P", "-m", "kiban.executors.local.shim", str(exit_file)),
                *("--user", user, "--env-file", str(env_file), "--"),
                *(sys.executable, "-c", COMMAND),
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd="/",
            env={**os.environ, INDEX_FD_ENV: str(marks.fileno())},
            pass_fds=(marks.fileno(),),
            timeout=60,
            check=False,
        )
    text = log.read_text()
    assert done.returncode == 0, text
    out_line, again_line, report_line, *rest = text.splitlines()
    assert (out_line, again_line, rest) == ("out", "again", [])
    report = json.loads(report_line)
    assert report["uid"] == nobody.pw_uid
    assert report["secret"] == "s3cret" and report["index"] is None
    held = report["fds"].values()
    assert not [target for target in held if target.startswith(str(tmp_path))], held
    assert not env_file.exists()  # read once: it held the job's environment
    assert exit_file.read_text().splitlines()[0] == "0"
    assert os.stat(exit_file).st_uid == 0  # the shim stayed root to write it
    found = LogMarks(marks_path(log)).between(0, len(text))
    assert found and found[0][0] == 0
