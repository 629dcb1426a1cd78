"""Endpoints of the request alone (``kiban.api.deps.request_alone``): called with their route's
dependencies, without FastAPI's solving of parameters, with the same answers."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import APIRouter, Depends, FastAPI, Request, Response, Security
from fastapi import routing as fastapi_routing
from fastapi.security import HTTPBearer
from fastapi.testclient import TestClient

from kiban.api.deps import SessionRoute, request_alone
from kiban.api.errors import install_error_handlers
from kiban.services.errors import Forbidden

BEARER = HTTPBearer(auto_error=False)


async def refuse_without_yes(request: Request) -> None:
    calls = request.app.state.calls
    calls.append("check")
    if request.headers.get("x-yes") != "1":
        raise Forbidden("say yes")


def app_with(endpoint: Any) -> FastAPI:
    router = APIRouter(
        prefix="/r",
        dependencies=[Security(BEARER), Depends(refuse_without_yes)],
        route_class=SessionRoute,
    )
    router.post("", status_code=201)(endpoint)
    app = FastAPI()
    app.state.calls = []
    install_error_handlers(app)
    app.include_router(router)
    return app


@request_alone
async def echo(request: Request) -> Response:
    request.app.state.calls.append("endpoint")
    return Response(await request.body(), status_code=201, media_type="text/plain")


def test_the_routes_checks_run_first_and_a_refusal_is_answered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def unused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("FastAPI solved the dependencies of an endpoint of the request alone")

    monkeypatch.setattr(fastapi_routing, "solve_dependencies", unused)
    app = app_with(echo)
    with TestClient(app) as client:
        refused = client.post("/r", content=b"hi")
        assert refused.status_code == 403
        assert refused.json()["error"]["message"] == "say yes"
        assert app.state.calls == ["check"]
        answered = client.post("/r", content=b"hi", headers={"x-yes": "1"})
    assert (answered.status_code, answered.text) == (201, "hi")
    assert app.state.calls == ["check", "check", "endpoint"]


def test_the_openapi_document_is_the_same_as_without_the_mark() -> None:
    async def plain(request: Request) -> Response:
        return Response(status_code=201)

    marked = app_with(request_alone(plain)).openapi()
    unmarked = app_with(plain).openapi()
    assert marked == unmarked
    assert marked["paths"]["/r"]["post"]["security"] == [{"HTTPBearer": []}]


def test_an_endpoint_with_other_parameters_cannot_be_marked() -> None:
    @request_alone
    async def with_query(request: Request, limit: int = 1) -> Response:
        return Response()

    with pytest.raises(TypeError, match="not an async endpoint of the request alone"):
        app_with(with_query)


def test_an_endpoint_answering_anything_but_a_response_is_an_error() -> None:
    @request_alone
    async def not_a_response(request: Request) -> Any:
        return {"a": 1}

    with (
        TestClient(app_with(not_a_response), raise_server_exceptions=True) as client,
        pytest.raises(TypeError, match="not a Response"),
    ):
        client.post("/r", headers={"x-yes": "1"})
