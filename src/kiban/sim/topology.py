"""The synthetic cluster's shape: node names, the four OCI network-locality levels, job shapes.

Shared by ``kiban sim --nodes N`` and ``kiban bench scheduler``. Each node carries the labels
OKE puts on RDMA nodes (oracle-quickstart/oci-hpc-oke,
docs/using-rdma-network-locality-when-running-workloads-on-oke.md: local block, network block
and HPC island are latency tiers 0, 1 and 2) and its ``topology`` path, outermost first, with
the label keys as level names. Those sources do not publish block sizes; the shape here is an
assumption: 8 hosts per local block, 16 local blocks per network block, 16 network blocks per
island. A smaller cluster keeps the block sizes (they are physical) and has fewer blocks, the
last one possibly partial. Domain ids are unique cluster-wide, as OCIDs are.
"""

from __future__ import annotations

from kiban.scheduler.snapshot import TopologyRequest

ISLAND_LABEL = "oci.oraclecloud.com/rdma.hpc_island_id"
NETWORK_BLOCK_LABEL = "oci.oraclecloud.com/rdma.network_block_id"
LOCAL_BLOCK_LABEL = "oci.oraclecloud.com/rdma.local_block_id"
HOSTNAME_LABEL = "kubernetes.io/hostname"
TOPOLOGY_LEVELS = (ISLAND_LABEL, NETWORK_BLOCK_LABEL, LOCAL_BLOCK_LABEL, HOSTNAME_LABEL)
"""The levels of every node's topology path, outermost first."""

HOSTS_PER_LOCAL_BLOCK = 8
LOCAL_BLOCKS_PER_NETWORK_BLOCK = 16
NETWORK_BLOCKS_PER_ISLAND = 16
HOSTS_PER_NETWORK_BLOCK = HOSTS_PER_LOCAL_BLOCK * LOCAL_BLOCKS_PER_NETWORK_BLOCK
HOSTS_PER_ISLAND = HOSTS_PER_NETWORK_BLOCK * NETWORK_BLOCKS_PER_ISLAND


def node_name(index: int) -> str:
    return f"node-{index:05d}"


def topology_path(index: int) -> tuple[str, str, str, str]:
    """Island, network block, local block and host of node ``index``, outermost first."""
    island = index // HOSTS_PER_ISLAND
    block = index % HOSTS_PER_ISLAND // HOSTS_PER_NETWORK_BLOCK
    local = index % HOSTS_PER_NETWORK_BLOCK // HOSTS_PER_LOCAL_BLOCK
    return (
        f"island-{island:02d}",
        f"nb-{island:02d}-{block:02d}",
        f"lb-{island:02d}-{block:02d}-{local:02d}",
        node_name(index),
    )


def split_gpus(gpus: int, gpus_per_node: int) -> tuple[int, int]:
    """``(replicas, GPUs per replica)``: the fewest equal replicas that each fit a node."""
    per = max(d for d in range(1, min(gpus, gpus_per_node) + 1) if gpus % d == 0)
    return gpus // per, per


def topology_request(replicas: int) -> TopologyRequest | None:
    """A multi-node gang prefers the smallest level whose domain has hosts for all of it."""
    if replicas <= 1:
        return None
    for level, hosts in (
        (LOCAL_BLOCK_LABEL, HOSTS_PER_LOCAL_BLOCK),
        (NETWORK_BLOCK_LABEL, HOSTS_PER_NETWORK_BLOCK),
        (ISLAND_LABEL, HOSTS_PER_ISLAND),
    ):
        if replicas <= hosts:
            return TopologyRequest(level, required=False)
    return None
