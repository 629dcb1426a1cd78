"""``kiban up``: the whole platform in one process (API, control loop, local executor)."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import uvicorn
from fastapi import FastAPI

from kiban.api.app import create_app
from kiban.api.http_protocol import GuardedHttpProtocol
from kiban.api.limits import AdmissionLimits
from kiban.control.loop_settings import LoopSettings
from kiban.control.ownership import Ownership, OwnershipError
from kiban.domain.cluster import ClusterConfig
from kiban.domain.errors import SpecError
from kiban.domain.job_relations import DEFAULT_MAX_ARRAY_SIZE
from kiban.domain.notebook import DEFAULT_READY_TIMEOUT_S
from kiban.executors.base import NodeInfo
from kiban.executors.local import LocalExecutor
from kiban.executors.local.isolation import Isolation, startup_notes
from kiban.executors.local.nodes import count_gpus, this_machine, virtual_nodes
from kiban.health.agent_process import AgentNode, AgentProcess, agent_arguments
from kiban.platform import Platform, build_platform
from kiban.services.errors import ServiceError

if TYPE_CHECKING:
    from kiban.executors.kubernetes.options import KubernetesOptions

SHUTDOWN_GRACE_S = 10.0
"""After SIGTERM (or SIGINT), the server has stopped within this many seconds."""
GIL_SWITCH_S = 0.001


INTERRUPTED_EXIT = 130  # what a shell reports for a command ended by Ctrl-C
STARTUP_INTERRUPTED = "kiban up: interrupted while starting; stopped, nothing left running"


@dataclass(frozen=True)
class ServerOptions:
    home: Path
    host: str = "127.0.0.1"
    port: int = 8470
    db_url: str | None = None
    config: ClusterConfig | None = None
    nodes: int | None = None
    gpus_per_node: int = 0
    tick_s: float = 0.2
    router_port: int | None = None  # inference services' router; None: the API's port + 1
    backend: str = "local"  # or "kubernetes"
    kubeconfig: Path | None = None  # Kubernetes: None is in-cluster
    kube_options: KubernetesOptions | None = None
    limits: AdmissionLimits = field(default_factory=AdmissionLimits)  # what the API takes at once
    multi_tenant: bool = False  # refuse to run local jobs as kiban's user; no token in the home
    node_agent: bool = True  # local: run `kiban node-agent` for the nodes (GPU health checks)
    agent_readings_dir: Path | None = None  # the agent reads DIR/<node>.json instead of NVML
    health_interval_s: float = 30.0  # seconds between the agent's checks
    sweep_every_s: float | None = None  # allreduce sweeps of idle nodes (None: only on demand)
    max_array_size: int = DEFAULT_MAX_ARRAY_SIZE  # indices one job array may have
    notebook_ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S  # JupyterLab's time to answer
    audit: bool = True  # state-changing requests leave audit records (off: to measure their cost)
    one_cpu: bool = True  # the event loop and the threads it starts share one CPU (share_one_cpu)

    @property
    def isolated(self) -> bool:
        """Local jobs run as their tenants' users: kiban runs them, as root."""
        return self.backend == "local" and os.geteuid() == 0


def multi_tenant_refusal(options: ServerOptions, euid: int) -> str | None:
    """Why ``--multi-tenant`` cannot start (None: it can): unprivileged, local jobs would run
    as kiban's own user and read what it can, other tenants' files included."""
    if not options.multi_tenant or options.backend != "local" or euid == 0:
        return None
    return (
        "--multi-tenant runs each tenant's local jobs as a user of its own, which takes root: "
        "start it as root (sudo kiban up --multi-tenant ...); without --multi-tenant every "
        "job runs as you and can read what you can"
    )


def local_nodes(options: ServerOptions) -> list[NodeInfo]:
    """Virtual nodes from ``--nodes`` or the cluster file, else this machine."""
    if options.nodes is not None:
        physical = count_gpus() if options.gpus_per_node else 0
        return virtual_nodes(options.nodes, options.gpus_per_node, physical=physical)
    if options.config is not None and options.config.nodes:
        return [
            NodeInfo(
                name=n.name,
                gpus=n.gpus,
                cpu_millis=n.cpus,
                memory=n.memory,
                labels={"kubernetes.io/hostname": n.name, **n.labels},
                extended=dict(n.resources),
            )
            for n in options.config.nodes
        ]
    return [this_machine()]


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind the listening socket up front so a busy port is a clear error, and port 0 works."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        # Listen now: a client that reads the url file before uvicorn is serving waits in the
        # backlog instead of being refused.
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise SystemExit(f"error: cannot listen on {host}:{port}: {exc.strerror}") from None
    return sock


def write_atomically(path: Path, text: str) -> None:
    """Readers see the old content or the new, never a partial file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def start_platform(options: ServerOptions) -> Platform:
    if options.backend == "kubernetes":
        from kiban.executors.kubernetes import KubernetesExecutor

        try:
            kube = KubernetesExecutor.connect(
                options.kubeconfig, options.kube_options, log_dir=options.home / "pod-logs"
            )
        except Exception as exc:
            where = options.kubeconfig or "the in-cluster service account"
            raise SystemExit(f"error: cannot reach Kubernetes with {where}: {exc}") from None
        try:
            return build_platform(
                home=options.home,
                db_url=options.db_url,
                executor=kube,
                config=options.config,
                loop_settings=LoopSettings(
                    tick_s=options.tick_s,
                    node_sync_s=kube.node_sync_s,
                    sweep_every_s=options.sweep_every_s,
                ),
                max_array_size=options.max_array_size,
                notebook_ready_timeout_s=options.notebook_ready_timeout_s,
                audit=options.audit,
            )
        except BaseException:
            kube.close()
            raise
    isolation = Isolation(options.home) if options.isolated else None
    executor = LocalExecutor(options.home, local_nodes(options), isolation=isolation)
    return build_platform(
        home=options.home,
        db_url=options.db_url,
        executor=executor,
        config=options.config,
        loop_settings=LoopSettings(tick_s=options.tick_s, sweep_every_s=options.sweep_every_s),
        admin_token_in_home=not options.multi_tenant,
        max_array_size=options.max_array_size,
        notebook_ready_timeout_s=options.notebook_ready_timeout_s,
        audit=options.audit,
    )


def admin_token_note(options: ServerOptions, platform: Platform) -> str:
    """Where the admin token is: its file in the home, or (``--multi-tenant``) nowhere kiban
    keeps it: shown here once, when it is made."""
    if not options.multi_tenant:
        return f"admin token in {platform.token_file}"
    note = "the admin token is not kept in the home (--multi-tenant)"
    if platform.admin_token is not None:
        note += f"; it is shown this once, keep it (as KIBAN_TOKEN): {platform.admin_token}"
    if platform.token_file.exists():
        note += f"; {platform.token_file}, written by a start without it, should move out"
    return note


def start_node_agent(options: ServerOptions, platform: Platform, url: str) -> AgentProcess | None:
    """The local executor's node agent, reporting to ``url`` with the admin token (as the CLI
    finds it: the home's token file, or the token just made); None on Kubernetes (a DaemonSet
    runs it there) or with ``--no-node-agent``."""
    if options.backend != "local" or not options.node_agent:
        return None
    token: str | None = None
    if platform.token_file.exists():
        token = platform.token_file.read_text().strip() or None
    token = token or platform.admin_token
    if token is None:
        logging.getLogger("kiban.server").warning(
            "the node agent runs without reporting: no admin token here (--multi-tenant)"
        )
    physical = None if options.agent_readings_dir is not None else count_gpus()
    nodes = [
        AgentNode.local(n.name, n.gpus, physical, n.gpu_devices) for n in platform.executor.nodes()
    ]
    agent = AgentProcess(
        agent_arguments(
            nodes,
            url=url if token is not None else None,
            interval_s=options.health_interval_s,
            readings_dir=options.agent_readings_dir,
        ),
        token,
    )
    agent.start()
    return agent


def current_cpu() -> int | None:
    """The CPU the calling thread runs on now (Linux: ``processor`` in its ``stat``); None
    where that cannot be read."""
    try:
        stat = Path("/proc/thread-self/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[36])
    except (OSError, ValueError, IndexError):
        return None


def share_one_cpu() -> int | None:
    """Keep the calling thread, the event loop's, on one CPU (the one it runs on now), and so
    the threads it starts from now on, which inherit it: the submission and audit writers
    (started at their first item) and the API's worker threads. Which CPU it was, or None
    where there is only one or affinity cannot be set.

    Every submission hands the interpreter lock from the event loop to the submission writer
    and back; on two different CPUs each hand-off wakes the other CPU (in a virtual machine,
    an interrupt through the hypervisor) and moves the lock's and the request's cache lines
    across, and where the scheduler happened to place the two threads made a fresh server's
    CPU per submission bimodal (docs/benchmarks.md, session 23). The control loop's,
    the services' and the router's threads, started before, keep every CPU.
    """
    if not hasattr(os, "sched_setaffinity"):
        return None
    allowed = os.sched_getaffinity(0)
    if len(allowed) < 2:
        return None
    cpu = current_cpu()
    if cpu not in allowed:
        cpu = min(allowed)
    os.sched_setaffinity(0, {cpu})  # pid 0: this thread alone
    return cpu


def stop_for_lost_lease(message: str) -> None:
    """The database lease was lost to another control plane: stop, as SIGTERM stops us."""
    logging.getLogger("kiban.server").error("%s; stopping", message)
    os.kill(os.getpid(), signal.SIGTERM)


def serve(options: ServerOptions, ownership: Ownership | None = None) -> None:
    """Run until interrupted. Replicas keep running across a restart and are re-adopted.

    Start-up, in this order: lock the home (before anything in it is read or written; another
    control plane there is named and refused), bind the port, claim the store (a PostgreSQL
    database's lease, before it is opened), then open it, sync the nodes, apply the policy,
    write the token and the url file. Ctrl-C meanwhile undoes what was started and exits 130.
    ``ownership``: the home, claimed already (``kiban up`` claims it before loading this
    module, so that a second control plane is refused at once).
    """
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("alembic").setLevel(logging.WARNING)
    refusal = multi_tenant_refusal(options, os.geteuid())
    if refusal is not None:
        raise SystemExit(f"error: {refusal}")
    if options.isolated:
        os.umask(0o077)  # what kiban writes in its home is its own (jobs get 022: isolation)
    if ownership is None:
        try:
            ownership = Ownership.claim_home(options.home)
        except OwnershipError as exc:
            raise SystemExit(f"error: {exc}") from None
    try:
        app, sock = prepare(options, ownership)
    except KeyboardInterrupt:
        ownership.release()
        print(STARTUP_INTERRUPTED, file=sys.stderr, flush=True)
        raise SystemExit(INTERRUPTED_EXIT) from None
    except BaseException:
        ownership.release()
        raise
    # Fewer, later collections: the objects made at start-up are never collected, and the
    # young generation may grow further before a pass (collections pause every request).
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    # The event loop waits for the GIL behind the worker threads' Python code: hand it over
    # every millisecond rather than every five, so that the loop (every request's I/O,
    # /healthz) is not kept waiting several slices while requests compute.
    sys.setswitchinterval(GIL_SWITCH_S)
    config = uvicorn.Config(
        app,
        http=GuardedHttpProtocol,
        log_level="warning",
        access_log=False,
        lifespan="on",
        # No permessage-deflate: the notebook route's websockets carry many small kernel
        # messages each way, and compressing each on the client's leg costs both ends more
        # than it saves on a local network (Jupyter's own server does not compress either).
        ws_per_message_deflate=False,
        timeout_graceful_shutdown=max(int(SHUTDOWN_GRACE_S / 2), 1),
    )
    StoppingServer(config, app.state.stopping).run(sockets=[sock])


class StoppingServer(uvicorn.Server):
    """uvicorn's server, which on SIGTERM or SIGINT ends the log follows at once (they would
    last as long as their jobs), gives other requests half of ``SHUTDOWN_GRACE_S`` to finish,
    and exits when the grace period is over whatever is still stopping."""

    def __init__(self, config: uvicorn.Config, stopping: asyncio.Event) -> None:
        super().__init__(config)
        self.stopping = stopping
        self._deadline: threading.Timer | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._deadline is None:
            self._deadline = threading.Timer(SHUTDOWN_GRACE_S, _exit_now, args=(sig,))
            self._deadline.daemon = True
            self._deadline.start()
        super().handle_exit(sig, frame)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.stopping.set()
        await super().shutdown(sockets)


def _exit_now(sig: int) -> None:
    """The grace period is over: exit now (the store is consistent at every commit, and
    replicas outlive the server by design)."""
    print(
        f"kiban: not stopped {SHUTDOWN_GRACE_S:g} s after the signal; exiting now",
        file=sys.stderr,
        flush=True,
    )
    os._exit(128 + sig)


def prepare(options: ServerOptions, ownership: Ownership) -> tuple[FastAPI, socket.socket]:
    """Everything ``serve`` does before it serves: the app to run and its listening socket.
    Whatever fails or is interrupted here leaves nothing running and no url file behind."""
    sock = bind_socket(options.host, options.port)
    platform: Platform | None = None
    url_file = options.home / "url"
    wrote_url = False
    try:
        port = sock.getsockname()[1]
        url = f"http://{options.host}:{port}"
        ownership.announce(url)
        try:
            ownership.claim_store(options.db_url, on_lost=stop_for_lost_lease)
        except OwnershipError as exc:
            raise SystemExit(f"error: {exc}") from None
        try:
            platform = start_platform(options)
        except (SpecError, ServiceError) as exc:
            what = "the cluster file's policy" if options.config is not None else "the policy"
            raise SystemExit(f"error: cannot apply {what}: {exc}") from None
        router_port = options.router_port
        if router_port is None:
            router_port = port + 1 if options.port else 0
        write_atomically(url_file, url + "\n")
        wrote_url = True
        # how replicas reach this API, as their own job: processes here at the URL just bound
        if options.backend == "local":
            platform.loop.launcher.api_url = url
        elif options.kube_options is not None:
            platform.loop.launcher.api_url = options.kube_options.pod_api_url
        running = platform

        @asynccontextmanager
        async def lifespan(_: FastAPI) -> AsyncIterator[None]:
            # Runs on SIGINT and SIGTERM alike: uvicorn re-raises the signal after its shutdown,
            # so a ``finally`` around ``server.run`` would not be reached on SIGTERM.
            running.loop.start()
            running.services.start()
            agent = start_node_agent(options, running, url)
            if options.one_cpu:
                share_one_cpu()  # after the threads above, which keep every CPU
            try:
                yield
            finally:
                if agent is not None:
                    agent.stop()
                running.close()
                ownership.release()
                print("kiban stopped", file=sys.stderr, flush=True)

        try:
            platform.start_router(options.host, router_port)
        except OSError as exc:
            raise SystemExit(
                f"error: the services' router cannot listen on {options.host}:{router_port}: "
                f"{exc.strerror or exc} (choose another with --router-port)"
            ) from None
        app = create_app(platform, lifespan, options.limits)
        nodes = platform.executor.nodes()
        gpus = sum(n.gpus for n in nodes)
        print(f"kiban is up at {url}", file=sys.stderr)
        print(f"  home {options.home}; {admin_token_note(options, platform)}", file=sys.stderr)
        if options.backend == "local":
            for note in startup_notes(options.home, options.isolated):
                print(f"  {note}", file=sys.stderr)
        if platform.router is not None:
            services = f"{platform.router.url}/s/<tenant>/<service>"
            print(f"  inference services at {services}", file=sys.stderr)
        store = platform.engine.url.render_as_string()
        print(
            f"  {len(nodes)} node(s), {gpus} GPU(s); store {store}",
            file=sys.stderr,
            flush=True,
        )
        return app, sock
    except BaseException:
        if platform is not None:
            platform.close()
        sock.close()
        if wrote_url:
            url_file.unlink(missing_ok=True)
        raise
