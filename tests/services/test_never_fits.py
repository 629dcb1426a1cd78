"""Submission refuses a job that could never start, naming the field to change and the numbers:
the same test the scheduler uses for ``Unschedulable`` (``feasibility.never_fits``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from kiban.domain.cluster import ClusterPolicy, parse_policy
from kiban.domain.errors import SpecError
from kiban.domain.jobspec import JobManifest
from kiban.executors.base import Capability, NodeInfo
from kiban.services.jobs import ClusterFacts, check_against_cluster

GIB = 2**30
CONTAINERS = frozenset({Capability.CONTAINERS})


def nodes(count: int, gpus: int, prefix: str = "node", **labels: str) -> list[NodeInfo]:
    return [NodeInfo(f"{prefix}-{i}", gpus, 8000, 32 * GIB, dict(labels)) for i in range(count)]


def job(*tasks: dict[str, Any], queue: str = "default", **spec: Any) -> JobManifest:
    return JobManifest.model_validate(
        {
            "apiVersion": "kiban/v1",
            "kind": "Job",
            "metadata": {"name": "j"},
            "spec": {
                "queue": queue,
                "tasks": [{"command": ["python"], **t} for t in tasks],
                **spec,
            },
        }
    )


TWO_FLAVORS = {
    "flavors": [
        {"name": "a100", "nodeLabels": {"gpu": "a100"}},
        {"name": "h100", "nodeLabels": {"gpu": "h100"}},
    ]
}
TWO_FLAVOR_NODES = [
    *nodes(1, 4, "a", gpu="a100"),
    *nodes(1, 4, "h", gpu="h100"),
    *nodes(4, 2, "small", gpu="a100"),
]
BLOCKS = {"topology": {"levels": [{"name": "block", "label": "block"}]}}


@dataclass
class Case:
    id: str
    nodes: list[NodeInfo]
    manifest: JobManifest
    policy: dict[str, Any] = field(default_factory=dict)
    field: str | None = None  # None: accepted
    says: tuple[str, ...] = ()
    capabilities: frozenset[Capability] = frozenset()


CASES = [
    Case(
        "ten-thousand-replicas-on-six-gpus",
        nodes(3, 2),
        job({"replicas": 10000, "resources": {"gpu": 1}}),
        field="spec.tasks[0].replicas",
        says=(
            "can never start: needs 10000 replicas of task worker (1 GPU, 1 CPU, 1 GiB of "
            "memory) together; the 3 nodes could hold 6 even when idle",
        ),
    ),
    Case("six-replicas-on-six-gpus", nodes(3, 2), job({"replicas": 6, "resources": {"gpu": 1}})),
    Case(
        "a-gang-whose-nodes-are-of-two-flavors",
        TWO_FLAVOR_NODES,
        job({"replicas": 2, "resources": {"gpu": 4}}),
        policy=TWO_FLAVORS,
        field="spec.tasks[0].replicas",
        says=(
            "needs 2 replicas of task worker (4 GPUs, 1 CPU, 1 GiB of memory) together; the 5 "
            "nodes of flavor a100 could hold 1 even when idle; the 1 node of flavor h100 could "
            "hold 1 even when idle",
        ),
    ),
    Case(
        "an-elastic-gang-of-one-fits-either-flavor",
        TWO_FLAVOR_NODES,
        job({"replicas": 2, "resources": {"gpu": 4}}, minAvailable=1),
        policy=TWO_FLAVORS,
    ),
    Case(
        "a-flavor-restricted-to-another-queue",
        TWO_FLAVOR_NODES,
        job({"replicas": 1, "resources": {"gpu": 4}}, queue="mine"),
        policy={
            "flavors": [
                {"name": "a100", "nodeLabels": {"gpu": "a100"}, "queues": ["vision"]},
                {"name": "h100", "nodeLabels": {"gpu": "h100"}, "queues": ["vision"]},
            ],
            "queues": [{"name": "mine"}, {"name": "vision"}],
        },
        field="spec.queue",
        says=("can never start: queue mine may use no flavor",),
    ),
    Case(
        "a-replica-larger-than-any-node",
        nodes(2, 2),
        job({"resources": {"gpu": 3}}),
        field="spec.tasks[0].resources.gpu",
        says=("the largest node has 2 GPUs, 8 CPUs and 32 GiB of memory",),
    ),
    Case(
        "memory-said-in-binary-units",
        nodes(2, 2),
        job({"resources": {"gpu": 1, "memory": "48Gi"}}),
        field="spec.tasks[0].resources.memory",
        says=("(1 GPU, 1 CPU, 48 GiB of memory)", "32 GiB of memory"),
    ),
    Case(
        "a-node-selector-no-node-matches",
        nodes(2, 2, zone="a"),
        job({"resources": {"gpu": 1}, "nodeSelector": {"zone": "b"}}),
        field="spec.tasks[0].nodeSelector",
        says=("needs a node matching nodeSelector zone=b", "no node matches"),
        capabilities=CONTAINERS,
    ),
    Case(
        "a-node-selector-the-local-executor-ignores",
        nodes(2, 2, zone="a"),
        job({"resources": {"gpu": 1}, "nodeSelector": {"zone": "b"}}),
    ),
    Case(
        "a-gang-larger-than-any-block",
        [*nodes(2, 8, "b0", block="b0"), *nodes(2, 8, "b1", block="b1")],
        job({"replicas": 3, "resources": {"gpu": 8}}, topology={"level": "block"}),
        policy=BLOCKS,
        field="spec.topology.level",
        says=("needs the gang (24 GPUs) in one block; no block could hold it even when idle",),
    ),
    Case(
        "a-preferred-block-is-no-limit",
        [*nodes(2, 8, "b0", block="b0"), *nodes(2, 8, "b1", block="b1")],
        job(
            {"replicas": 3, "resources": {"gpu": 8}},
            topology={"level": "block", "mode": "preferred"},
        ),
        policy=BLOCKS,
    ),
    Case(
        "more-than-the-quota-and-what-it-may-borrow",
        nodes(4, 4),
        job({"replicas": 2, "resources": {"gpu": 4}}, queue="team"),
        policy={
            "cohorts": [{"name": "all"}],
            "queues": [
                {
                    "name": "team",
                    "cohort": "all",
                    "quota": {"gpu": 4},
                    "borrowingLimit": {"gpu": 2},
                },
                {"name": "other", "cohort": "all", "quota": {"gpu": 8}},
            ],
        },
        field="spec.queue",
        says=("needs 8 GPUs; queue team can never hold more than 6 (4 its own, 2 borrowed)",),
    ),
    Case(
        "within-the-quota-and-what-it-may-borrow",
        nodes(4, 4),
        job({"replicas": 2, "resources": {"gpu": 4}}, queue="team"),
        policy={
            "cohorts": [{"name": "all"}],
            "queues": [
                {
                    "name": "team",
                    "cohort": "all",
                    "quota": {"gpu": 4},
                    "borrowingLimit": {"gpu": 4},
                },
                {"name": "other", "cohort": "all", "quota": {"gpu": 8}},
            ],
        },
    ),
    Case(
        "a-zero-quota",
        nodes(1, 1),
        job({"resources": {"gpu": 1}}, queue="held"),
        policy={"queues": [{"name": "held", "quota": {"gpu": 0}}]},
        field="spec.queue",
        says=("needs 1 GPU; queue held can never hold more than 0",),
    ),
    Case(
        "one-replica-per-node-on-too-few-nodes",
        nodes(2, 8),
        job({"replicas": 3, "resources": {"gpu": 1}, "maxReplicasPerNode": 1}),
        field="spec.tasks[0].maxReplicasPerNode",
        says=(
            "needs 3 nodes with 1 free GPU each for one replica per node (task worker); only 2 "
            "such nodes exist",
        ),
    ),
    Case(
        "cpu-only-ranks-one-per-node",
        nodes(3, 0),
        job({"replicas": 3, "resources": {"gpu": 0}, "maxReplicasPerNode": 1}),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_submission_refuses_what_could_never_start(case: Case) -> None:
    facts = ClusterFacts(nodes=tuple(case.nodes), capabilities=case.capabilities)
    policy = parse_policy(case.policy) if case.policy else ClusterPolicy()
    if case.field is None:
        check_against_cluster(case.manifest, facts, policy)
        return
    with pytest.raises(SpecError) as caught:
        check_against_cluster(case.manifest, facts, policy)
    (problem,) = caught.value.problems
    assert problem.field == case.field
    for words in case.says:
        assert words in problem.message


def test_what_the_nodes_hold_is_worked_out_again_under_a_new_policy() -> None:
    facts = ClusterFacts(nodes=tuple(TWO_FLAVOR_NODES))
    manifest = job({"resources": {"gpu": 4}}, queue="mine")
    open_to_all = parse_policy({**TWO_FLAVORS, "queues": [{"name": "mine"}, {"name": "vision"}]})
    check_against_cluster(manifest, facts, open_to_all)
    restricted = parse_policy(
        {
            "flavors": [
                {"name": "a100", "nodeLabels": {"gpu": "a100"}, "queues": ["vision"]},
                {"name": "h100", "nodeLabels": {"gpu": "h100"}},
            ],
            "queues": [{"name": "mine"}, {"name": "vision"}],
        }
    )
    check_against_cluster(manifest, facts, restricted)  # h100 still holds it
    both = parse_policy(
        {
            "flavors": [
                {"name": "a100", "nodeLabels": {"gpu": "a100"}, "queues": ["vision"]},
                {"name": "h100", "nodeLabels": {"gpu": "h100"}, "queues": ["vision"]},
            ],
            "queues": [{"name": "mine"}, {"name": "vision"}],
        }
    )
    with pytest.raises(SpecError):
        check_against_cluster(manifest, facts, both)


def test_an_equal_policy_read_again_keeps_what_the_nodes_hold() -> None:
    """The service controller reads the policy afresh each time: an equal one reuses the work."""
    facts = ClusterFacts(nodes=tuple(TWO_FLAVOR_NODES))
    first = facts.under(parse_policy(TWO_FLAVORS))
    assert facts.under(parse_policy(TWO_FLAVORS)) is first
    assert facts.under(parse_policy({})) is not first


def rdma_nodes(count: int, hostdev: int) -> list[NodeInfo]:
    return [
        NodeInfo(f"rdma-{i}", 8, 8000, 32 * GIB, {}, extended={"nvidia.com/hostdev": hostdev})
        for i in range(count)
    ]


EXTENDED_CASES = [
    Case(
        "fits-the-nodes-that-advertise-it",
        [*rdma_nodes(2, 8), *nodes(2, 8)],
        job({"replicas": 2, "resources": {"gpu": 8, "nvidia.com/hostdev": 8}}),
    ),
    Case(
        "more-per-replica-than-any-node-has",
        rdma_nodes(2, 8),
        job({"resources": {"gpu": 1, "nvidia.com/hostdev": 16}}),
        field="spec.tasks[0].resources.nvidia.com/hostdev",
        says=("the most any node has is 8 nvidia.com/hostdev",),
    ),
    Case(
        "more-replicas-than-the-advertisers-hold",
        [*rdma_nodes(2, 8), *nodes(4, 8)],
        job({"replicas": 3, "resources": {"gpu": 1, "nvidia.com/hostdev": 8}}),
        field="spec.tasks[0].replicas",
        says=("could hold 2 even when idle",),
    ),
    Case(
        "beyond-the-queues-quota-of-it",
        rdma_nodes(4, 8),
        job({"replicas": 3, "resources": {"gpu": 1, "nvidia.com/hostdev": 8}}),
        policy={"queues": [{"name": "default", "quota": {"gpu": 64, "nvidia.com/hostdev": 16}}]},
        field="spec.queue",
        says=("needs 24 nvidia.com/hostdev", "never hold more than 16"),
    ),
    Case(  # accepted: a device plugin may register it; it waits naming it (and the close one)
        "a-resource-no-node-advertises-is-accepted",
        rdma_nodes(1, 8),
        job({"resources": {"gpu": 1, "nvidia.com/hostdevs": 1}}),
    ),
]


@pytest.mark.parametrize("case", EXTENDED_CASES, ids=[c.id for c in EXTENDED_CASES])
def test_submission_counts_extended_resources(case: Case) -> None:
    test_submission_refuses_what_could_never_start(case)
