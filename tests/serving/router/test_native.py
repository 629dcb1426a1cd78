"""The compiled router: a build is found only for the exact sources it was made from."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kiban.serving.router import native


@pytest.fixture
def router_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "src" / "kiban" / "serving" / "router"
    for name in native.COMPILED_MODULES:
        copy.mkdir(parents=True, exist_ok=True)
        shutil.copy(native.ROUTER_DIR / f"{name}.py", copy / f"{name}.py")
    return copy


def test_the_key_follows_every_compiled_source(router_copy: Path) -> None:
    key = native.source_key(router_copy)
    assert native.source_key(router_copy) == key
    for name in native.COMPILED_MODULES:
        source = router_copy / f"{name}.py"
        original = source.read_bytes()
        source.write_bytes(original + b"\n# edited\n")
        assert native.source_key(router_copy) != key, name
        source.write_bytes(original)
    assert native.source_key(router_copy) == key


def test_without_a_build_of_these_sources_the_path_is_left_alone(
    router_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KIBAN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(native.SWITCH, raising=False)
    path = ["/somewhere/kiban/serving/router"]
    found = native.use_build(path, router_copy)
    assert not found.compiled
    assert native.source_key(router_copy) in found.detail
    assert path == ["/somewhere/kiban/serving/router"]


def test_a_half_written_build_is_not_used(
    router_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KIBAN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(native.SWITCH, raising=False)
    build = native.cache_root() / native.source_key(router_copy)
    (build / "kiban" / "serving" / "router").mkdir(parents=True)  # no shared library
    path: list[str] = []
    assert not native.use_build(path, router_copy).compiled
    assert path == []


def test_the_switch_turns_a_build_off(router_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(native.SWITCH, "0")
    path: list[str] = []
    found = native.use_build(path, router_copy)
    assert not found.compiled
    assert native.SWITCH in found.detail
    assert path == []


def test_this_run_uses_the_build_when_one_was_made() -> None:
    """``make test`` runs the suite compiled (``make setup`` builds) and the router's tests
    again as plain Python (the switch off); in CI both must be what they say."""
    if os.environ.get(native.SWITCH) == "0":
        assert not native.state.compiled
        assert not native.running_compiled()
        return
    if not native.state.compiled:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI runs the compiled router, but: {native.state.detail}")
        pytest.skip(native.state.detail)
    assert native.running_compiled()
    from kiban.serving.router import exchange, proxy, upstream

    for module in (exchange, proxy, upstream):
        assert module.__file__ is not None
        assert module.__file__.startswith(str(native.cache_root())), module.__name__


def test_importing_the_router_changes_nothing_until_activated(tmp_path: Path) -> None:
    """Importing the package, even its server, neither moves its path nor decides compiled or
    plain; ``activate()`` after its modules were imported leaves them plain, never mixed."""
    probe = (
        "import json; import kiban.serving.router as r; from kiban.serving.router import native; "
        "before = list(r.__path__); import kiban.serving.router.server; "
        "after_import = (list(r.__path__), native.state.detail); native.activate(); "
        "print(json.dumps([before, after_import, list(r.__path__), native.state.detail]))"
    )
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop(native.SWITCH, None)
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    before, (path_after_import, detail), path_after, activated = json.loads(done.stdout)
    assert path_after_import == before and detail == "not activated"
    assert path_after == before
    assert "imported before activate()" in activated and "exchange" in activated
