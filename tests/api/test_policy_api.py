"""The policy and node endpoints: who may do what, the answers, and the errors (401/403/422/409)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from kiban.api.app import create_app
from kiban.platform import Platform
from kiban.store.models import Event, PolicyVersion, Queue, Tenant
from kiban.store.models_nodes import Node
from kiban.testing import manifest

HOST = "kubernetes.io/hostname"
POLICY: dict[str, Any] = {
    "flavors": [
        {"name": "small", "nodeLabels": {HOST: "node-0"}},
        {"name": "large", "nodeLabels": {}, "queues": ["vision"]},
    ],
    "cohorts": [{"name": "research"}],
    "queues": [
        {"name": "default", "quota": {"small": {"gpu": 2}}},
        {
            "name": "vision",
            "tenant": "vision",
            "cohort": "research",
            "quota": {"large": {"gpu": 4}, "small": {"gpu": 0}},
            "borrowingLimit": {"small": {"gpu": 2}},
            "strategy": "BestEffortFIFO",
        },
    ],
    "priorityClasses": [
        {"name": "batch", "value": 5},
        {"name": "prod", "value": 50, "default": True},
    ],
    "fairShare": {"halfLife": "1d"},
    "topology": {"levels": [{"name": "host", "label": HOST}]},
}


@pytest.fixture
def anonymous(platform: Platform) -> Iterator[TestClient]:
    with TestClient(create_app(platform)) as client:
        yield client


@pytest.fixture
def member(api: TestClient, platform: Platform) -> Iterator[TestClient]:
    """A member of tenant ``default``."""
    token = api.post("/api/v1/tenants/default/tokens", json={"name": "alice"}).json()["token"]
    headers = {"Authorization": f"Bearer {token}"}
    with TestClient(create_app(platform), headers=headers) as client:
        yield client


def stored(platform: Platform) -> dict[str, int]:
    with platform.sessions() as session:
        return {
            model.__tablename__: session.scalar(select(func.count()).select_from(model)) or 0
            for model in (PolicyVersion, Queue, Tenant, Event)
        }


def problems(response: Any) -> list[str]:
    return [p["field"] for p in response.json()["error"]["problems"]]


# -- GET /policy, PUT /policy, GET /policy/versions ------------------------------------------------


def test_anyone_signed_in_reads_the_policy(member: TestClient) -> None:
    answer = member.get("/api/v1/policy")
    assert answer.status_code == 200
    body = answer.json()
    assert (body["version"], body["document"], body["createdBy"]) == (
        1,
        {},
        "kiban up (built-in policy)",
    )
    effective = body["effective"]
    assert [q["name"] for q in effective["queues"]] == ["default"]
    classes = ["low", "interactive", "normal", "serving", "high"]
    assert [c["name"] for c in effective["priorityClasses"]] == classes
    assert effective["fairShare"]["halfLife"] == 7 * 86400


def test_a_member_sees_only_its_tenants_queues_and_cohorts(
    api: TestClient, member: TestClient
) -> None:
    assert api.put("/api/v1/policy", json=POLICY).status_code == 200
    seen = member.get("/api/v1/policy").json()
    for view in (seen["document"], seen["effective"]):
        assert [q["name"] for q in view["queues"]] == ["default"]  # not vision's
        assert view.get("cohorts", []) == []  # research is vision's cohort
        assert [f["name"] for f in view["flavors"]] == ["small", "large"]  # what jobs name
        assert view["flavors"][1]["queues"] == []  # large is vision's alone
    admin = api.get("/api/v1/policy").json()
    assert [q["name"] for q in admin["document"]["queues"]] == ["default", "vision"]


def test_an_admin_replaces_the_policy(api: TestClient, platform: Platform) -> None:
    answer = api.put("/api/v1/policy", json=POLICY)
    assert answer.status_code == 200, answer.text
    change = answer.json()
    assert (change["version"], change["changed"]) == (2, True)
    assert (change["created"], change["updated"], change["drainPlan"]) == (
        ["vision"],
        ["default"],
        [],
    )
    assert change["message"].startswith("policy version 2 applied")
    current = api.get("/api/v1/policy").json()
    assert (current["version"], current["document"], current["createdBy"]) == (2, POLICY, "admin")
    assert current["effective"]["fairShare"]["halfLife"] == 86400
    again = api.put("/api/v1/policy", json=POLICY).json()
    assert (again["version"], again["changed"]) == (2, False)
    versions = api.get("/api/v1/policy/versions").json()
    assert [(v["version"], v["createdBy"]) for v in versions] == [
        (2, "admin"),
        (1, "kiban up (built-in policy)"),
    ]
    assert versions[0]["document"] == POLICY
    assert [v["version"] for v in api.get("/api/v1/policy/versions?limit=1").json()] == [2]
    queues = {q["name"]: q for q in api.get("/api/v1/queues").json()}
    flavors = queues["vision"].pop("flavors")
    assert queues["vision"] | {"gpusInUse": 0} == {
        "name": "vision",
        "tenant": "vision",
        "cohort": "research",
        "quota": {"large": {"gpu": 4}, "small": {"gpu": 0}},
        "borrowingLimit": {"small": {"gpu": 2}},
        "lendingLimit": {},
        "strategy": "BestEffortFIFO",
        "fairShareWeight": 1.0,
        "gpuQuota": 4,
        "gpusInUse": 0,
        "pending": 0,
        "running": 0,
        "pendingGpus": 0,
        "borrowed": 0,
        "lent": 0,
        "overQuota": 0,
        "usage": 0.0,
        "usageGpuHours": 0.0,
        "standing": 0.0,
        "scavenger": False,
    }
    assert [(f["flavor"], f["nominal"], f["borrowingLimit"], f["used"]) for f in flavors] == [
        ("large", 4, None, 0),
        ("small", 0, 2, 0),
    ]
    assert platform.policy.flavor_names == ("small", "large")


def test_a_new_policy_applies_to_the_next_submission_at_once(api: TestClient) -> None:
    assert api.post("/api/v1/jobs", json=manifest(priorityClass="high")).status_code == 201
    assert api.put("/api/v1/policy", json=POLICY).status_code == 200
    refused = api.post("/api/v1/jobs", json=manifest(priorityClass="high"))
    assert refused.status_code == 422
    assert problems(refused) == ["spec.priorityClass"]
    assert "known: batch, prod" in refused.json()["error"]["message"]
    batch_on_one_host = manifest(priorityClass="batch", topology={"level": "host"})
    accepted = api.post("/api/v1/jobs", json=batch_on_one_host)
    assert accepted.status_code == 201, accepted.text
    assert accepted.json()["priority"] == 5
    assert api.post("/api/v1/jobs", json=manifest()).json()["priority"] == 50
    unknown_level = api.post("/api/v1/jobs", json=manifest(topology={"level": "rack"}))
    assert unknown_level.status_code == 422
    assert problems(unknown_level) == ["spec.topology.level"]


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ({**POLICY, "flavours": []}, ["flavours"]),
        ({**POLICY, "nodes": []}, ["nodes"]),
        (
            {**POLICY, "queues": [{"name": "default", "quota": {"gpu": 2}}, *POLICY["queues"][1:]]},
            ["queues[0].quota"],
        ),
        (
            {**POLICY, "cohorts": [{"name": "research", "parent": "research"}]},
            ["cohorts[0].parent"],
        ),
        (
            {
                **POLICY,
                "queues": [
                    {"name": "default", "quota": {"large": {"gpu": 1}}},
                    *POLICY["queues"][1:],
                ],
            },
            ["queues[0].quota.large"],
        ),
        (["not", "an", "object"], [""]),
    ],
    ids=[
        "unknown-key",
        "nodes",
        "gpu-quota-with-flavors",
        "cohort-cycle",
        "restricted-flavor",
        "list",
    ],
)
def test_a_bad_policy_is_a_422_naming_its_fields(
    api: TestClient, platform: Platform, body: Any, fields: list[str]
) -> None:
    before = stored(platform)
    answer = api.put("/api/v1/policy", json=body)
    assert answer.status_code == 422, answer.text
    assert problems(answer) == fields
    assert stored(platform) == before


def test_a_policy_the_store_refuses_is_a_409(api: TestClient, platform: Platform) -> None:
    assert api.put("/api/v1/policy", json=POLICY).status_code == 200
    assert api.post("/api/v1/jobs", json=manifest(queue="vision")).status_code == 201
    before = stored(platform)
    no_node = {
        **POLICY,
        "flavors": [*POLICY["flavors"], {"name": "b200", "nodeLabels": {"gpu": "B200"}}],
    }
    without_vision = {**POLICY, "queues": POLICY["queues"][:1], "flavors": [POLICY["flavors"][0]]}
    for body, message in (
        (no_node, "flavor b200 (gpu=B200) matches none of the 3 nodes"),
        (without_vision, "queue vision is not in the policy but has 1 unfinished job(s)"),
    ):
        answer = api.put("/api/v1/policy", json=body)
        assert answer.status_code == 409, answer.text
        assert message in answer.json()["error"]["message"]
    assert stored(platform) == before


def test_members_read_but_do_not_change_the_policy(member: TestClient, platform: Platform) -> None:
    before = stored(platform)
    for method, path, body in (
        ("PUT", "/api/v1/policy", POLICY),
        ("GET", "/api/v1/policy/versions", None),
        ("POST", "/api/v1/nodes/node-0/cordon", None),
        ("POST", "/api/v1/nodes/node-0/uncordon", None),
    ):
        answer = member.request(method, path, json=body)
        assert answer.status_code == 403, (path, answer.text)
        assert "admin" in answer.json()["error"]["message"]
    assert stored(platform) == before


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/v1/policy"),
        ("PUT", "/api/v1/policy"),
        ("GET", "/api/v1/policy/versions"),
        ("POST", "/api/v1/nodes/node-0/cordon"),
        ("POST", "/api/v1/nodes/node-0/uncordon"),
    ],
)
def test_without_a_token_it_is_a_401(
    anonymous: TestClient, platform: Platform, method: str, path: str
) -> None:
    before = stored(platform)
    answer = anonymous.request(method, path, json=POLICY if method == "PUT" else None)
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"] == "Bearer"
    assert stored(platform) == before


# -- POST /queues adds to the policy --------------------------------------------------------------


def test_a_queue_created_through_the_api_is_in_the_policy(api: TestClient) -> None:
    assert api.put("/api/v1/policy", json=POLICY).status_code == 200
    refused = api.post(
        "/api/v1/queues", json={"name": "nlp", "tenant": "vision", "quota": {"gpu": 2}}
    )
    assert refused.status_code == 422
    assert problems(refused) == ["quota"]
    assert "name the flavor" in refused.json()["error"]["message"]
    body = {"name": "nlp", "tenant": "vision", "quota": {"small": {"gpu": 2}}, "cohort": "research"}
    created = api.post("/api/v1/queues", json=body)
    assert created.status_code == 201, created.text
    assert (created.json()["quota"], created.json()["cohort"]) == (
        {"small": {"gpu": 2}},
        "research",
    )
    current = api.get("/api/v1/policy").json()
    assert current["version"] == 3
    assert current["document"]["queues"][-1] == body


def test_the_queues_say_which_is_a_scavenger_queue(api: TestClient, member: TestClient) -> None:
    spare = {"name": "spare", "quota": {"small": {"gpu": 0}}, "scavenger": True}
    policy = {**POLICY, "queues": [*POLICY["queues"], spare]}
    assert api.put("/api/v1/policy", json=policy).status_code == 200
    listed = api.get("/api/v1/queues").json()
    assert {q["name"]: q["scavenger"] for q in listed} == {
        "default": False,
        "spare": True,
        "vision": False,
    }
    # A member of tenant default sees its scavenger queue marked too.
    mine = {q["name"]: q["scavenger"] for q in member.get("/api/v1/queues").json()}
    assert mine == {"default": False, "spare": True}


# -- nodes: cordon and uncordon --------------------------------------------------------------------


def test_an_admin_cordons_and_uncordons_a_node(api: TestClient, platform: Platform) -> None:
    cordoned = api.post("/api/v1/nodes/node-1/cordon")
    assert cordoned.status_code == 200
    assert (cordoned.json()["name"], cordoned.json()["cordoned"]) == ("node-1", True)
    listed = {n["name"]: n["cordoned"] for n in api.get("/api/v1/nodes").json()}
    assert listed == {"node-0": False, "node-1": True, "node-2": False}
    uncordoned = api.post("/api/v1/nodes/node-1/uncordon")
    assert (uncordoned.status_code, uncordoned.json()["cordoned"]) == (200, False)
    with platform.sessions() as session:
        reasons = session.scalars(
            select(Event.reason)
            .where(Event.object_kind == "Node", Event.object_name == "node-1")
            .order_by(Event.id)
        ).all()
        assert reasons == ["Registered", "Cordoned", "Uncordoned"]
        assert not session.get_one(Node, "node-1").cordoned


@pytest.mark.parametrize("name", ["node-9", "a%00b", "x" * 300])
def test_cordoning_an_unknown_node_is_a_404(api: TestClient, name: str) -> None:
    for action in ("cordon", "uncordon"):
        answer = api.post(f"/api/v1/nodes/{name}/{action}")
        assert answer.status_code == 404
        assert answer.json()["error"]["message"].startswith("node ")
