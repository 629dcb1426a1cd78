"""The API describes itself, and answers health checks without a token."""

from __future__ import annotations

from fastapi.testclient import TestClient

from kiban import __version__
from kiban.api.app import create_app
from kiban.platform import Platform

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
    "/api/v1/policy": {"get", "put"},
    "/api/v1/policy/versions": {"get"},
    "/api/v1/tenants": {"get", "post"},
    "/api/v1/tenants/{tenant}/tokens": {"post"},
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
    # Every API path is versioned; only the health check lives outside /api/v1.
    assert {p for p in paths if not p.startswith("/api/v1/")} == {"/healthz"}


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
    # The Allow header survives the JSON error handler (Starlette names the methods of the first
    # route matching the path).
    allowed = set(response.headers["allow"].replace(" ", "").split(","))
    assert allowed and allowed <= {"GET", "POST"}
