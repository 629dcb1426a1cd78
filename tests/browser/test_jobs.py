"""Jobs in the browser: submitted from the form and from a pasted Volcano manifest, logs
streamed, cancelled, a waiting job's reason and ETA, another tenant's job, field errors."""

from __future__ import annotations

import re
import sys

import pytest
from browser_support import JOB_TIMEOUT_MS, UI_TIMEOUT_MS, Screenshots, Web, job_manifest, sign_in
from playwright.sync_api import Page, expect

JOB_PAGE = re.compile(r"/jobs/([^/?#]+)$")

VOLCANO_JOB = """\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: web-volcano
spec:
  schedulerName: volcano
  minAvailable: 1
  tasks:
    - name: worker
      replicas: 1
      template:
        spec:
          restartPolicy: OnFailure
          containers:
            - name: worker
              image: registry.example/hello:1
              command: ["echo", "volcano-from-the-browser"]
              resources:
                limits: {cpu: "1", memory: 256Mi}
"""


def job_id_of(page: Page) -> str:
    """The id in the URL of the job page the browser went to."""
    expect(page).to_have_url(JOB_PAGE, timeout=UI_TIMEOUT_MS)
    found = JOB_PAGE.search(page.url)
    assert found is not None
    return found.group(1)


@pytest.fixture
def admin_page(page: Page, web: Web) -> Page:
    sign_in(page, web.admin_token)
    return page


def test_a_job_submitted_from_the_form_runs_and_its_page_shows_it(
    admin_page: Page, web: Web, shot: Screenshots
) -> None:
    page = admin_page
    page.get_by_test_id("nav-submit").click()
    page.get_by_test_id("submit-form-tab").click()
    page.get_by_test_id("submit-name").fill("web-form")
    page.get_by_test_id("submit-command").fill("echo submitted-from-the-form")
    page.get_by_test_id("submit-nodes").fill("1")
    page.get_by_test_id("submit-gpus").fill("1")
    shot(page, "form")
    page.get_by_test_id("submit-button").click()
    job_id = job_id_of(page)
    expect(page.get_by_test_id("job-title")).to_contain_text("web-form", timeout=UI_TIMEOUT_MS)
    expect(page.get_by_test_id("job-state")).to_have_text(
        re.compile("Succeeded"), timeout=JOB_TIMEOUT_MS
    )
    job = web.job(job_id)
    assert job["name"] == "web-form" and job["gpus"] == 1
    manifest = job["spec"]  # the manifest as submitted: the form wrote a kiban Job
    assert manifest["spec"]["tasks"][0]["command"] == ["echo", "submitted-from-the-form"]
    expect(page.get_by_test_id("job-spec")).to_contain_text("submitted-from-the-form")
    expect(
        page.get_by_test_id("job-placement").get_by_test_id("placement-node").first
    ).to_be_visible()
    expect(page.get_by_test_id("job-events").get_by_test_id("job-event").first).to_be_visible()
    expect(page.get_by_test_id("job-logs")).to_contain_text("submitted-from-the-form")
    shot(page, "job")


def test_a_pasted_volcano_manifest_is_submitted_and_runs(
    admin_page: Page, web: Web, shot: Screenshots
) -> None:
    page = admin_page
    page.get_by_test_id("nav-submit").click()
    page.get_by_test_id("submit-manifest-tab").click()
    page.get_by_test_id("submit-manifest").fill(VOLCANO_JOB)
    shot(page, "manifest")
    page.get_by_test_id("submit-button").click()
    job_id = job_id_of(page)
    expect(page.get_by_test_id("job-title")).to_contain_text("web-volcano", timeout=UI_TIMEOUT_MS)
    expect(page.get_by_test_id("job-state")).to_have_text(
        re.compile("Succeeded"), timeout=JOB_TIMEOUT_MS
    )
    expect(page.get_by_test_id("job-logs")).to_contain_text("volcano-from-the-browser")
    assert web.job(job_id)["name"] == "web-volcano"
    shot(page, "job")


def test_logs_stream_into_the_job_page_as_the_job_prints(
    admin_page: Page, web: Web, shot: Screenshots
) -> None:
    """The job prints a line, then waits for a file the test makes only once the page shows
    that line: the second line can reach the page only by streaming, not by a load after the
    end."""
    go_on = web.workdir / "logs-go-on"
    script = (
        "import os, time\n"
        "print('first-line', flush=True)\n"
        f"while not os.path.exists({str(go_on)!r}): time.sleep(0.1)\n"
        "print('second-line', flush=True)\n"
    )
    job_id = web.submit(job_manifest("web-logs", [sys.executable, "-c", script]))
    page = admin_page
    page.goto(f"/jobs/{job_id}")
    logs = page.get_by_test_id("job-logs")
    expect(logs).to_contain_text("first-line", timeout=JOB_TIMEOUT_MS)
    expect(logs).not_to_contain_text("second-line")
    shot(page, "first-line")
    go_on.touch()
    expect(logs).to_contain_text("second-line", timeout=JOB_TIMEOUT_MS)
    expect(page.get_by_test_id("job-state")).to_have_text(
        re.compile("Succeeded"), timeout=JOB_TIMEOUT_MS
    )
    shot(page, "second-line")


def test_cancel_from_the_job_page(admin_page: Page, web: Web, shot: Screenshots) -> None:
    job_id = web.submit(job_manifest("web-cancel", ["sleep", "600"]))
    page = admin_page
    page.on("dialog", lambda dialog: dialog.accept())  # a confirmation, if the page asks
    page.goto(f"/jobs/{job_id}")
    expect(page.get_by_test_id("job-state")).to_have_text(
        re.compile("Running"), timeout=JOB_TIMEOUT_MS
    )
    page.get_by_test_id("job-cancel").click()
    expect(page.get_by_test_id("job-state")).to_have_text(
        re.compile("Cancelled"), timeout=JOB_TIMEOUT_MS
    )
    assert web.job(job_id)["state"] == "Cancelled"
    shot(page, "cancelled")


def test_a_waiting_job_shows_its_reason_and_eta_in_the_jobs_list(
    admin_page: Page, web: Web, waiting_job: tuple[str, str], shot: Screenshots
) -> None:
    _, waiting = waiting_job
    page = admin_page
    page.get_by_test_id("nav-jobs").click()
    expect(page.get_by_test_id("jobs-table")).to_be_visible(timeout=UI_TIMEOUT_MS)
    row = page.locator(f'[data-testid="job-row"][data-job-id="{waiting}"]')
    expect(row).to_have_attribute("data-state", "Pending", timeout=JOB_TIMEOUT_MS)

    def forecast_given() -> bool:
        job = web.job(waiting)
        return job["reason"] is not None and job["eta"] is not None

    from e2e_support import eventually

    eventually(forecast_given, what="the waiting job's reason and ETA in the API")
    job = web.job(waiting)
    reason = job["reason"]
    shown = re.compile(f"{re.escape(reason['code'])}|{re.escape(reason['message'][:40])}")
    expect(row.get_by_test_id("job-reason")).to_have_text(shown, timeout=UI_TIMEOUT_MS)
    expect(row.get_by_test_id("job-eta")).to_have_text(re.compile(r"\d"), timeout=UI_TIMEOUT_MS)
    expect(row.get_by_test_id("job-position")).to_have_text(re.compile(r"\d"))
    # The filter by state narrows the list to pending jobs, and the row is among them.
    page.get_by_test_id("jobs-filter-state").select_option("Pending")
    expect(page.locator('[data-testid="job-row"][data-state="Succeeded"]')).to_have_count(
        0, timeout=UI_TIMEOUT_MS
    )
    expect(row).to_be_visible()
    shot(page, "jobs")


def test_a_member_following_a_link_to_another_tenants_job_sees_not_found(
    page: Page, web: Web, shot: Screenshots
) -> None:
    admins = web.submit(job_manifest("web-admins-own", ["echo", "admins-own-argument"]))
    sign_in(page, web.member_token)
    page.goto(f"/jobs/{admins}")
    expect(page.get_by_test_id("not-found")).to_be_visible(timeout=UI_TIMEOUT_MS)
    expect(page.get_by_test_id("job-spec")).to_have_count(0)
    # Nothing of the job itself: not its command, not its state (the id is the link's own).
    expect(page.locator("body")).not_to_contain_text("admins-own-argument")
    expect(page.get_by_test_id("job-state")).to_have_count(0)
    shot(page, "not-found")


def test_the_form_shows_the_apis_field_errors(
    admin_page: Page, web: Web, shot: Screenshots
) -> None:
    """More GPUs per node than any node has: the API refuses the manifest naming the field,
    and the form shows that error beside it, without leaving the page."""
    with web.api() as api:
        refused = api.post("/api/v1/jobs", json=job_manifest("web-too-big", ["true"], gpu=64))
    assert refused.status_code == 422, refused.text
    page = admin_page
    page.get_by_test_id("nav-submit").click()
    page.get_by_test_id("submit-form-tab").click()
    page.get_by_test_id("submit-name").fill("web-too-big")
    page.get_by_test_id("submit-command").fill("true")
    page.get_by_test_id("submit-nodes").fill("1")
    page.get_by_test_id("submit-gpus").fill("64")
    page.get_by_test_id("submit-button").click()
    error = page.get_by_test_id("field-error").first
    expect(error).to_be_visible(timeout=UI_TIMEOUT_MS)
    fields = {p["field"] for p in refused.json()["error"]["problems"]}
    assert fields, refused.text
    # The same field the API names for the same job, with the API's message.
    expect(error).to_have_attribute("data-field", re.compile("|".join(map(re.escape, fields))))
    expect(error).not_to_have_text("")
    expect(page).to_have_url(re.compile(r"/submit$"))
    shot(page, "field-errors")
