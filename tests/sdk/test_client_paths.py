"""The SDK's paths: names quoted, empty or slashed names refused before sending, and an answer
that redirects (a path the API does not have) an error rather than an empty result."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl

import httpcore
import pytest

from kiban.sdk.client import ApiError, Client

Handler = Callable[[httpcore.Request], httpcore.Response]


class Answering:
    """Stands in for the client's connection pool: ``handler`` answers every request."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler

    def handle_request(self, request: httpcore.Request) -> httpcore.Response:
        return self.handler(request)

    def close(self) -> None:
        pass


def client_answering(handler: Handler) -> Client:
    client = Client(url="http://kiban.test", token="t")
    client._http.close()
    client._http._pool = Answering(handler)  # type: ignore[assignment]
    return client


def answer(
    status: int, body: Any = None, headers: dict[str, str] | None = None
) -> httpcore.Response:
    content = b"" if body is None else json.dumps(body).encode()
    return httpcore.Response(status, headers=list((headers or {}).items()), content=content)


def test_a_redirect_is_an_error_not_an_empty_answer() -> None:
    client = client_answering(lambda _: answer(307, headers={"location": "/api/v1/jobs"}))
    with pytest.raises(ApiError) as caught:
        client.services()
    assert caught.value.status == 307
    assert "no such API path: /api/v1/services" in caught.value.message


def test_names_are_quoted_and_bad_ones_never_sent() -> None:
    sent: list[str] = []

    def named(request: httpcore.Request) -> httpcore.Response:
        sent.append(request.url.target.decode())
        return answer(200, {"name": "x"})

    client = client_answering(named)
    client.service("chat bot")
    client.cordon("node-1")
    assert sent == ["/api/v1/services/chat%20bot", "/api/v1/nodes/node-1/cordon"]
    for call, what in (
        (lambda: client.job(""), "job id: must not be empty"),
        (lambda: client.cancel("  "), "job id: must not be empty"),
        (lambda: client.service("a/b"), "service name: 'a/b' holds a '/'"),
        (lambda: client.create_token("", "bob"), "tenant name: must not be empty"),
    ):
        with pytest.raises(ApiError) as caught:
            call()
        assert caught.value.status == 400
        assert what in caught.value.message
    assert len(sent) == 2


def test_jobs_sends_offset_and_reason_as_the_api_names_them() -> None:
    seen: list[list[tuple[str, str]]] = []

    def listed(request: httpcore.Request) -> httpcore.Response:
        query = request.url.target.decode().partition("?")[2]
        seen.append(parse_qsl(query, keep_blank_values=True))
        return answer(200, [])

    client = client_answering(listed)
    client.jobs(offset=200, limit=100, reason="QueueQuotaExhausted")
    client.jobs()
    client.jobs(state=["Running", "Pending"], array_indices=False, name="a b")
    list(client.logs("j", follow=True, tail=5))
    assert dict(seen[0]) == {"limit": "100", "offset": "200", "reason": "QueueQuotaExhausted"}
    assert dict(seen[1]) == {"limit": "100"}
    assert seen[2] == [
        ("limit", "100"),
        ("arrayIndices", "false"),
        ("state", "Running"),
        ("state", "Pending"),
        ("name", "a b"),
    ]
    assert seen[3] == [("follow", "true"), ("timestamps", "false"), ("rank", "0"), ("tail", "5")]


def test_bodies_headers_and_timeouts_are_sent_as_httpx_sent_them() -> None:
    """A JSON body compact with its type and length, the token, the Host; a followed log
    waits for its output as long as it takes, other calls no longer than the timeout."""
    sent: list[httpcore.Request] = []

    def kept(request: httpcore.Request) -> httpcore.Response:
        sent.append(request)
        return answer(200, {"ok": True})

    client = client_answering(kept)
    client.create_tenant("émile")
    list(client.logs("j", follow=True))
    headers = {k.decode().lower(): v.decode() for k, v in sent[0].headers}
    body = b"".join(sent[0].stream)  # type: ignore[arg-type]
    assert body == '{"name":"émile"}'.encode()
    assert headers["content-type"] == "application/json"
    assert headers["content-length"] == str(len(body))
    assert headers["authorization"] == "Bearer t"
    assert headers["host"] == "kiban.test"
    assert sent[0].extensions["timeout"] == dict.fromkeys(
        ("connect", "read", "write", "pool"), 30.0
    )
    assert sent[1].extensions["timeout"]["read"] is None


def test_an_error_answer_is_the_servers_message() -> None:
    client = client_answering(lambda _: answer(404, {"error": {"message": "job x not found"}}))
    with pytest.raises(ApiError) as caught:
        client.job("x")
    assert (caught.value.status, caught.value.message) == (404, "job x not found")
    plain = client_answering(
        lambda _: httpcore.Response(
            502, content=b"bad gateway", extensions={"reason_phrase": b"Bad Gateway"}
        )
    )
    with pytest.raises(ApiError) as caught:
        plain.job("x")
    assert (caught.value.status, caught.value.message) == (502, "bad gateway")


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://127.0.0.1:9", "Connection refused"),  # the discard port: nothing listens
        ("http://kiban.test:abc", "invalid URL"),  # httpx raised InvalidURL: a traceback
        ("kiban.test:8470", "unsupported protocol"),
    ],
)
def test_a_server_not_reached_is_an_api_error_naming_it(url: str, why: str) -> None:
    with Client(url=url, token="t") as client:
        with pytest.raises(ApiError) as caught:
            client.jobs()
        assert caught.value.status == 0
        assert caught.value.message.startswith(f"cannot reach kiban at {url}: ")
        assert why in caught.value.message
        assert not client.healthy()
        with pytest.raises(ApiError) as followed:
            list(client.logs("j", follow=True))
        assert followed.value.message.startswith(f"cannot reach kiban at {url}: ")
