"""``GET /api/v1/share``: each member's fair share within its tenant, as sshare shows it; a
member sees only its tenant's members, the admin every tenant's."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from kiban.api.app import create_app
from kiban.platform import Platform
from kiban.testing import ManualClock, manifest


def member_client(api: TestClient, platform: Platform, tenant: str, name: str) -> TestClient:
    token = api.post(f"/api/v1/tenants/{tenant}/tokens", json={"name": name}).json()["token"]
    return TestClient(create_app(platform), headers={"Authorization": f"Bearer {token}"})


@pytest.fixture
def clients(
    api: TestClient, platform: Platform, clock: ManualClock
) -> Iterator[dict[str, TestClient]]:
    """alice and bob of vision, carol of speech; alice ran 2 GPUs and carol 1 GPU for 600 s."""
    for tenant in ("vision", "speech"):
        assert api.post("/api/v1/tenants", json={"name": tenant}).status_code == 201
        queue = {"name": f"{tenant}-q", "tenant": tenant}
        assert api.post("/api/v1/queues", json=queue).status_code == 201
    document = api.get("/api/v1/policy").json()["document"]
    document["fairShare"] = {"members": [{"tenant": "vision", "member": "bob", "weight": 3}]}
    assert api.put("/api/v1/policy", json=document).status_code == 200
    people = {
        "alice": member_client(api, platform, "vision", "alice"),
        "bob": member_client(api, platform, "vision", "bob"),
        "carol": member_client(api, platform, "speech", "carol"),
    }
    with people["alice"], people["bob"], people["carol"]:
        for name, tenant, gpus in (("alice", "vision", 2), ("carol", "speech", 1)):
            job = manifest(f"{name}-train", queue=f"{tenant}-q", gpu=gpus)
            assert people[name].post("/api/v1/jobs", json=job).status_code == 201
        for _ in range(2):  # admitted, then the members' usage rows start
            clock.advance(1)
            platform.loop.run_once()
        clock.advance(600)
        platform.loop.run_once()
        yield people


def rows(response: Any) -> dict[tuple[str, str], dict[str, Any]]:
    assert response.status_code == 200, response.text
    return {(r["tenant"], r["member"]): r for r in response.json()}


def test_a_member_sees_its_tenants_members_ranked_by_standing(
    clients: dict[str, TestClient],
) -> None:
    seen = rows(clients["bob"].get("/api/v1/share"))
    assert set(seen) == {("vision", "alice"), ("vision", "bob")}
    alice, bob = seen[("vision", "alice")], seen[("vision", "bob")]
    assert alice["rawUsage"] == pytest.approx(2 * 600)
    assert alice["rawUsageGpuHours"] == pytest.approx(2 * 600 / 3600)
    assert 0.99 * 1200 < alice["usage"] < 1200  # decayed a little over 600 s
    assert (alice["weight"], alice["share"], alice["effective"]) == (1.0, 0.25, 1.0)
    assert (bob["weight"], bob["share"], bob["usage"], bob["effective"]) == (3.0, 0.75, 0.0, 0.0)
    assert (bob["rank"], alice["rank"]) == (1, 2)  # bob used less: his jobs go first
    assert alice["standing"] == pytest.approx(alice["usage"])


def test_a_member_cannot_see_another_tenants_members(clients: dict[str, TestClient]) -> None:
    assert rows(clients["carol"].get("/api/v1/share")).keys() == {("speech", "carol")}
    assert rows(clients["carol"].get("/api/v1/share", params={"tenant": "vision"})) == {}


def test_the_admin_sees_every_tenant_or_one(
    api: TestClient, clients: dict[str, TestClient]
) -> None:
    assert rows(api.get("/api/v1/share")).keys() == {
        ("vision", "alice"),
        ("vision", "bob"),
        ("speech", "carol"),
    }
    only = rows(api.get("/api/v1/share", params={"tenant": "speech"}))
    assert only.keys() == {("speech", "carol")}
    assert only[("speech", "carol")]["rawUsage"] == pytest.approx(600)


def test_a_bad_tenant_filter_is_refused_naming_it(api: TestClient) -> None:
    response = api.get("/api/v1/share", params={"tenant": "Not A Name"})
    assert response.status_code == 422
    assert "tenant" in response.text
