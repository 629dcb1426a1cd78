"""End-to-end fixtures: a real ``kiban up`` process on the local executor, and the real CLI.

``kiban`` starts a server with three virtual 2-GPU nodes; ``start_kiban`` starts others (other
node shapes, or a cluster file given through ``--config``). Each handle runs CLI commands as
subprocesses with argument lists, can SIGKILL and restart its server, and at teardown stops the
server and kills every replica process (group) the test left behind.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_support import KibanServer, StartKiban, open_to_tenant_users, server_factory

from kiban import __file__ as KIBAN_PACKAGE


@pytest.fixture(scope="session", autouse=True)
def tenant_users_reach_python() -> None:
    """As root, kiban runs jobs as per-tenant users: they must be able to run this Python and
    import kiban (its model server, torchrun, ``python`` jobs). A Python under root's 0700
    home (pyenv) is out of their reach until ``chmod o+x`` opens the way (not the listing)."""
    opened = open_to_tenant_users(Path(sys.executable), Path(KIBAN_PACKAGE))
    if opened:
        print(f"opened to tenant users (o+x): {', '.join(map(str, opened))}", file=sys.stderr)


@pytest.fixture
def start_kiban(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StartKiban]:
    """A factory of running servers; all are stopped and their replicas killed at teardown.

    ``start_kiban(nodes=3, gpus_per_node=2)`` uses virtual nodes; ``start_kiban(config={...})``
    (a mapping or YAML text) passes a cluster file with ``--config`` instead.
    """
    with server_factory(tmp_path_factory) as start:
        yield start


@pytest.fixture
def kiban(start_kiban: StartKiban) -> KibanServer:
    """A server of its own with three virtual nodes of 2 GPUs each."""
    return start_kiban(nodes=3, gpus_per_node=2)


@pytest.fixture(scope="module")
def shared_kiban(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KibanServer]:
    """One 3 x 2-GPU server for a module's tests that only read, or are refused (no jobs run)."""
    with server_factory(tmp_path_factory) as start:
        server = start(nodes=3, gpus_per_node=2)
        yield server
        assert server.running, f"the shared server died:\n{server.log_tail()}"
