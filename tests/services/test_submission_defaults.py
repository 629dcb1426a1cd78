"""What a submission fills in: the queue of a manifest that names none (the member's own), and
who submitted it; and listing by state in any case and by submitter."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from kiban.api.app import create_app
from kiban.platform import Platform
from kiban.testing import manifest, submit

Member = Callable[[str, str], TestClient]


def job(name: str = "train", queue: str | None = None) -> dict[str, Any]:
    """A job that needs no GPU, in ``queue`` or (None) in the one kiban picks."""
    return manifest(name, queue=queue, gpu=0, command=["true"])


@pytest.fixture
def member(api: TestClient, platform: Platform) -> Member:
    """``member(tenant, name)``: a client with a new member token of ``tenant`` (made if new)."""

    def make(tenant: str, name: str) -> TestClient:
        api.post("/api/v1/tenants", json={"name": tenant})
        answer = api.post(f"/api/v1/tenants/{tenant}/tokens", json={"name": name})
        assert answer.status_code in (200, 201), answer.text
        token = answer.json()["token"]
        return TestClient(create_app(platform), headers={"Authorization": f"Bearer {token}"})

    return make


def add_queue(api: TestClient, name: str, tenant: str) -> None:
    answer = api.post("/api/v1/queues", json={"name": name, "tenant": tenant})
    assert answer.status_code in (200, 201), answer.text


def test_a_member_with_one_queue_needs_not_name_it(api: TestClient, member: Member) -> None:
    alice = member("vision", "alice")
    add_queue(api, "vision-gpu", "vision")
    made = submit(alice, job())
    assert made["queue"] == "vision-gpu"  # was: "queue default does not exist"
    stored = api.get(f"/api/v1/jobs/{made['id']}").json()
    assert stored["queue"] == "vision-gpu" and stored["spec"] == job()  # stored as submitted


def test_of_several_queues_the_one_named_after_the_tenant(api: TestClient, member: Member) -> None:
    alice = member("vision", "alice")
    for name in ("vision-low", "vision"):
        add_queue(api, name, "vision")
    assert submit(alice, job())["queue"] == "vision"
    assert submit(alice, job(queue="vision-low"))["queue"] == "vision-low"


@pytest.mark.parametrize(
    ("queues", "message"),
    [
        ([], "tenant speech has no queue"),
        (["asr", "tts"], "tenant speech has 2: asr, tts"),
    ],
)
def test_otherwise_the_member_must_name_one(
    api: TestClient, member: Member, queues: list[str], message: str
) -> None:
    bob = member("speech", "bob")
    for name in queues:
        add_queue(api, name, "speech")
    answer = bob.post("/api/v1/jobs", json=job())
    assert answer.status_code == 422
    (problem,) = answer.json()["error"]["problems"]
    assert problem["field"] == "spec.queue" and message in problem["message"]


def test_the_admin_and_the_default_tenant_keep_default(api: TestClient, member: Member) -> None:
    add_queue(api, "batch", "default")
    assert submit(api, job())["queue"] == "default"
    carol = member("default", "carol")
    assert submit(carol, job())["queue"] == "default"


def test_who_submitted_is_kept_and_listed(api: TestClient, member: Member) -> None:
    alice, bob = member("vision", "alice"), member("vision", "bob")
    add_queue(api, "vision", "vision")
    hers = submit(alice, job("a"))["id"]
    his = submit(bob, job("b"))["id"]
    assert api.get(f"/api/v1/jobs/{hers}").json()["submittedBy"] == "alice"
    listed = bob.get("/api/v1/jobs", params={"submittedBy": "bob"}).json()
    assert [j["id"] for j in listed] == [his]
    assert {j["id"] for j in bob.get("/api/v1/jobs").json()} == {hers, his}


def test_states_in_any_case(api: TestClient) -> None:
    made = submit(api, job())["id"]
    for word in ("pending", "PENDING", "Pending"):
        listed = api.get("/api/v1/jobs", params={"state": word}).json()
        assert [j["id"] for j in listed] == [made], word
    assert api.get("/api/v1/jobs", params={"state": "running"}).json() == []
    answer = api.get("/api/v1/jobs", params={"state": "pendin"})
    problems = answer.json()["error"]["problems"]
    assert answer.status_code == 422 and problems[0]["field"] == "state[0]"
    assert "'Pending'" in problems[0]["message"] and "'Cancelled'" in problems[0]["message"]
