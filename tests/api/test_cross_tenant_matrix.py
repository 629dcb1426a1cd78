"""Every way a member of tenant A (vision) might reach tenant B's (speech) jobs, queues,
services, nodes, tokens, events, logs, checkpoints and policy, as a table (issue 21: "every
cross-tenant attempt through the API was denied").

Each attempt is denied: 404 where the object is B's, answered exactly as for one that does not
exist (so a 403 cannot tell the member that it exists), 403 for what only admins may do, or
an answer with only A's own things. No answer carries B's data (its job ids, log, queue, cohort,
service, member), unless the member wrote it in the request itself; and B's things are as they
were after each attempt.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from kiban.api.app import create_app
from kiban.executors.base import NodeInfo
from kiban.platform import build_platform
from kiban.testing import FakeExecutor, ManualClock, manifest


def service(name: str, queue: str) -> dict[str, Any]:
    return {
        "apiVersion": "kiban/v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"queue": queue, "model": {"name": "m", "storageUri": "file:///m"}},
    }


POLICY = {
    "cohorts": [{"name": "speech-pool"}, {"name": "vision-pool"}],
    "queues": [
        {"name": "default"},
        {"name": "vision-q", "tenant": "vision", "cohort": "vision-pool", "quota": {"gpu": 2}},
        {"name": "speech-q", "tenant": "speech", "cohort": "speech-pool", "quota": {"gpu": 2}},
    ],
}


@dataclass
class Tenants:
    member: TestClient  # alice, of vision (A)
    admin: TestClient
    ids: dict[str, str]  # placeholders: B_RUN, B_DONE, A_RUN
    markers: list[str] = field(default_factory=list)  # B's data, never to be shown to A

    def fill(self, text: str) -> str:
        for key, value in self.ids.items():
            text = text.replace("{" + key + "}", value)
        return text

    def b_state(self) -> Any:
        """What B has, as the admin sees it: jobs, services, policy version, tenants."""
        jobs = self.admin.get("/api/v1/jobs", params={"tenant": "speech"}).json()
        services = self.admin.get("/api/v1/services").json()
        return (
            sorted((j["id"], j["state"], j["attempt"], j["lastCheckpointAt"]) for j in jobs),
            sorted(
                (s["name"], s["state"], len(s["revisions"]))
                for s in services
                if s["tenant"] == "speech"
            ),
            self.admin.get("/api/v1/policy").json()["version"],
            sorted(t["name"] for t in self.admin.get("/api/v1/tenants").json()),
            [n["cordoned"] for n in self.admin.get("/api/v1/nodes").json()],
        )


@pytest.fixture(scope="module")
def tenants(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tenants]:
    tmp = tmp_path_factory.mktemp("tenants")
    clock = ManualClock()
    nodes = [
        NodeInfo(f"node-{i}", gpus=2, cpu_millis=8000, memory=2**35, labels={}) for i in (0, 1)
    ]
    executor = FakeExecutor(nodes, clock=clock)
    platform = build_platform(
        home=tmp / "home", db_url=f"sqlite:///{tmp / 'kiban.db'}", executor=executor, clock=clock
    )
    app = create_app(platform)
    admin_token = (platform.home / "token").read_text().strip()
    with TestClient(app, headers={"Authorization": f"Bearer {admin_token}"}) as admin:
        for name in ("vision", "speech"):
            assert admin.post("/api/v1/tenants", json={"name": name}).status_code == 201
        assert admin.put("/api/v1/policy", json=POLICY).status_code == 200
        alice = admin.post("/api/v1/tenants/vision/tokens", json={"name": "alice"}).json()["token"]
        admin.post("/api/v1/tenants/speech/tokens", json={"name": "bob-of-speech"})
        ids = {}
        for key, name, queue in (
            ("A_RUN", "vision-train", "vision-q"),
            ("B_RUN", "speech-train", "speech-q"),
            ("B_DONE", "speech-eval", "speech-q"),
        ):
            answer = admin.post("/api/v1/jobs", json=manifest(name, queue=queue))
            assert answer.status_code == 201, answer.text
            ids[key] = answer.json()["id"]
        for name, queue in (("vision-svc", "vision-q"), ("speech-svc", "speech-q")):
            assert admin.post("/api/v1/services", json=service(name, queue)).status_code == 201
        platform.loop.run_once()
        clock.advance(30)
        assert admin.post(f"/api/v1/jobs/{ids['B_RUN']}/checkpoint").status_code == 200
        for job_id in ids.values():
            executor.replicas[(job_id, 1, 0)].log.extend(f"log of {job_id}: secret\n".encode())
        executor.finish(ids["B_DONE"], 0, 0)
        platform.loop.run_once()
        markers = [ids["B_RUN"], ids["B_DONE"], "speech-q", "speech-pool", "speech-svc"]
        markers += [f"log of {ids['B_RUN']}", "bob-of-speech"]
        with TestClient(app, headers={"Authorization": f"Bearer {alice}"}) as member:
            yield Tenants(member, admin, ids, markers)
    platform.close()


@dataclass(frozen=True)
class Attempt:
    """An attempt of A's member: the request, the status it must get, and ``like``: B's name in
    it and one that does not exist, for the same request naming that, to be answered alike."""

    method: str
    path: str
    status: int
    params: dict[str, Any] | None = None
    body: Any = None
    like: tuple[str, str] | None = None


MISSING_JOB = "speech-train-zzzzzz"

ATTEMPTS: dict[str, Attempt] = {
    # jobs by id
    "read B's running job": Attempt(
        "GET", "/api/v1/jobs/{B_RUN}", 404, like=("{B_RUN}", MISSING_JOB)
    ),
    "read B's finished job": Attempt(
        "GET", "/api/v1/jobs/{B_DONE}", 404, like=("{B_DONE}", MISSING_JOB)
    ),
    "B's events": Attempt("GET", "/api/v1/jobs/{B_RUN}/events", 404, like=("{B_RUN}", MISSING_JOB)),
    "B's events after an id": Attempt(
        "GET",
        "/api/v1/jobs/{B_RUN}/events",
        404,
        params={"after": 1},
        like=("{B_RUN}", MISSING_JOB),
    ),
    "B's log": Attempt("GET", "/api/v1/jobs/{B_RUN}/logs", 404, like=("{B_RUN}", MISSING_JOB)),
    "B's log, followed": Attempt(
        "GET",
        "/api/v1/jobs/{B_RUN}/logs",
        404,
        params={"follow": True},
        like=("{B_RUN}", MISSING_JOB),
    ),
    "B's log at an offset": Attempt(
        "GET", "/api/v1/jobs/{B_RUN}/logs", 404, params={"offset": 3}, like=("{B_RUN}", MISSING_JOB)
    ),
    "B's finished job's log": Attempt(
        "GET", "/api/v1/jobs/{B_DONE}/logs", 404, like=("{B_DONE}", MISSING_JOB)
    ),
    "cancel B's job": Attempt(
        "POST", "/api/v1/jobs/{B_RUN}/cancel", 404, like=("{B_RUN}", MISSING_JOB)
    ),
    "report B's checkpoint": Attempt(
        "POST", "/api/v1/jobs/{B_RUN}/checkpoint", 404, like=("{B_RUN}", MISSING_JOB)
    ),
    "guess B's id from its name": Attempt("GET", "/api/v1/jobs/speech-train", 404),
    "B's id in upper case": Attempt("GET", "/api/v1/jobs/{B_RUN_UPPER}", 404),
    # lists and filters
    "list every job": Attempt("GET", "/api/v1/jobs", 200, params={"limit": 1000}),
    "filter by B's tenant": Attempt("GET", "/api/v1/jobs", 200, params={"tenant": "speech"}),
    "filter by B's queue": Attempt("GET", "/api/v1/jobs", 200, params={"queue": "speech-q"}),
    "filter by B's job name": Attempt("GET", "/api/v1/jobs", 200, params={"name": "speech-train"}),
    "filter by states and B's tenant": Attempt(
        "GET",
        "/api/v1/jobs",
        200,
        params={"state": ["Running", "Succeeded"], "tenant": "speech"},
    ),
    # submitting
    "submit to B's queue": Attempt(
        "POST",
        "/api/v1/jobs",
        422,
        body=manifest("sneaky", queue="speech-q"),
        like=("speech-q", "nosuch-q"),
    ),
    "submit under B's job's name": Attempt(
        "POST", "/api/v1/jobs", 201, body=manifest("speech-train", queue="vision-q")
    ),
    # queues and the policy
    "list queues": Attempt("GET", "/api/v1/queues", 200),
    "create a queue for B": Attempt(
        "POST", "/api/v1/queues", 403, body={"name": "extra", "tenant": "speech"}
    ),
    "read the policy": Attempt("GET", "/api/v1/policy", 200),
    "replace the policy": Attempt("PUT", "/api/v1/policy", 403, body={"queues": POLICY["queues"]}),
    "read the policy's versions": Attempt("GET", "/api/v1/policy/versions", 403),
    # services
    "list services": Attempt("GET", "/api/v1/services", 200),
    "read B's service": Attempt(
        "GET", "/api/v1/services/speech-svc", 404, like=("speech-svc", "nosuch-svc")
    ),
    "read B's service naming B": Attempt(
        "GET",
        "/api/v1/services/speech-svc",
        404,
        params={"tenant": "speech"},
        like=("speech-svc", "nosuch-svc"),
    ),
    "B's service's events": Attempt(
        "GET", "/api/v1/services/speech-svc/events", 404, like=("speech-svc", "nosuch-svc")
    ),
    "promote B's service": Attempt(
        "POST", "/api/v1/services/speech-svc/promote", 404, like=("speech-svc", "nosuch-svc")
    ),
    "roll B's service back": Attempt(
        "POST", "/api/v1/services/speech-svc/rollback", 404, like=("speech-svc", "nosuch-svc")
    ),
    "delete B's service": Attempt(
        "DELETE", "/api/v1/services/speech-svc", 404, like=("speech-svc", "nosuch-svc")
    ),
    "apply a service in B's queue": Attempt(
        "POST",
        "/api/v1/services",
        422,
        body=service("mine", "speech-q"),
        like=("speech-q", "nosuch-q"),
    ),
    # before the member has a service of that name of its own (the attempt below makes one)
    "call B's service's chat route": Attempt(
        "POST",
        "/api/v1/services/speech-svc/openai/chat/completions",
        404,
        body={"model": "m", "messages": []},
        like=("speech-svc", "nosuch-svc"),
    ),
    "apply a service under B's service's name": Attempt(
        "POST", "/api/v1/services", 201, body=service("speech-svc", "vision-q")
    ),
    # nodes, tenants, tokens
    "list nodes": Attempt("GET", "/api/v1/nodes", 200),
    "cordon a node": Attempt("POST", "/api/v1/nodes/node-0/cordon", 403),
    "uncordon a node": Attempt("POST", "/api/v1/nodes/node-1/uncordon", 403),
    "a node's health": Attempt("GET", "/api/v1/nodes/node-0/health", 200),
    "list tenants": Attempt("GET", "/api/v1/tenants", 200),
    "create a tenant": Attempt("POST", "/api/v1/tenants", 403, body={"name": "speech2"}),
    "mint a token of B": Attempt(
        "POST",
        "/api/v1/tenants/speech/tokens",
        403,
        body={"name": "mallory"},
        like=("speech", "nosuch"),
    ),
    "mint a token of its own tenant": Attempt(
        "POST", "/api/v1/tenants/vision/tokens", 403, body={"name": "mallory"}
    ),
    "who am I": Attempt("GET", "/api/v1/whoami", 200),
    # the dashboard's reads and the chat playground (issue 24)
    "the overview": Attempt("GET", "/api/v1/overview", 200),
    "usage history": Attempt("GET", "/api/v1/usage/history", 200, params={"hours": 2}),
    "a page of jobs naming B": Attempt(
        "GET", "/api/v1/jobs", 200, params={"tenant": "speech", "offset": 0, "limit": 1}
    ),
}


def send(client: TestClient, attempt: Attempt, path: str, body: Any) -> httpx.Response:
    return client.request(attempt.method, path, params=attempt.params, json=body)


def renamed(text: str, name: str, placeholder: str = "NAME") -> str:
    return text.replace(name, placeholder)


@pytest.mark.parametrize("attempt", list(ATTEMPTS.values()), ids=list(ATTEMPTS))
def test_a_member_gets_nothing_of_another_tenant(tenants: Tenants, attempt: Attempt) -> None:
    tenants.ids["B_RUN_UPPER"] = tenants.ids["B_RUN"].upper()
    path = tenants.fill(attempt.path)
    before = tenants.b_state()

    answer = send(tenants.member, attempt, path, attempt.body)

    assert answer.status_code == attempt.status, answer.text
    sent = path + json.dumps(attempt.params) + json.dumps(attempt.body)
    leaked = [m for m in tenants.markers if m in answer.text and m not in sent]
    assert not leaked, f"B's {leaked} in {answer.text}"
    if answer.status_code >= 400:
        assert answer.json()["error"]["status"] == attempt.status
    if answer.status_code == 403:
        message = answer.json()["error"]["message"]  # the role needed, and the caller's own
        assert "role" in message and message.endswith("this token is member alice of vision")
    if attempt.like is not None:  # as for something that does not exist, but for its name
        named, missing = tenants.fill(attempt.like[0]), attempt.like[1]
        body = json.loads(json.dumps(attempt.body).replace(named, missing))
        twin = send(tenants.member, attempt, path.replace(named, missing), body)
        assert twin.status_code == answer.status_code
        assert renamed(twin.text, missing) == renamed(answer.text, named)
    if answer.status_code in (200, 201):
        own = answer.json()
        for item in own if isinstance(own, list) else [own]:
            if "tenant" in item:
                assert item["tenant"] in ("vision", None), item
    assert tenants.b_state() == before
