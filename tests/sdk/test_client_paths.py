"""The SDK's paths: names quoted, empty or slashed names refused before sending, and an answer
that redirects (a path the API does not have) an error rather than an empty result."""

from __future__ import annotations

import httpx
import pytest

from kiban.sdk.client import ApiError, Client


def client_answering(handler: httpx.MockTransport) -> Client:
    client = Client(url="http://kiban.test", token="t")
    client._http.close()
    client._http = httpx.Client(base_url="http://kiban.test", transport=handler)
    return client


def test_a_redirect_is_an_error_not_an_empty_answer() -> None:
    def redirect(request: httpx.Request) -> httpx.Response:
        return httpx.Response(307, headers={"location": "/api/v1/jobs"})

    client = client_answering(httpx.MockTransport(redirect))
    with pytest.raises(ApiError) as caught:
        client.services()
    assert caught.value.status == 307
    assert "no such API path: /api/v1/services" in caught.value.message


def test_names_are_quoted_and_bad_ones_never_sent() -> None:
    sent: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request.url.raw_path.decode())
        return httpx.Response(200, json={"name": "x"})

    client = client_answering(httpx.MockTransport(answer))
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
    seen: list[httpx.QueryParams] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.params)
        return httpx.Response(200, json=[])

    client = client_answering(httpx.MockTransport(answer))
    client.jobs(offset=200, limit=100, reason="QueueQuotaExhausted")
    client.jobs()
    assert dict(seen[0]) == {"limit": "100", "offset": "200", "reason": "QueueQuotaExhausted"}
    assert dict(seen[1]) == {"limit": "100"}
