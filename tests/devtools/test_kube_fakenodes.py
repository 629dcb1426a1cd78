"""Fake GPU nodes and their topology labels (kiban.devtools.kube.fakenodes)."""

from __future__ import annotations

from collections import Counter

import pytest

from kiban.devtools.kube.fakenodes import (
    HOSTNAME_LABEL,
    ISLAND_LABEL,
    LOCAL_BLOCK_LABEL,
    NETWORK_BLOCK_LABEL,
    FakeNodeSpec,
    NodeSpecError,
    Topology,
    parse_labels,
    parse_topology,
)


def test_node_object_has_kwok_annotation_gpus_and_labels() -> None:
    spec = FakeNodeSpec(count=2, gpus=8, labels={"team": "vision"})
    node = spec.node(1)
    assert node["metadata"]["name"] == "kwok-node-0001"
    assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    labels = node["metadata"]["labels"]
    assert labels["nvidia.com/gpu.product"] == "H100"
    assert labels["team"] == "vision"
    assert labels[HOSTNAME_LABEL] == "kwok-node-0001"
    assert ISLAND_LABEL not in labels  # no topology asked for
    for field in ("capacity", "allocatable"):
        resources = node["status"][field]
        assert resources["nvidia.com/gpu"] == "8"
        assert {"cpu", "memory", "pods"} <= set(resources)


def test_topology_fills_local_blocks_in_order_evenly() -> None:
    topology = parse_topology("2x2x2")
    assert topology == Topology(2, 2, 2)
    spec = FakeNodeSpec(count=20, topology=topology)
    labels = [spec.node(i)["metadata"]["labels"] for i in range(spec.count)]

    per_local = Counter(lab[LOCAL_BLOCK_LABEL] for lab in labels)
    assert len(per_local) == 8
    assert set(per_local.values()) == {2, 3}  # 20 nodes in 8 blocks: sizes differ by one
    assert Counter(lab[ISLAND_LABEL] for lab in labels) == {"island-0": 10, "island-1": 10}
    assert len({lab[NETWORK_BLOCK_LABEL] for lab in labels}) == 4  # unique across islands
    # In order: a local block's nodes are consecutive, and blocks nest in their parents.
    assert [lab[LOCAL_BLOCK_LABEL] for lab in labels] == sorted(
        (lab[LOCAL_BLOCK_LABEL] for lab in labels),
        key=lambda v: tuple(int(p) for p in v.split("-")[1:]),
    )
    for lab in labels:
        _, island, block, _local = lab[LOCAL_BLOCK_LABEL].split("-")
        assert lab[NETWORK_BLOCK_LABEL] == f"block-{island}-{block}"
        assert lab[ISLAND_LABEL] == f"island-{island}"


@pytest.mark.parametrize("text", ["2x4", "2x0x4", "axbxc", "1x2x3x4", "-1x2x2", ""])
def test_bad_topology_names_the_option(text: str) -> None:
    with pytest.raises(NodeSpecError, match="--topology"):
        parse_topology(text)


def test_labels_are_checked() -> None:
    assert parse_labels(["a=b", "example.com/tier=gold", "empty="]) == {
        "a": "b",
        "example.com/tier": "gold",
        "empty": "",
    }
    for bad in ("nokey", "=v", "Bad_Prefix!/x=y", "k=" + "v" * 64, "k=-v"):
        with pytest.raises(NodeSpecError, match="--label"):
            parse_labels([bad])


def test_many_nodes_get_wider_names() -> None:
    spec = FakeNodeSpec(count=20000)
    assert spec.name(7) == "kwok-node-00007"
