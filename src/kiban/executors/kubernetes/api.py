"""The few calls kiban makes to the Kubernetes API, as JSON in and out.

The official client's typed models are slow to build for thousands of pods and its methods are
typed for them; kiban sends and reads plain JSON (``_preload_content=False``) through this thin
layer instead. Errors are the client's ``ApiException``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

Obj = dict[str, Any]


POOL = 16
"""Keep-alive connections to the API server, at least: one per pod created at once (the
client's own default, 5 per CPU, would drop connections on a small machine)."""
LOG_TIMEOUT_S = 30.0
"""How long a log read may take (connecting to the node and reading it)."""


def connect(kubeconfig: Path | None, pool: int = POOL) -> ApiClient:
    """An API client from a kubeconfig file, or from the pod's service account (in-cluster)."""
    configuration = client.Configuration()
    if kubeconfig is not None:
        if not kubeconfig.is_file():
            raise FileNotFoundError(f"kubeconfig {kubeconfig} does not exist")
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig), client_configuration=configuration
        )
    else:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize, pool)
    return ApiClient(configuration)


def ignore_gone(call: Any, *args: Any, **kwargs: Any) -> None:
    """Delete; an object gone already (404) or replaced by another (409) is not an error."""
    try:
        call(*args, **kwargs)
    except ApiException as exc:
        if exc.status not in (404, 409):
            raise


def _json(response: Any) -> Obj:
    data: Obj = json.loads(response.data)
    return data


class CoreApi:
    """Core v1 calls with JSON bodies and results."""

    def __init__(self, api_client: ApiClient) -> None:
        self.api_client = api_client
        self._core: Any = client.CoreV1Api(api_client)

    def close(self) -> None:
        self.api_client.close()  # type: ignore[no-untyped-call]

    # -- lists -----------------------------------------------------------------------------
    def list_nodes(self, label_selector: str = "") -> list[Obj]:
        return self._items(
            self._core.list_node(label_selector=label_selector, _preload_content=False)
        )

    def list_pods(self, *, label_selector: str = "", field_selector: str = "") -> Obj:
        """The PodList (items and the list's resourceVersion), in every namespace."""
        return _json(
            self._core.list_pod_for_all_namespaces(
                label_selector=label_selector, field_selector=field_selector, _preload_content=False
            )
        )

    def list_services(self, label_selector: str) -> list[Obj]:
        return self._items(
            self._core.list_service_for_all_namespaces(
                label_selector=label_selector, _preload_content=False
            )
        )

    def watch_pods(self, label_selector: str, resource_version: str | None, timeout_s: int) -> Any:
        """A streaming response of watch events (one JSON object a line)."""
        return self._core.list_pod_for_all_namespaces(
            label_selector=label_selector,
            watch=True,
            resource_version=resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=timeout_s,
            _preload_content=False,
        )

    @staticmethod
    def _items(response: Any) -> list[Obj]:
        items: list[Obj] = _json(response).get("items") or []
        return items

    # -- objects ---------------------------------------------------------------------------
    def read_node(self, name: str) -> Obj:
        return _json(self._core.read_node(name, _preload_content=False))

    def patch_node(self, name: str, body: Obj) -> Obj:
        return _json(self._core.patch_node(name, body, _preload_content=False))

    def create_namespace(self, body: Obj) -> Obj:
        return _json(self._core.create_namespace(body, _preload_content=False))

    def create_service(self, namespace: str, body: Obj) -> Obj:
        return _json(self._core.create_namespaced_service(namespace, body, _preload_content=False))

    def read_service(self, namespace: str, name: str) -> Obj:
        return _json(self._core.read_namespaced_service(name, namespace, _preload_content=False))

    def delete_service(self, namespace: str, name: str) -> None:
        self._core.delete_namespaced_service(name, namespace, _preload_content=False)

    def create_config_map(self, namespace: str, body: Obj) -> Obj:
        return _json(
            self._core.create_namespaced_config_map(namespace, body, _preload_content=False)
        )

    def delete_config_map(self, namespace: str, name: str) -> None:
        self._core.delete_namespaced_config_map(name, namespace, _preload_content=False)

    def create_secret(self, namespace: str, body: Obj) -> Obj:
        return _json(self._core.create_namespaced_secret(namespace, body, _preload_content=False))

    def read_secret(self, namespace: str, name: str) -> Obj:
        return _json(self._core.read_namespaced_secret(name, namespace, _preload_content=False))

    def delete_secret(self, namespace: str, name: str) -> None:
        self._core.delete_namespaced_secret(name, namespace, _preload_content=False)

    def create_claim(self, namespace: str, body: Obj) -> Obj:
        return _json(
            self._core.create_namespaced_persistent_volume_claim(
                namespace, body, _preload_content=False
            )
        )

    def create_pod(self, namespace: str, body: Obj) -> Obj:
        return _json(self._core.create_namespaced_pod(namespace, body, _preload_content=False))

    def read_pod(self, namespace: str, name: str) -> Obj:
        return _json(self._core.read_namespaced_pod(name, namespace, _preload_content=False))

    def delete_pod(
        self, namespace: str, name: str, *, uid: str | None = None, grace_s: int | None = None
    ) -> None:
        """Delete a pod; only if it is still ``uid``; with ``grace_s`` instead of its own."""
        body: Obj = {}
        if uid is not None:
            body["preconditions"] = {"uid": uid}
        if grace_s is not None:
            body["gracePeriodSeconds"] = grace_s
        self._core.delete_namespaced_pod(name, namespace, body=body, _preload_content=False)

    def read_pod_log(
        self,
        namespace: str,
        name: str,
        container: str,
        tail_lines: int | None = None,
        *,
        timestamps: bool = False,
    ) -> bytes:
        """The container's log (its last ``tail_lines`` lines when given; each line after its
        time with ``timestamps``); the API server fetches it from the node's kubelet, so a node
        that does not answer costs at most ``LOG_TIMEOUT_S`` rather than a hung reader."""
        options = {"timestamps": True} if timestamps else {}
        answer = self._pod_log(namespace, name, container, tail_lines, LOG_TIMEOUT_S, **options)
        return bytes(answer.data)

    def follow_pod_log(
        self,
        namespace: str,
        name: str,
        container: str,
        *,
        tail_lines: int | None,
        timeout_s: float,
    ) -> Iterator[bytes]:
        """The container's log (its last ``tail_lines`` lines, or all of it) and then what it
        writes, until the container ends; a read waits at most ``timeout_s`` for the next
        bytes. Nothing is asked of the API server before the first chunk is wanted."""
        timeouts = (LOG_TIMEOUT_S, timeout_s)
        response = self._pod_log(namespace, name, container, tail_lines, timeouts, follow=True)
        try:
            yield from response.stream(64 * 1024, decode_content=False)
        finally:
            response.close()  # not back to the pool: the stream may have been left unfinished
            response.release_conn()

    def _pod_log(
        self,
        namespace: str,
        name: str,
        container: str,
        tail_lines: int | None,
        timeout: float | tuple[float, float],
        **options: Any,
    ) -> Any:
        """One request for a container's log, its answer not read yet (the whole log, or its
        last ``tail_lines`` lines)."""
        if tail_lines is not None:
            options["tail_lines"] = tail_lines
        return self._core.read_namespaced_pod_log(
            name,
            namespace,
            container=container,
            _preload_content=False,
            _request_timeout=timeout,
            **options,
        )
