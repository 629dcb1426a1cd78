"""Models loaded once per test session, and apps serving them through the real loading code."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from kiban.serving.runtime.app import create_app
from kiban.serving.runtime.loading import LoadedModel, load_model
from kiban.serving.runtime.options import parse_options
from kiban.testing.models import build_tiny_causal_lm, embedding_model_path


@pytest.fixture(scope="session")
def tiny_lm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_causal_lm(tmp_path_factory.mktemp("tiny-lm"))


@pytest.fixture(scope="session")
def tiny_lm(tiny_lm_dir: Path) -> LoadedModel:
    return load_model(parse_options(["--model_dir", str(tiny_lm_dir)]))


@pytest.fixture(scope="session")
def minilm() -> LoadedModel:
    return load_model(parse_options(["--model_dir", str(embedding_model_path())]))


def serve(loaded: LoadedModel, *args: str) -> TestClient:
    """A client for an app serving ``loaded`` (already in memory) under the given options."""
    options = parse_options(["--model_dir", str(loaded.directory), *args])
    return TestClient(create_app(options, loaded=loaded), raise_server_exceptions=False)


Serve = Callable[..., TestClient]


@pytest.fixture(scope="session")
def make_client() -> Serve:
    """``serve`` as a fixture, for tests that need an app with their own options."""
    return serve


@pytest.fixture(scope="module")
def lm_client(tiny_lm: LoadedModel) -> Iterator[TestClient]:
    with serve(
        tiny_lm, "--model_name", "tiny", "--max-tokens-limit", "64", "--max-request-bytes", "4096"
    ) as client:
        yield client


@pytest.fixture(scope="module")
def embed_client(minilm: LoadedModel) -> Iterator[TestClient]:
    with serve(minilm, "--model_name", "minilm") as client:
        yield client
