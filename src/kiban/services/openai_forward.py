"""The dashboard's chat playground and embeddings box: a call to a service's OpenAI route,
made through the serving router with the caller's own credentials, answered as it comes.

The router (``kiban.serving.router``) is what every client of a service calls; going through
it keeps its authorization, traffic split, queueing and metrics for the playground too. The
answer's status, content type and bytes pass through unchanged and unbuffered, so a
``"stream": true`` completion arrives token by token as server-sent events.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from enum import StrEnum

import httpx

from kiban.services.errors import Conflict, ServiceError

CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 300.0
"""Between two pieces of an answer: a model may think a while before its first token."""
FORWARDED_HEADERS = ("content-type", "accept")
"""The caller's request headers the router gets (beside ``Authorization``)."""


class OpenAIPath(StrEnum):
    """The OpenAI routes the playground may call."""

    CHAT_COMPLETIONS = "chat/completions"
    COMPLETIONS = "completions"
    EMBEDDINGS = "embeddings"


class BadGateway(ServiceError):
    """The router could not be reached, or broke off before answering."""

    status = 502


@dataclass
class Upstream:
    """The router's answer, open: its status and content type now, its body as it comes."""

    status: int
    content_type: str
    _response: httpx.Response
    _client: httpx.AsyncClient

    async def body(self) -> AsyncIterator[bytes]:
        """The answer's bytes as they arrive; closes the connection at the end (or when the
        caller goes away)."""
        try:
            async for chunk in self._response.aiter_raw():
                yield chunk
        except httpx.HTTPError:
            return  # the router broke off mid-answer: the caller sees the answer end
        finally:
            await self.close()

    async def close(self) -> None:
        await self._response.aclose()
        await self._client.aclose()


def service_openai_url(service_url: str | None, path: OpenAIPath) -> str:
    """Where on the router a service's OpenAI route is (Conflict while no router runs: the
    control plane's state refuses the call, as for a service that is not there yet)."""
    if service_url is None:
        raise Conflict("the serving router is not running here, so no service can be called")
    return f"{service_url}/openai/v1/{path.value}"


async def forward(url: str, body: bytes, authorization: str, headers: dict[str, str]) -> Upstream:
    """Send the call to the router and return once its answer's head has come."""
    sent = {k: v for k, v in headers.items() if k.lower() in FORWARDED_HEADERS}
    sent["Authorization"] = authorization
    timeout = httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
    client = httpx.AsyncClient(timeout=timeout)
    try:
        request = client.build_request("POST", url, content=body, headers=sent)
        response = await client.send(request, stream=True)
    except httpx.HTTPError as exc:
        await client.aclose()
        raise BadGateway(f"the serving router did not answer: {type(exc).__name__}") from None
    content_type = response.headers.get("content-type", "application/octet-stream")
    return Upstream(response.status_code, content_type, response, client)
