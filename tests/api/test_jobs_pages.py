"""Listing jobs a page at a time: offset, the total on all pages, and the reason filter."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import event, update

from kiban.platform import Platform
from kiban.store.models import Job
from kiban.testing import ManualClock, manifest


def submit(api: TestClient, clock: ManualClock, count: int, gpu: int = 1) -> list[str]:
    """``count`` jobs, a second apart; their ids, oldest first."""
    ids = []
    for i in range(count):
        clock.advance(1.0)
        response = api.post("/api/v1/jobs", json=manifest(f"job-{i}", gpu=gpu))
        assert response.status_code == 201, response.text
        ids.append(response.json()["id"])
    return ids


def test_pages_cover_every_job_once_newest_first_with_the_total(
    api: TestClient, clock: ManualClock
) -> None:
    ids = submit(api, clock, 7)
    seen = []
    for offset in (0, 3, 6):
        page = api.get("/api/v1/jobs", params={"offset": offset, "limit": 3})
        assert page.status_code == 200, page.text
        assert page.headers["X-Total-Count"] == "7"
        seen += [job["id"] for job in page.json()]
    assert seen == ids[::-1]
    past = api.get("/api/v1/jobs", params={"offset": 7, "limit": 3})
    assert past.json() == [] and past.headers["X-Total-Count"] == "7"


def test_the_total_counts_the_filtered_jobs_not_the_page(
    api: TestClient, clock: ManualClock
) -> None:
    submit(api, clock, 4)
    page = api.get("/api/v1/jobs", params={"name": "job-2", "limit": 1})
    assert [j["name"] for j in page.json()] == ["job-2"]
    assert page.headers["X-Total-Count"] == "1"
    none = api.get("/api/v1/jobs", params={"state": "Running"})
    assert none.json() == [] and none.headers["X-Total-Count"] == "0"


def test_the_reason_filter_lists_the_jobs_waiting_for_that_reason(
    api: TestClient, clock: ManualClock, platform: Platform
) -> None:
    submit(api, clock, 5, gpu=2)  # three nodes of two GPUs: two jobs wait
    platform.loop.run_once()
    every = api.get("/api/v1/jobs").json()
    waiting = [j for j in every if j["state"] == "Pending"]
    assert len(waiting) == 2
    code = waiting[0]["reason"]["code"]
    listed = api.get("/api/v1/jobs", params={"reason": code})
    assert listed.status_code == 200, listed.text
    expected = {j["id"] for j in waiting if j["reason"]["code"] == code}
    assert {j["id"] for j in listed.json()} == expected
    assert listed.headers["X-Total-Count"] == str(len(expected))


def test_a_bad_offset_or_reason_names_the_field(api: TestClient) -> None:
    for params, field in (({"offset": -1}, "offset"), ({"reason": "Bored"}, "reason")):
        response = api.get("/api/v1/jobs", params=params)
        assert response.status_code == 422, response.text
        problems = response.json()["error"]["problems"]
        assert any(field in p["field"] for p in problems), problems


def test_jobs_no_pass_has_judged_are_found_by_the_reason_the_api_shows(
    api: TestClient, clock: ManualClock
) -> None:
    submit(api, clock, 2)  # no scheduling pass yet
    shown = {j["reason"]["code"] for j in api.get("/api/v1/jobs").json()}
    assert shown == {"QueueBacklog"}
    listed = api.get("/api/v1/jobs", params={"reason": "QueueBacklog"})
    assert len(listed.json()) == 2
    assert listed.headers["X-Total-Count"] == "2"


def test_a_listed_job_reads_as_its_own_document_without_an_orm_object_per_job(
    api: TestClient, clock: ManualClock, platform: Platform
) -> None:
    """A listing reads plain rows (``job_listing.ListedJob``): no ``Job`` object is loaded,
    and each listed job says what its own document says (but for the fields only that has)."""
    ids = submit(api, clock, 3)
    loaded: list[object] = []
    listen = (Job, "load", lambda target, _context: loaded.append(target))
    event.listen(*listen)
    try:
        page = api.get("/api/v1/jobs")
    finally:
        event.remove(*listen)
    assert page.status_code == 200, page.text
    assert loaded == []
    assert page.headers["X-Total-Count"] == "3"
    only_its_own = ("spec", "replicas", "executorLimits", "estimatedRuntime", "standing")
    for listed in page.json():
        own = api.get(f"/api/v1/jobs/{listed['id']}").json()
        assert {k: v for k, v in listed.items() if k not in only_its_own} == {
            k: v for k, v in own.items() if k not in only_its_own
        }
    assert [job["id"] for job in page.json()] == ids[::-1]


def test_a_job_stored_without_its_counts_is_listed_with_those_of_its_manifest(
    api: TestClient, platform: Platform
) -> None:
    """Rows stored before migrations 0011 and 0014 have no ``gpus`` or ``replicas``: a
    listing reads their manifest for them (and only theirs)."""
    response = api.post("/api/v1/jobs", json=manifest("old", gpu=2, replicas=1))
    assert response.status_code == 201, response.text
    with platform.sessions() as session:
        session.execute(update(Job).values(gpus=None, replicas=None))
        session.commit()
    (listed,) = api.get("/api/v1/jobs").json()
    assert (listed["gpus"], listed["replicaCount"]) == (2, 1)
