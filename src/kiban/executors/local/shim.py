"""Runs one replica's command and records its exit code in a file.

The control plane may be restarted (even killed) while a replica runs; the replica is then no
longer its child and its exit status would be lost. This shim is the replica's process-group
leader: it waits for the command and writes the code to ``EXIT_FILE`` atomically, so a restarted
control plane can settle the replica.

Usage: ``python -m kiban.executors.local.shim EXIT_FILE -- CMD...``
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from kiban.executors.local.log_index import Relay


def _write_exit(path: str, code: int, message: str = "") -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as handle:
        handle.write(f"{code}\n{message}\n")
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m kiban.executors.local.shim EXIT_FILE -- CMD...", file=sys.stderr)
        return 2
    exit_file, command = argv[0], argv[2:]
    # The whole process group receives stop signals; the shim outlives its command to record it.
    signal.signal(signal.SIGTERM, lambda *_: None)
    signal.signal(signal.SIGINT, lambda *_: None)
    relay = Relay.from_env()  # the command's output goes through it, its times noted
    output = None if relay is None else relay.child_fd
    try:
        child = subprocess.Popen(command, stdout=output, stderr=output)
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
