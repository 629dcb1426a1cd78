"""The API describes itself, and answers health checks without a token."""

from __future__ import annotations

from typing import Any, cast

import jsonschema_rs
from fastapi.testclient import TestClient

from kiban import __version__
from kiban.api.app import create_app
from kiban.domain.states import JobState
from kiban.platform import Platform

DOCUMENT = create_app(cast(Platform, None)).openapi()  # the routes need no platform to be listed

EXPECTED = {
    "/api/v1/jobs": {"get", "post"},
    "/api/v1/jobs/{job_id}": {"get"},
    "/api/v1/jobs/{job_id}/cancel": {"post"},
    "/api/v1/jobs/{job_id}/checkpoint": {"post"},
    "/api/v1/jobs/{job_id}/events": {"get"},
    "/api/v1/jobs/{job_id}/logs": {"get"},
    "/api/v1/whoami": {"get"},
    "/api/v1/queues": {"get", "post"},
    "/api/v1/nodes": {"get"},
    "/api/v1/nodes/{name}/cordon": {"post"},
    "/api/v1/nodes/{name}/uncordon": {"post"},
    "/api/v1/nodes/{name}/health": {"get", "post"},
    "/api/v1/nodes/health": {"post"},
    "/api/v1/policy": {"get", "put"},
    "/api/v1/policy/versions": {"get"},
    "/api/v1/budgets": {"get"},
    "/api/v1/budgets/extensions": {"get", "post"},
    "/api/v1/tenants": {"get", "post"},
    "/api/v1/tenants/{tenant}/tokens": {"post"},
    "/api/v1/discovery/prometheus": {"get"},
}


def test_openapi_lists_the_v1_paths(platform: Platform) -> None:
    with TestClient(create_app(platform)) as anonymous:  # the schema is public
        response = anonymous.get("/openapi.json")
    assert response.status_code == 200
    schema = response.json()
    assert schema["openapi"].startswith("3.")
    assert schema["info"]["title"] == "kiban"
    assert schema["info"]["version"] == __version__
    paths = schema["paths"]
    for path, methods in EXPECTED.items():
        assert path in paths, path
        assert methods <= set(paths[path]), (path, set(paths[path]))
    # Every API path is versioned; only the health check and Prometheus's /metrics (where
    # Prometheus looks by default) live outside /api/v1.
    assert {p for p in paths if not p.startswith("/api/v1/")} == {"/healthz", "/metrics"}


def test_openapi_documents_what_the_endpoints_take(api: TestClient) -> None:
    paths = api.get("/openapi.json").json()["paths"]
    submit = paths["/api/v1/jobs"]["post"]
    assert set(submit["requestBody"]["content"]) == {"application/json", "application/yaml"}
    assert "201" in submit["responses"]
    listing = {p["name"] for p in paths["/api/v1/jobs"]["get"]["parameters"]}
    assert {"state", "queue", "tenant", "name", "limit"} <= listing
    logs = {p["name"] for p in paths["/api/v1/jobs/{job_id}/logs"]["get"]["parameters"]}
    assert {"job_id", "rank", "follow", "offset"} <= logs
    assert "text/plain" in paths["/api/v1/jobs/{job_id}/logs"]["get"]["responses"]["200"]["content"]


def test_healthz_needs_no_token(platform: Platform) -> None:
    with TestClient(create_app(platform)) as anonymous:
        response = anonymous.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_unknown_path_is_a_json_404(api: TestClient) -> None:
    response = api.get("/api/v2/jobs")
    assert response.status_code == 404
    assert response.json()["error"]["status"] == 404


def test_wrong_method_is_a_json_405_with_allow(api: TestClient) -> None:
    response = api.delete("/api/v1/jobs")
    assert response.status_code == 405
    assert response.json()["error"]["status"] == 405
    # Every method of the path, not only the first route's (Starlette's own 405 names one).
    assert response.headers["allow"] == "GET, OPTIONS, POST"


def test_options_and_405_list_every_method_of_the_path(platform: Platform) -> None:
    """OPTIONS needs no token and answers what the document says (a generated client's view);
    any other method gets a JSON 405 with the same Allow."""
    with TestClient(create_app(platform)) as anonymous:
        for path, declared in DOCUMENT["paths"].items():
            methods = {method.upper() for method in declared}
            url = path.replace("{job_id}", "train-abcdef").replace("{name}", "x")
            url = url.replace("{tenant}", "t")
            allow = ", ".join(sorted(methods | {"OPTIONS"}))
            options = anonymous.options(url)
            assert (options.status_code, options.headers["allow"]) == (204, allow), path
            assert options.content == b""
            for method in sorted({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"} - methods):
                refused = anonymous.request(method, url)
                assert refused.status_code == 405, (method, path, refused.text)
                assert refused.headers["allow"] == allow
                if method != "HEAD":
                    assert refused.json()["error"]["status"] == 405


def test_every_error_a_route_may_answer_is_declared_with_the_error_body() -> None:
    for path, declared in DOCUMENT["paths"].items():
        for method, operation in declared.items():
            codes = {int(code) for code in operation["responses"]}
            assert {408, 431} <= codes, (method, path)  # the server's bounds, before routing
            # admission's, before the body is read (any method's), on all but the open paths
            if path not in {"/healthz", "/metrics", "/api/v1/discovery/prometheus"}:
                assert {401, 413, 503} <= codes, (method, path)
            if "{" in path:
                assert 404 in codes, (method, path)
            for code, answer in operation["responses"].items():
                if int(code) >= 400:
                    schema = answer["content"]["application/json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/ErrorBody"}, (method, path)
    assert DOCUMENT["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"


def test_a_job_state_filter_is_an_enum_and_an_empty_one_is_refused(api: TestClient) -> None:
    parameters = DOCUMENT["paths"]["/api/v1/jobs"]["get"]["parameters"]
    (state,) = [p for p in parameters if p["name"] == "state"]
    assert state["schema"]["anyOf"][0]["items"] == {"$ref": "#/components/schemas/JobState"}
    assert DOCUMENT["components"]["schemas"]["JobState"]["enum"] == [s.value for s in JobState]
    refused = api.get("/api/v1/jobs", params={"state": ""})
    assert refused.status_code == 422
    assert [p["field"] for p in refused.json()["error"]["problems"]] == ["state[0]"]


POLICY = jsonschema_rs.validator_for(  # the validator Schemathesis checks with
    DOCUMENT["paths"]["/api/v1/policy"]["put"]["requestBody"]["content"]["application/json"][
        "schema"
    ]
)


REFUSED_POLICIES: dict[str, dict[str, Any]] = {
    "unknown key": {"\u00b6": None},  # the key the fuzzing found the schema let through
    "nodes": {"nodes": []},
    "unknown queue key": {"queues": [{"name": "a", "quota": {"gpu": 1}, "colour": "red"}]},
    "bad name": {"queues": [{"name": "Not_A_Label"}]},
    "no name": {"queues": [{"tenant": "t"}]},
    "list for a duration": {"fairShare": {"halfLife": []}},
}
ACCEPTED_POLICIES: dict[str, dict[str, Any]] = {
    "empty": {},
    "queues": {
        "queues": [{"name": "default"}, {"name": "vision", "tenant": "vision", "quota": {"gpu": 2}}]
    },
    "flavor and a duration": {
        "flavors": [{"name": "h100", "nodeLabels": {"kubernetes.io/hostname": "node-0"}}],
        "fairShare": {"halfLife": "12h"},
    },
    "priority class": {
        "priorityClasses": [{"name": "low", "value": 1, "default": True, "minRuntime": "5m"}]
    },
}


def test_the_policy_schema_takes_what_the_server_takes_and_refuses_what_it_refuses(
    api: TestClient,
) -> None:
    for why, document in REFUSED_POLICIES.items():
        assert not POLICY.is_valid(document), why
        assert api.put("/api/v1/policy", json=document).status_code == 422, why
    for why, document in ACCEPTED_POLICIES.items():
        assert POLICY.is_valid(document), why
        answer = api.put("/api/v1/policy", json=document)
        assert answer.status_code == 200, (why, answer.text)


def test_a_name_with_a_trailing_newline_is_refused(api: TestClient) -> None:
    """A name pattern ends with ``$``, which Python's re.match lets match before a final
    newline; the schema's (JSON Schema) does not, and neither does the server now."""
    assert api.post("/api/v1/tenants", json={"name": "vision\n"}).status_code == 422
    queue = {"name": "q\n", "tenant": "default"}
    assert api.post("/api/v1/queues", json=queue).status_code == 422
    assert "vision\n" not in [t["name"] for t in api.get("/api/v1/tenants").json()]
