"""``kiban up`` servers in subprocesses for the benchmarks, and the CPU they spend."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil

from kiban.bench.loadgen import BenchError


@contextlib.contextmanager
def bench_workspace(prefix: str) -> Iterator[Path]:
    """A temporary folder for a benchmark's servers, removed after. Searchable by others (not
    listable): a server started as root runs each tenant's jobs as a user of its own, which
    must reach its working directory in the servers' homes below."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    root.chmod(0o711)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


# -- servers ---------------------------------------------------------------------------------
def cpu_seconds(processes: list[psutil.Process]) -> float:
    total = 0.0
    for proc in processes:
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            total += times.user + times.system
    return total


class KibanServer:
    """``kiban up`` in a subprocess (its own session, so Ctrl-C reaches it only through us)."""

    def __init__(
        self,
        home: Path,
        db_url: str | None,
        timeout_s: float,
        cluster_file: str,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.home = home
        self.extra_args = extra_args  # more ``kiban up`` options (``--no-audit``)
        self.cluster_file = cluster_file
        self.db_url = db_url
        self.timeout_s = timeout_s
        self.url = ""
        self.token = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_path = home.parent / f"{home.name}.log"

    def start(self) -> KibanServer:
        """Start ``kiban up`` on the home (a new one, or the store of an earlier start)."""
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "url").unlink(missing_ok=True)  # an earlier start's, gone stale
        cluster = self.home.parent / f"{self.home.name}-cluster.yaml"
        cluster.write_text(self.cluster_file)
        command = [
            sys.executable,
            "-m",
            "kiban.cli.main",
            "up",
            "--home",
            str(self.home),
            "--port",
            "0",
            "--nodes",
            "1",
            "--gpus-per-node",
            "1",
            "--config",
            str(cluster),
        ]
        if self.db_url:
            command += ["--db", self.db_url]
        command += self.extra_args
        with open(self._log_path, "wb") as log:
            self._proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + self.timeout_s
        url_file = self.home / "url"
        while not (url_file.exists() and self._healthy(url_file.read_text().strip())):
            if self._proc.poll() is not None:
                raise BenchError(f"kiban up exited with code {self._proc.returncode}:\n{self.log}")
            if time.monotonic() > deadline:
                self.stop()
                raise BenchError(f"kiban up did not answer within {self.timeout_s:g}s:\n{self.log}")
            time.sleep(0.05)
        self.url = url_file.read_text().strip()
        self.token = (self.home / "token").read_text().strip()
        return self

    def _healthy(self, url: str) -> bool:
        if not url:
            return False
        try:
            return httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False

    @property
    def log(self) -> str:
        try:
            return "\n".join(self._log_path.read_text(errors="replace").splitlines()[-30:])
        except OSError:
            return "(no log)"

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def cpu_seconds(self) -> float:
        """CPU time used so far by the server process (all its threads)."""
        return cpu_seconds([psutil.Process(self.pid)])

    def stop(self) -> None:
        """SIGINT (kiban stops its loop and closes its store), then SIGKILL after 15 seconds.

        Not SIGTERM: uvicorn re-raises a captured SIGTERM after its shutdown, which ends the
        process before ``kiban up`` has stopped its control loop.
        """
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)

    def __enter__(self) -> KibanServer:
        return self.start()

    def __exit__(self, *_: object) -> None:
        try:
            self.stop()
        finally:  # a stopped kiban leaves its jobs' replicas running; a bench leaves nothing
            kill_replica_groups(self.home)


def kill_replica_groups(home: Path) -> list[str]:
    """SIGKILL the process group of every replica a local ``kiban up`` on ``home`` started and
    that still runs (its pid file names the pid and its start time, so a reused pid is left
    alone); what was killed, as ``group PID (path)``."""
    killed: list[str] = []
    for pid_file in sorted((home / "jobs").glob("*/attempt-*/rank-*.pid")):
        with contextlib.suppress(ValueError, OSError, psutil.Error):
            pid_text, start_text = pid_file.read_text().split()
            proc = psutil.Process(int(pid_text))
            if abs(proc.create_time() - float(start_text)) < 0.05 and proc.status() != "zombie":
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                killed.append(f"group {proc.pid} ({pid_file.relative_to(home)})")
    return killed


def postgres_processes(data_dir: Path) -> list[psutil.Process]:
    """The postmaster named in ``postmaster.pid`` and its children (the backends)."""
    try:
        pid = int((data_dir / "postmaster.pid").read_text().splitlines()[0])
        master = psutil.Process(pid)
        return [master, *master.children(recursive=True)]
    except (OSError, ValueError, IndexError, psutil.Error):
        return []
