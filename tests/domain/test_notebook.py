"""A notebook's spec (durations, CPUs, names), its job, and the derivation of Jupyter's token."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from kiban.domain.cluster import ClusterPolicy
from kiban.domain.jobspec import JobManifest
from kiban.domain.notebook import (
    NotebookRequest,
    NotebookRuntime,
    NotebookSpec,
    jupyter_token,
    notebook_dir,
    notebook_job_manifest,
)
from kiban.web.jupyter_runtime import jupyter_argv


def test_durations_and_cpus_read_as_people_write_them_and_survive_storage() -> None:
    spec = NotebookRequest.model_validate(
        {"idleTimeout": "30s", "maxLifetime": "1h30m", "cpus": "500m"}
    ).spec()
    assert (spec.idle_timeout, spec.max_lifetime, spec.cpus) == (30.0, 5400.0, 500)
    stored = spec.model_dump(mode="json", by_alias=True)
    assert NotebookSpec.model_validate(stored) == spec


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"idleTimeout": "soon"}, "idleTimeout"),
        ({"idleTimeout": "0s"}, "idleTimeout"),
        ({"maxLifetime": -5}, "maxLifetime"),
        ({"name": "My Notebook"}, "name"),
        ({"gpus": 1.5}, "gpus"),
        ({"colour": "blue"}, "colour"),
    ],
)
def test_a_bad_field_is_named(body: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        NotebookRequest.model_validate(body)
    assert [e["loc"][0] for e in caught.value.errors()] == [field]


def test_token_depends_on_key_tenant_name_and_run() -> None:
    key = b"k" * 32
    token = jupyter_token(key, "vision", "lab", "nb-lab-1")
    assert token == jupyter_token(key, "vision", "lab", "nb-lab-1")
    others = {
        jupyter_token(b"x" * 32, "vision", "lab", "nb-lab-1"),
        jupyter_token(key, "speech", "lab", "nb-lab-1"),
        jupyter_token(key, "vision", "lab2", "nb-lab-1"),
        jupyter_token(key, "vision", "lab", "nb-lab-2"),
        jupyter_token(key, "visionl", "ab", "nb-lab-1"),  # the parts are kept apart
    }
    assert token not in others and len(others) == 5


def test_the_job_runs_jupyterlab_from_an_argument_list_at_the_notebook_class(
    tmp_path: Path,
) -> None:
    root = notebook_dir(tmp_path, "vision", "alice/../bob", "lab")
    assert root.parent.name == "alice_.._bob" and root.is_relative_to(tmp_path / "notebooks")
    document = notebook_job_manifest(
        tenant="vision",
        name="lab",
        spec=NotebookSpec(gpus=1),
        runtime=NotebookRuntime(root_dir=str(root), python="/venv/bin/python"),
        priority_class=ClusterPolicy().notebook_class(),
        job_name="nb-lab",
    )
    manifest = JobManifest.model_validate(document)
    task = manifest.spec.tasks[0]
    assert task.command[:3] == ["/venv/bin/python", "-m", "kiban.web.jupyter_runtime"]
    assert "--ServerApp.base_url=/nb/vision/lab/" in task.command
    assert manifest.spec.priority_class == "interactive"
    assert manifest.spec.working_dir == str(root)
    assert not any("token" in arg.lower() for arg in task.command)


def test_the_runtime_listens_on_the_jobs_port_and_nowhere_else() -> None:
    argv, env = jupyter_argv(["--no-browser"], {"MASTER_PORT": "4242", "JUPYTER_TOKEN": "t"})
    assert argv[1:] == ["-m", "jupyterlab", "--no-browser"]
    assert (env["JUPYTER_PORT"], env["JUPYTER_PORT_RETRIES"], env["JUPYTER_TOKEN"]) == (
        "4242",
        "0",
        "t",
    )


def test_the_policy_names_the_notebook_class_or_is_refused() -> None:
    assert ClusterPolicy().notebook_class() == "interactive"
    chosen = ClusterPolicy.model_validate({"notebookPriorityClass": "low"})
    assert chosen.notebook_class() == "low"
    without = ClusterPolicy.model_validate({"priorityClasses": [{"name": "p", "value": 1}]})
    assert without.notebook_class() is None  # the policy's default
    with pytest.raises(ValidationError) as caught:
        ClusterPolicy.model_validate({"notebookPriorityClass": "urgent"})
    assert "unknown priority class 'urgent'" in str(caught.value)
