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
