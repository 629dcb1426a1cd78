"""End-to-end fixtures: a real ``kiban up`` process on the local executor, and the real CLI.

``kiban`` starts a server with three virtual 2-GPU nodes; ``start_kiban`` starts others (other
node shapes, or a cluster file given through ``--config``). Each handle runs CLI commands as
subprocesses with argument lists, can SIGKILL and restart its server, and at teardown stops the
server and kills every replica process (group) the test left behind.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import yaml
from e2e_support import KIBAN, KibanServer, StartKiban, cli_env


@contextlib.contextmanager
def server_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StartKiban]:
    """Start servers on demand; on exit stop them all and kill what their jobs left running."""
    if not KIBAN.exists():
        pytest.skip(f"the kiban console script is not installed at {KIBAN} (pip install -e .)")
    servers: list[KibanServer] = []

    def start(
        *,
        nodes: int | None = 3,
        gpus_per_node: int = 2,
        config: dict[str, Any] | str | None = None,
        extra_args: Sequence[str] = (),
    ) -> KibanServer:
        base = tmp_path_factory.mktemp("kiban")
        home = base / "home"
        workdir = base / "work"
        home.mkdir()
        workdir.mkdir()
        args = ["up", "--home", str(home), "--port", "0"]
        if config is not None:
            config_file = base / "cluster.yaml"
            text = config if isinstance(config, str) else yaml.safe_dump(config)
            config_file.write_text(text)
            args += ["--config", str(config_file)]
        if nodes is not None:
            args += ["--nodes", str(nodes), "--gpus-per-node", str(gpus_per_node)]
        args += list(extra_args)
        server = KibanServer(home=home, up_args=args, env=cli_env(home), workdir=workdir)
        servers.append(server)
        server.start()
        return server

    try:
        yield start
    finally:
        for server in servers:
            server.close()


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
