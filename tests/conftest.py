"""Shared fixtures: a store on SQLite or PostgreSQL, a platform with a fake executor, an API client.

Under ``CI=true`` a skipped test of a required tier (PostgreSQL, end-to-end,
Kubernetes, root: the isolation of local jobs, Prometheus, the browser) is a failure.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from kiban.api.app import create_app
from kiban.control.loop_settings import LoopSettings
from kiban.devtools.postgres import PostgresUnavailable, ThrowawayPostgres, find_postgres_bin
from kiban.executors.base import NodeInfo
from kiban.platform import Platform, build_platform
from kiban.testing import FakeExecutor, ManualClock

REQUIRED_TIERS = ("postgres", "e2e", "kube", "root", "prometheus", "browser")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if IN_CI and report.skipped and any(item.get_closest_marker(t) for t in REQUIRED_TIERS):
        report.outcome = "failed"
        report.longrepr = f"required tier skipped under CI=true: {report.longrepr}"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[ThrowawayPostgres]:
    if find_postgres_bin() is None:
        pytest.skip("PostgreSQL binaries not found; run scripts/ensure-postgres.sh")
    try:
        with ThrowawayPostgres() as server:
            yield server
    except PostgresUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty store of each kind."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'kiban.db'}"
    server: ThrowawayPostgres = request.getfixturevalue("postgres_server")
    return server.create_database(f"t_{uuid.uuid4().hex[:12]}")


def fake_nodes(count: int = 3, gpus: int = 2) -> list[NodeInfo]:
    return [
        NodeInfo(
            name=f"node-{i}",
            gpus=gpus,
            cpu_millis=8000,
            memory=32 * 2**30,
            labels={"kubernetes.io/hostname": f"node-{i}"},
        )
        for i in range(count)
    ]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def executor(clock: ManualClock) -> FakeExecutor:
    return FakeExecutor(fake_nodes(), clock=clock)


@pytest.fixture
def loop_settings() -> LoopSettings:
    """The control loop's settings for ``platform`` (a test asks for others by parametrizing
    ``loop_settings``)."""
    return LoopSettings()


@pytest.fixture
def platform(
    tmp_path: Path,
    db_url: str,
    executor: FakeExecutor,
    clock: ManualClock,
    loop_settings: LoopSettings,
) -> Iterator[Platform]:
    built = build_platform(
        home=tmp_path / "home",
        db_url=db_url,
        executor=executor,
        clock=clock,
        loop_settings=loop_settings,
    )
    yield built
    built.close()


@pytest.fixture
def admin_token(platform: Platform) -> str:
    return (platform.home / "token").read_text().strip()


@pytest.fixture
def api(platform: Platform, admin_token: str) -> Iterator[TestClient]:
    """An HTTP client of the app, authenticated as the admin."""
    with TestClient(
        create_app(platform), headers={"Authorization": f"Bearer {admin_token}"}
    ) as client:
        yield client
