"""Helpers of the end-to-end tier: a handle on a real ``kiban up`` process, CLI runs, polling.

Everything waits by polling against a deadline: the machine running the tests may be small and
busy, so no fixed sleep decides an outcome.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
import yaml

from kiban import testing
from kiban.bench.servers import kill_replica_groups
from kiban.executors.local.isolation import blocking_directories
from kiban.sdk.client import Client

BIN_DIR = Path(sys.executable).parent
KIBAN = BIN_DIR / "kiban"
TERMINAL = ("Succeeded", "Failed", "Cancelled")

# Deadlines, generous for a loaded 2-core machine: they bound waits, they never decide results.
START_TIMEOUT = 90.0
STATE_TIMEOUT = 60.0
CLI_TIMEOUT = 120.0


AS_ROOT = os.geteuid() == 0
"""kiban up as root runs each tenant's local jobs as a user of its own (isolation): what the
tests give jobs (homes, working directories) must be within those users' reach."""


def fresh_dir(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A new directory for a server's home and work; as root, one outside pytest's own
    (which only root may enter), searchable by the tenants' users. ``remove_fresh`` removes
    it (pytest keeps its own)."""
    if not AS_ROOT:
        return tmp_path_factory.mktemp(name)
    path = Path(tempfile.mkdtemp(prefix=f"kiban-e2e-{name}-"))
    path.chmod(0o711)
    return path


def readable_dir(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A new directory every user may read (a model, a site a service serves): as root, the
    tenants' users run the replicas that read it. ``remove_fresh`` removes it."""
    path = fresh_dir(tmp_path_factory, name)
    path.chmod(0o755)
    return path


def remove_fresh(path: Path) -> None:
    if AS_ROOT and path.name.startswith("kiban-e2e-"):
        shutil.rmtree(path, ignore_errors=True)


def open_to_tenant_users(*paths: Path) -> list[Path]:
    """As root: let other users search the directories on the way to ``paths`` (this Python,
    kiban's sources), as the README asks of whoever runs kiban as root; returns those changed."""
    changed: list[Path] = []
    if not AS_ROOT:
        return changed
    for path in paths:
        for directory in blocking_directories(path):
            directory.chmod(directory.stat().st_mode | stat.S_IXOTH)
            changed.append(directory)
    return changed


# The one poll-until-deadline of kiban.testing, with this tier's generous deadline and a
# slower pace (each probe may be an HTTP call or a file read of a busy machine).
eventually = partial(testing.eventually, timeout=STATE_TIMEOUT, interval=0.2)


def cli_env(home: Path) -> dict[str, str]:
    """The environment of a user's shell pointed at ``home``: venv first on PATH, no stray URL."""
    env = {k: v for k, v in os.environ.items() if k not in ("KIBAN_URL", "KIBAN_TOKEN")}
    env["KIBAN_HOME"] = str(home)
    env["PATH"] = f"{BIN_DIR}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("COLUMNS", None)
    return env


def run_cli(
    args: Sequence[str | Path],
    *,
    env: dict[str, str],
    cwd: Path | None = None,
    input: str | None = None,
    timeout: float = CLI_TIMEOUT,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(KIBAN), *map(str, args)],
        env=env,
        cwd=cwd,
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def processes_with_env(key: str, match: Callable[[str], bool]) -> list[psutil.Process]:
    """Live (non-zombie) processes of this user whose environment has ``key`` matching (as
    root: of any user, since kiban runs each tenant's jobs as a user of its own)."""
    found = []
    uid = os.getuid()
    for proc in psutil.process_iter(["uids", "status"]):
        try:
            if proc.info["uids"] is None or (not AS_ROOT and proc.info["uids"].real != uid):
                continue
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            value = proc.environ().get(key)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
        if value is not None and match(value):
            found.append(proc)
    return found


def cancel_leaves_nothing(kiban: KibanServer, job_id: str, pids: set[int], what: str) -> None:
    """Cancel ``job_id`` and wait until none of ``pids`` (its ranks and their launchers,
    ``what`` in the failure message) nor any other process of the job is left."""
    processes = [psutil.Process(pid) for pid in pids]
    done = kiban.cli("cancel", job_id)
    assert done.returncode == 0, done.stderr
    kiban.wait_for_state(job_id, "Cancelled")

    def all_gone() -> bool:
        return not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in processes)

    eventually(all_gone, timeout=30, what=f"no {what} left of {sorted(pids)}")
    eventually(lambda: not job_processes(job_id), timeout=30, what="no process of the job")


def job_processes(job_id: str) -> list[psutil.Process]:
    """Every live process that belongs to a job: the replicas and their children (they carry
    its id in their environment) and the shims that lead their sessions (as root a shim runs in
    kiban's own environment, not the job's)."""
    found = processes_with_env("KIBAN_JOB_ID", lambda v: v == job_id)
    pids = {p.pid for p in found}
    for process in list(found):
        with contextlib.suppress(ProcessLookupError, psutil.Error):
            leader = os.getsid(process.pid)
            if leader not in pids:
                found.append(psutil.Process(leader))
                pids.add(leader)
    return found


@dataclass
class KibanServer:
    """One ``kiban up`` process and the CLI pointed at it."""

    home: Path
    up_args: list[str]
    env: dict[str, str]
    workdir: Path
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    _client: Client | None = field(default=None, repr=False)

    @property
    def server_log(self) -> Path:
        return self.home / "server.log"

    @property
    def url(self) -> str:
        return (self.home / "url").read_text().strip()

    @property
    def token(self) -> str:
        return (self.home / "token").read_text().strip()

    # -- the server process ----------------------------------------------------------------
    def start(self, timeout: float = START_TIMEOUT) -> None:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self._drop_client()
        (self.home / "url").unlink(missing_ok=True)  # a restart listens on a new port
        self.home.mkdir(parents=True, exist_ok=True)
        with open(self.server_log, "ab") as log:
            log.write(f"--- start {self.starts + 1}: kiban {' '.join(self.up_args)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                [str(KIBAN), *self.up_args],
                env=self.env,
                cwd=self.workdir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.starts += 1
        proc = self.proc

        def healthy() -> bool:
            if proc.poll() is not None:
                raise AssertionError(
                    f"kiban up exited with code {proc.returncode}:\n{self.log_tail()}"
                )
            return self._healthy()

        try:
            eventually(healthy, timeout=timeout, what="kiban up to be healthy")
        except testing.TimedOut as timed_out:
            self.kill()
            raise AssertionError(f"{timed_out}:\n{self.log_tail()}") from None

    def _healthy(self) -> bool:
        url_file = self.home / "url"
        if not url_file.exists() or not (self.home / "token").exists():
            return False
        url = url_file.read_text().strip()
        if not url:
            return False
        try:
            return httpx.get(f"{url}/healthz", timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (a clean shutdown), then SIGKILL if it does not exit in time."""
        self._drop_client()
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """SIGKILL the server alone (not its replicas, which run in their own sessions)."""
        self._drop_client()
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.kill()
        self.proc.wait(timeout=30)

    def restart(self) -> None:
        self.stop()
        self.start()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.server_log.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no server log)"

    # -- the CLI ---------------------------------------------------------------------------
    def cli(
        self,
        *args: str | Path,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        input: str | None = None,
        timeout: float = CLI_TIMEOUT,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``kiban ARGS...`` as a user would; returns the completed process (any exit)."""
        return run_cli(
            [str(a) for a in args],
            env={**self.env, **(env or {})},
            cwd=cwd or self.workdir,
            input=input,
            timeout=timeout,
        )

    def ok(self, *args: str | Path, **kwargs: Any) -> str:
        """Run a CLI command that must succeed; returns its stdout."""
        done = self.cli(*args, **kwargs)
        assert done.returncode == 0, (
            f"kiban {' '.join(map(str, args))} exited {done.returncode}\n"
            f"stdout: {done.stdout}\nstderr: {done.stderr}"
        )
        return done.stdout

    def json(self, *args: str | Path) -> Any:
        import json

        return json.loads(self.ok(*args, "-o", "json"))

    def run_job(self, *command: str, options: Sequence[str] = (), cwd: Path | None = None) -> str:
        """``kiban run OPTIONS -- COMMAND``; returns the job id."""
        out = self.ok("run", *options, "--", *command, cwd=cwd)
        return out.strip()

    def submit(self, manifest: dict[str, Any] | str, name: str = "job.yaml") -> str:
        """Write a manifest to the work directory and ``kiban submit`` it; returns the job id."""
        path = self.workdir / name
        text = manifest if isinstance(manifest, str) else yaml.safe_dump(manifest)
        path.write_text(text)
        return self.ok("submit", path).strip()

    # -- looking, through the SDK (quicker than a CLI process per poll) -----------------------
    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = Client(url=self.url, token=self.token)
        return self._client

    def _drop_client(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def job(self, job_id: str) -> dict[str, Any]:
        return self.client.job(job_id)

    def events(self, job_id: str) -> list[dict[str, Any]]:
        return self.client.events(job_id)

    def wait_for_state(
        self, job_id: str, *states: str, timeout: float = STATE_TIMEOUT
    ) -> dict[str, Any]:
        """Poll until the job is in one of ``states``; fails early if it ends in another."""

        def probe() -> dict[str, Any] | None:
            job = self.job(job_id)
            if job["state"] in states:
                return job
            if job["state"] in TERMINAL:
                pytest.fail(
                    f"job {job_id} ended {job['state']} ({job.get('message')}), wanted "
                    f"{'/'.join(states)}; events: {self.events(job_id)}\n"
                    f"rank 0 log:\n{self.log_text(job_id)}"
                )
            return None

        return eventually(probe, timeout=timeout, what=f"job {job_id} to be {'/'.join(states)}")

    def log_path(self, job_id: str, rank: int = 0) -> Path:
        return self.home / "jobs" / job_id / f"rank-{rank}.log"

    def log_text(self, job_id: str, rank: int = 0) -> str:
        try:
            return self.log_path(job_id, rank).read_text(errors="replace")
        except FileNotFoundError:
            return ""

    # -- cleaning up -----------------------------------------------------------------------
    def replica_processes(self) -> list[psutil.Process]:
        """Live processes started for this server's jobs (they inherit the checkpoint dir)."""
        root = str(self.home / "checkpoints")
        return processes_with_env("KIBAN_CHECKPOINT_DIR", lambda v: v.startswith(root))

    def kill_leftovers(self) -> list[str]:
        """SIGKILL every replica process group and stray process; returns what was found."""
        found = kill_replica_groups(self.home)
        for proc in self.replica_processes():
            found.append(f"process {proc.pid} {proc.info.get('name', '')}")
            with contextlib.suppress(psutil.Error):
                proc.kill()
        return found

    def close(self) -> None:
        try:
            self.stop()
        finally:
            self.kill_leftovers()


StartKiban = Callable[..., KibanServer]


def job_manifest(
    name: str, command: list[str], *, replicas: int = 1, gpu: int = 0, **spec: Any
) -> dict[str, Any]:
    """kiban.testing's manifest sized for the local executor: one task ``worker`` of 1 CPU and
    256 MiB per replica; ``task`` adds keys to the task, other keywords go into ``spec``."""
    task = {"name": "worker", **spec.pop("task", {})}
    return testing.manifest(
        name, replicas=replicas, gpu=gpu, command=command, cpu=1, memory="256Mi", task=task, **spec
    )


@contextlib.contextmanager
def server_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StartKiban]:
    """Start servers on demand; on exit stop them all and kill what their jobs left running."""
    if not KIBAN.exists():
        pytest.skip(f"the kiban console script is not installed at {KIBAN} (pip install -e .)")
    servers: list[KibanServer] = []

    bases: list[Path] = []

    def start(
        *,
        nodes: int | None = 3,
        gpus_per_node: int = 2,
        config: dict[str, Any] | str | None = None,
        extra_args: Sequence[str] = (),
    ) -> KibanServer:
        base = fresh_dir(tmp_path_factory, "kiban")
        bases.append(base)
        home = base / "home"
        workdir = base / "work"
        home.mkdir()
        workdir.mkdir()
        args = ["up", "--home", str(home), "--port", "0"]
        if config is not None:
            config_file = base / "cluster.yaml"
            text = config if isinstance(config, str) else yaml.safe_dump(config)
            config_file.write_text(text)
            args += ["--config", str(config_file)]
        if nodes is not None:
            args += ["--nodes", str(nodes), "--gpus-per-node", str(gpus_per_node)]
        args += list(extra_args)
        server = KibanServer(home=home, up_args=args, env=cli_env(home), workdir=workdir)
        servers.append(server)
        server.start()
        return server

    try:
        yield start
    finally:
        for server in servers:
            server.close()
        for base in bases:
            remove_fresh(base)
