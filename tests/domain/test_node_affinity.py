"""A task's required node affinity is read as the API server reads it, and refused when it
could not be, naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from kiban.domain.errors import SpecError
from kiban.domain.manifests import parse_job_manifest, parse_submission
from kiban.domain.node_affinity import PREFERRED, REQUIRED, node_constraint, read_pod_affinity
from kiban.scheduler.node_match import NodeConstraint, NodeTerm, Operator, Requirement
from kiban.services.jobs import affinity_warnings


def required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": list(terms)}}}


def manifest(**task: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kiban/v1",
        "kind": "Job",
        "metadata": {"name": "train"},
        "spec": {"tasks": [{"command": ["python", "train.py"], **task}]},
    }


def test_selector_and_required_terms_become_one_constraint() -> None:
    affinity = required(
        {
            "matchExpressions": [
                {"key": "gpu.product", "operator": "In", "values": ["H100"]},
                {"key": "spot", "operator": "DoesNotExist"},
            ]
        },
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-9"]}]},
    )
    assert node_constraint({"zone": "b", "rack": "r1"}, affinity) == NodeConstraint(
        (("rack", "r1"), ("zone", "b")),
        (
            NodeTerm(
                (
                    Requirement("gpu.product", Operator.IN, ("H100",)),
                    Requirement("spot", Operator.DOES_NOT_EXIST),
                )
            ),
            NodeTerm((Requirement("metadata.name", Operator.IN, ("gpu-9",), on_name=True),)),
        ),
    )


@pytest.mark.parametrize(
    "affinity",
    [
        None,
        {},
        {"podAntiAffinity": {REQUIRED: [{"topologyKey": "kubernetes.io/hostname"}]}},
        {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
    ],
)
def test_no_constraint_without_a_selector_or_required_node_affinity(
    affinity: dict[str, Any] | None,
) -> None:
    assert node_constraint({}, affinity) is None


def test_a_job_task_gives_its_constraint() -> None:
    spec = parse_job_manifest(manifest(nodeSelector={"gpu.product": "H100"})).spec
    assert spec.tasks[0].node_constraint() == NodeConstraint((("gpu.product", "H100"),))


@pytest.mark.parametrize(
    ("term", "problem"),
    [
        (
            {"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["x"]}]},
            "nodeSelectorTerms[0].matchExpressions[0].operator: 'Equals' is not one of In, NotIn",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "In"}]},
            "matchExpressions[0].values: In needs at least one value",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
            "matchExpressions[0].values: Exists takes no values",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["big"]}]},
            "matchExpressions[0].values: Gt needs exactly one integer value",
        ),
        (
            {"matchExpressions": [{"operator": "Exists"}]},
            "matchExpressions[0].key: must be a non-empty string",
        ),
        (
            {"matchFields": [{"key": "metadata.labels", "operator": "In", "values": ["x"]}]},
            "matchFields[0].key: matchFields may only name metadata.name",
        ),
        (
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}]},
            "matchFields[0]: a metadata.name field needs In or NotIn and one value",
        ),
        ({"matchExpressions": "a=b"}, "matchExpressions: must be a list"),
    ],
)
def test_a_malformed_required_term_is_refused_naming_its_field(
    term: dict[str, Any], problem: str
) -> None:
    with pytest.raises(SpecError) as caught:
        parse_job_manifest(manifest(affinity=required(term)))
    (found,) = caught.value.problems
    assert found.field == "spec.tasks[0].affinity"
    assert problem in found.message


def test_required_affinity_needs_at_least_one_term() -> None:
    with pytest.raises(SpecError) as caught:
        parse_job_manifest(manifest(affinity={"nodeAffinity": {REQUIRED: {}}}))
    assert "nodeSelectorTerms: must be a list of at least one term" in str(caught.value)


def test_only_pod_affinity_is_named_as_without_effect() -> None:
    term = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
    own = {"app": "x"}
    assert read_pod_affinity(None, own).without_effect == ()
    node_only = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [term]}}}
    assert read_pod_affinity(node_only, own).without_effect == ()
    assert read_pod_affinity(
        {
            "podAffinity": {"x": 1},
            "podAntiAffinity": {},  # empty: asks for nothing
            "nodeAffinity": {PREFERRED: [{"weight": 1, "preference": term}]},
        },
        own,
    ).without_effect == ("podAffinity",)


def test_a_volcano_jobs_warning_names_its_own_paths() -> None:
    document = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "v"},
        "spec": {
            "minAvailable": 1,
            "tasks": [
                {
                    "name": "worker",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "affinity": {"podAntiAffinity": {"x": 1}},
                            "containers": [{"name": "c", "image": "i", "command": ["python"]}],
                        }
                    },
                }
            ],
        },
    }
    [warning] = affinity_warnings(parse_submission(document))
    assert warning.startswith("spec.tasks[0].template.spec.affinity.podAntiAffinity.x: no effect")


def test_preferred_terms_score_the_nodes_they_match_by_weight() -> None:
    gpu_a100 = {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100"]}]}
    zone_a = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
    affinity = {
        "nodeAffinity": {
            PREFERRED: [{"weight": 10, "preference": gpu_a100}, {"weight": 3, "preference": zone_a}]
        }
    }
    task = parse_job_manifest(manifest(affinity=affinity)).spec.tasks[0]
    prefers = task.node_preference()
    assert prefers is not None
    assert prefers.score("n1", {"gpu": "a100", "zone": "a"}) == 13
    assert prefers.score("n2", {"gpu": "a100", "zone": "b"}) == 10
    assert prefers.score("n3", {"zone": "a"}) == 3
    assert prefers.score("n4", {}) == 0
    assert task.node_constraint() is None  # a preference limits nothing
    assert parse_job_manifest(manifest()).spec.tasks[0].node_preference() is None


@pytest.mark.parametrize(
    ("preferred", "problem"),
    [
        ({"weight": 1}, f"nodeAffinity.{PREFERRED}: must be a list"),
        ([{"weight": 0, "preference": {}}], f"{PREFERRED}[0].weight: must be an integer from 1"),
        ([{"weight": 101, "preference": {}}], "weight: must be an integer from 1 to 100"),
        ([{"weight": "5", "preference": {}}], "weight: must be an integer from 1 to 100"),
        ([{"weight": 5}], f"{PREFERRED}[0].preference: is required"),
        (
            [{"weight": 5, "preference": {"matchExpressions": [{"key": "k", "operator": "Is"}]}}],
            f"{PREFERRED}[0].preference.matchExpressions[0].operator: 'Is' is not one of",
        ),
    ],
)
def test_a_malformed_preferred_term_is_refused_naming_its_field(
    preferred: Any, problem: str
) -> None:
    with pytest.raises(SpecError) as refused:
        parse_job_manifest(manifest(affinity={"nodeAffinity": {PREFERRED: preferred}}))
    assert problem in str(refused.value)
    assert "spec.tasks[0].affinity" in str(refused.value)
