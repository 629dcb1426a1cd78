"""Required pod anti-affinity on the node's hostname, against the task's own pods, is read as
``maxReplicasPerNode: 1`` (in kiban and Volcano manifests alike); every other part of pod
(anti-)affinity is still named as having no effect."""

from __future__ import annotations

from typing import Any

import pytest

from kiban.domain.jobspec import JobManifest
from kiban.domain.manifests import parse_submission
from kiban.domain.node_affinity import HOSTNAME, POD_TASK_LABEL, REQUIRED, read_pod_affinity
from kiban.executors.kubernetes.naming import TASK_LABEL
from kiban.services.jobs import affinity_warnings

PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def anti(selector: dict[str, Any], topology_key: str = HOSTNAME, **extra: Any) -> dict[str, Any]:
    term = {"labelSelector": selector, "topologyKey": topology_key, **extra}
    return {"podAntiAffinity": {REQUIRED: [term]}}


def kiban_job(*tasks: dict[str, Any], labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "kiban/v1",
        "kind": "Job",
        "metadata": {"name": "ddp", "labels": labels or {}},
        "spec": {"tasks": [{"command": ["python", "train.py"], **t} for t in tasks]},
    }


def volcano_job(*tasks: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "vddp"},
        "spec": {"tasks": list(tasks)},
    }


def volcano_task(
    name: str, replicas: int, affinity: dict[str, Any] | None = None, labels: Any = None
) -> dict[str, Any]:
    pod: dict[str, Any] = {"containers": [{"name": "c", "image": "i", "command": ["python"]}]}
    if affinity is not None:
        pod["affinity"] = affinity
    template: dict[str, Any] = {"spec": pod}
    if labels is not None:
        template["metadata"] = {"labels": labels}
    return {"name": name, "replicas": replicas, "template": template}


def spread_of(document: dict[str, Any]) -> list[int | None]:
    return [t.max_replicas_per_node for t in parse_submission(document).manifest.spec.tasks]


def test_the_pod_task_label_is_the_kubernetes_executors() -> None:
    assert POD_TASK_LABEL == TASK_LABEL


@pytest.mark.parametrize(
    ("selector", "one_per_node"),
    [
        ({"matchLabels": {"app": "ddp"}}, True),
        ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["ddp"]}]}, True),
        ({"matchExpressions": [{"key": "app", "operator": "Exists"}]}, True),
        ({"matchLabels": {"app": "other"}}, False),  # other pods: no effect under kiban
        ({"matchExpressions": [{"key": "app", "operator": "Gt", "values": ["1"]}]}, False),
        ({}, False),  # every pod of the namespace, not the task's own
        ({"matchLabels": {"app": "ddp"}, "unknown": 1}, False),
    ],
)
def test_a_hostname_anti_affinity_against_its_own_pods_is_one_per_node(
    selector: dict[str, Any], one_per_node: bool
) -> None:
    reading = read_pod_affinity(anti(selector), {"app": "ddp"})
    assert reading.one_per_node is one_per_node
    assert reading.without_effect == (() if one_per_node else (f"podAntiAffinity.{REQUIRED}[0]",))


@pytest.mark.parametrize(
    "term_extra",
    [{"topologyKey": "topology.kubernetes.io/zone"}, {"namespaces": ["other"]}],
)
def test_other_domains_or_namespaces_are_not_one_per_node(term_extra: dict[str, Any]) -> None:
    affinity = anti({"matchLabels": {"app": "ddp"}}, **term_extra)
    assert not read_pod_affinity(affinity, {"app": "ddp"}).one_per_node


def test_a_selector_that_also_matches_another_task_is_not_one_per_node_of_each() -> None:
    """Job-wide: one pod of the job per node across its tasks, which a per-task limit is not."""
    selector = {"matchLabels": {"job": "ddp"}}
    own, other = {"job": "ddp", "role": "worker"}, {"job": "ddp", "role": "master"}
    assert read_pod_affinity(anti(selector), own, [other]).without_effect == (
        f"podAntiAffinity.{REQUIRED}[0]",
    )
    assert read_pod_affinity(anti(selector), own, []).one_per_node  # a job of one task


def test_a_kiban_task_anti_affinity_against_its_own_pods_runs_one_per_node() -> None:
    document = kiban_job(
        {"replicas": 3, "affinity": anti({"matchLabels": {"app": "ddp"}})},
        labels={"app": "ddp"},
    )
    assert spread_of(document) == [1]
    assert affinity_warnings(parse_submission(document)) == []
    by_task_label = kiban_job(
        {"name": "w", "replicas": 2, "affinity": anti({"matchLabels": {POD_TASK_LABEL: "w"}})},
        {"name": "x", "replicas": 2},
    )
    assert spread_of(by_task_label) == [1, None]


def test_an_explicit_limit_stays_unless_anti_affinity_asks_for_less() -> None:
    assert spread_of(kiban_job({"replicas": 4, "maxReplicasPerNode": 2})) == [2]
    tighter = kiban_job(
        {"replicas": 4, "maxReplicasPerNode": 2, "affinity": anti({"matchLabels": {"a": "b"}})},
        labels={"a": "b"},
    )
    assert spread_of(tighter) == [1]
    assert JobManifest.model_validate(tighter).spec.tasks[0].max_replicas_per_node == 1


def test_what_still_has_no_effect_is_warned_of() -> None:
    affinity = {
        **anti({"matchLabels": {"app": "ddp"}}),
        "podAffinity": {REQUIRED: [{"topologyKey": HOSTNAME, "labelSelector": {}}]},
    }
    affinity["podAntiAffinity"][PREFERRED] = [{"weight": 1, "podAffinityTerm": {}}]
    document = kiban_job({"replicas": 2, "affinity": affinity}, labels={"app": "ddp"})
    assert spread_of(document) == [1]
    [warning] = affinity_warnings(parse_submission(document))
    assert warning.startswith(
        f"spec.tasks[0].affinity.podAffinity, spec.tasks[0].affinity.podAntiAffinity.{PREFERRED}: "
        "no effect"
    )


def test_a_volcano_anti_affinity_on_its_template_labels_becomes_one_per_node() -> None:
    task = volcano_task("worker", 3, anti({"matchLabels": {"app": "vddp"}}), labels={"app": "vddp"})
    submission = parse_submission(volcano_job(task))
    assert submission.document["spec"]["tasks"][0]["maxReplicasPerNode"] == 1
    assert spread_of(volcano_job(task)) == [1]
    assert affinity_warnings(submission) == []
    assert submission.source_path("spec.tasks[0].maxReplicasPerNode") == (
        "spec.tasks[0].template.spec.affinity.podAntiAffinity"
    )


def test_a_volcano_job_name_selector_is_one_per_node_only_for_a_job_of_one_task() -> None:
    job_wide = anti({"matchLabels": {"volcano.sh/job-name": "vddp"}})
    assert spread_of(volcano_job(volcano_task("worker", 2, job_wide))) == [1]
    two_tasks = volcano_job(
        volcano_task("master", 1, job_wide), volcano_task("worker", 2, job_wide)
    )
    assert spread_of(two_tasks) == [None, None]
    warnings = affinity_warnings(parse_submission(two_tasks))
    assert [w.split(":")[0] for w in warnings] == [
        f"spec.tasks[0].template.spec.affinity.podAntiAffinity.{REQUIRED}[0]",
        f"spec.tasks[1].template.spec.affinity.podAntiAffinity.{REQUIRED}[0]",
    ]


def test_a_volcano_task_spec_selector_keeps_each_task_apart() -> None:
    def by_task(name: str) -> dict[str, Any]:
        return anti({"matchLabels": {"volcano.sh/task-spec": name}})

    document = volcano_job(
        volcano_task("master", 1, by_task("master")), volcano_task("worker", 3, by_task("worker"))
    )
    assert spread_of(document) == [1, 1]
