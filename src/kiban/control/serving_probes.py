"""The service controller's probes: readiness of running replicas and the model loader's
failure in the logs of those that ended, read with no session open, all at once within a
bound (a replica that hangs costs a pass one timeout and holds no lock)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_all
from typing import Any, TypeVar

import httpx

from kiban.control.serving_plan import Probes, ServiceView
from kiban.domain.service_replica import replica_port
from kiban.domain.states import JobState
from kiban.executors.base import Executor, log_source
from kiban.serving.router.upstream import UNIX_PREFIX

LOAD_FAILED = "KIBAN_LOAD_FAILED:"
LOG_TAIL_BYTES = 1 << 20
MAX_UNIX_CLIENTS = 256  # probe clients of replicas' Unix sockets kept at most
_T = TypeVar("_T")


class ReplicaProber:
    """Asks replicas whether they are ready and reads why they failed; its pool of probe
    threads and its HTTP clients are kept between passes."""

    def __init__(self, executor: Executor) -> None:
        self.executor = executor
        self._http = httpx.Client(trust_env=False)
        self._pool = ThreadPoolExecutor(8, thread_name_prefix="kiban-probe")
        self.unix_clients: dict[str, httpx.Client] = {}
        """One client per replica's Unix socket, made once (a client costs milliseconds)."""
        self._unix_lock = threading.Lock()

    def close(self) -> None:
        """Let go of the pool and the clients."""
        # A probe that hangs past its timeout is not waited for: its thread ends with it.
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._http.close()
        for client in self.unix_clients.values():
            client.close()

    def gather(
        self,
        views: Iterable[ServiceView],
        is_ready: Callable[[str, str], bool],
        timeout_s: float,
    ) -> Probes:
        """Probe the running replicas and read the logs of those that ended unready, with no
        session open: all at once (at most the pool's size in flight), each within
        ``timeout_s``; one that has not answered by then is not ready / says nothing.
        ``is_ready(address, path)``: the readiness probe (``ready``, or a test's own)."""
        addresses: dict[str, str] = {}
        ports: dict[str, int] = {}
        asked: dict[str, Future[bool]] = {}
        logs: dict[str, Future[str | None]] = {}
        for view in views:
            for revision in view.revisions:
                port = replica_port(revision.spec)
                for replica in view.replicas_of(revision):
                    if (
                        replica.job_state is not JobState.RUNNING
                        or replica.master_port is None
                        or replica.launched is None
                    ):
                        continue
                    address = self.executor.replica_address(
                        replica.launched, port or replica.master_port
                    )
                    if address is not None:
                        addresses[replica.job_id] = address
                        ports[replica.job_id] = port or replica.master_port
                        asked[replica.job_id] = self._pool.submit(
                            is_ready, address, revision.spec.readiness_path
                        )
            for replica in view.ended_unexplained():
                logs[replica.job_id] = self._pool.submit(self.load_failure, replica.job_id)
        pending: list[Future[Any]] = [*asked.values(), *logs.values()]
        wait_all(pending, timeout=timeout_s)
        ready = {job_id: _answer(f, False) for job_id, f in asked.items()}
        failures = {job_id: _answer(f, None) for job_id, f in logs.items()}
        return Probes(
            addresses=addresses,
            ports=ports,
            ready=ready,
            load_failures={k: v for k, v in failures.items() if v is not None},
        )

    def load_failure(self, job_id: str) -> str | None:
        """The model loader's message from a replica's log, if it wrote one."""
        try:
            data, _ = log_source(self.executor).read_log(job_id, 0, 0, LOG_TAIL_BYTES)
        except Exception:  # a log that cannot be read says nothing about the model
            return None
        for line in reversed(data.decode("utf-8", "replace").splitlines()):
            if line.startswith(LOAD_FAILED):
                return line.removeprefix(LOAD_FAILED).strip() or "the model failed to load"
        return None

    def ready(self, address: str, path: str, timeout_s: float) -> bool:
        """Whether the replica at ``address`` answers 200 on ``path`` within ``timeout_s``."""
        try:
            if address.startswith(UNIX_PREFIX):  # the Unix socket the router will use too
                client, url = self._unix_client(address[len(UNIX_PREFIX) :]), "http://localhost"
            else:
                client, url = self._http, f"http://{address}"
            response = client.get(url + path, timeout=timeout_s)
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    def _unix_client(self, path: str) -> httpx.Client:
        """The probes' client of one replica's Unix socket, made once (a client costs
        milliseconds to make); those of replicas gone are dropped once there are many."""
        with self._unix_lock:
            client = self.unix_clients.get(path)
            if client is None:
                if len(self.unix_clients) >= MAX_UNIX_CLIENTS:
                    for stale in self.unix_clients.values():
                        stale.close()
                    self.unix_clients.clear()
                transport = httpx.HTTPTransport(uds=path)
                client = self.unix_clients[path] = httpx.Client(
                    transport=transport, trust_env=False
                )
            return client


def _answer(future: Future[_T], otherwise: _T) -> _T:
    """A probe's or log read's answer, or ``otherwise`` when it has none in time."""
    if not future.done() or future.cancelled() or future.exception() is not None:
        return otherwise
    return future.result()
