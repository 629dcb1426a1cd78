"""``/api/v1/budgets``: members see their tenant's budgets and extensions, only admins grant
extensions, and a bad extension is a 422 naming the field."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from kiban.api.app import create_app
from kiban.platform import Platform

POLICY = {
    "queues": [{"name": "vision-q", "tenant": "vision"}, {"name": "speech-q", "tenant": "speech"}],
    "budgets": [
        {"tenant": "vision", "gpuHours": 500, "action": "hold"},
        {"tenant": "speech", "gpuHours": 100, "action": "warn"},
    ],
}


@pytest.fixture
def member(api: TestClient, platform: Platform) -> Iterator[TestClient]:
    """alice, a member of tenant vision, once the policy declares the budgets."""
    for tenant in ("vision", "speech"):
        assert api.post("/api/v1/tenants", json={"name": tenant}).status_code == 201
    assert api.put("/api/v1/policy", json=POLICY).status_code == 200
    token = api.post("/api/v1/tenants/vision/tokens", json={"name": "alice"}).json()["token"]
    with TestClient(create_app(platform), headers={"Authorization": f"Bearer {token}"}) as c:
        yield c


def test_members_see_their_tenants_budgets_and_admins_all(
    api: TestClient, member: TestClient
) -> None:
    everything = api.get("/api/v1/budgets")
    assert everything.status_code == 200, everything.text
    assert [b["budget"] for b in everything.json()] == ["vision", "speech"]
    mine = member.get("/api/v1/budgets").json()
    assert [(b["budget"], b["used"], b["limit"], b["state"]) for b in mine] == [
        ("vision", 0.0, 500.0, "ok")
    ]


def test_only_an_admin_extends_and_the_extension_is_recorded(
    api: TestClient, member: TestClient
) -> None:
    refused = member.post("/api/v1/budgets/extensions", json={"tenant": "vision", "gpuHours": 9})
    assert refused.status_code == 403, refused.text
    granted = api.post(
        "/api/v1/budgets/extensions",
        json={"tenant": "vision", "gpuHours": 100, "until": "2099-01-31", "note": "deadline"},
    )
    assert granted.status_code == 201, granted.text
    assert granted.json()["grantedBy"] and granted.json()["amount"] == 100
    (vision,) = member.get("/api/v1/budgets").json()
    assert (vision["limit"], vision["extended"]) == (600.0, 100.0)
    assert [e["budget"] for e in member.get("/api/v1/budgets/extensions").json()] == ["vision"]
    api.post("/api/v1/budgets/extensions", json={"tenant": "speech", "gpuHours": 5})
    assert [e["budget"] for e in member.get("/api/v1/budgets/extensions").json()] == ["vision"]


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"tenant": "vision", "cost": 5}, 422, "cost"),
        ({"tenant": "vision", "gpuHours": 0}, 422, "gpuHours"),
        ({"tenant": "vision", "gpuHours": 5, "until": "2001-01-01"}, 422, "until"),
        ({"tenant": "vision", "gpuHours": 5, "until": "soon"}, 422, "until"),
        ({"tenant": "nlp", "gpuHours": 5}, 404, None),
    ],
)
def test_a_bad_extension_is_refused(
    api: TestClient, member: TestClient, body: dict[str, object], status: int, field: str | None
) -> None:
    answer = api.post("/api/v1/budgets/extensions", json=body)
    assert answer.status_code == status, answer.text
    if field is not None:
        assert field in answer.text


def test_a_member_reads_only_its_tenants_budgets_in_the_policy(
    api: TestClient, member: TestClient
) -> None:
    for form in ("document", "effective"):
        shown = member.get("/api/v1/policy").json()[form]["budgets"]
        assert [b["tenant"] for b in shown] == ["vision"], form
    assert len(api.get("/api/v1/policy").json()["document"]["budgets"]) == 2
