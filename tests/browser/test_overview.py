"""The overview: GPUs by flavor, queues' quota as bars, pending jobs by reason, tenants."""

from __future__ import annotations

from typing import Any

from browser_support import UI_TIMEOUT_MS, Screenshots, Web, sign_in
from e2e_support import eventually
from playwright.sync_api import Page, expect


def test_the_admin_sees_every_flavor_queue_pending_reason_and_tenant_the_api_reports(
    page: Page, web: Web, waiting_job: tuple[str, str], shot: Screenshots
) -> None:
    holder, waiting = waiting_job

    def settled() -> bool:
        reason = web.job(waiting)["reason"]
        return web.job(holder)["state"] == "Running" and reason["code"] != "QueueBacklog"

    eventually(settled, what="the holder to run and the waiting job to have its reason")
    with web.api() as api:
        answer = api.get("/api/v1/overview")
    assert answer.status_code == 200, answer.text
    facts: dict[str, Any] = answer.json()
    assert facts["pendingByReason"]
    assert facts["flavors"] and facts["queues"]
    sign_in(page, web.admin_token)
    page.get_by_test_id("nav-overview").click()
    flavors = page.get_by_test_id("overview-flavors")
    expect(flavors).to_be_visible(timeout=UI_TIMEOUT_MS)
    for flavor in facts["flavors"]:
        row = flavors.locator(f'[data-testid="flavor-row"][data-flavor="{flavor["flavor"]}"]')
        expect(row).to_be_visible()
        expect(row).to_contain_text(str(flavor["total"]))
    queues = page.get_by_test_id("overview-queues")
    for queue in facts["queues"]:
        bar = queues.locator(f'[data-testid="queue-bar"][data-queue="{queue["name"]}"]')
        expect(bar.first).to_be_visible()
    pending = page.get_by_test_id("overview-pending")
    for waiting in facts["pendingByReason"]:
        row = pending.locator(f'[data-testid="pending-reason"][data-reason="{waiting["reason"]}"]')
        expect(row).to_contain_text(str(waiting["count"]), timeout=UI_TIMEOUT_MS)
    tenants = page.get_by_test_id("overview-tenants")
    for tenant in facts["tenants"]:
        row = tenants.locator(f'[data-testid="tenant-row"][data-tenant="{tenant["name"]}"]')
        expect(row).to_be_visible()
    shot(page, "admin")


def test_a_member_sees_only_its_own_tenants_queues(page: Page, web: Web, shot: Screenshots) -> None:
    sign_in(page, web.member_token)
    page.get_by_test_id("nav-overview").click()
    queues = page.get_by_test_id("overview-queues")
    expect(queues).to_be_visible(timeout=UI_TIMEOUT_MS)
    mine = queues.locator(f'[data-testid="queue-bar"][data-queue="{web.member_queue}"]')
    expect(mine.first).to_be_visible()
    expect(queues.locator('[data-testid="queue-bar"][data-queue="default"]')).to_have_count(0)
    tenants = page.get_by_test_id("overview-tenants")
    expect(tenants.locator('[data-testid="tenant-row"][data-tenant="default"]')).to_have_count(0)
    shot(page, "member")
