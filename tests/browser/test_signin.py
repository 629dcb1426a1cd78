"""Signing in with a kiban token, and what a wrong one gets."""

from __future__ import annotations

import re

from browser_support import UI_TIMEOUT_MS, Screenshots, Web, sign_in
from playwright.sync_api import Page, expect


def test_a_page_without_a_session_goes_to_sign_in_and_a_wrong_token_is_refused(
    page: Page, shot: Screenshots
) -> None:
    page.goto("/jobs")
    expect(page).to_have_url(re.compile(r"/signin(\?.*)?$"), timeout=UI_TIMEOUT_MS)
    expect(page.get_by_test_id("signin-token")).to_be_visible(timeout=UI_TIMEOUT_MS)
    shot(page, "signin")
    page.get_by_test_id("signin-token").fill("not-a-kiban-token")
    page.get_by_test_id("signin-submit").click()
    expect(page.get_by_test_id("signin-error")).to_be_visible(timeout=UI_TIMEOUT_MS)
    expect(page.get_by_test_id("whoami")).to_have_count(0)
    shot(page, "wrong-token")
    # The refused token left no session behind.
    assert not [c for c in page.context.cookies() if c["name"] == "kiban_session"]


def test_signing_in_sets_an_http_only_strict_cookie_and_shows_who_is_signed_in(
    page: Page, web: Web, shot: Screenshots
) -> None:
    sign_in(page, web.member_token)
    expect(page.get_by_test_id("whoami")).to_contain_text(web.member_tenant)
    shot(page, "signed-in")
    cookies = {c["name"]: c for c in page.context.cookies()}
    session = cookies["kiban_session"]
    assert session["httpOnly"] is True
    assert session["sameSite"] == "Strict"
    assert cookies["kiban_csrf"]["httpOnly"] is False
    # Signing out ends the session: the next page asks for a token again.
    page.get_by_test_id("signout").click()
    expect(page.get_by_test_id("signin-token")).to_be_visible(timeout=UI_TIMEOUT_MS)
    page.goto("/jobs")
    expect(page.get_by_test_id("signin-token")).to_be_visible(timeout=UI_TIMEOUT_MS)
