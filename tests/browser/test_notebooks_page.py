"""A notebook from the dashboard: started, a cell executed through kiban's route with the
member's token, JupyterLab opened through the route with the session cookie, then culled after
a short idle timeout and its GPU given back."""

from __future__ import annotations

import re
from typing import Any

import httpx
from browser_support import UI_TIMEOUT_MS, Screenshots, Web, sign_in
from e2e_support import eventually
from playwright.sync_api import Page, expect

from kiban.bench.kernel import KernelClient

NOTEBOOK = "nb-web"
IDLE_TIMEOUT = "30s"
START_TIMEOUT = 180.0  # JupyterLab's start on a loaded 2-core machine
CULL_TIMEOUT = 180.0  # the idle timeout, the culler's pace, and the stop


def gpus_in_use(web: Web) -> int:
    with web.api() as api:
        nodes: list[dict[str, Any]] = api.get("/api/v1/nodes").json()
    return sum(int(node["gpusInUse"]) for node in nodes)


def notebook(web: Web) -> dict[str, Any]:
    with web.api(web.member_token) as api:
        answer = api.get(f"/api/v1/notebooks/{NOTEBOOK}")
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


def test_a_notebook_started_from_the_dashboard_runs_a_cell_and_is_culled_when_idle(
    page: Page, web: Web, shot: Screenshots
) -> None:
    before = gpus_in_use(web)
    sign_in(page, web.member_token)
    page.get_by_test_id("nav-notebooks").click()
    page.get_by_test_id("notebook-name").fill(NOTEBOOK)
    page.get_by_test_id("notebook-gpus").fill("1")
    page.get_by_test_id("notebook-idle-timeout").fill(IDLE_TIMEOUT)
    shot(page, "start-form")
    page.get_by_test_id("notebook-start").click()
    row = page.locator(f'[data-testid="notebook-row"][data-notebook="{NOTEBOOK}"]')
    expect(row).to_be_visible(timeout=UI_TIMEOUT_MS)
    eventually(
        lambda: notebook(web)["state"] == "Running",
        timeout=START_TIMEOUT,
        what=f"notebook {NOTEBOOK} to be Running",
    )
    page.reload()
    expect(row).to_have_attribute("data-state", "Running", timeout=UI_TIMEOUT_MS)
    route = f"/nb/{web.member_tenant}/{NOTEBOOK}/"
    expect(row.get_by_test_id("notebook-open")).to_have_attribute(
        "href", re.compile(re.escape(route))
    )
    assert gpus_in_use(web) == before + 1
    shot(page, "running")

    # Without kiban's credentials the route answers nothing of Jupyter's.
    anonymous = httpx.get(f"{web.url}{route}api/kernels", timeout=30)
    assert anonymous.status_code in (401, 403), anonymous.status_code
    # A cell, through the route: kernel REST and its websocket, with the member's token.
    member = {"Authorization": f"Bearer {web.member_token}"}
    with KernelClient(f"{web.url}{route}", member) as kernel:
        executed = kernel.execute("print(6 * 7)")
    assert executed.status == "ok"
    assert executed.stdout.strip() == "42"

    # JupyterLab itself, through the route, with the browser's session cookie.
    page.goto(route)
    expect(page).to_have_title(re.compile("JupyterLab"), timeout=60_000)
    # JupyterLab's own shell (its DOM, not the dashboard's contract), drawn over its websockets.
    expect(page.locator("#jp-main-dock-panel")).to_be_visible(timeout=60_000)
    shot(page, "jupyterlab")
    page.goto("/notebooks")

    # Idle (the kernel shut down, no terminal): culled after the timeout, GPU given back.
    eventually(
        lambda: notebook(web)["state"] == "Stopped",
        timeout=CULL_TIMEOUT,
        interval=1.0,
        what=f"notebook {NOTEBOOK} to be culled",
    )
    page.reload()
    expect(row).to_have_attribute("data-state", "Stopped", timeout=UI_TIMEOUT_MS)
    shot(page, "culled")
    eventually(lambda: gpus_in_use(web) == before, what="the notebook's GPU to be free")
    page.get_by_test_id("nav-nodes").click()
    expect(page.get_by_test_id("nodes-table")).to_be_visible(timeout=UI_TIMEOUT_MS)
    expect(page.get_by_test_id("node-row").first).to_be_visible()
    shot(page, "nodes")
