"""A tenant-admin's queues through the API, on both stores (issue 27, point 4): quota moved
between their queues and a new queue within the ceiling; a raise above it refused (403 naming
the field, the ceiling and the total) and audited as denied; another tenant's queue 404."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from kiban.api.app import create_app
from kiban.platform import Platform


@pytest.fixture
def tina(api: TestClient, platform: Platform) -> Iterator[TestClient]:
    """vision's tenant-admin; vision has vision-q (2 GPUs), speech has speech-q (2 GPUs)."""
    for tenant in ("vision", "speech"):
        assert api.post("/api/v1/tenants", json={"name": tenant}).status_code == 201
        queue = {"name": f"{tenant}-q", "tenant": tenant, "quota": {"gpu": 2}}
        assert api.post("/api/v1/queues", json=queue).status_code == 201
    made = api.post("/api/v1/tenants/vision/tokens", json={"name": "tina", "role": "tenant-admin"})
    assert made.status_code == 201, made.text
    headers = {"Authorization": f"Bearer {made.json()['token']}"}
    with TestClient(create_app(platform), headers=headers) as client:
        yield client


def last_audit(api: TestClient) -> dict[str, Any]:
    answer = api.get("/api/v1/audit", params={"limit": 1})
    assert answer.status_code == 200, answer.text
    record: dict[str, Any] = answer.json()[0]
    return record


def quotas(client: TestClient) -> dict[str, Any]:
    return {q["name"]: q["gpuQuota"] for q in client.get("/api/v1/queues").json()}


def test_a_tenant_admin_moves_quota_within_the_ceiling_and_is_refused_above_it(
    api: TestClient, tina: TestClient
) -> None:
    new_queue = {"name": "vision-dev", "tenant": "vision", "quota": {"gpu": 1}}
    refused = tina.post("/api/v1/queues", json=new_queue)
    assert refused.status_code == 403, refused.text
    error = refused.json()["error"]
    assert [p["field"] for p in error["problems"]] == ["quota.gpu"]
    assert "would hold 3 default gpu in all (now 2), above its ceiling of 2" in error["message"]
    record = last_audit(api)
    assert (record["action"], record["member"], record["role"], record["outcome"]) == (
        "queues.create",
        "tina",
        "tenant-admin",
        "denied",
    )
    assert record["target"] == "vision-dev"  # named by the endpoint from the request

    lowered = tina.patch("/api/v1/queues/vision-q", json={"quota": {"gpu": 1}})
    assert lowered.status_code == 200, lowered.text
    created = tina.post("/api/v1/queues", json=new_queue)
    assert created.status_code == 201, created.text
    assert quotas(tina) == {"vision-q": 1, "vision-dev": 1}

    raised = tina.patch("/api/v1/queues/vision-q", json={"quota": {"gpu": 2}})
    assert raised.status_code == 403, raised.text
    assert [p["field"] for p in raised.json()["error"]["problems"]] == ["quota.gpu"]
    record = last_audit(api)
    assert (record["action"], record["target"], record["outcome"], record["status"]) == (
        "queues.change",
        "vision-q",
        "denied",
        403,
    )
    assert quotas(tina) == {"vision-q": 1, "vision-dev": 1}

    hidden = tina.patch("/api/v1/queues/speech-q", json={"quota": {"gpu": 0}})
    assert hidden.status_code == 404
    cohort = tina.patch("/api/v1/queues/vision-q", json={"cohort": "anything"})
    assert cohort.status_code == 403
    assert [p["field"] for p in cohort.json()["error"]["problems"]] == ["cohort"]
    # the admin is not held to it
    assert api.patch("/api/v1/queues/vision-q", json={"quota": {"gpu": 6}}).status_code == 200


def test_a_queue_is_made_a_scavenger_and_back_through_the_api(
    api: TestClient, tina: TestClient
) -> None:
    """``scavenger`` is set when a queue is created and changed by PATCH (its tenant-admin may:
    a scavenger queue only uses idle capacity); a value that is not a boolean is refused naming
    the field, changing nothing."""

    def scavengers(client: TestClient) -> dict[str, bool]:
        return {q["name"]: q["scavenger"] for q in client.get("/api/v1/queues").json()}

    spare = {"name": "spare-q", "tenant": "speech", "quota": {"gpu": 1}, "scavenger": True}
    created = api.post("/api/v1/queues", json=spare)
    assert created.status_code == 201, created.text
    assert created.json()["scavenger"] is True
    assert scavengers(api)["spare-q"] is True

    made = tina.patch("/api/v1/queues/vision-q", json={"scavenger": True})
    assert made.status_code == 200, made.text
    assert made.json()["scavenger"] is True
    back = tina.patch("/api/v1/queues/vision-q", json={"scavenger": None})
    assert back.status_code == 200, back.text
    assert scavengers(tina) == {"vision-q": False}

    bad = tina.patch("/api/v1/queues/vision-q", json={"scavenger": "sometimes"})
    assert bad.status_code == 422, bad.text
    assert "scavenger" in bad.text
    assert scavengers(tina) == {"vision-q": False}
