"""What the dashboard offers each role (issue 27, point 4): a viewer sees their tenant's jobs
but no submit form, nor cancel or checkpoint buttons; a tenant-admin sees their role and their
tenant's tokens page (never a secret); a member sees neither the tokens page nor a tokens link."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from browser_support import UI_TIMEOUT_MS, Screenshots, Web, job_manifest, sign_in
from playwright.sync_api import Page, expect


def token_of(web: Web, member: str, role: str) -> str:
    with web.api() as api:
        made = api.post(
            f"/api/v1/tenants/{web.member_tenant}/tokens", json={"name": member, "role": role}
        )
    assert made.status_code == 201, made.text
    return str(made.json()["token"])


@pytest.fixture
def members_job(web: Web) -> Iterator[str]:
    """A job of the member's (pending or running for the test's length), cancelled after."""
    job = web.submit(
        job_manifest("web-roles", ["sleep", "300"], queue=web.member_queue), web.member_token
    )
    try:
        yield job
    finally:
        web.cancel(job)


def test_a_viewer_sees_their_tenants_job_but_no_submit_form_nor_cancel_button(
    page: Page, web: Web, members_job: str, shot: Screenshots
) -> None:
    sign_in(page, token_of(web, "web-viewer", "viewer"))
    whoami = page.get_by_test_id("whoami")
    expect(whoami).to_have_attribute("data-role", "viewer")
    expect(whoami).to_contain_text("viewer")
    expect(page.get_by_test_id("nav-jobs")).to_be_visible()
    expect(page.get_by_test_id("nav-submit")).to_have_count(0)
    expect(page.get_by_test_id("nav-tokens")).to_have_count(0)
    page.goto(f"/jobs/{members_job}")
    expect(page.get_by_test_id("job-events")).to_be_visible(timeout=UI_TIMEOUT_MS)
    expect(page.get_by_test_id("job-cancel")).to_have_count(0)
    expect(page.get_by_test_id("job-checkpoint")).to_have_count(0)
    shot(page, "viewer-job")
    page.goto("/jobs")
    expect(page.get_by_test_id("nav-jobs")).to_have_attribute("aria-current", "page")
    expect(page.get_by_test_id("jobs-submit")).to_have_count(0)
    page.goto("/submit")
    expect(page.get_by_test_id("submit-forbidden")).to_be_visible(timeout=UI_TIMEOUT_MS)
    expect(page.get_by_test_id("submit-button")).to_have_count(0)


def test_a_tenant_admin_sees_their_role_and_their_tenants_tokens(
    page: Page, web: Web, members_job: str, shot: Screenshots
) -> None:
    secret = token_of(web, "web-tina", "tenant-admin")
    sign_in(page, secret)
    expect(page.get_by_test_id("whoami")).to_contain_text("tenant-admin")
    page.get_by_test_id("nav-tokens").click()
    table = page.get_by_test_id("tokens-table")
    expect(table).to_be_visible(timeout=UI_TIMEOUT_MS)
    expect(table.locator('[data-member="web-tina"][data-role="tenant-admin"]')).to_have_count(1)
    expect(table.locator(f'[data-member="{web.member_tenant}-member"]')).to_have_count(1)
    expect(table.locator('[data-role="admin"]')).to_have_count(0)  # another tenant's: not shown
    assert secret not in page.content()
    shot(page, "tenant-admin-tokens")
    page.goto(f"/jobs/{members_job}")  # a teammate's job: a tenant-admin may cancel it
    expect(page.get_by_test_id("job-cancel")).to_be_enabled(timeout=UI_TIMEOUT_MS)


def test_a_member_sees_no_tokens_page(page: Page, web: Web) -> None:
    sign_in(page, web.member_token)
    expect(page.get_by_test_id("whoami")).to_have_attribute("data-role", "member")
    expect(page.get_by_test_id("nav-submit")).to_be_visible()
    expect(page.get_by_test_id("nav-tokens")).to_have_count(0)
    page.goto("/tokens")
    expect(page.get_by_test_id("tokens-forbidden")).to_be_visible(timeout=UI_TIMEOUT_MS)
