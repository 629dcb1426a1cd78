"""Resolving a model's location offline: paths, file://, pvc://, hf:// from the local cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from kiban.serving.runtime.errors import LoadError
from kiban.serving.runtime.options import parse_options
from kiban.serving.runtime.storage import resolve_model_dir, resolve_uri


def test_model_dir_and_file_uri(tmp_path: Path) -> None:
    assert resolve_model_dir(parse_options(["--model_dir", str(tmp_path)])) == tmp_path
    assert resolve_uri(f"file://{tmp_path}") == tmp_path


def test_pvc_uri_maps_under_the_pvc_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "models-claim" / "llm" / "v1").mkdir(parents=True)
    monkeypatch.setenv("KIBAN_PVC_ROOT", str(tmp_path))
    assert resolve_uri("pvc://models-claim/llm/v1") == tmp_path / "models-claim" / "llm" / "v1"
    with pytest.raises(LoadError, match=r"pvc://models-claim/llm/v2.*does not exist"):
        resolve_uri("pvc://models-claim/llm/v2")
    with pytest.raises(LoadError, match="leave the claim"):
        resolve_uri("pvc://models-claim/../other")


def test_missing_and_unsupported_locations_are_named(tmp_path: Path) -> None:
    with pytest.raises(LoadError, match=f"file://{tmp_path}/nope.*does not exist"):
        resolve_uri(f"file://{tmp_path}/nope")
    with pytest.raises(LoadError, match="s3://bucket/m: scheme s3:// is not supported"):
        resolve_uri("s3://bucket/m")
    with pytest.raises(LoadError, match="no model given"):
        resolve_model_dir(parse_options([]))


def _cache_snapshot(cache: Path, repo: str, commit: str) -> Path:
    """A cached repo in the hub cache layout, as huggingface_hub writes it after a download."""
    root = cache / ("models--" + repo.replace("/", "--"))
    snapshot = root / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(commit)
    return snapshot


def test_hf_ids_come_from_the_local_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    commit = "0123456789abcdef0123456789abcdef01234567"
    snapshot = _cache_snapshot(tmp_path / "hub", "acme/tiny", commit)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert resolve_uri("hf://acme/tiny") == snapshot
    assert resolve_uri(f"hf://acme/tiny@{commit}") == snapshot
    assert resolve_model_dir(parse_options(["--model_id", "acme/tiny"])) == snapshot


def test_hf_revisions_after_a_colon_as_kserve_writes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commit = "fedcba9876543210fedcba9876543210fedcba98"
    snapshot = _cache_snapshot(tmp_path / "hub", "acme/tiny", commit)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert resolve_uri(f"hf://acme/tiny:{commit}") == snapshot
    assert resolve_uri("hf://acme/tiny:main") == snapshot
    assert resolve_model_dir(parse_options(["--model_id", f"acme/tiny:{commit}"])) == snapshot
    with pytest.raises(LoadError, match=r"acme/tiny at revision v9 is not in the local"):
        resolve_uri("hf://acme/tiny:v9")


def test_malformed_hf_ids_name_both_revision_forms() -> None:
    with pytest.raises(LoadError, match=r"org/name@revision or org/name:revision"):
        resolve_uri("hf://a/b/c")
    with pytest.raises(LoadError, match=r"org/name@revision or org/name:revision"):
        resolve_model_dir(parse_options(["--model_id", ":main"]))


def test_hf_home_is_honoured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    commit = "89abcdef0123456789abcdef0123456789abcdef"
    snapshot = _cache_snapshot(tmp_path / "home" / "hub", "acme/other", commit)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert resolve_model_dir(parse_options(["--model-id", "acme/other"])) == snapshot


def test_uncached_hf_id_names_the_id_and_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    pattern = rf"hf://acme/absent.*not in the local .*cache \({tmp_path}"
    with pytest.raises(LoadError, match=pattern):
        resolve_uri("hf://acme/absent")
