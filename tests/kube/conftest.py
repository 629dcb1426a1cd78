"""The kube tier: a real control plane (etcd, kube-apiserver, KWOK) shared by the session.

It is started by the same code as ``kiban dev kube up``. Without the binaries (built by
scripts/ensure-kube.sh) the tier is skipped with that hint, which fails under ``CI=true``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kiban.devtools.kube import (
    ControlPlane,
    ControlPlaneOptions,
    FakeNodeSpec,
    Topology,
    find_binaries,
    start_control_plane,
)
from kiban.devtools.kube.binaries import ENSURE_HINT, bin_dir

NODE_SPEC = FakeNodeSpec(
    count=3,
    gpus=2,
    labels={"kiban.dev/pool": "test"},
    topology=Topology(islands=1, blocks=1, local_blocks=3),
)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    if find_binaries() is None:
        pytest.skip(f"Kubernetes control plane binaries not found in {bin_dir()}; {ENSURE_HINT}")
    directory = tmp_path_factory.mktemp("kube")
    with start_control_plane(directory, ControlPlaneOptions(nodes=NODE_SPEC)) as plane:
        yield plane


@pytest.fixture(scope="session")
def core(control_plane: ControlPlane) -> Iterator[Any]:
    """CoreV1Api of the official client, as the admin."""
    from kubernetes import client, config

    api_client = config.new_client_from_config(config_file=str(control_plane.kubeconfig))
    try:
        yield client.CoreV1Api(api_client)
    finally:
        api_client.close()
