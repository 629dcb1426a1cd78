"""Virtual nodes on a machine with GPUs enough for all of them each get GPUs of their own (an
NCCL rank refuses a GPU another rank uses); with too few, they share the machine's first."""

from __future__ import annotations

from pathlib import Path

from kiban.domain.manifests import parse_job_manifest
from kiban.executors.base import LaunchRequest, ReplicaRef
from kiban.executors.local import LocalExecutor
from kiban.executors.local.nodes import virtual_nodes
from kiban.health.agent_process import AgentNode
from kiban.scheduler.decisions import ReplicaPlacement
from kiban.testing import eventually


def test_nodes_get_their_own_gpus_only_where_the_machine_has_enough() -> None:
    assert [n.gpu_devices for n in virtual_nodes(2, 2, physical=4)] == [(0, 1), (2, 3)]
    assert [n.gpu_devices for n in virtual_nodes(2, 2, physical=3)] == [(), ()]
    assert [n.gpu_devices for n in virtual_nodes(3, 0, physical=8)] == [(), (), ()]
    # the node agent reads each node's own GPUs, clamped to the machine's
    nodes = virtual_nodes(2, 1, physical=2)
    assert [AgentNode.local(n.name, n.gpus, 2, n.gpu_devices).gpus for n in nodes] == [(0,), (1,)]
    assert AgentNode.local("node-1", 1, 1).gpus == (0,)


def visible_devices(tmp_path: Path, physical: int) -> list[str]:
    """What ``CUDA_VISIBLE_DEVICES`` each rank of a 2-node job (GPU 0 of its node) sees."""
    document = {
        "apiVersion": "kiban/v1",
        "kind": "Job",
        "metadata": {"name": "gd"},
        "spec": {
            "tasks": [
                {
                    "name": "w",
                    "replicas": 2,
                    "command": ["sh", "-c", 'echo "[$CUDA_VISIBLE_DEVICES]"'],
                }
            ]
        },
    }
    spec = parse_job_manifest(document).spec
    home = tmp_path / f"home-{physical}"
    executor = LocalExecutor(home, virtual_nodes(2, 1, physical=physical))
    placements = tuple(
        ReplicaPlacement("w", rank, rank, f"node-{rank}", (0,), 100, 2**26) for rank in range(2)
    )
    launched = executor.launch(LaunchRequest("gd-1", "gd", "t", 1, spec, placements, 29500))
    refs = [
        ReplicaRef("gd-1", 1, "w", p.index, p.rank, up.handle)
        for p, up in zip(placements, launched, strict=True)
    ]
    eventually(lambda: not any(executor.observe(r).running for r in refs), what="the job to end")
    return [(home / "jobs" / "gd-1" / f"rank-{r}.log").read_text().strip() for r in range(2)]


def test_each_rank_sees_its_nodes_own_gpu(tmp_path: Path) -> None:
    assert visible_devices(tmp_path, physical=2) == ["[0]", "[1]"]
    assert visible_devices(tmp_path, physical=1) == ["[0]", "[0]"]  # shared, as before
