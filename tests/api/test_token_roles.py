"""Tokens with roles and lifetimes, and deleting tenants and queues (issue 27, point 4): what a
tenant-admin may and may not do, revoked and expired tokens refused on their next request
(a principal cached a moment ago included), a token's last use noted at most once a minute,
and deletions refused while jobs are unfinished unless drained."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient

from kiban.api.app import create_app
from kiban.executors.base import NodeInfo
from kiban.platform import Platform, build_platform
from kiban.services.auth import authenticate, create_token
from kiban.store.models import ApiToken
from kiban.testing import FakeExecutor, ManualClock, manifest

POLICY = {
    "queues": [
        {"name": "default"},
        {"name": "vision-q", "tenant": "vision", "quota": {"gpu": 2}},
        {"name": "speech-q", "tenant": "speech", "quota": {"gpu": 2}},
    ],
}


@dataclass
class World:
    platform: Platform
    clock: ManualClock
    app: Any
    admin: TestClient

    def client(self, token: str) -> TestClient:
        return TestClient(self.app, headers={"Authorization": f"Bearer {token}"})

    def token(self, tenant: str, member: str, role: str = "member", **extra: Any) -> str:
        body = {"name": member, "role": role, **extra}
        answer = self.admin.post(f"/api/v1/tenants/{tenant}/tokens", json=body)
        assert answer.status_code == 201, answer.text
        return str(answer.json()["token"])


@pytest.fixture
def world(tmp_path: Any) -> Iterator[World]:
    clock = ManualClock()
    nodes = [NodeInfo("node-0", gpus=4, cpu_millis=8000, memory=2**35, labels={})]
    platform = build_platform(
        home=tmp_path / "home",
        db_url=f"sqlite:///{tmp_path / 'kiban.db'}",
        executor=FakeExecutor(nodes, clock=clock),
        clock=clock,
    )
    app = create_app(platform)
    admin_token = (platform.home / "token").read_text().strip()
    with TestClient(app, headers={"Authorization": f"Bearer {admin_token}"}) as admin:
        for name in ("vision", "speech"):
            assert admin.post("/api/v1/tenants", json={"name": name}).status_code == 201
        assert admin.put("/api/v1/policy", json=POLICY).status_code == 200
        yield World(platform, clock, app, admin)
    platform.close()


def error_of(answer: Any, status: int) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    error: dict[str, Any] = answer.json()["error"]
    return error


# -- what a tenant-admin may do -------------------------------------------------------------------
def test_a_tenant_admin_makes_member_and_viewer_tokens_of_their_tenant_only(world: World) -> None:
    with world.client(world.token("vision", "tina", "tenant-admin")) as tina:
        made = tina.post("/api/v1/tenants/vision/tokens", json={"name": "vic", "role": "viewer"})
        assert made.status_code == 201, made.text
        assert made.json()["role"] == "viewer"
        with world.client(made.json()["token"]) as vic:
            assert vic.get("/api/v1/whoami").json()["role"] == "viewer"
        for role in ("tenant-admin", "admin"):
            body = {"name": "eve", "role": role}
            error = error_of(tina.post("/api/v1/tenants/vision/tokens", json=body), 403)
            assert f"a token with the {role} role needs an admin" in error["message"]
        error = error_of(tina.post("/api/v1/tenants/speech/tokens", json={"name": "eve"}), 403)
        assert "tenant-admin of speech" in error["message"]
        error = error_of(tina.get("/api/v1/tokens", params={"tenant": "speech"}), 403)
        assert "listing tokens of tenant speech" in error["message"]
        listed = tina.get("/api/v1/tokens").json()
        assert {(t["tenant"], t["member"], t["role"]) for t in listed} == {
            ("vision", "tina", "tenant-admin"),
            ("vision", "vic", "viewer"),
        }


def test_a_tenant_admin_changes_their_queues_strategy_not_beyond_their_quota(
    world: World,
) -> None:
    with world.client(world.token("vision", "tina", "tenant-admin")) as tina:
        changed = tina.patch("/api/v1/queues/vision-q", json={"strategy": "BestEffortFIFO"})
        assert changed.status_code == 200, changed.text
        policy = world.admin.get("/api/v1/policy").json()["document"]
        entry = next(q for q in policy["queues"] if q["name"] == "vision-q")
        assert entry == {**POLICY["queues"][1], "strategy": "BestEffortFIFO"}
        raise_quota = {"strategy": "StrictFIFO", "quota": {"gpu": 64}}
        error = error_of(tina.patch("/api/v1/queues/vision-q", json=raise_quota), 403)
        assert [p["field"] for p in error["problems"]] == ["quota.gpu"]
        error = error_of(tina.patch("/api/v1/queues/vision-q", json={"strategy": "Whim"}), 422)
        assert [p["field"] for p in error["problems"]] == ["strategy"]
        error_of(tina.patch("/api/v1/queues/speech-q", json={"strategy": "StrictFIFO"}), 404)
        new_queue = {"name": "more", "tenant": "vision", "quota": {"gpu": 8}}
        error = error_of(tina.post("/api/v1/queues", json=new_queue), 403)
        assert [p["field"] for p in error["problems"]] == ["quota.gpu"]


def test_a_member_cancels_their_own_jobs_not_a_teammates(world: World) -> None:
    alice_token, bob_token = world.token("vision", "alice"), world.token("vision", "bob")
    tina_token = world.token("vision", "tina", "tenant-admin")
    with world.client(alice_token) as alice, world.client(bob_token) as bob:
        hers = alice.post("/api/v1/jobs", json=manifest("a", queue="vision-q")).json()["id"]
        assert bob.get(f"/api/v1/jobs/{hers}").status_code == 200  # sees the tenant's
        error = error_of(bob.post(f"/api/v1/jobs/{hers}/cancel"), 403)
        assert "submitted by alice" in error["message"]
        assert "this token is member bob of vision" in error["message"]
        assert bob.get(f"/api/v1/jobs/{hers}").json()["state"] == "Pending"
        with world.client(tina_token) as tina:
            assert tina.post(f"/api/v1/jobs/{hers}/cancel").status_code == 200


# -- tokens' lives --------------------------------------------------------------------------------
def test_a_revoked_token_is_refused_on_its_next_request(world: World) -> None:
    token = world.token("vision", "alice")
    with world.client(token) as alice:
        assert alice.get("/api/v1/jobs").status_code == 200  # its principal is cached now
        token_id = next(
            t["id"] for t in world.admin.get("/api/v1/tokens").json() if t["member"] == "alice"
        )
        revoked = world.admin.delete(f"/api/v1/tokens/{token_id}")
        assert revoked.status_code == 200 and revoked.json()["member"] == "alice"
        assert revoked.json()["revokedAt"] == world.clock.now()
        error = error_of(alice.get("/api/v1/jobs"), 401)
        assert error["message"] == f"token {token_id} (alice) was revoked; ask for a new one"
    error = error_of(world.admin.delete(f"/api/v1/tokens/{token_id}"), 409)
    assert "revoked already, by admin" in error["message"]
    # kept as a revoked row: listed with all=true only
    assert "alice" not in {t["member"] for t in world.admin.get("/api/v1/tokens").json()}
    every = world.admin.get("/api/v1/tokens", params={"all": "true"}).json()
    (row,) = [t for t in every if t["member"] == "alice"]
    assert (row["id"], row["revokedBy"], row["revokedAt"]) == (token_id, "admin", world.clock.now())


def test_a_token_read_while_it_is_revoked_is_not_cached(world: World) -> None:
    """A request whose caller was read from the store just before the revocation committed
    (it cleared the cache meanwhile) does not leave that caller cached: the next is refused."""
    token = world.token("vision", "alice")
    header = f"Bearer {token}"
    lookups = world.platform.lookups
    since = lookups.generation  # the in-flight request reads its caller ...
    with world.platform.sessions() as session:
        caller = authenticate(session, header, world.clock.now())
    token_id = caller.token_id
    assert world.admin.delete(f"/api/v1/tokens/{token_id}").status_code == 200  # ... revoked ...
    lookups.put(("principal", header), caller, since)  # ... and it keeps what it read
    assert lookups.peek(("principal", header)) is None
    with world.client(token) as alice:
        error_of(alice.get("/api/v1/jobs"), 401)


def test_the_last_admin_token_cannot_be_revoked(world: World) -> None:
    """Revoking the only admin token would leave nobody to administer the cluster: 409, and it
    still works; once there is another, it may go."""
    (first,) = [t["id"] for t in world.admin.get("/api/v1/tokens").json() if t["role"] == "admin"]
    error = error_of(world.admin.delete(f"/api/v1/tokens/{first}"), 409)
    assert "last admin token" in error["message"]
    assert world.admin.get("/api/v1/tokens").status_code == 200
    with world.platform.sessions() as session:
        second = create_token(session, name="ops", tenant=None, admin=True, at=world.clock.now())
        session.commit()
    with world.client(second) as ops:
        assert ops.delete(f"/api/v1/tokens/{first}").status_code == 200
        error_of(world.admin.get("/api/v1/tokens"), 401)  # the first is refused from now on
        assert ops.get("/api/v1/tokens").status_code == 200


def test_an_expired_token_is_refused_even_while_cached(world: World) -> None:
    made = world.admin.post(
        "/api/v1/tenants/vision/tokens", json={"name": "alice", "expires": "1h"}
    ).json()
    assert made["expiresAt"] == pytest.approx(world.clock.now() + 3600)
    with world.client(made["token"]) as alice:
        assert alice.get("/api/v1/jobs").status_code == 200
        world.clock.advance(3600)
        error = error_of(alice.get("/api/v1/jobs"), 401)
        assert "expired" in error["message"]


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        ({"name": "x", "role": "root"}, "role", "'viewer'"),
        ({"name": "x", "role": "job"}, "role", "'viewer'"),  # made for jobs, by kiban only
        ({"name": "x", "expires": "soon"}, "expires", "pattern"),
        ({"name": "x", "expires": "0d"}, "expires", "pattern"),
        ({"name": "x", "expires": "9" * 40}, "expires", "pattern"),
    ],
)
def test_a_bad_role_or_lifetime_names_its_field(
    world: World, body: dict[str, Any], field: str, says: str
) -> None:
    error = error_of(world.admin.post("/api/v1/tenants/vision/tokens", json=body), 422)
    assert [p["field"] for p in error["problems"]] == [field]
    assert says in error["problems"][0]["message"]


def test_listing_never_shows_a_secret_and_notes_last_use_once_a_minute(world: World) -> None:
    token = world.token("vision", "alice")
    listed = world.admin.get("/api/v1/tokens").json()
    text = str(listed)
    assert token not in text and token[4:] not in text
    with world.platform.sessions() as session:
        row = session.query(ApiToken).filter(ApiToken.name == "alice").one()
        assert row.token_hash not in text
        header = f"Bearer {token}"
        start = world.clock.now()
        for offset, noted in ((0, 0), (30, 0), (59, 0), (60, 60), (90, 60)):
            authenticate(session, header, start + offset)
            session.commit()
            session.refresh(row)
            assert row.last_used_at == start + noted, offset


# -- deleting -------------------------------------------------------------------------------------
def test_a_queue_with_unfinished_jobs_is_deleted_only_by_draining(world: World) -> None:
    job = world.admin.post("/api/v1/jobs", json=manifest("a", queue="vision-q")).json()["id"]
    world.platform.loop.run_once()
    error = error_of(world.admin.delete("/api/v1/queues/vision-q"), 409)
    assert "1 unfinished job(s)" in error["message"] and job in error["message"]
    assert world.admin.get(f"/api/v1/jobs/{job}").json()["state"] == "Running"
    draining = world.admin.delete("/api/v1/queues/vision-q", params={"drain": "true"})
    assert draining.status_code == 202, draining.text
    assert draining.json() | {"message": ""} == {
        "deleted": False,
        "stopping": 1,
        "cancelled": 1,
        "services": [],
        "message": "",
    }
    world.platform.loop.run_once()
    world.clock.advance(60)
    world.platform.loop.run_once()
    done = world.admin.delete("/api/v1/queues/vision-q", params={"drain": "true"})
    assert done.status_code == 200, done.text
    assert done.json()["deleted"] is True
    assert world.admin.get(f"/api/v1/jobs/{job}").json()["state"] == "Cancelled"
    assert "vision-q" not in {q["name"] for q in world.admin.get("/api/v1/queues").json()}


def test_deleting_a_tenant_revokes_its_tokens_and_keeps_its_history(world: World) -> None:
    token = world.token("vision", "alice")
    with world.client(token) as alice:
        job = alice.post("/api/v1/jobs", json=manifest("a", queue="vision-q")).json()["id"]
        error = error_of(world.admin.delete("/api/v1/tenants/vision"), 409)
        assert "tenant vision holds 1 unfinished job(s)" in error["message"]
        error_of(alice.delete("/api/v1/tenants/vision"), 403)
        drained = world.admin.delete("/api/v1/tenants/vision", params={"drain": "true"})
        assert drained.status_code == 200, drained.text  # a pending job is cancelled at once
        error_of(alice.get("/api/v1/jobs"), 401)
    every = world.admin.get("/api/v1/tokens", params={"tenant": "vision", "all": "true"}).json()
    assert [(t["member"], t["revokedBy"]) for t in every] == [("alice", "admin")]
    assert world.admin.get(f"/api/v1/jobs/{job}").json()["state"] == "Cancelled"
    assert [t["name"] for t in world.admin.get("/api/v1/tenants").json()] == ["default", "speech"]
    queues = {q["name"] for q in world.admin.get("/api/v1/queues").json()}
    assert queues == {"default", "speech-q"}
    error_of(world.admin.delete("/api/v1/tenants/vision"), 404)
    assert world.admin.post("/api/v1/tenants", json={"name": "vision"}).status_code == 201


def test_draining_a_tenant_deletes_its_services_and_their_replicas_end(world: World) -> None:
    service = {
        "apiVersion": "kiban/v1",
        "kind": "Service",
        "metadata": {"name": "chat"},
        "spec": {
            "queue": "vision-q",
            "model": {"name": "m", "storageUri": "file:///models/m"},
            "resources": {"gpu": 1},
        },
    }
    with world.client(world.token("vision", "alice")) as alice:
        assert alice.post("/api/v1/services", json=service).status_code == 201
    world.platform.services.run_once()  # its replica
    world.platform.loop.run_once()
    error = error_of(world.admin.delete("/api/v1/tenants/vision"), 409)
    assert "service(s) chat" in error["message"] and "--drain" in error["message"]
    draining = world.admin.delete("/api/v1/tenants/vision", params={"drain": "true"})
    assert draining.status_code == 202, draining.text
    assert (draining.json()["cancelled"], draining.json()["services"]) == (1, ["chat"])
    assert world.admin.get("/api/v1/services/chat").json()["state"] == "Deleting"
    for _ in range(3):  # the replica ends after its grace, then the controller removes chat
        world.platform.services.run_once()
        world.platform.loop.run_once()
        world.clock.advance(60)
    done = world.admin.delete("/api/v1/tenants/vision", params={"drain": "true"})
    assert done.status_code == 200 and done.json()["deleted"] is True, done.text
    assert world.admin.get("/api/v1/services").json() == []


def test_a_policy_naming_a_deleted_tenants_queue_restores_the_tenant(world: World) -> None:
    assert world.admin.delete("/api/v1/tenants/vision").status_code == 200
    assert world.admin.put("/api/v1/policy", json=POLICY).status_code == 200
    assert "vision" in {t["name"] for t in world.admin.get("/api/v1/tenants").json()}
