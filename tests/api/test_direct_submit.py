"""``POST /api/v1/jobs`` answered straight by its endpoint (``kiban.api.direct_submit``) gives
the answers FastAPI's routing gives, byte for byte, for good and bad submissions, and the same
audit records; and it does skip FastAPI's dependency solving."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import fastapi.routing
import pytest
import sqlalchemy.exc
import yaml
from fastapi.testclient import TestClient

from kiban.api.app import create_app
from kiban.platform import Platform

JOBS = "/api/v1/jobs"
Response = Any  # what a TestClient answers


def manifest(name: str = "train", **spec: Any) -> dict[str, Any]:
    task = {"name": "worker", "replicas": 1, "resources": {"gpu": 1}, "command": ["true"]}
    return {
        "apiVersion": "kiban/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"tasks": [task], **spec},
    }


class Pair:
    """The same platform's API twice: submissions answered directly, and routed by FastAPI."""

    def __init__(self, platform: Platform, token: str) -> None:
        self.platform = platform
        routed_app = create_app(platform)
        routed_app.direct_submit = False
        headers = {"Authorization": f"Bearer {token}"}
        # a failure is answered 500 by the app (and raised to the server after): the answer
        self.direct = TestClient(
            create_app(platform), headers=headers, raise_server_exceptions=False
        )
        self.routed = TestClient(routed_app, headers=headers, raise_server_exceptions=False)

    def both(self, send: Callable[[TestClient], Response]) -> tuple[Response, Response]:
        """The answer of each, and each one's audit record the same as the other's."""
        before = self._records()
        direct = send(self.direct)
        direct_records = self._records()[len(before) :]
        routed = send(self.routed)
        routed_records = self._records()[len(before) + len(direct_records) :]
        assert [_record(r, direct) for r in direct_records] == [
            _record(r, routed) for r in routed_records
        ]
        assert direct.status_code == routed.status_code, (direct.text, routed.text)
        assert direct.headers.multi_items() == routed.headers.multi_items()
        assert _normalized(direct) == _normalized(routed)
        return direct, routed

    def _records(self) -> list[dict[str, Any]]:
        answer = self.routed.get("/api/v1/audit", params={"limit": 10000})
        assert answer.status_code == 200, answer.text
        return list(reversed(answer.json()))


def _created_id(response: Response) -> str | None:
    if response.status_code != 201:
        return None
    return str(response.json()["id"])


def _normalized(response: Response) -> bytes:
    """The body, with the id the submission was given (random) left out."""
    made = _created_id(response)
    body = bytes(response.content)
    return body if made is None else body.replace(made.encode(), b"<id>")


def _record(record: dict[str, Any], response: Response) -> dict[str, Any]:
    kept = {k: v for k, v in record.items() if k not in ("seq", "hash", "prevHash", "prev_hash")}
    made = _created_id(response)
    if made is not None and kept.get("target") == made:
        kept["target"] = "<id>"
    return kept


@pytest.fixture
def pair(platform: Platform, admin_token: str) -> Iterator[Pair]:
    made = Pair(platform, admin_token)
    with made.direct, made.routed:
        yield made


@pytest.fixture
def solved(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times FastAPI solved a route's dependencies."""
    calls: list[int] = []
    solve = getattr(fastapi.routing, "solve_dependencies")  # noqa: B009 (not exported)

    async def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return await solve(*args, **kwargs)

    monkeypatch.setattr(fastapi.routing, "solve_dependencies", counted)
    return calls


def test_a_submission_skips_fastapis_routing_and_gets_the_same_answer(
    pair: Pair, solved: list[int]
) -> None:
    direct = pair.direct.post(JOBS, json=manifest())
    assert direct.status_code == 201, direct.text
    assert solved == []  # answered by the endpoint itself
    routed = pair.routed.post(JOBS, json=manifest())
    assert solved  # FastAPI's route, as before
    assert direct.headers.multi_items() == routed.headers.multi_items()
    assert _normalized(direct) == _normalized(routed)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(json.dumps(manifest()).encode(), id="good"),
        pytest.param(b'{"apiVersion": "kiban/v1", "kind": "Job"', id="malformed-json"),
        pytest.param(b"[1, 2]", id="not-an-object"),
        pytest.param(json.dumps(manifest(name="Not_A_Name")).encode(), id="bad-name"),
        pytest.param(json.dumps(manifest(queue="nope")).encode(), id="unknown-queue"),
        pytest.param(json.dumps({**manifest(), "spec": {"tasks": []}}).encode(), id="no-tasks"),
        pytest.param(json.dumps(manifest(priority="high")).encode(), id="bad-field-type"),
        pytest.param(
            json.dumps(manifest(array={"indices": "0-3", "parallelism": 2})).encode(), id="array"
        ),
        pytest.param(
            json.dumps(manifest(array={"indices": "5-1"})).encode(), id="array-bad-indices"
        ),
    ],
)
def test_json_submissions_are_answered_alike(pair: Pair, body: bytes) -> None:
    direct, _ = pair.both(lambda c: c.post(JOBS, content=body, headers=_json()))
    assert direct.status_code in (201, 400, 404, 422), direct.text


def test_yaml_and_unknown_media_types_are_answered_alike(pair: Pair) -> None:
    text = yaml.safe_dump(manifest())
    for media in ("application/yaml", "text/yaml", "text/plain"):
        pair.both(_post(text.encode(), {"Content-Type": media}))
    direct, _ = pair.both(
        lambda c: c.post(JOBS, content=b"a: [", headers={"Content-Type": "application/yaml"})
    )
    assert direct.status_code in (400, 422)


def test_refusals_before_the_endpoint_are_answered_alike(pair: Pair) -> None:
    body = json.dumps(manifest()).encode()
    for headers in (
        {"Authorization": ""},  # no token
        {"Authorization": "Bearer not-a-token"},
        {"Content-Length": str(64 * 2**20)},  # declared past the limit: 413
    ):
        direct, _ = pair.both(_post(body, {**_json(), **headers}))
        assert direct.status_code in (401, 413)


def test_a_chunked_body_past_the_limit_is_413_alike(pair: Pair) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(40):
            yield b" " * (64 * 1024)  # 2.5 MiB in all, no Content-Length

    direct, _ = pair.both(lambda c: c.post(JOBS, content=chunks(), headers=_json()))
    assert direct.status_code == 413


def test_a_role_that_may_not_submit_is_403_alike(pair: Pair) -> None:
    assert pair.direct.post("/api/v1/tenants", json={"name": "vision"}).status_code == 201
    made = pair.direct.post("/api/v1/tenants/vision/tokens", json={"name": "vic", "role": "viewer"})
    assert made.status_code == 201, made.text
    viewer = {"Authorization": f"Bearer {made.json()['token']}"}
    direct, _ = pair.both(lambda c: c.post(JOBS, json=manifest(), headers=viewer))
    assert direct.status_code == 403


def test_a_busy_store_and_a_failure_are_answered_alike(
    pair: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def busy(*_: Any, **__: Any) -> None:
        raise sqlalchemy.exc.TimeoutError("no connection came free")

    monkeypatch.setattr(pair.platform.submissions, "stored", busy)
    direct, _ = pair.both(lambda c: c.post(JOBS, json=manifest()))
    assert (direct.status_code, direct.headers["retry-after"]) == (503, "1")

    async def broken(*_: Any, **__: Any) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(pair.platform.submissions, "stored", broken)
    direct, _ = pair.both(lambda c: c.post(JOBS, json=manifest()))
    assert direct.status_code == 500


def test_at_capacity_a_submission_is_503_alike(pair: Pair) -> None:
    for client in (pair.direct, pair.routed):
        assert client.get("/api/v1/whoami").status_code == 200  # the stack is built
        admission = client.app.middleware_stack.app  # type: ignore[attr-defined]
        admission.requests.held = admission.requests.capacity  # every slot taken
    direct = pair.direct.post(JOBS, json=manifest())
    routed = pair.routed.post(JOBS, json=manifest())
    assert (direct.status_code, routed.status_code) == (503, 503)
    assert direct.headers.multi_items() == routed.headers.multi_items()
    assert direct.content == routed.content


def test_other_methods_and_paths_of_jobs_go_through_fastapi(pair: Pair) -> None:
    pair.both(lambda c: c.get(JOBS))
    pair.both(lambda c: c.put(JOBS, json=manifest()))  # 405 with Allow
    pair.both(lambda c: c.post(JOBS + "/", json=manifest(), follow_redirects=False))


def _json() -> dict[str, str]:
    return {"Content-Type": "application/json"}


def _post(body: bytes, headers: dict[str, str]) -> Callable[[TestClient], Response]:
    return lambda client: client.post(JOBS, content=body, headers=headers)
