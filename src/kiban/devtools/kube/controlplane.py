"""A real Kubernetes control plane on loopback: etcd, kube-apiserver and KWOK with fake nodes.

``kiban dev kube up`` and the kube test tier both use :func:`start_control_plane`, which runs
these steps and returns once the API is healthy and the nodes are Ready:

1. refuse a directory in use or not ours; find the binaries (scripts/ensure-kube.sh builds them);
2. make certificates and the admin kubeconfig, pick free loopback ports;
3. start etcd, wait for /health; start kube-apiserver, wait for /readyz;
4. start KWOK with our stages, wait for /healthz;
5. create the fake nodes and wait until KWOK has made them Ready.

Its directory holds everything: ``kubeconfig``, ``pki/``, ``etcd/``, ``kwok/``, ``logs/``,
``run/*.pid`` and ``control-plane.json``. :func:`stop_control_plane` stops the processes the
pid files name (kube-scheduler if one was started for a comparison, KWOK, the API server, then
etcd) and keeps the logs.
"""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Self

import httpx
import yaml

from kiban.devtools.kube import components, nodeapi, stages, supervisor
from kiban.devtools.kube.binaries import (
    ETCD_VERSION,
    KUBERNETES_VERSION,
    KWOK_VERSION,
    require_binaries,
)
from kiban.devtools.kube.certs import ControlPlaneCerts, generate_certs
from kiban.devtools.kube.fakenodes import FakeNodeSpec
from kiban.devtools.kube.kubeconfig import write_kubeconfig

__all__ = [
    "ControlPlane",
    "ControlPlaneError",
    "ControlPlaneOptions",
    "running_processes",
    "start_control_plane",
    "stop_control_plane",
]

# Started in this order (kube-scheduler only when asked for), stopped in the reverse one.
PROCESS_NAMES = ("etcd", "kube-apiserver", "kwok", "kube-scheduler")
STATE_FILE = "control-plane.json"
MARKER = ".kiban-dev-kube"
"""Marks a directory as one of ours: only then does a new start clear what an old one left."""


class ControlPlaneError(RuntimeError):
    """The control plane could not be started (the message says which part and why)."""


@dataclass(frozen=True)
class ControlPlaneOptions:
    """What to start: the fake nodes, and how long to wait for each part."""

    nodes: FakeNodeSpec = field(default_factory=FakeNodeSpec)
    start_timeout: float = 120.0
    node_creation_workers: int = 8


@dataclass(frozen=True)
class ControlPlane:
    """A running control plane; a context manager that stops it on exit."""

    directory: Path
    server: str
    kubeconfig: Path
    etcd_url: str
    certs: ControlPlaneCerts
    node_names: tuple[str, ...]

    def stop(self) -> list[str]:
        return stop_control_plane(self.directory)

    def start_kube_scheduler(self, timeout: float = 60.0) -> supervisor.ProcessRecord:
        """Start kube-scheduler of the same release on this API (stopped with the rest).

        kiban binds its pods itself; this one is for comparing with it.
        """
        run_dir = _run_dir(self.directory)
        if any(r.name == "kube-scheduler" for r in running_processes(self.directory)):
            raise ControlPlaneError(f"kube-scheduler already runs in {self.directory}")
        config = self.directory / "kube-scheduler.yaml"
        config.write_text(
            yaml.safe_dump(components.scheduler_configuration(self.kubeconfig), sort_keys=False)
        )
        port = _free_port()
        argv = components.scheduler_args(require_binaries(), config, port)
        record = supervisor.start(
            "kube-scheduler", argv, run_dir=run_dir, log_dir=self.directory / "logs"
        )
        try:
            _wait("kube-scheduler", _http_ok(f"https://127.0.0.1:{port}/healthz"), record, timeout)
        except BaseException:
            supervisor.stop_from_pid_file(supervisor.pid_file(run_dir, "kube-scheduler"))
            raise
        return record

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _free_ports() -> components.Ports:
    ports: set[int] = set()
    while len(ports) < 4:
        ports.add(_free_port())
    return components.Ports(*sorted(ports))


def _run_dir(directory: Path) -> Path:
    return directory / "run"


def running_processes(directory: Path) -> list[supervisor.ProcessRecord]:
    """The processes of the control plane in directory that are still running."""
    records = []
    for name in PROCESS_NAMES:
        record = supervisor.read_record(supervisor.pid_file(_run_dir(directory), name))
        if record is not None and supervisor.alive(record):
            records.append(record)
    return records


def stop_control_plane(directory: Path, *, timeout: float = 15.0) -> list[str]:
    """Stop the processes directory's pid files name; return the names of those that ran."""
    stopped = []
    for name in reversed(PROCESS_NAMES):
        path = supervisor.pid_file(_run_dir(directory), name)
        record = supervisor.read_record(path)
        if record is not None and supervisor.alive(record):
            stopped.append(name)
        supervisor.stop_from_pid_file(path, timeout=timeout)
    return stopped


def _wait(
    what: str,
    check: Callable[[], bool],
    record: supervisor.ProcessRecord,
    timeout: float,
) -> None:
    """Poll check until it is true; fail early, with its log, if the process exits."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        supervisor.check_alive(record)
        try:
            if check():
                return
        except (httpx.HTTPError, OSError):
            pass
        if time.monotonic() > deadline:
            raise ControlPlaneError(
                f"{what} not ready after {timeout:.0f}s; the end of {record.log}:\n"
                + supervisor.log_tail(record)
            )
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)


def _http_ok(url: str, *, verify: ssl.SSLContext | bool = False) -> Callable[[], bool]:
    def check() -> bool:
        response = httpx.get(url, verify=verify, timeout=2.0)
        return response.status_code == 200

    return check


def _admin_tls(certs: ControlPlaneCerts) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(certs.ca_cert))
    context.load_cert_chain(str(certs.admin_cert), str(certs.admin_key))
    return context


def _check_directory(directory: Path) -> None:
    """Refuse a directory in use, or one with files that a start of ours did not make."""
    if directory.exists() and not directory.is_dir():
        raise ControlPlaneError(f"{directory} is not a directory")
    if directory.is_dir() and not (directory / MARKER).exists() and any(directory.iterdir()):
        raise ControlPlaneError(
            f"{directory} is not empty and was not made by kiban dev kube up; "
            "choose a new or an empty directory"
        )
    if running_processes(directory):
        raise ControlPlaneError(
            f"a control plane is already running in {directory}; "
            f"stop it first (kiban dev kube down --dir {directory})"
        )


def _prepare(directory: Path) -> None:
    """Clear what a previous start left in directory (logs are appended to), mark it ours."""
    for name in ("pki", "etcd", "kwok", "run"):
        shutil.rmtree(directory / name, ignore_errors=True)
    for name in ("kubeconfig", STATE_FILE, "kube-scheduler.yaml"):
        (directory / name).unlink(missing_ok=True)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / MARKER).write_text("a local control plane of kiban dev kube up\n")


def _write_kwok_config(directory: Path) -> list[Path]:
    """KWOK's configuration and our stages, as files KWOK reads with --config."""
    kwok_dir = directory / "kwok"
    kwok_dir.mkdir(parents=True, exist_ok=True)
    config = kwok_dir / "kwok.yaml"
    config.write_text(yaml.safe_dump(components.kwok_configuration(), sort_keys=False))
    copies = []
    for path in stages.stage_files():
        copy = kwok_dir / path.name
        copy.write_text(path.read_text())
        copies.append(copy)
    return [config, *copies]


def start_control_plane(
    directory: Path, options: ControlPlaneOptions | None = None
) -> ControlPlane:
    """Start etcd, kube-apiserver and KWOK in the background; create the fake nodes.

    Returns once the API answers /readyz and every fake node is Ready. The processes outlive
    this call: stop them with :func:`stop_control_plane` (or use the result as a context
    manager). On failure, whatever was started is stopped again.
    """
    options = options or ControlPlaneOptions()
    directory = directory.expanduser().resolve()
    _check_directory(directory)  # 1.
    binaries = require_binaries()
    _prepare(directory)

    certs = generate_certs(directory / "pki")  # 2.
    ports = _free_ports()
    server = f"https://127.0.0.1:{ports.apiserver}"
    kubeconfig = write_kubeconfig(directory / "kubeconfig", server, certs)
    etcd_url = f"http://127.0.0.1:{ports.etcd_client}"
    run_dir, log_dir = _run_dir(directory), directory / "logs"
    timeout = options.start_timeout

    def start(name: str, argv: list[str]) -> supervisor.ProcessRecord:
        return supervisor.start(name, argv, run_dir=run_dir, log_dir=log_dir)

    try:
        etcd = start("etcd", components.etcd_args(binaries, directory / "etcd", ports))  # 3.
        _wait("etcd", _http_ok(f"{etcd_url}/health"), etcd, timeout)
        apiserver = start("kube-apiserver", components.apiserver_args(binaries, certs, ports))
        _wait(
            "kube-apiserver",
            _http_ok(f"{server}/readyz", verify=_admin_tls(certs)),
            apiserver,
            timeout,
        )

        configs = _write_kwok_config(directory)  # 4.
        kwok = start("kwok", components.kwok_args(binaries, kubeconfig, configs, ports))
        _wait("kwok", _http_ok(f"http://127.0.0.1:{ports.kwok}/healthz"), kwok, timeout)

        with nodeapi.core_api(kubeconfig, pool=options.node_creation_workers) as core:  # 5.
            names = nodeapi.create_nodes(core, options.nodes, options.node_creation_workers)
            _wait("fake nodes", nodeapi.nodes_ready(core, set(names)), kwok, timeout)
    except BaseException:
        stop_control_plane(directory)
        raise

    state = {
        "server": server,
        "kubeconfig": str(kubeconfig),
        "etcd": etcd_url,
        "ports": asdict(ports),
        "versions": {
            "kubernetes": KUBERNETES_VERSION,
            "etcd": ETCD_VERSION,
            "kwok": KWOK_VERSION,
        },
        "nodes": len(names),
    }
    (directory / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")
    return ControlPlane(directory, server, kubeconfig, etcd_url, certs, tuple(names))
