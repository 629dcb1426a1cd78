"""The dashboard's pages and assets on the API's port; a clear 503 when they are not built."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from kiban.api.app import create_app
from kiban.platform import Platform
from kiban.web.pages import PAGES

PAGE_URLS = [p.replace("{job_id}", "train-abc123").replace("{name}", "chat") for p in PAGES]


@pytest.fixture
def built(tmp_path: Path) -> Path:
    assets = tmp_path / "assets"
    assets.mkdir()
    (assets / "index.html").write_text("<!doctype html><div id=app></div>")
    (assets / "app.js").write_text("console.log('kiban')")
    return assets


@pytest.mark.parametrize("url", PAGE_URLS)
def test_every_page_is_the_app_never_cached_and_needs_no_token(
    platform: Platform, built: Path, url: str
) -> None:
    with TestClient(create_app(platform, web_assets=built)) as browser:
        response = browser.get(url)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/html")
    assert response.headers["cache-control"] == "no-cache"
    assert "<div id=app>" in response.text


def test_assets_are_served_and_a_missing_one_is_404(platform: Platform, built: Path) -> None:
    with TestClient(create_app(platform, web_assets=built)) as browser:
        script = browser.get("/assets/app.js")
        missing = browser.get("/assets/nothing.js")
        escape = browser.get("/assets/%2e%2e/%2e%2e/assets/index.html")
        hidden = browser.get("/assets/.env")
    assert script.status_code == 200
    assert script.text == "console.log('kiban')"
    assert "javascript" in script.headers["content-type"]
    assert missing.status_code == 404
    assert escape.status_code == 404
    assert hidden.status_code == 404


def test_without_a_build_a_page_says_how_to_build_it(platform: Platform, tmp_path: Path) -> None:
    with TestClient(create_app(platform, web_assets=tmp_path / "none")) as browser:
        response = browser.get("/")
        asset = browser.get("/assets/app.js")
    assert response.status_code == 503
    assert response.headers["content-type"].startswith("text/plain")
    assert "make setup" in response.text and "scripts/build-web.sh" in response.text
    assert response.text.count("\n") == 1
    assert asset.status_code == 404


def test_a_method_a_page_does_not_take_is_405_naming_those_it_does(
    platform: Platform, built: Path
) -> None:
    with TestClient(create_app(platform, web_assets=built)) as browser:
        page = browser.post("/jobs")
        session = browser.get("/web/session")
    assert page.status_code == 405
    assert page.headers["allow"] == "GET, HEAD, OPTIONS"
    assert session.status_code == 405
    assert session.headers["allow"] == "DELETE, OPTIONS, POST"
