"""The browser tier: Debian's chromium, driven by Playwright, against one real ``kiban up``.

One server (two virtual nodes of two GPUs) is shared by every test of the tier and stopped
when the tier's last test is done (with the model server and notebooks it started, which
would otherwise load the machine until the whole run ends); it has an admin, and a member of
tenant ``team-web`` with a queue of its own. Skipped, with the reason, where chromium or the
dashboard's built assets (``make setup``) are missing; under ``CI=true`` the root conftest
turns that skip into a failure.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))

from browser_support import ASSETS, Screenshots, Web, chat_service_manifest, job_manifest
from e2e_support import (
    KibanServer,
    open_to_tenant_users,
    readable_dir,
    remove_fresh,
    server_factory,
)
from playwright.sync_api import Browser, Page, sync_playwright

from kiban import __file__ as KIBAN_PACKAGE
from kiban.testing.models import build_tiny_causal_lm

MEMBER_TENANT = "team-web"
MEMBER_QUEUE = "team-web-q"


def _missing() -> str | None:
    """Why the tier cannot run here, or None."""
    if shutil.which("chromium") is None:
        return "chromium is not installed (bash scripts/ensure-chromium.sh)"
    if not (ASSETS / "index.html").is_file():
        return f"the dashboard is not built: no {ASSETS / 'index.html'} (make setup)"
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test of this directory carries the ``browser`` marker (a required tier)."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.browser)


TIER = contextlib.ExitStack()
"""What the tier's shared server and browser left to undo: undone after the tier's last test
(``pytest_runtest_teardown``), or at the end of the run if that never came."""


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After the tier's last test (and its own fixtures), stop the shared server and browser."""
    here = Path(__file__).parent
    if nextitem is None or here not in Path(str(nextitem.fspath)).parents:
        TIER.close()


def _still_running(server: KibanServer) -> None:
    assert server.running, f"the shared server died:\n{server.log_tail()}"


@pytest.fixture(scope="session")
def kiban_web_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KibanServer]:
    reason = _missing()
    if reason is not None:
        pytest.skip(reason)
    open_to_tenant_users(Path(sys.executable), Path(KIBAN_PACKAGE))
    start = TIER.enter_context(server_factory(tmp_path_factory))
    server = start(nodes=2, gpus_per_node=2)
    TIER.callback(_still_running, server)  # checked first, before the server is stopped
    yield server
    TIER.close()


@pytest.fixture(scope="session")
def models(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A folder the replicas' users can read (as root: the tenant's user) for the tiny model."""
    path = readable_dir(tmp_path_factory, "models")
    yield path
    remove_fresh(path)


@pytest.fixture(scope="session")
def web(kiban_web_server: KibanServer, models: Path) -> Web:
    """The shared server, with a member tenant, its queue and its token made through the API."""
    admin = kiban_web_server.client
    admin.create_tenant(MEMBER_TENANT)
    admin.create_queue(MEMBER_QUEUE, tenant=MEMBER_TENANT)
    member_token = admin.create_token(MEMBER_TENANT, f"{MEMBER_TENANT}-member")
    # The chat playground's model server loads (slowly, on CPU) while the other tests run.
    admin.apply_service(chat_service_manifest(build_tiny_causal_lm(models / "tiny-llama")))
    return Web(
        url=kiban_web_server.url,
        admin_token=kiban_web_server.token,
        member_token=member_token,
        member_tenant=MEMBER_TENANT,
        member_queue=MEMBER_QUEUE,
        workdir=kiban_web_server.workdir,
    )


@pytest.fixture(scope="session")
def chromium() -> Iterator[Browser]:
    reason = _missing()
    if reason is not None:
        pytest.skip(reason)
    # Playwright's sync API runs an event loop on this thread while it is open: it is closed
    # with the tier (a later test's asyncio.run() would find that loop running)
    playwright = TIER.enter_context(sync_playwright())
    browser = playwright.chromium.launch(executable_path=shutil.which("chromium"))
    TIER.callback(browser.close)
    yield browser
    TIER.close()


@pytest.fixture
def page(chromium: Browser, web: Web) -> Iterator[Page]:
    """A fresh browser context (no cookies) on the shared server; pages use paths like
    ``page.goto("/jobs")``."""
    context = chromium.new_context(base_url=web.url, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    yield page
    context.close()


@pytest.fixture
def shot(request: pytest.FixtureRequest) -> Screenshots:
    """``shot(page, "step")`` saves ``test-artifacts/screenshots/<test>-<step>.png``."""
    return Screenshots(request.node.name)


@pytest.fixture
def waiting_job(web: Web) -> Iterator[tuple[str, str]]:
    """A job that holds all four GPUs for a bounded time (so the forecast has an end to count
    from), and a two-GPU job waiting behind it: (holder id, waiting id); both cancelled after."""
    holder = web.submit(
        job_manifest("web-holder", ["sleep", "600"], gpu=2, replicas=2, maxRuntime=600)
    )
    waiting = web.submit(job_manifest("web-waiting", ["true"], gpu=2))
    try:
        yield holder, waiting
    finally:
        web.cancel(waiting)
        web.cancel(holder)
