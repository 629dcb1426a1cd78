"""Extended resources in the cluster file: queue quotas that name them beside ``gpu``, and
nodes of the local executor that advertise them; refusals name the field at fault."""

from __future__ import annotations

from typing import Any

import pytest

from kiban.domain.cluster import parse_cluster_config, parse_policy
from kiban.domain.errors import SpecError

FLAVORS = [{"name": "h100", "nodeLabels": {"gpu.product": "H100"}}]


def policy(**queue: Any) -> dict[str, Any]:
    return {"flavors": FLAVORS, "queues": [{"name": "rdma", **queue}]}


def test_a_quota_names_extended_resources_beside_gpus() -> None:
    parsed = parse_policy(policy(quota={"h100": {"gpu": 64, "nvidia.com/hostdev": 64}}))
    (queue,) = parsed.queues
    assert queue.nominal == {"h100": 64}
    assert queue.extended_nominal == {"h100": {"nvidia.com/hostdev": 64}}


def test_hugepages_in_a_quota_are_bytes() -> None:
    parsed = parse_policy(policy(quota={"h100": {"gpu": 8, "hugepages-2Mi": "4Gi"}}))
    assert parsed.queues[0].extended_nominal == {"h100": {"hugepages-2Mi": 4 * 2**30}}


def test_a_quota_without_flavors_limits_the_default_flavors() -> None:
    parsed = parse_policy({"queues": [{"name": "q", "quota": {"gpu": 8, "rdma/hca": 2}}]})
    assert parsed.queues[0].extended_nominal == {"default": {"rdma/hca": 2}}


def test_a_gpu_only_quota_limits_no_extended_resource() -> None:
    parsed = parse_policy(policy(quota={"h100": {"gpu": 8}}))
    assert parsed.queues[0].extended_nominal == {}


def test_the_quota_reads_back_as_written() -> None:
    written = {"h100": {"gpu": 64, "nvidia.com/hostdev": 64}}
    parsed = parse_policy(policy(quota=written))
    dumped = parsed.model_dump(by_alias=True, exclude_none=True)
    assert dumped["queues"][0]["quota"] == written
    assert parse_policy(dumped).queues[0].extended_nominal == {"h100": {"nvidia.com/hostdev": 64}}


REFUSALS = [
    (
        "not-a-resource-name",
        policy(quota={"h100": {"gpu": 8, "hostdev": 8}}),
        "queues[0].quota.h100.hostdev",
        "quotas count gpu and extended resources",
    ),
    (
        "cpu-is-not-an-extended-resource",
        policy(quota={"h100": {"gpu": 8, "cpu": 8}}),
        "queues[0].quota.h100.cpu",
        "unknown resource 'cpu'",
    ),
    (
        "a-fraction",
        policy(quota={"h100": {"gpu": 8, "nvidia.com/hostdev": 1.5}}),
        "queues[0].quota.h100.nvidia.com/hostdev",
        "whole number",
    ),
    (
        "negative",
        policy(quota={"h100": {"gpu": 8, "nvidia.com/hostdev": -1}}),
        "queues[0].quota.h100.nvidia.com/hostdev",
        "must not be negative",
    ),
]


@pytest.mark.parametrize(
    ("document", "field", "message"), [c[1:] for c in REFUSALS], ids=[c[0] for c in REFUSALS]
)
def test_refused_with_the_field_at_fault(
    document: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(SpecError) as caught:
        parse_policy(document)
    problems = caught.value.problems
    assert [p.field for p in problems] == [field], problems
    assert message in problems[0].message, problems[0]


def test_extended_resources_are_never_borrowed_or_lent() -> None:
    document = {
        "flavors": FLAVORS,
        "cohorts": [{"name": "c"}],
        "queues": [
            {
                "name": "rdma",
                "cohort": "c",
                "quota": {"h100": {"gpu": 8, "nvidia.com/hostdev": 8}},
                "borrowingLimit": {"h100": {"gpu": 8, "nvidia.com/hostdev": 8}},
            }
        ],
    }
    with pytest.raises(SpecError) as caught:
        parse_policy(document)
    (problem,) = caught.value.problems
    assert problem.field == "queues[0].borrowingLimit"
    assert "may not be lent or borrowed" in problem.message


def test_nodes_of_the_cluster_file_advertise_extended_resources() -> None:
    config = parse_cluster_config(
        {
            "nodes": [
                {
                    "name": "dgx-0",
                    "gpus": 8,
                    "resources": {"nvidia.com/hostdev": 8, "hugepages-2Mi": "1Gi"},
                },
                {"name": "plain", "gpus": 8},
            ]
        }
    )
    assert config.nodes[0].resources == {"nvidia.com/hostdev": 8, "hugepages-2Mi": 2**30}
    assert config.nodes[1].resources == {}


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        ({"gpu": 8}, "counted by the 'gpu' field"),
        ({"nvidia.com/hostdev": "eight"}, "whole number"),
        ({"hostdev": 8}, "is not a resource name"),
    ],
)
def test_a_bad_node_resource_names_its_field(resources: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_cluster_config({"nodes": [{"name": "n", "resources": resources}]})
    (problem,) = caught.value.problems
    assert problem.field == "nodes[0].resources"
    assert message in problem.message


def test_the_local_executor_reports_what_the_cluster_files_nodes_advertise(tmp_path: Any) -> None:
    from kiban.server import ServerOptions, local_nodes

    config = parse_cluster_config(
        {"nodes": [{"name": "dgx-0", "gpus": 8, "resources": {"nvidia.com/hostdev": 8}}]}
    )
    (node,) = local_nodes(ServerOptions(home=tmp_path, config=config))
    assert node.extended == {"nvidia.com/hostdev": 8}
