"""The cluster file and its policy: what is accepted, what it means, and each refusal's field."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from kiban.bench.submit import CLUSTER_FILE as BENCH_CLUSTER_FILE
from kiban.domain.cluster import (
    NO_PRIORITY_CLASS,
    ClusterPolicy,
    PriorityLevel,
    parse_cluster_config,
    parse_policy,
)
from kiban.domain.errors import SpecError
from kiban.domain.manifests import parse_job_manifest
from kiban.scheduler.snapshot import DEFAULT_FLAVOR, FlavorView

# The issue's example, word for word (with the local executor's nodes in front).
ISSUE_EXAMPLE = """
nodes:
  - {name: h100-0, gpus: 8, labels: {gpu.product: H100}}
  - {name: a100-0, gpus: 8, labels: {gpu.product: A100}}
flavors:
  - {name: h100, nodeLabels: {gpu.product: H100}}
  - {name: a100, nodeLabels: {gpu.product: A100}}
cohorts:
  - {name: research}
queues:
  - name: vision
    tenant: vision
    cohort: research
    quota: {h100: {gpu: 16}, a100: {gpu: 8}}      # nominal quota
    borrowingLimit: {h100: {gpu: 8}}                # how much more it may borrow
    lendingLimit: {a100: {gpu: 4}}                  # how much of its own it lends
    strategy: BestEffortFIFO                        # or StrictFIFO
    fairShareWeight: 1
priorityClasses:
  - {name: low, value: 100}
  - {name: normal, value: 1000, default: true}
  - {name: high, value: 10000, preemptionPolicy: PreemptLowerPriority}
fairShare: {halfLife: 7d, resourceWeights: {gpu: 1.0}}
topology:
  levels:                                          # outermost first; label keys are configurable
    - {name: island, label: oci.oraclecloud.com/rdma.hpc_island_id}
    - {name: network_block, label: oci.oraclecloud.com/rdma.network_block_id}
    - {name: local_block, label: oci.oraclecloud.com/rdma.local_block_id}
    - {name: host, label: kubernetes.io/hostname}
"""

# The README's cluster file: nodes and queues with GPU quotas, no flavors.
README_FILE = """
nodes:
  - {name: node-0, gpus: 4, cpus: 8, memory: 32Gi, labels: {gpu.product: H100}}
  - {name: node-1, gpus: 4, cpus: 8, memory: 32Gi, labels: {gpu.product: A100}}
queues:
  - {name: default, quota: {gpu: 8}}
  - {name: vision, tenant: vision, quota: {gpu: 4}, strategy: StrictFIFO}
"""


def example() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(ISSUE_EXAMPLE)
    del document["nodes"]
    return document


def policy_of(**parts: Any) -> dict[str, Any]:
    """The issue's policy with top-level parts replaced (None removes a part)."""
    document = example()
    for key, value in parts.items():
        if value is None:
            document.pop(key, None)
        else:
            document[key] = value
    return document


def vision(**fields: Any) -> dict[str, Any]:
    """The issue's ``vision`` queue with fields replaced (None removes a field)."""
    queue: dict[str, Any] = copy.deepcopy(example()["queues"][0])
    for key, value in fields.items():
        if value is None:
            queue.pop(key, None)
        else:
            queue[key] = value
    return queue


# -- what is accepted, and what it means ----------------------------------------------------------


def test_the_issue_example_means_what_it_says() -> None:
    config = parse_cluster_config(yaml.safe_load(ISSUE_EXAMPLE))
    assert [n.name for n in config.nodes] == ["h100-0", "a100-0"]
    assert config.flavor_names == ("h100", "a100")
    queue = config.queue("vision")
    assert queue is not None
    assert (queue.tenant, queue.cohort, queue.strategy) == ("vision", "research", "BestEffortFIFO")
    assert queue.nominal == {"h100": 16, "a100": 8}
    assert list(queue.nominal) == ["h100", "a100"]  # the order flavors are tried in
    assert queue.borrowing == {"h100": 8}
    assert queue.lending == {"a100": 4}
    assert queue.fair_share_weight == 1.0
    assert config.priority("high") == PriorityLevel("high", 10000, preempts=True)
    assert config.priority(None) == PriorityLevel("normal", 1000, preempts=False)
    assert config.half_life_s == 7 * 86400
    assert config.fair_share.resource_weights.gpu == 1.0
    assert config.topology_levels == ("island", "network_block", "local_block", "host")


@pytest.mark.parametrize(
    "text",
    [README_FILE, BENCH_CLUSTER_FILE, "nodes: [{name: a, gpus: 2}]\nqueues: [{name: q}]\n"],
    ids=["readme", "bench", "queue-without-quota"],
)
def test_files_without_flavors_keep_working(text: str) -> None:
    config = parse_cluster_config(yaml.safe_load(text))
    assert config.flavor_names == (DEFAULT_FLAVOR,)
    assert config.flavor_views() == (FlavorView(DEFAULT_FLAVOR),)
    assert config.flavor_of({"gpu.product": "H100"}) == DEFAULT_FLAVOR
    assert config.flavor_of({}) == DEFAULT_FLAVOR
    for queue in config.queues:
        assert queue.nominal is None or set(queue.nominal) == {DEFAULT_FLAVOR}


def test_the_cluster_files_in_the_readme_parse() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    # Manifests (apiVersion) and Prometheus's configuration (scrape_configs) are not cluster files.
    others = ("apiVersion", "scrape_configs")
    blocks = [
        b
        for b in re.findall(r"```yaml\n(.*?)```", readme, re.S)
        if not any(key in b for key in others)
    ]
    assert len(blocks) >= 2
    for block in blocks:
        parse_cluster_config(yaml.safe_load(block))


def test_a_gpu_quota_without_flavors_is_the_default_flavors() -> None:
    config = parse_cluster_config(yaml.safe_load(README_FILE))
    assert [(q.name, q.tenant, q.nominal) for q in config.queues] == [
        ("default", "default", {DEFAULT_FLAVOR: 8}),
        ("vision", "vision", {DEFAULT_FLAVOR: 4}),
    ]
    assert config.queues[1].gpu_quota == 4


@pytest.mark.parametrize("quota", [None, {}], ids=["absent", "empty"])
def test_no_quota_means_no_limit(quota: dict[str, Any] | None) -> None:
    queue: dict[str, Any] = {"name": "q"} if quota is None else {"name": "q", "quota": quota}
    (decl,) = parse_policy({"queues": [queue]}).queues
    assert decl.nominal is None
    assert decl.gpu_quota is None


def test_an_empty_policy_gets_the_defaults() -> None:
    policy = parse_policy({})
    assert [(q.name, q.tenant, q.nominal, q.strategy) for q in policy.queues] == [
        ("default", "default", None, "BestEffortFIFO")  # a stuck job holds up nobody
    ]
    assert [(c.name, c.value, c.default, c.preempts) for c in policy.priority_classes] == [
        ("low", 100, False, False),
        ("interactive", 500, False, False),  # notebooks: below the default, never preempting
        ("normal", 1000, True, False),
        ("serving", 5000, False, True),
        ("high", 10000, False, True),
    ]
    assert policy.half_life_s == 7 * 86400
    weights = policy.fair_share.resource_weights
    assert (weights.gpu, weights.cpu, weights.memory) == (1.0, 0.0, 0.0)
    assert policy.topology_levels == ()
    assert policy.flavor_views() == (FlavorView(DEFAULT_FLAVOR),)


def test_queues_written_out_empty_means_no_queues() -> None:
    assert parse_policy({"queues": []}).queues == []


def test_the_effective_policy_reads_back_as_itself() -> None:
    policy = parse_policy(example())
    effective = policy.model_dump(mode="json", by_alias=True)
    assert parse_policy(effective) == policy
    assert effective["queues"][0]["quota"] == {"h100": {"gpu": 16}, "a100": {"gpu": 8}}
    flavorless = parse_policy({"queues": [{"name": "q", "quota": {"gpu": 3}}]})
    dumped = flavorless.model_dump(mode="json", by_alias=True)
    assert dumped["queues"][0]["quota"] == {"gpu": 3}  # as written
    assert parse_policy(dumped) == flavorless


def test_the_cluster_files_policy_is_kept_as_written() -> None:
    config = parse_cluster_config(yaml.safe_load(ISSUE_EXAMPLE))
    assert config.declares_policy
    assert config.policy_document() == example()
    assert config.policy_document()["fairShare"]["halfLife"] == "7d"  # not 604800.0
    nodes_only = parse_cluster_config({"nodes": [{"name": "a"}]})
    assert not nodes_only.declares_policy
    assert nodes_only.policy_document() == {}


# -- flavors, topology, priorities, cohorts -------------------------------------------------------

FLAVORS = [
    {"name": "h100", "nodeLabels": {"gpu.product": "H100"}},
    {"name": "h100-spot", "nodeLabels": {"gpu.product": "H100", "spot": "true"}},
    {"name": "a100", "nodeLabels": {"gpu.product": "A100", "zone": "b"}},
]


@pytest.mark.parametrize(
    ("labels", "flavor"),
    [
        ({"gpu.product": "H100"}, "h100"),
        ({"gpu.product": "H100", "spot": "true"}, "h100"),  # the first declared that matches
        ({"gpu.product": "A100", "zone": "b", "x": "y"}, "a100"),  # other labels do not matter
        ({"gpu.product": "A100"}, None),  # all of a flavor's labels must match
        ({"gpu.product": "h100"}, None),  # values are compared exactly
        ({}, None),
    ],
)
def test_flavor_of_a_node(labels: dict[str, str], flavor: str | None) -> None:
    policy = parse_policy({"flavors": FLAVORS, "queues": []})
    assert policy.flavor_of(labels) == flavor


def test_a_flavor_without_labels_takes_every_node_not_taken_before() -> None:
    flavors = [FLAVORS[0], {"name": "other"}]
    policy = parse_policy({"flavors": flavors, "queues": []})
    assert policy.flavor_of({"gpu.product": "H100"}) == "h100"
    assert policy.flavor_of({"gpu.product": "L4"}) == "other"


def test_restricted_flavors_in_the_snapshots_terms() -> None:
    flavors = [{**FLAVORS[0], "queues": ["vision"]}, FLAVORS[2]]
    queues = [{"name": "vision", "quota": {"h100": {"gpu": 8}}}, {"name": "speech"}]
    policy = parse_policy({"flavors": flavors, "queues": queues})
    assert policy.flavor_views() == (
        FlavorView("h100", frozenset({"vision"})),
        FlavorView("a100", None),
    )


ISLAND = "oci.oraclecloud.com/rdma.hpc_island_id"
NETWORK_BLOCK = "oci.oraclecloud.com/rdma.network_block_id"
LOCAL_BLOCK = "oci.oraclecloud.com/rdma.local_block_id"
HOST = "kubernetes.io/hostname"


@pytest.mark.parametrize(
    ("labels", "path"),
    [
        (
            {ISLAND: "i1", NETWORK_BLOCK: "n1", LOCAL_BLOCK: "l1", HOST: "h1", "x": "y"},
            ("i1", "n1", "l1", "h1"),
        ),
        ({ISLAND: "i1", NETWORK_BLOCK: "n1", HOST: "h1"}, ("i1", "n1")),  # stops at a gap
        ({HOST: "h1"}, ()),
        ({}, ()),
    ],
)
def test_topology_path_of_a_node(labels: dict[str, str], path: tuple[str, ...]) -> None:
    assert parse_policy(example()).topology_path(labels) == path


def test_no_topology_levels_means_an_empty_path() -> None:
    assert parse_policy({}).topology_path({HOST: "h1"}) == ()


def test_priority_classes_lookup() -> None:
    classes = [
        {"name": "batch", "value": -10},
        {"name": "prod", "value": 500, "preemptionPolicy": "PreemptLowerPriority"},
        {"name": "urgent", "value": 900, "minRuntime": "10m", "default": True},
    ]
    policy = parse_policy({"priorityClasses": classes})
    assert policy.priority("batch") == PriorityLevel("batch", -10)
    assert policy.priority("prod") == PriorityLevel("prod", 500, preempts=True)
    assert policy.priority("urgent") == PriorityLevel("urgent", 900, min_runtime_s=600.0)
    assert policy.priority(None) == policy.priority("urgent")
    assert policy.priority("normal") is None  # the built-in classes are gone
    no_default = parse_policy({"priorityClasses": classes[:2]})
    assert no_default.default_priority_class is None
    assert no_default.priority(None) == NO_PRIORITY_CLASS  # priority 0, as in Kubernetes
    assert parse_policy({"priorityClasses": []}).priority("batch") is None


def test_cohort_ancestry() -> None:
    cohorts = [
        {"name": "org"},
        {"name": "research", "parent": "org"},
        {"name": "ml", "parent": "research"},
    ]
    policy = parse_policy({"cohorts": cohorts})
    assert policy.cohort_ancestry("ml") == ("ml", "research", "org")
    assert policy.cohort_ancestry("org") == ("org",)
    assert policy.cohort_ancestry("nope") == ()


# -- refusals: each names its field ---------------------------------------------------------------

H100_ONLY_VISION = [
    {**FLAVORS[0], "queues": ["vision"]},
    {"name": "a100", "nodeLabels": {"gpu.product": "A100"}},
]

# (case id, document, the field path of the one problem, a part of its message)
REFUSALS: list[tuple[str, dict[str, Any], str, str]] = [
    (
        "member-weight-zero",
        policy_of(fairShare={"members": [{"tenant": "vision", "member": "alice", "weight": 0}]}),
        "fairShare.members[0].weight",
        "greater than 0",
    ),
    (
        "member-of-a-bad-tenant-name",
        policy_of(fairShare={"members": [{"tenant": "Vision Team", "member": "alice"}]}),
        "fairShare.members[0].tenant",
        "lowercase letters",
    ),
    (
        "member-listed-twice",
        policy_of(
            fairShare={
                "members": [
                    {"tenant": "vision", "member": "alice"},
                    {"tenant": "vision", "member": "alice", "weight": 2},
                ]
            }
        ),
        "fairShare.members",
        "listed twice",
    ),
    (
        "member-unknown-key",
        policy_of(fairShare={"members": [{"tenant": "vision", "member": "a", "user": "a"}]}),
        "fairShare.members[0].user",
        "unknown field",
    ),
    ("unknown-top-level-key", {**example(), "flavours": []}, "flavours", "unknown field"),
    (
        "unknown-queue-key",
        policy_of(queues=[vision(borrowLimit={})]),
        "queues[0].borrowLimit",
        "unknown field",
    ),
    (
        "unknown-flavor-key",
        policy_of(flavors=[{"name": "h100", "labels": {}}]),
        "flavors[0].labels",
        "unknown field",
    ),
    ("nodes-in-a-policy", {**example(), "nodes": []}, "nodes", "kiban up --config"),
    (
        "gpu-quota-with-flavors",
        policy_of(queues=[vision(quota={"gpu": 16})]),
        "queues[0].quota",
        "name the flavor, e.g. quota: {h100: {gpu: 16}}",
    ),
    (
        "gpu-borrowing-limit-with-flavors",
        policy_of(queues=[vision(borrowingLimit={"gpu": 8})]),
        "queues[0].borrowingLimit",
        "name the flavor",
    ),
    (
        "undeclared-flavor-in-quota",
        policy_of(
            queues=[vision(quota={"h200": {"gpu": 8}}, borrowingLimit=None, lendingLimit=None)]
        ),
        "queues[0].quota.h200",
        "unknown flavor 'h200'; declared: h100, a100",
    ),
    (
        "undeclared-flavor-in-borrowing-limit",
        policy_of(queues=[vision(borrowingLimit={"b200": {"gpu": 8}})]),
        "queues[0].borrowingLimit.b200",
        "unknown flavor",
    ),
    (
        "flavor-without-flavors",
        {"queues": [{"name": "q", "quota": {"h100": {"gpu": 8}}}]},
        "queues[0].quota.h100",
        "declares no flavors",
    ),
    (
        "cpu-quota",
        policy_of(queues=[vision(quota={"h100": {"gpu": 16, "cpu": 64}})]),
        "queues[0].quota.h100.cpu",
        "quotas count gpu",
    ),
    (
        "cpu-quota-without-flavors",
        {"queues": [{"name": "q", "quota": {"cpu": 4}}]},
        "queues[0].quota.cpu",
        "quotas count gpu",
    ),
    (
        "negative-quota",
        policy_of(queues=[vision(quota={"h100": {"gpu": -1}, "a100": {"gpu": 8}})]),
        "queues[0].quota.h100.gpu",
        "greater than or equal to 0",
    ),
    (
        "half-a-gpu",
        {"queues": [{"name": "q", "quota": {"gpu": 1.5}}]},
        "queues[0].quota.gpu",
        "whole",
    ),
    (
        "huge-quota",
        {"queues": [{"name": "q", "quota": {"gpu": 2**70}}]},
        "queues[0].quota.gpu",
        "less than",
    ),
    (
        "quota-not-a-mapping",
        {"queues": [{"name": "q", "quota": [8]}]},
        "queues[0].quota",
        "dictionary",
    ),
    (
        "lending-above-nominal",
        policy_of(queues=[vision(lendingLimit={"a100": {"gpu": 9}})]),
        "queues[0].lendingLimit.a100",
        "more than its quota of 8",
    ),
    (
        "borrowing-outside-a-cohort",
        policy_of(queues=[vision(cohort=None, lendingLimit=None)]),
        "queues[0].borrowingLimit",
        "set cohort",
    ),
    (
        "borrowing-a-flavor-without-quota",
        policy_of(queues=[vision(quota={"a100": {"gpu": 8}})]),
        "queues[0].borrowingLimit.h100",
        "has no quota for h100",
    ),
    (
        "borrowing-without-any-quota",
        policy_of(queues=[vision(quota=None, lendingLimit=None)]),
        "queues[0].borrowingLimit",
        "has no quota",
    ),
    (
        "unknown-cohort",
        policy_of(queues=[vision(cohort="nlp")]),
        "queues[0].cohort",
        "unknown cohort 'nlp'; declared: research",
    ),
    (
        "unknown-parent-cohort",
        policy_of(cohorts=[{"name": "research", "parent": "org"}]),
        "cohorts[0].parent",
        "unknown cohort 'org'",
    ),
    (
        "cohort-cycle",
        policy_of(
            cohorts=[
                {"name": "research", "parent": "org"},
                {"name": "org", "parent": "lab"},
                {"name": "lab", "parent": "research"},
            ]
        ),
        "cohorts[0].parent",
        "cohorts form a cycle: research -> org -> lab -> research",
    ),
    (
        "cohort-its-own-parent",
        policy_of(cohorts=[{"name": "research", "parent": "research"}]),
        "cohorts[0].parent",
        "research -> research",
    ),
    (
        "restricted-flavor",
        policy_of(
            flavors=H100_ONLY_VISION,
            queues=[vision(), {"name": "speech", "quota": {"h100": {"gpu": 2}}}],
        ),
        "queues[1].quota.h100",
        "flavor h100 is restricted to queues vision",
    ),
    (
        "restriction-to-an-unknown-queue",
        policy_of(flavors=[{**FLAVORS[0], "queues": ["vision", "nlp"]}, FLAVORS[2]]),
        "flavors[0].queues[1]",
        "unknown queue 'nlp'",
    ),
    (
        "restriction-to-no-queue",
        policy_of(flavors=[{**FLAVORS[0], "queues": []}]),
        "flavors[0].queues",
        "at least one queue",
    ),
    (
        "flavor-bad-label-key",
        policy_of(flavors=[{"name": "h100", "nodeLabels": {"gpu product": "H100"}}]),
        "flavors[0].nodeLabels",
        "not a label key",
    ),
    ("flavor-bad-name", policy_of(flavors=[{"name": "H100"}]), "flavors[0].name", "lowercase"),
    (
        "repeated-flavor",
        policy_of(flavors=[FLAVORS[0], FLAVORS[0], FLAVORS[2]]),
        "flavors[1].name",
        "declared twice",
    ),
    (
        "repeated-queue",
        policy_of(queues=[vision(), vision()]),
        "queues[1].name",
        "queue vision is declared twice (also queues[0])",
    ),
    (
        "repeated-cohort",
        policy_of(cohorts=[{"name": "research"}, {"name": "research"}]),
        "cohorts[1].name",
        "declared twice",
    ),
    ("bad-queue-name", policy_of(queues=[vision(name="Vision")]), "queues[0].name", "lowercase"),
    (
        "bad-strategy",
        policy_of(queues=[vision(strategy="LIFO")]),
        "queues[0].strategy",
        "StrictFIFO",
    ),
    (
        "zero-weight",
        policy_of(queues=[vision(fairShareWeight=0)]),
        "queues[0].fairShareWeight",
        "greater than 0",
    ),
    (
        "nan-weight",
        policy_of(queues=[vision(fairShareWeight=float("nan"))]),
        "queues[0].fairShareWeight",
        "finite",
    ),
    (
        "two-default-priority-classes",
        policy_of(
            priorityClasses=[
                {"name": "normal", "value": 1, "default": True},
                {"name": "high", "value": 2, "default": True},
            ]
        ),
        "priorityClasses[1].default",
        "normal already is",
    ),
    (
        "repeated-priority-class",
        policy_of(priorityClasses=[{"name": "normal", "value": 1}, {"name": "normal", "value": 2}]),
        "priorityClasses[1].name",
        "declared twice",
    ),
    (
        "bad-preemption-policy",
        policy_of(priorityClasses=[{"name": "high", "value": 2, "preemptionPolicy": "Always"}]),
        "priorityClasses[0].preemptionPolicy",
        "PreemptLowerPriority",
    ),
    (
        "bad-min-runtime",
        policy_of(priorityClasses=[{"name": "high", "value": 2, "minRuntime": "soon"}]),
        "priorityClasses[0].minRuntime",
        "not a duration",
    ),
    (
        "boolean-priority",
        policy_of(priorityClasses=[{"name": "high", "value": True}]),
        "priorityClasses[0].value",
        "whole number",
    ),
    (
        "huge-priority",
        policy_of(priorityClasses=[{"name": "high", "value": 2**40}]),
        "priorityClasses[0].value",
        "less than",
    ),
    (
        "missing-priority-value",
        policy_of(priorityClasses=[{"name": "high"}]),
        "priorityClasses[0].value",
        "required",
    ),
    (
        "zero-half-life",
        policy_of(fairShare={"halfLife": 0}),
        "fairShare.halfLife",
        "positive duration",
    ),
    (
        "bad-half-life",
        policy_of(fairShare={"halfLife": "a week"}),
        "fairShare.halfLife",
        "not a duration",
    ),
    (
        "no-resource-weight",
        policy_of(fairShare={"resourceWeights": {"gpu": 0}}),
        "fairShare.resourceWeights",
        "at least one",
    ),
    (
        "unknown-resource-weight",
        policy_of(fairShare={"resourceWeights": {"tpu": 1}}),
        "fairShare.resourceWeights.tpu",
        "unknown field",
    ),
    (
        "negative-resource-weight",
        policy_of(fairShare={"resourceWeights": {"cpu": -1}}),
        "fairShare.resourceWeights.cpu",
        "greater than or equal",
    ),
    (
        "repeated-topology-level",
        policy_of(
            topology={
                "levels": [{"name": "host", "label": HOST}, {"name": "host", "label": LOCAL_BLOCK}]
            }
        ),
        "topology.levels[1].name",
        "declared twice",
    ),
    (
        "repeated-topology-label",
        policy_of(
            topology={"levels": [{"name": "block", "label": HOST}, {"name": "host", "label": HOST}]}
        ),
        "topology.levels[1].label",
        "declared twice",
    ),
    (
        "bad-topology-label",
        policy_of(topology={"levels": [{"name": "host", "label": "host name"}]}),
        "topology.levels[0].label",
        "not a label key",
    ),
    (
        "bad-topology-level-name",
        policy_of(topology={"levels": [{"name": "Host", "label": HOST}]}),
        "topology.levels[0].name",
        "lowercase",
    ),
]


@pytest.mark.parametrize(
    ("document", "field", "message"),
    [case[1:] for case in REFUSALS],
    ids=[case[0] for case in REFUSALS],
)
def test_refused_with_the_field_at_fault(
    document: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(SpecError) as caught:
        parse_policy(document)
    problems = caught.value.problems
    assert [p.field for p in problems] == [field], problems
    assert message in problems[0].message, problems[0]


def test_every_problem_is_reported_at_once() -> None:
    document = policy_of(
        queues=[vision(cohort="nlp"), vision()],
        cohorts=[{"name": "research", "parent": "research"}],
    )
    with pytest.raises(SpecError) as caught:
        parse_policy(document)
    assert {p.field for p in caught.value.problems} == {
        "queues[1].name",
        "cohorts[0].parent",
        "queues[0].cohort",
    }


def test_cluster_file_refusals_name_their_field() -> None:
    with pytest.raises(SpecError) as caught:
        parse_cluster_config({"nodes": [{"name": "a"}, {"name": "a"}]})
    assert [p.field for p in caught.value.problems] == ["nodes[1].name"]
    with pytest.raises(SpecError) as caught:
        parse_cluster_config(
            {"nodes": [{"name": "a", "gpus": -1}], "queues": [{"name": "q", "quota": {"gpu": "x"}}]}
        )
    assert {p.field for p in caught.value.problems} == {"nodes[0].gpus", "queues[0].quota.gpu"}


def test_a_policy_object_is_always_consistent() -> None:
    # Checks across fields run in the model itself: model_validate refuses as parse_policy does.
    with pytest.raises(ValueError, match="cohorts form a cycle"):
        ClusterPolicy.model_validate({"cohorts": [{"name": "a", "parent": "a"}]})


# -- the job spec's topology request ---------------------------------------------------------------


def job(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kiban/v1",
        "kind": "Job",
        "metadata": {"name": "train"},
        "spec": {"tasks": [{"command": ["python", "train.py"]}], **spec},
    }


@pytest.mark.parametrize(
    ("topology", "level", "required"),
    [
        ({"level": "local_block"}, "local_block", True),
        ({"level": "local_block", "mode": "required"}, "local_block", True),
        ({"level": "network_block", "mode": "preferred"}, "network_block", False),
    ],
)
def test_a_job_asks_for_a_topology_level(
    topology: dict[str, str], level: str, required: bool
) -> None:
    spec = parse_job_manifest(job(topology=topology)).spec
    assert spec.topology is not None
    assert (spec.topology.level, spec.topology.required) == (level, required)


@pytest.mark.parametrize(
    ("topology", "field"),
    [
        ({"level": "local_block", "mode": "ideally"}, "spec.topology.mode"),
        ({"mode": "required"}, "spec.topology.level"),
        ({"level": ""}, "spec.topology.level"),
        ({"level": "host", "size": 4}, "spec.topology.size"),
    ],
)
def test_a_bad_topology_request_names_its_field(topology: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_job_manifest(job(topology=topology))
    assert [p.field for p in caught.value.problems] == [field]


@pytest.mark.parametrize("value", ["yes", 1, None, {"on": True}])
def test_a_queues_scavenger_flag_is_a_boolean(value: object) -> None:
    with pytest.raises(SpecError) as caught:
        parse_policy({"queues": [{"name": "q", "scavenger": value}]})
    assert [p.field for p in caught.value.problems] == ["queues[0].scavenger"]


def test_a_scavenger_queue_is_known_by_name() -> None:
    policy = parse_policy({"queues": [{"name": "idle", "scavenger": True}, {"name": "work"}]})
    assert [policy.is_scavenger(q) for q in ("idle", "work", "absent")] == [True, False, False]
    (dumped, _) = [q.model_dump(by_alias=True) for q in policy.queues]
    assert dumped["scavenger"] is True
