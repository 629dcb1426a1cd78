"""``kiban.testing.manifest`` builds documents the job parser accepts as asked."""

from __future__ import annotations

from kiban.domain.manifests import parse_job_manifest
from kiban.testing import manifest


def test_defaults_make_a_valid_one_task_job() -> None:
    parsed = parse_job_manifest(manifest())
    assert parsed.metadata.name == "train"
    (task,) = parsed.spec.tasks
    assert (task.replicas, task.resources.gpu, task.command) == (1, 1, ["python", "train.py"])


def test_keywords_reach_the_task_and_the_spec() -> None:
    document = manifest(
        "big",
        replicas=2,
        gpu=4,
        command=["t"],
        queue="research",
        env={"A": "1"},
        maxRuntime="1h",
    )
    assert document["spec"]["queue"] == "research"
    assert document["spec"]["maxRuntime"] == "1h"
    parsed = parse_job_manifest(document)
    spec = parsed.spec
    (task,) = spec.tasks
    assert (parsed.metadata.name, spec.queue, task.replicas, task.resources.gpu, task.command) == (
        "big",
        "research",
        2,
        4,
        ["t"],
    )
    assert task.env == {"A": "1"}
    assert spec.max_runtime == 3600


def test_spec_keywords_replace_the_tasks() -> None:
    tasks = [{"name": "a", "command": ["x"]}, {"name": "b", "command": ["y"]}]
    assert manifest(tasks=tasks)["spec"]["tasks"] == tasks


def test_resources_and_task_keys_are_set_when_given() -> None:
    parsed = parse_job_manifest(
        manifest("small", gpu=0, cpu=1, memory="256Mi", task={"name": "worker"})
    )
    (task,) = parsed.spec.tasks
    assert task.name == "worker"
    assert (task.resources.gpu, task.resources.cpu, task.resources.memory) == (0, 1000, 256 << 20)
