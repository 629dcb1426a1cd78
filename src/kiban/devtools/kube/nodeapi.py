"""The fake nodes through the API server: create them, tell when KWOK has made them Ready."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kiban.devtools.kube.fakenodes import FakeNodeSpec


@contextmanager
def core_api(kubeconfig: Path, pool: int = 16) -> Iterator[Any]:
    """A CoreV1Api of the official client on kubeconfig, closed on exit."""
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(kubeconfig), client_configuration=configuration
    )
    configuration.connection_pool_maxsize = pool
    api_client = client.ApiClient(configuration)
    try:
        yield client.CoreV1Api(api_client)
    finally:
        api_client.close()  # type: ignore[no-untyped-call]


def create_nodes(core: Any, spec: FakeNodeSpec, workers: int = 8) -> list[str]:
    """Create the fake nodes, several requests at a time; return their names in order."""
    with ThreadPoolExecutor(max(1, workers)) as pool:
        created = pool.map(lambda i: core.create_node(body=spec.node(i)), range(spec.count))
        return [node.metadata.name for node in created]


def nodes_ready(core: Any, names: set[str]) -> Callable[[], bool]:
    """A check that every node in names is Ready (reads raw JSON: there may be thousands)."""

    def check() -> bool:
        if not names:
            return True
        response = core.list_node(resource_version="0", _preload_content=False)
        ready = {
            node["metadata"]["name"]
            for node in json.loads(response.data)["items"]
            for condition in node.get("status", {}).get("conditions") or []
            if condition["type"] == "Ready" and condition["status"] == "True"
        }
        return names <= ready

    return check
