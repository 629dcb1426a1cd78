"""The SDK's HTTP transport: httpcore's connection pool (httpx's own transport layer), not
``httpx.Client``, so a CLI call never imports httpx (its auth module alone pulls in
``urllib.request``, ``http.client``, ``email`` and ``http.cookiejar``: ``kiban bench cli``
measures the difference, docs/benchmarks.md).

What the SDK used of httpx is here, as httpx does it: one base URL and default headers, query
strings (lists repeated, booleans as ``true``/``false``), JSON bodies, timeouts, TLS verified
as httpx sets it up (``SSL_CERT_FILE``, ``SSL_CERT_DIR``, else certifi's bundle), a proxy named
by the environment (``HTTPS_PROXY``, ``NO_PROXY``...), request and response hooks, streaming.
HTTP/1.1 itself is httpcore's (and h11's) work.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlencode, urlsplit

import httpcore

if TYPE_CHECKING:
    import ssl

REDIRECTS = frozenset({301, 302, 303, 307, 308})
"""Statuses that send the client elsewhere (with a ``Location``); the API never answers one."""

PROXY_VARIABLES = frozenset({"http_proxy", "https_proxy", "all_proxy"})
"""Environment variables that name a proxy, in any case (as httpx and curl read them)."""


class InvalidUrl(Exception):
    """The server's URL cannot be asked (a port that is not a number, say)."""


TRANSPORT_ERRORS: tuple[type[Exception], ...] = (
    httpcore.TimeoutException,
    httpcore.NetworkError,
    httpcore.ProtocolError,
    httpcore.ProxyError,
    httpcore.UnsupportedProtocol,
    InvalidUrl,
)
"""What sending a request or reading its answer raises when no answer came: httpx's
``TransportError``, of which ``CONNECT_ERRORS`` are the ones where the server was not reached."""

CONNECT_ERRORS: tuple[type[Exception], ...] = (
    httpcore.ConnectError,
    httpcore.UnsupportedProtocol,
    InvalidUrl,
)

Hook = Callable[..., Any]


@dataclass(frozen=True)
class Answer:
    """An answer read whole: status, headers (names in lower case), body."""

    status_code: int
    reason_phrase: str
    headers: dict[str, str]
    content: bytes
    path: str
    """The path asked (decoded, no query), for messages."""

    @property
    def is_redirect(self) -> bool:
        return self.status_code in REDIRECTS and "location" in self.headers

    @property
    def text(self) -> str:
        """The body as text, in the charset its ``Content-Type`` names (UTF-8 if none)."""
        charset = "utf-8"
        for part in self.headers.get("content-type", "").split(";")[1:]:
            key, _, value = part.strip().partition("=")
            if key.lower() == "charset" and value:
                charset = value.strip('"')
        try:
            return self.content.decode(charset, errors="replace")
        except LookupError:
            return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body as JSON (``ValueError`` if it is not)."""
        return json.loads(self.content)


class Streamed:
    """An answer whose body is read as it comes (``iter_bytes``) or whole (``read``)."""

    def __init__(self, response: httpcore.Response, path: str) -> None:
        self._response = response
        self.status_code = response.status
        self.path = path

    def iter_bytes(self) -> Iterator[bytes]:
        for chunk in self._response.iter_stream():
            if chunk:
                yield chunk

    def read(self) -> Answer:
        return _answer(self._response, self._response.read(), self.path)


class Transport:
    """Requests to paths of one base URL, with default headers and a timeout, over a pool of
    kept-alive connections."""

    def __init__(self, base_url: str, headers: dict[str, str], timeout: float) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = dict(headers)
        self.timeout = timeout
        self.event_hooks: dict[str, list[Hook]] = {"request": [], "response": []}
        """``request`` hooks are called with each ``httpcore.Request`` before it is sent (its
        ``extensions`` may be added to: ``trace``), ``response`` hooks with each
        ``httpcore.Response`` once its headers have come."""
        self._problem: str | None = None
        try:
            parts = urlsplit(self.base_url)
            parts.port  # noqa: B018 (raises for a port that is not a number)
        except ValueError as exc:
            self._problem = str(exc)
            parts = urlsplit("")
        self.host = parts.netloc.rpartition("@")[2]
        tls = parts.scheme.lower() == "https"
        self.ssl_context = verified_context() if tls else None
        self._pool = httpcore.ConnectionPool(
            ssl_context=self.ssl_context, proxy=environment_proxy(parts.scheme, parts.netloc)
        )

    def close(self) -> None:
        self._pool.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        json: Any = None,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> Answer:
        """Send a request and read its whole answer; ``TRANSPORT_ERRORS`` if none came."""
        with self.stream(
            method,
            path,
            params=params,
            json=json,
            content=content,
            headers=headers,
            timeout=timeout,
        ) as streamed:
            return streamed.read()

    def get(self, path: str, *, timeout: float | None = None) -> Answer:
        return self.request("GET", path, timeout=timeout)

    @contextmanager
    def stream(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        json: Any = None,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
        unbounded_read: bool = False,
    ) -> Iterator[Streamed]:
        """Send a request; the answer, its body still to read, while the block runs.
        ``timeout``: seconds for each step (connect, write, read, a free connection), this
        client's by default; ``unbounded_read``: reading waits as long as it takes (a followed
        log)."""
        request = self._request(method, path, params, json, content, headers)
        seconds = self.timeout if timeout is None else timeout
        request.extensions["timeout"] = {
            "connect": seconds,
            "read": None if unbounded_read else seconds,
            "write": seconds,
            "pool": seconds,
        }
        for hook in self.event_hooks["request"]:
            hook(request)
        response = self._pool.handle_request(request)
        try:
            for hook in self.event_hooks["response"]:
                hook(response)
            yield Streamed(response, unquote(path.partition("?")[0]))
        finally:
            response.close()

    def _request(
        self,
        method: str,
        path: str,
        params: dict[str, Any] | None,
        body: Any,
        content: bytes | None,
        headers: dict[str, str] | None,
    ) -> httpcore.Request:
        if self._problem is not None:
            raise InvalidUrl(f"invalid URL: {self._problem}")
        url = self.base_url + path
        if params:
            url += "?" + query_string(params)
        sent = {"Host": self.host, "Accept": "*/*", **self.headers, **(headers or {})}
        if body is not None:
            content = json_body(body)
            sent.setdefault("Content-Type", "application/json")
        if content is not None or method in ("POST", "PUT", "PATCH"):
            sent["Content-Length"] = str(len(content or b""))
        try:
            return httpcore.Request(method, url, headers=list(sent.items()), content=content)
        except ValueError as exc:  # a host or port httpcore cannot parse
            raise InvalidUrl(f"invalid URL {url!r}: {exc}") from None


def query_string(params: dict[str, Any]) -> str:
    """``params`` as httpx writes a query: a list as its key repeated, booleans as
    ``true``/``false``, ``None`` as empty."""
    pairs = []
    for key, value in params.items():
        for item in value if isinstance(value, (list, tuple)) else [value]:
            pairs.append((key, _primitive(item)))
    return urlencode(pairs)


def _primitive(value: Any) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    return "" if value is None else str(value)


def json_body(value: Any) -> bytes:
    """A JSON body as httpx writes one (compact, UTF-8, no NaN)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def _answer(response: httpcore.Response, content: bytes, path: str) -> Answer:
    reason = response.extensions.get("reason_phrase", b"")
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in response.headers}
    return Answer(response.status, reason.decode("ascii", "replace"), headers, content, path)


def verified_context() -> ssl.SSLContext:
    """A TLS context that verifies the server as httpx's does: against ``SSL_CERT_FILE``,
    else ``SSL_CERT_DIR``, else certifi's bundle."""
    import ssl

    if os.environ.get("SSL_CERT_FILE"):
        return ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
    if os.environ.get("SSL_CERT_DIR"):
        return ssl.create_default_context(capath=os.environ["SSL_CERT_DIR"])
    import certifi

    return ssl.create_default_context(cafile=certifi.where())


def environment_proxy(scheme: str, netloc: str) -> httpcore.Proxy | None:
    """The proxy the environment names for ``scheme://netloc`` (``HTTPS_PROXY``, ``ALL_PROXY``,
    with ``NO_PROXY`` honoured, as ``urllib.request`` reads them), or None. Read only when
    such a variable is set: ``urllib.request`` is what this module keeps from importing."""
    if not any(name.lower() in PROXY_VARIABLES for name in os.environ):
        return None
    from urllib.request import getproxies, proxy_bypass

    found = getproxies()
    url = found.get(scheme.lower()) or found.get("all")
    if not url or not netloc or proxy_bypass(netloc):
        return None
    if "://" not in url:
        url = f"http://{url}"
    parts = urlsplit(url)
    auth = None
    if parts.username is not None:
        auth = (unquote(parts.username), unquote(parts.password or ""))
    bare = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
    return httpcore.Proxy(bare, auth=auth)
