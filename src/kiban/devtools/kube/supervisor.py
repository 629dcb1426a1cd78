"""Background processes of the local control plane, tracked by pid files so another command
(``kiban dev kube down``) can stop them.

Each process runs in its own session (a Ctrl-C in the terminal that started it does not reach
it), from an argument list, with its output in ``<name>.log``. The pid file records the pid and
the process's start time, so a pid reused by an unrelated process is never signalled.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

_SAME_START = 0.05  # seconds: create_time is rounded differently on different reads


class ProcessExited(RuntimeError):
    """A supervised process exited while it was expected to run."""


@dataclass(frozen=True)
class ProcessRecord:
    """What a pid file holds about one started process."""

    name: str
    pid: int
    started: float
    argv: list[str]
    log: str

    @property
    def log_path(self) -> Path:
        return Path(self.log)


def pid_file(run_dir: Path, name: str) -> Path:
    return run_dir / f"{name}.pid"


def start(
    name: str,
    argv: Sequence[str],
    *,
    run_dir: Path,
    log_dir: Path,
    env: Mapping[str, str] | None = None,
) -> ProcessRecord:
    """Start argv in the background, output appended to log_dir/<name>.log; write its pid file."""
    run_dir.mkdir(parents=True, exist_ok=True)
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            env=dict(env) if env is not None else None,
        )
    try:
        started = psutil.Process(process.pid).create_time()
    except psutil.NoSuchProcess:
        started = 0.0
    record = ProcessRecord(name, process.pid, started, list(argv), str(log_path))
    path = pid_file(run_dir, name)
    path.write_text(json.dumps(asdict(record)) + "\n")
    return record


def read_record(path: Path) -> ProcessRecord | None:
    """The record in a pid file, or None if it is missing or unreadable."""
    try:
        data = json.loads(path.read_text())
        return ProcessRecord(
            name=str(data["name"]),
            pid=int(data["pid"]),
            started=float(data["started"]),
            argv=[str(a) for a in data["argv"]],
            log=str(data["log"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _process(record: ProcessRecord) -> psutil.Process | None:
    """The live process of record (not a zombie, not a reused pid), or None."""
    try:
        process = psutil.Process(record.pid)
        if abs(process.create_time() - record.started) > _SAME_START:
            return None
        if process.status() == psutil.STATUS_ZOMBIE:
            with contextlib.suppress(psutil.Error):
                process.wait(timeout=0)  # reap it if it is our child
            return None
        return process
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def alive(record: ProcessRecord) -> bool:
    return _process(record) is not None


def check_alive(record: ProcessRecord) -> None:
    """Raise :class:`ProcessExited` with the end of its log if the process is gone."""
    if not alive(record):
        raise ProcessExited(f"{record.name} exited; the end of {record.log}:\n{log_tail(record)}")


def log_tail(record: ProcessRecord, lines: int = 25) -> str:
    try:
        text = record.log_path.read_text(errors="replace")
    except OSError as exc:
        return f"(no log: {exc.strerror})"
    return "\n".join(text.splitlines()[-lines:])


def stop(record: ProcessRecord, *, timeout: float = 15.0) -> None:
    """SIGTERM the process, SIGKILL it after timeout seconds; wait until it is gone."""
    process = _process(record)
    if process is None:
        return
    with contextlib.suppress(psutil.NoSuchProcess):
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except psutil.TimeoutExpired:
            process.kill()
            process.wait(timeout=timeout)


def stop_from_pid_file(path: Path, *, timeout: float = 15.0) -> ProcessRecord | None:
    """Stop the process a pid file names (if it still runs) and remove the file."""
    record = read_record(path)
    if record is not None:
        stop(record, timeout=timeout)
    path.unlink(missing_ok=True)
    return record
