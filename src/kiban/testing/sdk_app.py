"""The SDK's client answered in this process by an app's test client (Starlette's
``TestClient``, or any ``httpx.Client``): CLI and SDK tests run commands against the app with
no server, through the same client code as against one."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

import httpcore

from kiban.sdk.client import Client


class Http(Protocol):
    """What is asked of the test client: httpx's ``request`` and ``close``."""

    def request(
        self, method: str, url: str, *, headers: list[tuple[str, str]], content: bytes
    ) -> Any: ...

    def close(self) -> None: ...


class ThroughApp:
    """Stands in for the SDK client's connection pool: each request (as httpcore's) is sent
    through ``http`` and its answer handed back as httpcore's."""

    def __init__(self, http: Http) -> None:
        self.http = http

    def handle_request(self, request: httpcore.Request) -> httpcore.Response:
        assert isinstance(request.stream, Iterable)  # bytes, as the SDK sends them
        answer = self.http.request(
            request.method.decode(),
            request.url.target.decode(),
            headers=[(k.decode(), v.decode()) for k, v in request.headers],
            content=b"".join(request.stream),
        )
        return httpcore.Response(
            answer.status_code,
            headers=list(answer.headers.raw),
            content=answer.content,
            extensions={"reason_phrase": answer.reason_phrase.encode()},
        )

    def close(self) -> None:
        self.http.close()


def client_through(http: Http, token: str | None, url: str = "http://testserver") -> Client:
    """A client of the API at ``url`` with ``token``, whose every request ``http`` answers."""
    client = Client(url=url, token=token)
    client._http.close()
    client._http._pool = ThroughApp(http)  # type: ignore[assignment]
    return client
