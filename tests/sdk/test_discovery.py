"""Where the SDK finds the server and token, and how it completes a job manifest before sending
it (the one place for the CLI and the SDK alike)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kiban.sdk.client import Client, complete_job_manifest, discover
from kiban.sdk.transport import environment_proxy


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    (home / "url").write_text("http://127.0.0.1:9999\n")
    (home / "token").write_text("home-token\n")
    for name in ("KIBAN_URL", "KIBAN_TOKEN", "KIBAN_QUEUE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KIBAN_HOME", str(home))
    return home


@pytest.mark.parametrize("name", ["KIBAN_TOKEN", "KIBAN_URL"])
def test_a_variable_set_but_empty_counts_as_unset(
    home: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    # KIBAN_TOKEN= reported "missing token (looked for <home>/token)" with that file there.
    monkeypatch.setenv(name, "")
    assert discover() == ("http://127.0.0.1:9999", "home-token")


def test_an_empty_kiban_home_is_the_default_home(
    home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_home = tmp_path / "user"
    (fake_home / ".kiban").mkdir(parents=True)
    (fake_home / ".kiban" / "token").write_text("default-home-token")
    monkeypatch.setenv("HOME", str(fake_home))
    monkeypatch.setenv("KIBAN_HOME", "")
    assert discover() == ("http://127.0.0.1:8470", "default-home-token")


def test_set_variables_win_over_the_home(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIBAN_URL", "http://elsewhere:1")
    monkeypatch.setenv("KIBAN_TOKEN", "env-token")
    assert discover() == ("http://elsewhere:1", "env-token")


def test_empty_files_in_the_home_are_no_url_or_token(home: Path) -> None:
    (home / "url").write_text("\n")
    (home / "token").write_text("")
    assert discover() == ("http://127.0.0.1:8470", None)


def test_plain_http_loads_no_certificates_and_https_verifies(home: Path) -> None:
    with Client(url="https://kiban.example", token="t") as secure:
        context = secure._http.ssl_context
        assert context is not None and context.verify_mode.name == "CERT_REQUIRED"
        assert context.check_hostname
    with Client(url="http://kiban.example", token="t") as plain:
        assert plain._http.ssl_context is None


def test_a_proxy_named_by_the_environment_is_used_unless_no_proxy_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As httpx did: HTTPS_PROXY (with its credentials) for an https:// server, none for a
    host NO_PROXY names, none when no variable names one."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        for spelled in (name, name.lower()):
            monkeypatch.delenv(spelled, raising=False)
    assert environment_proxy("https", "kiban.example") is None
    monkeypatch.setenv("HTTPS_PROXY", "http://me:s%40cret@proxy.corp:3128")
    monkeypatch.setenv("NO_PROXY", "localhost,.internal")
    proxy = environment_proxy("https", "kiban.example")
    assert proxy is not None
    assert (proxy.url.host, proxy.url.port) == (b"proxy.corp", 3128)
    assert proxy.auth == (b"me", b"s@cret")
    assert environment_proxy("https", "kiban.internal:443") is None
    assert environment_proxy("https", "localhost:8470") is None
    assert environment_proxy("http", "kiban.example") is None  # only HTTPS_PROXY is set


JOB = {
    "apiVersion": "kiban/v1",
    "kind": "Job",
    "metadata": {"name": "train"},
    "spec": {"tasks": [{"command": ["python", "train.py"]}]},
}
VOLCANO = {
    "apiVersion": "batch.volcano.sh/v1alpha1",
    "kind": "Job",
    "metadata": {"name": "v"},
    "spec": {"tasks": [{"replicas": 1, "template": {}}]},
}


def test_a_job_runs_where_it_was_submitted_from(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    completed = complete_job_manifest(JOB)
    assert completed["spec"]["workingDir"] == str(tmp_path)
    assert "workingDir" not in JOB["spec"]  # the caller's document is left as it was
    assert complete_job_manifest(JOB, working_dir="/data")["spec"]["workingDir"] == "/data"
    own = {**JOB, "spec": {**JOB["spec"], "workingDir": "/mine"}}
    assert complete_job_manifest(own)["spec"]["workingDir"] == "/mine"
    assert "workingDir" not in complete_job_manifest(VOLCANO)["spec"]  # kiban/v1 only


def test_kiban_queue_fills_a_job_that_names_none(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "queue" not in complete_job_manifest(JOB)["spec"]
    monkeypatch.setenv("KIBAN_QUEUE", "batch")
    assert complete_job_manifest(JOB)["spec"]["queue"] == "batch"
    assert complete_job_manifest(VOLCANO)["spec"]["queue"] == "batch"
    named = {**JOB, "spec": {**JOB["spec"], "queue": "vision"}}
    assert complete_job_manifest(named)["spec"]["queue"] == "vision"
    monkeypatch.setenv("KIBAN_QUEUE", "")
    assert "queue" not in complete_job_manifest(JOB)["spec"]


def test_kiban_queue_goes_into_an_mpijobs_scheduling_policy(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mpijob = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "spec": {}}
    assert complete_job_manifest(mpijob) is mpijob
    monkeypatch.setenv("KIBAN_QUEUE", "batch")
    completed = complete_job_manifest(mpijob)
    assert completed["spec"]["runPolicy"]["schedulingPolicy"]["queue"] == "batch"
    assert "queue" not in completed["spec"]  # an MPIJob has no spec.queue
    named = {**mpijob, "spec": {"runPolicy": {"schedulingPolicy": {"queue": "vision"}}}}
    assert (
        complete_job_manifest(named)["spec"]["runPolicy"]["schedulingPolicy"]["queue"] == "vision"
    )


def test_other_documents_are_sent_as_they_are(home: Path) -> None:
    service = {"apiVersion": "kiban/v1", "kind": "Service", "spec": {"model": "x"}}
    assert complete_job_manifest(service) is service
    broken = {"apiVersion": "kiban/v1", "kind": "Job", "spec": ["not", "a", "mapping"]}
    assert complete_job_manifest(broken) is broken
