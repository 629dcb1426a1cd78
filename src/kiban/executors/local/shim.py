"""Runs one replica's command and records its exit code in a file.

The control plane may be restarted (even killed) while a replica runs; the replica is then no
longer its child and its exit status would be lost. This shim is the replica's process-group
leader: it waits for the command and writes the code to ``EXIT_FILE`` atomically, so a restarted
control plane can settle the replica.

Usage: ``python -P -m kiban.executors.local.shim EXIT_FILE [--user UID:GID --env-file PATH]
-- CMD...`` (``-P``: the working directory, which the job may write, is not searched for
modules).

With ``--user`` (kiban runs as root) the command runs as that user and group, with no other
group, while the shim stays root: the exit file is written where only kiban writes. The shim
then runs in kiban's own environment, not the job's (a root process must not take
``LD_PRELOAD`` or ``PYTHONPATH`` from a tenant): the command's environment is read from
``--env-file`` (JSON, in a directory only kiban enters), which the shim removes.

The command's output goes through a pipe that the shim copies into the log, noting when each
part came (``log_index``; the marks file's descriptor is the shim's alone, never the command's).
With ``--user`` the pipe is that user's, so that the command may open ``/dev/stdout`` again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass

from kiban.executors.local.log_index import Relay


def _write_exit(path: str, code: int, message: str = "") -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as handle:
        handle.write(f"{code}\n{message}\n")
    os.replace(tmp, path)


USAGE = (
    "usage: python -P -m kiban.executors.local.shim EXIT_FILE [--user UID:GID --env-file PATH] "
    "-- CMD..."
)


@dataclass(frozen=True)
class Invocation:
    """What the shim is asked: where to record the exit, as whom to run what, in which
    environment (None: the shim's own)."""

    exit_file: str
    command: list[str]
    user: tuple[int, int] | None = None
    env_file: str | None = None


def parse(argv: list[str]) -> Invocation | None:
    """The invocation ``argv`` asks for; None when it is malformed."""
    if "--" not in argv[1:]:
        return None
    end = argv.index("--", 1)
    options, command = argv[1:end], argv[end + 1 :]
    if not command or len(options) % 2:
        return None
    given = dict(zip(options[::2], options[1::2], strict=True))
    if set(given) - {"--user", "--env-file"} or len(given) * 2 != len(options):
        return None
    user = None
    if "--user" in given:
        uid, sep, gid = given["--user"].partition(":")
        if not (sep and uid.isdigit() and gid.isdigit()):
            return None
        user = (int(uid), int(gid))
    if (user is None) != ("--env-file" not in given):
        return None  # both or neither: as another user, never in the shim's own environment
    return Invocation(argv[0], command, user, given.get("--env-file"))


def _read_env(path: str) -> dict[str, str]:
    with open(path, encoding="utf-8") as handle:
        env = json.load(handle)
    os.unlink(path)  # it holds the job's token: read once
    return {str(k): str(v) for k, v in env.items()}


def main(argv: list[str]) -> int:
    asked = parse(argv)
    if asked is None:
        print(USAGE, file=sys.stderr)
        return 2
    exit_file, command = asked.exit_file, asked.command
    # The whole process group receives stop signals; the shim outlives its command to record it.
    signal.signal(signal.SIGTERM, lambda *_: None)
    signal.signal(signal.SIGINT, lambda *_: None)
    env = None
    if asked.env_file is not None:
        try:
            env = _read_env(asked.env_file)
        except (OSError, ValueError, AttributeError) as exc:
            message = f"cannot read the job's environment: {exc}"
            print(f"kiban: {message}", file=sys.stderr, flush=True)
            _write_exit(exit_file, 126, message)
            return 126
    relay = Relay.from_env()  # the command's output goes through it, its times noted
    output = None if relay is None else relay.child_fd
    try:
        if asked.user is None:
            child = subprocess.Popen(command, stdout=output, stderr=output)
        else:
            uid, gid = asked.user
            if relay is not None:  # its own output, which it may open again (/dev/stdout)
                os.fchown(relay.child_fd, uid, gid)
            child = subprocess.Popen(
                command, stdout=output, stderr=output, env=env, user=uid, group=gid, extra_groups=[]
            )
    except FileNotFoundError:
        message = f"command not found: {command[0]!r}"
        print(f"kiban: {message}", file=sys.stderr, flush=True)
        _write_exit(exit_file, 127, message)
        return 127
    except PermissionError:
        message = f"permission denied: {command[0]!r} is not executable"
        print(f"kiban: {message}", file=sys.stderr, flush=True)
        _write_exit(exit_file, 126, message)
        return 126
    except OSError as exc:
        message = f"cannot run {command[0]!r}: {exc.strerror}"
        print(f"kiban: {message}", file=sys.stderr, flush=True)
        _write_exit(exit_file, 126, message)
        return 126
    if relay is not None:
        relay.start()
        relay.command_started()
    while True:
        try:
            code = child.wait()
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries, kept for safety
            continue
    if relay is not None:
        relay.finish()  # its output is in the log before its end is recorded
    exit_code = code if code >= 0 else 128 - code
    message = f"killed by signal {signal.Signals(-code).name}" if code < 0 else ""
    _write_exit(exit_file, exit_code, message)
    return exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
