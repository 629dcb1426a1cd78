"""A thin client of the HTTP API. The CLI uses it; so can notebooks and scripts.

It finds the server and token as ``kiban.sdk.discovery`` says (``KIBAN_URL``/``KIBAN_TOKEN``,
else the kiban home). A job finds its own id in ``KIBAN_JOB_ID``, so ``Client().checkpoint()``
inside it reports its own checkpoint (given a URL and token it can reach). A job manifest is
completed by ``kiban.sdk.submission`` before it is sent, for the CLI and the SDK alike. It
speaks HTTP through ``kiban.sdk.transport`` (httpcore), so that it imports no httpx.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

from kiban.sdk.discovery import default_home, discover, env_value
from kiban.sdk.errors import ApiError
from kiban.sdk.submission import as_document, complete_job_manifest
from kiban.sdk.transport import CONNECT_ERRORS, TRANSPORT_ERRORS, Answer, Transport

__all__ = [
    "TERMINAL_STATES",
    "ApiError",
    "Client",
    "complete_job_manifest",
    "default_home",
    "discover",
    "env_value",
]

TERMINAL_STATES = frozenset({"Succeeded", "Failed", "Cancelled"})
"""States a job never leaves."""

CHECK_TIMEOUT_S = 45.0
"""How long ``check_node`` waits: the server gives the node's agent 30 s to answer."""


class Client:
    """Calls the API with a bearer token; raises ApiError with the server's message."""

    def __init__(
        self, url: str | None = None, token: str | None = None, timeout: float = 30.0
    ) -> None:
        if url is None or token is None:
            found_url, found_token = discover()
            url = url or found_url
            token = token or found_token
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        # TLS only for an https:// server: this client asks paths of its base URL alone and
        # follows no redirect, so for http:// no certificates need loading (that took about as
        # long as importing the HTTP client, on every CLI call).
        self._http = Transport(self.url, headers, timeout)

    def close(self) -> None:
        self._http.close()

    @property
    def event_hooks(self) -> dict[str, list[Callable[..., Any]]]:
        """Event hooks of this client, to add to, as httpx's: ``"request"`` ones are called with
        each request (an ``httpcore.Request``, whose ``extensions`` they may add to) before it
        is sent, ``"response"`` ones with each ``httpcore.Response`` once its headers have
        come."""
        return self._http.event_hooks

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- plumbing ------------------------------------------------------------------------------
    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except TRANSPORT_ERRORS as exc:
            raise ApiError(
                0, f"cannot reach kiban at {self.url}: {exc}. Is `kiban up` running?"
            ) from None
        return _decode(response)

    # -- services ------------------------------------------------------------------------------
    def apply_service(self, manifest: dict[str, Any] | str) -> dict[str, Any]:
        """Create or change an inference service (a kiban Service or a KServe
        InferenceService), given as a mapping or as YAML/JSON text."""
        if isinstance(manifest, str):
            return dict(
                self._request(
                    "POST",
                    "/api/v1/services",
                    content=manifest.encode(),
                    headers={"Content-Type": "application/yaml"},
                )
            )
        return dict(self._request("POST", "/api/v1/services", json=manifest))

    def start_notebook(self, name: str, **options: Any) -> dict[str, Any]:
        """Start a notebook (or start a stopped one again); ``options``: the API's camelCase
        fields (``gpus``, ``queue``, ``cpus``, ``idleTimeout``, ``maxLifetime``)."""
        body = {"name": name, **{k: v for k, v in options.items() if v is not None}}
        return dict(self._request("POST", "/api/v1/notebooks", json=body))

    def notebooks(self) -> list[dict[str, Any]]:
        return list(self._request("GET", "/api/v1/notebooks"))

    def notebook(self, name: str) -> dict[str, Any]:
        return dict(self._request("GET", resource_path("notebooks", name, "notebook name")))

    def stop_notebook(self, name: str) -> dict[str, Any]:
        path = resource_path("notebooks", name, "notebook name", "/stop")
        return dict(self._request("POST", path))

    def services(self) -> list[dict[str, Any]]:
        return list(self._request("GET", "/api/v1/services"))

    def _service_path(self, name: str, action: str = "") -> str:
        return resource_path("services", name, "service name", action)

    def service(self, name: str) -> dict[str, Any]:
        return dict(self._request("GET", self._service_path(name)))

    def promote(self, name: str) -> dict[str, Any]:
        return dict(self._request("POST", self._service_path(name, "/promote")))

    def rollback(self, name: str) -> dict[str, Any]:
        return dict(self._request("POST", self._service_path(name, "/rollback")))

    def delete_service(self, name: str) -> dict[str, Any]:
        return dict(self._request("DELETE", self._service_path(name)))

    def service_events(self, name: str, after: int = 0) -> list[dict[str, Any]]:
        return list(
            self._request("GET", self._service_path(name, "/events"), params={"after": after})
        )

    @property
    def token(self) -> str | None:
        """The bearer token this client sends (a service's URL takes the same)."""
        header = self._http.headers.get("Authorization", "")
        return header.removeprefix("Bearer ") or None

    # -- jobs ----------------------------------------------------------------------------------
    def submit(
        self, manifest: dict[str, Any] | str, *, working_dir: str | Path | None = None
    ) -> dict[str, Any]:
        """Submit a manifest given as a mapping or as YAML/JSON text. A ``kiban/v1`` Job runs
        in ``working_dir`` (default: the current directory) unless it names its
        ``spec.workingDir``, as ``kiban submit`` and ``kiban run`` do."""
        document = as_document(manifest) if isinstance(manifest, str) else manifest
        if document is None:
            assert isinstance(manifest, str)
            return dict(
                self._request(
                    "POST",
                    "/api/v1/jobs",
                    content=manifest.encode(),
                    headers={"Content-Type": "application/yaml"},
                )
            )
        completed = complete_job_manifest(document, working_dir)
        return dict(self._request("POST", "/api/v1/jobs", json=completed))

    def jobs(
        self,
        *,
        state: list[str] | None = None,
        queue: str | None = None,
        tenant: str | None = None,
        name: str | None = None,
        submitted_by: str | None = None,
        reason: str | None = None,
        offset: int = 0,
        limit: int = 100,
        array: str | None = None,
        array_indices: bool = True,
    ) -> list[dict[str, Any]]:
        """Jobs the token may see, newest first, ``limit`` of them from the ``offset``-th on;
        ``state`` in any case (``running``); ``reason``, a waiting job's reason code;
        ``array``: only that array's indices; ``array_indices`` False: no array's indices."""
        params: dict[str, Any] = {"limit": limit}
        if not array_indices:
            params["arrayIndices"] = "false"
        if offset:
            params["offset"] = offset
        if state:
            params["state"] = state
        for key, value in (
            ("queue", queue),
            ("tenant", tenant),
            ("name", name),
            ("submittedBy", submitted_by),
            ("reason", reason),
            ("array", array),
        ):
            if value:
                params[key] = value
        return list(self._request("GET", "/api/v1/jobs", params=params))

    def arrays(self, limit: int = 100) -> list[dict[str, Any]]:
        """Job arrays the token may see, newest first, with their indices counted by state."""
        return list(self._request("GET", "/api/v1/arrays", params={"limit": limit}))

    def array(self, array_id: str, *, indices: bool = False) -> dict[str, Any]:
        """A job array: counts by state, held indices, unresolved dependencies; with
        ``indices``, which indices are in each state."""
        path = resource_path("arrays", array_id, "array id", "")
        return dict(self._request("GET", path, params={"indices": str(indices).lower()}))

    def cancel_array(self, array_id: str) -> dict[str, Any]:
        """End every index of an array that has not ended."""
        return dict(self._request("POST", resource_path("arrays", array_id, "array id", "/cancel")))

    def wait_array(
        self,
        array_id: str,
        *,
        timeout: float | None = None,
        interval: float = 0.5,
        progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """Poll an array until every index has ended and return it (``succeeded``: each
        one did); after ``timeout`` seconds a TimeoutError, as ``wait``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            found = self.array(array_id)
            if progress is not None:
                progress(found)
            if found["done"]:
                return found
            if deadline is not None and time.monotonic() >= deadline:
                counts = ", ".join(f"{n} {s}" for s, n in sorted(found["counts"].items()))
                raise TimeoutError(f"timed out after {timeout:g}s; array {array_id}: {counts}")
            time.sleep(interval)

    def job(self, job_id: str) -> dict[str, Any]:
        """A job with its spec and replicas."""
        return dict(self._request("GET", _job_path(job_id)))

    def describe(self, job_id: str) -> dict[str, Any]:
        """A job with its spec, replicas and ``events`` (what ``kiban describe -o json``
        prints)."""
        job = self.job(job_id)
        return {**job, "events": self.events(job_id)}

    def wait(
        self,
        job_id: str,
        *,
        timeout: float | None = None,
        interval: float = 0.5,
        progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """Poll a job until it ends (Succeeded, Failed or Cancelled) and return it.

        ``progress`` is called with the job after each poll. After ``timeout`` seconds a
        TimeoutError says the state it is in; the job itself is left as it is."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if progress is not None:
                progress(job)
            if job["state"] in TERMINAL_STATES:
                return job
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"timed out after {timeout:g}s; job {job_id} is {job['state']}")
            time.sleep(interval)

    def start_health_sweep(
        self, *, size_mb: float | None = None, iters: int | None = None
    ) -> dict[str, Any]:
        """Start an allreduce sweep of the idle nodes now (admin): ``jobs``, ``blocks``,
        ``skipped``."""
        params: dict[str, Any] = {}
        if size_mb is not None:
            params["sizeMb"] = size_mb
        if iters is not None:
            params["iters"] = iters
        return dict(self._request("POST", "/api/v1/health/sweeps", params=params))

    def health_sweeps(self) -> dict[str, Any]:
        """The latest allreduce figures of every block and node (admin)."""
        return dict(self._request("GET", "/api/v1/health/sweeps"))

    def cancel(self, job_id: str) -> dict[str, Any]:
        """Cancel a job: running replicas get SIGTERM, then SIGKILL after its grace period."""
        return dict(self._request("POST", _job_path(job_id, "/cancel")))

    def checkpoint(self, job_id: str | None = None) -> dict[str, Any]:
        """Report that a running job saved a checkpoint now; preemption then prefers victims
        that lose less work. Inside a job, ``job_id`` defaults to ``$KIBAN_JOB_ID``."""
        job_id = job_id or os.environ.get("KIBAN_JOB_ID")
        if not job_id:
            raise ValueError("no job id: pass one, or call this inside a job (KIBAN_JOB_ID)")
        return dict(self._request("POST", _job_path(job_id, "/checkpoint")))

    def events(self, job_id: str, after: int = 0) -> list[dict[str, Any]]:
        return list(self._request("GET", _job_path(job_id, "/events"), params={"after": after}))

    def logs(
        self,
        job_id: str,
        *,
        rank: int = 0,
        follow: bool = False,
        all_ranks: bool = False,
        tail: int | None = None,
        since: timedelta | datetime | None = None,
        timestamps: bool = False,
    ) -> Iterator[bytes]:
        """A replica's output in chunks; with ``follow``, until the job finishes.

        ``all_ranks``: every replica's lines, each after ``[rank R]``; ``tail``: only the last
        lines; ``since``: only lines written that recently (a ``timedelta``) or since then (a
        ``datetime``; a naive one is local time); ``timestamps``: each line after its time
        (RFC 3339, UTC), as ``kubectl logs --timestamps``.
        """
        params: dict[str, Any] = {"follow": follow, "timestamps": timestamps}
        if all_ranks:
            params["all_ranks"] = True
        else:
            params["rank"] = rank
        if tail is not None:
            params["tail"] = tail
        if isinstance(since, timedelta):
            params["since_seconds"] = max(since.total_seconds(), 0.0)
        elif isinstance(since, datetime):
            params["since_time"] = since.timestamp()
        try:
            with self._http.stream(
                "GET",
                _job_path(job_id, "/logs"),
                params=params,
                timeout=30.0,
                unbounded_read=True,
            ) as response:
                if response.status_code >= 400:
                    _decode(response.read())
                yield from response.iter_bytes()
        except CONNECT_ERRORS as exc:
            raise ApiError(
                0, f"cannot reach kiban at {self.url}: {exc}. Is `kiban up` running?"
            ) from None
        except TRANSPORT_ERRORS as exc:
            raise ApiError(0, f"lost the connection to kiban at {self.url}: {exc}") from None

    # -- cluster -------------------------------------------------------------------------------
    def usage(
        self,
        *,
        by: str = "tenant",
        since: str = "30d",
        until: str | None = None,
        granularity: str | None = None,
    ) -> dict[str, Any]:
        """GPU- and CPU-hours per tenant, user, queue, flavor or job (``GET /api/v1/usage``)."""
        params = {"by": by, "since": since}
        if until is not None:
            params["until"] = until
        if granularity is not None:
            params["granularity"] = granularity
        return dict(self._request("GET", "/api/v1/usage", params=params))

    def queues(self) -> list[dict[str, Any]]:
        return list(self._request("GET", "/api/v1/queues"))

    def share(self, tenant: str | None = None) -> list[dict[str, Any]]:
        """Each visible member's fair share within its tenant (``tenant``: only that one)."""
        params = {"tenant": tenant} if tenant else None
        return list(self._request("GET", "/api/v1/share", params=params))

    def create_queue(
        self,
        name: str,
        tenant: str,
        gpu_quota: int | None = None,
        strategy: str = "StrictFIFO",
        **entry: Any,
    ) -> dict[str, Any]:
        """Add a queue to the policy. ``gpu_quota``: for a policy without flavors; otherwise
        pass ``quota={"h100": {"gpu": 8}}``. Other keys as in the policy (``cohort=...``)."""
        body: dict[str, Any] = {"name": name, "tenant": tenant, "strategy": strategy, **entry}
        if gpu_quota is not None:
            body["quota"] = {"gpu": gpu_quota}
        return dict(self._request("POST", "/api/v1/queues", json=body))

    def nodes(self) -> list[dict[str, Any]]:
        return list(self._request("GET", "/api/v1/nodes"))

    def cordon(self, node: str) -> dict[str, Any]:
        """Take a node out of scheduling (admin): no new work; running jobs keep running."""
        return dict(self._request("POST", resource_path("nodes", node, "node name", "/cordon")))

    def uncordon(self, node: str) -> dict[str, Any]:
        """Let a cordoned node take new work again (admin)."""
        return dict(self._request("POST", resource_path("nodes", node, "node name", "/uncordon")))

    def node_health(self, name: str) -> dict[str, Any]:
        """A node's health: ``conditions`` (one per check), ``history`` and ``actions``
        (newest first), its agent's latest ``reading`` and its ``agent`` (address, last
        report, ``stale``)."""
        return dict(self._request("GET", resource_path("nodes", name, "node name", "/health")))

    def check_node(self, name: str) -> dict[str, Any]:
        """Run every health check of a node now, through its agent (admin): ``{"node",
        "taken_at", "conditions"}``. The server waits up to 30 s for the agent, so this
        waits longer than other calls."""
        path = resource_path("nodes", name, "node name", "/health/check")
        return dict(self._request("POST", path, timeout=CHECK_TIMEOUT_S))

    # -- policy --------------------------------------------------------------------------------
    def policy(self) -> dict[str, Any]:
        """The policy in force: ``version``, ``document`` (as written), ``effective``."""
        return dict(self._request("GET", "/api/v1/policy"))

    def budgets(self) -> list[dict[str, Any]]:
        """Budgets as they stand now: used, limit, period, state (your tenant's; all for an
        admin)."""
        return list(self._request("GET", "/api/v1/budgets"))

    def budget_extensions(self) -> list[dict[str, Any]]:
        """Extensions granted, newest first."""
        return list(self._request("GET", "/api/v1/budgets/extensions"))

    def extend_budget(self, tenant: str, **fields: Any) -> dict[str, Any]:
        """Grant a budget more (admin): ``gpuHours`` or ``cost``, ``queue``, ``until``,
        ``note`` (the API's camelCase fields)."""
        body = {"tenant": tenant, **{k: v for k, v in fields.items() if v is not None}}
        return dict(self._request("POST", "/api/v1/budgets/extensions", json=body))

    def apply_policy(self, document: dict[str, Any]) -> dict[str, Any]:
        """Replace the policy (admin); the answer says the version and any drain plan."""
        return dict(self._request("PUT", "/api/v1/policy", json=document))

    def policy_versions(self, limit: int = 50) -> list[dict[str, Any]]:
        """Applied versions of the policy, newest first (admin)."""
        return list(self._request("GET", "/api/v1/policy/versions", params={"limit": limit}))

    def audit(
        self,
        *,
        since: float | None = None,
        member: str | None = None,
        action: str | None = None,
        limit: int = 100,
    ) -> list[dict[str, Any]]:
        """Audit records, newest first (admin): since a time (UNIX seconds), of a member, of an
        action (``jobs.submit``, ...)."""
        params: dict[str, Any] = {"limit": limit}
        for key, value in (("since", since), ("member", member), ("action", action)):
            if value is not None:
                params[key] = value
        return list(self._request("GET", "/api/v1/audit", params=params))

    def verify_audit(self, anchor: str | None = None) -> dict[str, Any]:
        """Walk the audit log's hash chain (admin): ``intact``, else the first broken record;
        with an ``anchor`` (``SEQ:HASH``), the chain must still reach that record, that hash."""
        params = {} if anchor is None else {"anchor": anchor}
        return dict(self._request("GET", "/api/v1/audit/verify", params=params))

    def audit_anchor(self) -> dict[str, Any]:
        """The audit chain's last record (admin): ``seq``, ``hash`` and ``anchor`` (SEQ:HASH),
        to keep outside the store for ``verify_audit``."""
        return dict(self._request("GET", "/api/v1/audit/anchor"))

    def tenants(self) -> list[dict[str, Any]]:
        return list(self._request("GET", "/api/v1/tenants"))

    def create_tenant(self, name: str) -> dict[str, Any]:
        return dict(self._request("POST", "/api/v1/tenants", json={"name": name}))

    def create_token(
        self, tenant: str, name: str, role: str | None = None, expires: str | None = None
    ) -> str:
        """A new token of ``tenant``'s member ``name`` (``role``: admin, tenant-admin, member
        or viewer; ``expires``: a duration from now such as ``30d``), in clear."""
        return str(self.create_token_info(tenant, name, role, expires)["token"])

    def create_token_info(
        self, tenant: str, name: str, role: str | None = None, expires: str | None = None
    ) -> dict[str, Any]:
        """As ``create_token``, the whole answer: the token with its id, role and expiry."""
        path = resource_path("tenants", tenant, "tenant name", "/tokens")
        body: dict[str, Any] = {"name": name}
        if role is not None:
            body["role"] = role
        if expires is not None:
            body["expires"] = expires
        return dict(self._request("POST", path, json=body))

    def tokens(self, tenant: str | None = None, revoked: bool = False) -> list[dict[str, Any]]:
        """Tokens (never their secrets): every tenant's for an admin, a tenant-admin's own;
        the revoked ones too with ``revoked``."""
        params: dict[str, str] = {"tenant": tenant} if tenant else {}
        if revoked:
            params["all"] = "true"
        return list(self._request("GET", "/api/v1/tokens", params=params))

    def revoke_token(self, token_id: int) -> dict[str, Any]:
        return dict(self._request("DELETE", f"/api/v1/tokens/{int(token_id)}"))

    def delete_tenant(self, name: str, drain: bool = False) -> dict[str, Any]:
        """Delete a tenant; ``drain``: cancel its jobs, delete its services and stop its
        notebooks first (``deleted`` false while they end: call again)."""
        path = resource_path("tenants", name, "tenant name")
        return dict(self._request("DELETE", path, params={"drain": str(drain).lower()}))

    def delete_queue(self, name: str, drain: bool = False) -> dict[str, Any]:
        path = resource_path("queues", name, "queue name")
        return dict(self._request("DELETE", path, params={"drain": str(drain).lower()}))

    def change_queue(
        self, name: str, strategy: str | None = None, **settings: Any
    ) -> dict[str, Any]:
        """Change a queue's settings: ``strategy``, and as in the policy ``quota={"h100":
        {"gpu": 8}}``, ``fairShareWeight=2``...; the rest stay."""
        body = dict(settings) if strategy is None else {"strategy": strategy, **settings}
        path = resource_path("queues", name, "queue name")
        return dict(self._request("PATCH", path, json=body))

    def whoami(self) -> dict[str, Any]:
        return dict(self._request("GET", "/api/v1/whoami"))

    def healthy(self) -> bool:
        try:
            return self._http.get("/healthz", timeout=2.0).status_code == 200
        except TRANSPORT_ERRORS:
            return False


def resource_path(collection: str, name: str, what: str, action: str = "") -> str:
    """The API path of one named resource. An empty name, or one holding a "/", is refused
    here: ``/api/v1/jobs/`` addresses the collection, and the server decodes a quoted "/"
    before routing, so ``x/cancel`` would address another route rather than fail."""
    if not name.strip():
        raise ApiError(400, f"{what}: must not be empty")
    if "/" in name:
        raise ApiError(400, f"{what}: {name!r} holds a '/', which no {what} has")
    return f"/api/v1/{collection}/{quote(name, safe='')}{action}"


def _job_path(job_id: str, action: str = "") -> str:
    return resource_path("jobs", job_id, "job id", action)


def _decode(response: Answer) -> Any:
    if response.is_redirect:  # the API never redirects: a path that is not one of its own
        raise ApiError(response.status_code, f"no such API path: {response.path}")
    if response.status_code < 400:
        return response.json() if response.content else None
    try:
        error = response.json().get("error", {})
        message = error.get("message") or response.text
        problems = error.get("problems")
    except ValueError:
        message, problems = response.text or response.reason_phrase, None
    raise ApiError(response.status_code, message, problems)
