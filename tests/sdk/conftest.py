"""The SDK against a live ``kiban up``: the end-to-end tier's server handles (tests/e2e)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))

from e2e_support import KibanServer, server_factory


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KibanServer]:
    """One 3 x 2-GPU server for a module's tests."""
    with server_factory(tmp_path_factory) as start:
        server = start(nodes=3, gpus_per_node=2)
        yield server
        assert server.running, f"the server died:\n{server.log_tail()}"
