"""Helpers of the browser tier: signing in through the page, screenshots, the API beside it.

The tests drive Debian's chromium through Playwright and find elements only by the
``data-testid`` names of the dashboard's DOM contract; they wait with Playwright's polling
``expect``, never with sleeps.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import Page, expect

from kiban import testing

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "test-artifacts" / "screenshots"
ASSETS = REPO / "src" / "kiban" / "web" / "assets"

UI_TIMEOUT_MS = 30_000  # a page's answer on a loaded 2-core machine
JOB_TIMEOUT_MS = 90_000  # a job's run, seen through the page's live refresh


@dataclass
class Web:
    """The shared server as the browser tier sees it: its URL and the tokens of its users."""

    url: str
    admin_token: str
    member_token: str
    member_tenant: str
    member_queue: str
    workdir: Path

    def api(self, token: str | None = None) -> httpx.Client:
        """An API client for the admin (or the holder of ``token``)."""
        headers = {"Authorization": f"Bearer {token or self.admin_token}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60.0)

    def submit(self, manifest: dict[str, Any], token: str | None = None) -> str:
        """Submit a job through the API; returns its id."""
        with self.api(token) as api:
            return str(testing.submit(api, manifest)["id"])

    def job(self, job_id: str, token: str | None = None) -> dict[str, Any]:
        with self.api(token) as api:
            answer = api.get(f"/api/v1/jobs/{job_id}")
        assert answer.status_code == 200, answer.text
        found: dict[str, Any] = answer.json()
        return found

    def cancel(self, job_id: str) -> None:
        with self.api() as api:
            api.post(f"/api/v1/jobs/{job_id}/cancel")


class Screenshots:
    """Saves a page as ``test-artifacts/screenshots/<test>-<step>.png`` (gitignored)."""

    def __init__(self, test_name: str) -> None:
        self.test = re.sub(r"[^A-Za-z0-9_.-]+", "_", test_name)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def __call__(self, page: Page, step: str) -> Path:
        path = SCREENSHOTS / f"{self.test}-{step}.png"
        page.screenshot(path=str(path), full_page=True)
        return path


def sign_in(page: Page, token: str) -> None:
    """Sign in through the sign-in page, as a person would, and wait for the signed-in nav."""
    page.goto("/signin")
    page.get_by_test_id("signin-token").fill(token)
    page.get_by_test_id("signin-submit").click()
    expect(page.get_by_test_id("whoami")).to_be_visible(timeout=UI_TIMEOUT_MS)


def job_manifest(name: str, command: list[str], *, gpu: int = 0, **spec: Any) -> dict[str, Any]:
    """kiban.testing's manifest sized for the local executor: 1 CPU, 256 MiB a replica."""
    return testing.manifest(name, gpu=gpu, command=command, cpu=1, memory="256Mi", **spec)


CHAT_SERVICE = "chat"
CHAT_MODEL = "tiny"


def chat_service_manifest(model_dir: Path) -> dict[str, Any]:
    """The admin's text-generation service of the tiny random Llama (CPU only)."""
    return {
        "apiVersion": "kiban/v1",
        "kind": "Service",
        "metadata": {"name": CHAT_SERVICE},
        "spec": {
            "model": {
                "name": CHAT_MODEL,
                "storageUri": f"file://{model_dir}",
                "task": "text_generation",
            },
            "resources": {"gpu": 0, "cpu": 0.5, "memory": "1Gi"},
        },
    }
