"""The kiban/v1 Job manifest: what is accepted, and for what is refused, which field and why."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kiban.domain.errors import FieldProblem, SpecError
from kiban.domain.manifests import load_document, parse_job_manifest

GI = 2**30
DELETE = object()


def manifest(**spec: Any) -> dict[str, Any]:
    """A minimal valid manifest; keyword arguments replace keys of ``spec``."""
    doc: dict[str, Any] = {
        "apiVersion": "kiban/v1",
        "kind": "Job",
        "metadata": {"name": "train"},
        "spec": {"tasks": [{"command": ["python", "train.py"]}]},
    }
    doc["spec"].update(spec)
    return doc


def with_value(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of ``doc`` with the value at a dotted path (list indexes as numbers) replaced."""
    doc = copy.deepcopy(doc)
    *parents, last = path.split(".")
    node: Any = doc
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    key: Any = int(last) if isinstance(node, list) else last
    if value is DELETE:
        del node[key]
    else:
        node[key] = value
    return doc


def only_problem(doc: dict[str, Any]) -> FieldProblem:
    with pytest.raises(SpecError) as caught:
        parse_job_manifest(doc)
    assert len(caught.value.problems) == 1, caught.value.problems
    return caught.value.problems[0]


# -- valid manifests -------------------------------------------------------------------------


def test_minimal_manifest_gets_the_defaults() -> None:
    job = parse_job_manifest(manifest())
    spec = job.spec
    assert job.metadata.name == "train"
    assert spec.queue == "default"
    assert spec.launcher == "none"
    assert spec.restart_policy == "Never"
    assert spec.backoff_limit == 3
    assert spec.termination_grace_period == 30.0
    assert spec.max_runtime is None
    (task,) = spec.tasks
    assert (task.name, task.replicas, task.command) == ("worker", 1, ["python", "train.py"])
    assert (task.resources.gpu, task.resources.cpu, task.resources.memory) == (0, 1000, GI)
    assert spec.gang_size == 1
    assert spec.total_gpus == 0


@pytest.mark.parametrize(
    ("spec", "expect"),
    [
        pytest.param(
            {
                "queue": "vision",
                "launcher": "torchrun",
                "maxRuntime": "1h30m",
                "terminationGracePeriod": "10s",
                "restartPolicy": "OnFailure",
                "backoffLimit": 0,
                "tasks": [
                    {
                        "name": "trainer",
                        "replicas": 4,
                        "resources": {"gpu": 8, "cpu": "500m", "memory": "64Gi"},
                        "command": ["train.py", "--epochs", "3"],
                        "env": {"EPOCHS": 3, "MODE": "fast"},
                        "nprocPerNode": 8,
                    }
                ],
            },
            {
                "queue": "vision",
                "total_gpus": 32,
                "gang_size": 4,
                "max_runtime": 5400.0,
                "termination_grace_period": 10.0,
                "backoff_limit": 0,
                "cpu": 500,
                "memory": 64 * GI,
                "env": {"EPOCHS": "3", "MODE": "fast"},
            },
            id="torchrun-with-everything",
        ),
        pytest.param(
            {
                "minAvailable": 3,
                "tasks": [
                    {"name": "launcher", "command": ["mpirun"], "resources": {"gpu": 0}},
                    {"name": "workers", "replicas": 4, "command": ["w"], "resources": {"gpu": 2}},
                ],
            },
            {"total_gpus": 8, "gang_size": 3, "cpu": 1000, "memory": GI},
            id="two-tasks-smaller-gang",
        ),
        pytest.param(
            {"maxRuntime": 600, "tasks": [{"command": ["x"], "resources": {"gpu": 2.0}}]},
            {"max_runtime": 600.0, "total_gpus": 2},
            id="whole-float-gpus-and-seconds",
        ),
    ],
)
def test_valid_manifests(spec: dict[str, Any], expect: dict[str, Any]) -> None:
    parsed = parse_job_manifest(manifest(**spec)).spec
    task = parsed.tasks[0]
    actual = {
        "queue": parsed.queue,
        "total_gpus": parsed.total_gpus,
        "gang_size": parsed.gang_size,
        "max_runtime": parsed.max_runtime,
        "termination_grace_period": parsed.termination_grace_period,
        "backoff_limit": parsed.backoff_limit,
        "cpu": task.resources.cpu,
        "memory": task.resources.memory,
        "env": task.env,
    }
    assert {k: actual[k] for k in expect} == expect


def test_yaml_manifest_parses_like_its_mapping() -> None:
    text = """\
apiVersion: kiban/v1
kind: Job
metadata:
  name: mnist
spec:
  tasks:
    - name: trainer
      replicas: 2
      resources: {gpu: 1, memory: 8Gi}
      command: [python, mnist.py]
"""
    job = parse_job_manifest(load_document(text))
    assert job.metadata.name == "mnist"
    assert job.spec.tasks[0].replicas == 2
    assert job.spec.tasks[0].resources.memory == 8 * GI


def test_parsed_manifest_is_immutable() -> None:
    job = parse_job_manifest(manifest())
    with pytest.raises(ValueError, match="frozen"):
        setattr(job.spec.tasks[0], "replicas", 5)  # noqa: B010 (mypy knows it is read-only)


# -- invalid manifests -----------------------------------------------------------------------

INVALID = [
    # (id, path to change, new value, field of the problem, fragment of its message)
    ("unknown-spec-field", "spec.replicaz", 2, "spec.replicaz", "unknown field"),
    (
        "misspelled-task-field",
        "spec.tasks.0.comand",
        ["x"],
        "spec.tasks[0].comand",
        "unknown field",
    ),
    ("snake-case-top", "spec.max_runtime_s", 1, "spec.max_runtime_s", "unknown field"),
    (
        "unknown-resource",
        "spec.tasks.0.resources.tpu",
        1,
        "spec.tasks[0].resources.tpu",
        "unknown field",
    ),
    ("unknown-top-level", "status", {}, "status", "unknown field"),
    (
        "zero-replicas",
        "spec.tasks.0.replicas",
        0,
        "spec.tasks[0].replicas",
        "greater than or equal to 1",
    ),
    (
        "negative-replicas",
        "spec.tasks.0.replicas",
        -3,
        "spec.tasks[0].replicas",
        "greater than or equal to 1",
    ),
    ("empty-command", "spec.tasks.0.command", [], "spec.tasks[0].command", "at least 1 item"),
    (
        "blank-program",
        "spec.tasks.0.command",
        ["  ", "x"],
        "spec.tasks[0].command",
        "must not be empty",
    ),
    (
        "command-as-string",
        "spec.tasks.0.command",
        "python x.py",
        "spec.tasks[0].command",
        "valid list",
    ),
    (
        "missing-command",
        "spec.tasks.0.command",
        DELETE,
        "spec.tasks[0].command",
        "required field is missing",
    ),
    ("no-tasks", "spec.tasks", [], "spec.tasks", "at least 1 item"),
    ("uppercase-name", "metadata.name", "Train", "metadata.name", "name 'Train' must be lowercase"),
    ("underscore-name", "metadata.name", "my_job", "metadata.name", "must be lowercase"),
    ("name-too-long", "metadata.name", "a" * 64, "metadata.name", "at most 63 characters"),
    ("name-leading-dash", "metadata.name", "-a", "metadata.name", "start and end with"),
    ("missing-name", "metadata.name", DELETE, "metadata.name", "required field is missing"),
    (
        "bad-task-name",
        "spec.tasks.0.name",
        "Worker",
        "spec.tasks[0].name",
        "task name 'Worker' must be lowercase",
    ),
    ("bad-queue-name", "spec.queue", "Team_A", "spec.queue", "queue name 'Team_A'"),
    (
        "reserved-env",
        "spec.tasks.0.env",
        {"RANK": "3"},
        "spec.tasks[0].env",
        "RANK is set by kiban and cannot be overridden",
    ),
    (
        "reserved-master-addr",
        "spec.tasks.0.env",
        {"MASTER_ADDR": "x"},
        "spec.tasks[0].env",
        "MASTER_ADDR is set by kiban",
    ),
    (
        "reserved-prefix-env",
        "spec.tasks.0.env",
        {"KIBAN_JOB_ID": "x"},
        "spec.tasks[0].env",
        "KIBAN_JOB_ID is set by kiban",
    ),
    (
        "bad-env-name",
        "spec.tasks.0.env",
        {"1ST": "x"},
        "spec.tasks[0].env",
        "'1ST' is not a valid environment variable name",
    ),
    ("env-value-list", "spec.tasks.0.env", {"A": [1]}, "spec.tasks[0].env.A", "valid string"),
    # NUL in any string that reaches exec: the OS refuses it, so the launch could only fail
    (
        "nul-in-env-value",
        "spec.tasks.0.env",
        {"A": "x\x00y"},
        "spec.tasks[0].env",
        "the value of A must not contain NUL characters",
    ),
    (
        "nul-in-env-name",
        "spec.tasks.0.env",
        {"A\x00B": "x"},
        "spec.tasks[0].env",
        "'A\\x00B' is not a valid environment variable name",
    ),
    ("nul-in-program", "spec.tasks.0.command", ["py\x00"], "spec.tasks[0].command", "NUL"),
    ("nul-in-command", "spec.tasks.0.command", ["py", "a\x00"], "spec.tasks[0].command", "NUL"),
    ("nul-in-args", "spec.tasks.0.args", ["--x\x00"], "spec.tasks[0].args", "NUL"),
    ("nul-in-working-dir", "spec.workingDir", "/tmp/a\x00b", "spec.workingDir", "NUL"),
    (
        "nul-in-mount-path",
        "spec.tasks.0.volumes",
        [{"name": "data", "claimName": "c", "mountPath": "/data\x00"}],
        "spec.tasks[0].volumes[0].mountPath",
        "must be an absolute path",
    ),
    (
        "memory-gb",
        "spec.tasks.0.resources.memory",
        "4GB",
        "spec.tasks[0].resources.memory",
        "'4GB' is not a memory quantity",
    ),
    (
        "memory-negative",
        "spec.tasks.0.resources.memory",
        -1,
        "spec.tasks[0].resources.memory",
        "must not be negative",
    ),
    (
        "cpu-words",
        "spec.tasks.0.resources.cpu",
        "two",
        "spec.tasks[0].resources.cpu",
        "'two' is not a CPU quantity",
    ),
    (
        "gpu-fraction",
        "spec.tasks.0.resources.gpu",
        1.5,
        "spec.tasks[0].resources.gpu",
        "GPUs are whole numbers",
    ),
    (
        "gpu-boolean",
        "spec.tasks.0.resources.gpu",
        True,
        "spec.tasks[0].resources.gpu",
        "GPUs are whole numbers",
    ),
    (
        "gpu-negative",
        "spec.tasks.0.resources.gpu",
        -1,
        "spec.tasks[0].resources.gpu",
        "greater than or equal to 0",
    ),
    (
        "duration-words",
        "spec.maxRuntime",
        "2 hours",
        "spec.maxRuntime",
        "'2 hours' is not a duration",
    ),
    ("duration-negative", "spec.maxRuntime", -5, "spec.maxRuntime", "must not be negative"),
    (
        "grace-words",
        "spec.terminationGracePeriod",
        "soon",
        "spec.terminationGracePeriod",
        "is not a duration",
    ),
    (
        "restart-always",
        "spec.restartPolicy",
        "Always",
        "spec.restartPolicy",
        "'Never' or 'OnFailure'",
    ),
    ("launcher-unknown", "spec.launcher", "mpi", "spec.launcher", "'torchrun', 'mpirun' or 'none'"),
    ("backoff-negative", "spec.backoffLimit", -1, "spec.backoffLimit", "greater than or equal"),
    ("min-available-zero", "spec.minAvailable", 0, "spec.minAvailable", "greater than or equal"),
    ("missing-spec", "spec", DELETE, "spec", "required field is missing"),
    (
        "unknown-api-version",
        "apiVersion",
        "kiban/v2",
        "apiVersion",
        "unknown apiVersion 'kiban/v2'; known: batch.volcano.sh/v1alpha1/Job, kiban/v1/Job",
    ),
    ("unknown-kind", "kind", "Deployment", "kind", "unknown kind 'Deployment' for kiban/v1"),
    ("missing-kind", "kind", DELETE, "kind", "required"),
    ("missing-api-version", "apiVersion", DELETE, "apiVersion", "required"),
    ("api-version-number", "apiVersion", 1, "apiVersion", "required"),
]


@pytest.mark.parametrize(
    ("path", "value", "field", "fragment"),
    [pytest.param(*case[1:], id=case[0]) for case in INVALID],
)
def test_invalid_manifests_name_the_field(path: str, value: Any, field: str, fragment: str) -> None:
    problem = only_problem(with_value(manifest(), path, value))
    assert problem.field == field
    assert fragment in problem.message


# Rules that span several fields. The message says what is wrong; the path should name the field.
CROSS_FIELD = [
    pytest.param(
        {"tasks": [{"command": ["a"]}, {"command": ["b"]}]},
        "spec.tasks",
        "task names must be unique; repeated: worker",
        id="duplicate-task-names",
    ),
    pytest.param(
        {"minAvailable": 3, "tasks": [{"command": ["a"], "replicas": 2}]},
        "spec.minAvailable",
        "minAvailable (3) is more than the job's replicas (2)",
        id="min-available-over-replicas",
    ),
    pytest.param(
        {"maxRuntime": "0s"}, "spec.maxRuntime", "maxRuntime must be positive", id="zero-runtime"
    ),
]


@pytest.mark.parametrize(("spec", "_field", "message"), CROSS_FIELD)
def test_cross_field_rules_are_enforced(spec: dict[str, Any], _field: str, message: str) -> None:
    problem = only_problem(manifest(**spec))
    assert problem.message == message


@pytest.mark.parametrize(("spec", "field", "_message"), CROSS_FIELD)
def test_cross_field_problems_name_the_field(
    spec: dict[str, Any], field: str, _message: str
) -> None:
    assert only_problem(manifest(**spec)).field == field


def test_every_problem_is_reported_at_once() -> None:
    doc = with_value(manifest(), "spec.tasks.0.replicas", 0)
    doc = with_value(doc, "spec.queue", "Bad")
    doc = with_value(doc, "metadata.name", "Bad")
    with pytest.raises(SpecError) as caught:
        parse_job_manifest(doc)
    fields = sorted(p.field for p in caught.value.problems)
    assert fields == ["metadata.name", "spec.queue", "spec.tasks[0].replicas"]
    assert "spec.tasks[0].replicas: " in str(caught.value)


def test_empty_cpu_value_is_a_field_problem() -> None:
    problem = only_problem(with_value(manifest(), "spec.tasks.0.resources.cpu", None))
    assert problem.field == "spec.tasks[0].resources.cpu"


# -- documents -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("apiVersion: kiban/v1\nkind: Job\n  metadata: x\n", "at line 3, column 11"),
        ("spec:\n  tasks: [1, 2\nkind: Job\n", "at line 3, column 5"),
        ('{"apiVersion": "kiban/v1",\n "kind": "Job",\n "spec": [1,}\n', "at line 3, column 13"),
        ("a: 1\nb:\n\t- x\n", "at line 3, column 1"),
    ],
)
def test_invalid_yaml_says_where(text: str, fragment: str) -> None:
    with pytest.raises(SpecError) as caught:
        load_document(text)
    (problem,) = caught.value.problems
    assert problem.field == ""
    assert problem.message.startswith("not valid YAML or JSON")
    assert fragment in problem.message


@pytest.mark.parametrize("text", ["", "- a\n- b\n", "just a string\n", "42\n"])
def test_document_must_be_a_mapping(text: str) -> None:
    with pytest.raises(SpecError, match="a manifest must be a mapping"):
        load_document(text)


def test_json_documents_are_accepted() -> None:
    doc = load_document(
        '{"apiVersion": "kiban/v1", "kind": "Job", "metadata": {"name": "j"},'
        ' "spec": {"tasks": [{"command": ["true"]}]}}'
    )
    assert parse_job_manifest(doc).metadata.name == "j"


@pytest.mark.parametrize("mode", ["python", "json"])
def test_a_dumped_spec_reads_back_as_the_same_spec(mode: str) -> None:
    """Dumped and parsed again (Python dump or JSON), a spec is unchanged: 1.5 CPUs stay 1.5
    (a Python dump once wrote 1500, read back as 1,500 CPUs)."""
    doc = with_value(manifest(), "spec.tasks.0.resources.cpu", "1500m")
    job = parse_job_manifest(doc)
    again = parse_job_manifest(job.model_dump(mode=mode, by_alias=True, exclude_none=True))
    assert again.spec.tasks[0].resources.cpu == 1500
    assert again == job
