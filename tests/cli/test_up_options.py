"""``kiban up``: options that cannot work together, or a bad URL, are refused naming the option,
before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kiban.cli.main import app

runner = CliRunner()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pod-api-url", "http://kiban:8470"], "--pod-api-url, --notebook-storage and"),
        (
            ["--backend", "kubernetes", "--pod-api-url", "kiban:8470"],
            "pod_api_url 'kiban:8470' must be an http:// or https:// URL",
        ),
        (["--notebook-storage", "20Gi"], "--notebook-storage-class need --backend kubernetes"),
        (
            ["--backend", "kubernetes", "--notebook-storage", "lots"],
            "notebook_storage 'lots': 'lots' is not a memory quantity",
        ),
        (
            ["--backend", "kubernetes", "--notebook-storage", "0Gi"],
            "notebook_storage '0Gi' must be above zero",
        ),
        (
            ["--backend", "kubernetes", "--notebook-storage-class", "Fast_SSD"],
            "notebook_storage_class 'Fast_SSD' is not a StorageClass name",
        ),
    ],
)
def test_up_refuses_pod_api_url_misuse(tmp_path: Path, args: list[str], message: str) -> None:
    result = runner.invoke(app, ["up", "--home", str(tmp_path), *args])
    assert result.exit_code != 0
    assert message in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "url").exists()  # nothing started


def test_up_multi_tenant_refuses_to_start_unprivileged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unprivileged, local jobs would run as kiban's own user and read what it can (other
    tenants' logs, the admin token): --multi-tenant refuses, before anything starts."""
    monkeypatch.setattr("kiban.server.os.geteuid", lambda: 1000)
    result = runner.invoke(app, ["up", "--home", str(tmp_path), "--multi-tenant"])
    assert result.exit_code != 0
    assert "--multi-tenant runs each tenant's local jobs as a user of its own" in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "url").exists() and not (tmp_path / "token").exists()


def test_up_on_a_home_another_control_plane_owns_is_refused_before_it_touches_it(
    tmp_path: Path,
) -> None:
    from kiban.control.ownership import LOCK_FILE, Ownership

    home = tmp_path / "home"
    running = Ownership.claim_home(home)
    running.announce("http://127.0.0.1:8470")
    try:
        result = runner.invoke(app, ["up", "--home", str(home), "--port", "0", "--nodes", "1"])
    finally:
        running.release()
    assert result.exit_code == 1
    assert f"home {home} is in use by another kiban control plane" in result.output
    assert "at http://127.0.0.1:8470" in result.output
    assert "Traceback" not in result.output
    assert sorted(p.name for p in home.iterdir()) == [LOCK_FILE]  # no url, store, token, jobs


def test_ctrl_c_while_the_server_loads_is_one_line_and_exit_130(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys
    import types

    class Interrupted(types.ModuleType):
        def __getattr__(self, name: str) -> object:
            raise KeyboardInterrupt  # as Ctrl-C does in the middle of importing it

    monkeypatch.setitem(sys.modules, "kiban.server", Interrupted("kiban.server"))
    result = runner.invoke(app, ["up", "--home", str(tmp_path / "home"), "--nodes", "1"])
    assert result.exit_code == 130
    assert result.output.strip() == (
        "kiban up: interrupted while starting; stopped, nothing left running"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--backend", "kubernetes", "--agent-readings-dir", "."],
            "--agent-readings-dir is for the local backend",
        ),
        (["--agent-readings-dir", "/nonexistent/readings"], "is not a directory"),
    ],
)
def test_up_refuses_agent_options_that_cannot_work(
    tmp_path: Path, args: list[str], message: str
) -> None:
    result = runner.invoke(app, ["up", "--home", str(tmp_path), *args])
    assert result.exit_code == 1
    assert message in result.output
    assert not (tmp_path / "url").exists()


def test_up_passes_its_array_limit_to_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--max-array-size`` is the server's limit on an array's indices (default 10,000)."""
    seen = []
    monkeypatch.setattr("kiban.server.serve", lambda options, _ownership: seen.append(options))
    for args, limit in (([], 10_000), (["--max-array-size", "50000"], 50_000)):
        result = runner.invoke(app, ["up", "--home", str(tmp_path / str(limit)), *args])
        assert result.exit_code == 0, result.output
        assert seen.pop().max_array_size == limit
    refused = runner.invoke(app, ["up", "--home", str(tmp_path), "--max-array-size", "0"])
    assert refused.exit_code != 0
    assert "--max-array-size" in refused.output


def test_up_keeps_the_api_on_one_cpu_unless_told_any(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """By default the API's event loop and writers share one CPU; ``--api-any-cpu`` leaves
    them to the OS scheduler (for machines whose local jobs keep every CPU busy)."""
    seen = []
    monkeypatch.setattr("kiban.server.serve", lambda options, _ownership: seen.append(options))
    for args, one_cpu in (([], True), (["--api-any-cpu"], False)):
        result = runner.invoke(app, ["up", "--home", str(tmp_path / str(one_cpu)), *args])
        assert result.exit_code == 0, result.output
        assert seen.pop().one_cpu is one_cpu


def test_up_passes_its_notebook_ready_timeout_to_the_notebook_controller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--notebook-ready-timeout``: how long a starting JupyterLab has to answer (default 120 s),
    down to the controller that fails a notebook past it; below 1 s is refused."""
    from kiban.server import start_platform

    seen = []
    monkeypatch.setattr("kiban.server.serve", lambda options, _ownership: seen.append(options))
    for args, limit in (([], 120.0), (["--notebook-ready-timeout", "600"], 600.0)):
        result = runner.invoke(app, ["up", "--home", str(tmp_path / str(limit)), *args])
        assert result.exit_code == 0, result.output
        options = seen.pop()
        assert options.notebook_ready_timeout_s == limit
        platform = start_platform(options)
        try:
            assert platform.notebooks is not None
            assert platform.notebooks.ready_timeout_s == limit
        finally:
            platform.close()
    refused = runner.invoke(app, ["up", "--home", str(tmp_path), "--notebook-ready-timeout", "0"])
    assert refused.exit_code != 0
    assert "--notebook-ready-timeout" in refused.output
