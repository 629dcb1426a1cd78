"""The bytes the router itself reads and writes: which request headers it drops, the error
answers it makes, where a replica's answer ends, and which paths it forwards."""

from __future__ import annotations

import json

DROPPED_HEADERS = frozenset(
    {
        b"host",
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"upgrade",
        b"authorization",
        b"expect",
    }
)
"""Hop-by-hop headers, the kiban token (the replica has no use for it) and ``Expect``."""
REASONS = {
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    408: "Request Timeout",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


def error_response(
    status: int, message: str, kind: str, *, keep_alive: bool, revision: str = ""
) -> bytes:
    """A complete JSON error answer: ``{"error": {"message": ..., "type": ...}}``.

    With the revision the request was meant for, when one was chosen (502, 503, 504).
    """
    body = json.dumps({"error": {"message": message, "type": kind}}).encode()
    head = (
        f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n"
        f"connection: {'keep-alive' if keep_alive else 'close'}\r\n"
    )
    if revision:
        head += f"x-kiban-revision: {revision}\r\n"
    if status == 401:
        head += 'www-authenticate: Bearer realm="kiban"\r\n'
    return head.encode() + b"\r\n" + body


ERROR_TYPES = {
    400: "invalid_request",
    401: "unauthorized",
    404: "not_found",
    502: "bad_gateway",
    503: "unavailable",
    504: "timeout",
}


def content_length(head: bytes) -> tuple[int, bool] | None:
    """(body length, keep-alive) of an HTTP/1.1 answer's lowercased head, when framed so.

    None when the body's end must be parsed out instead: chunked, no length, HTTP/1.0, 1xx.
    Written for speed, as it runs for every answer: ``find`` over ``in`` (faster on bytes),
    no slices that are not needed.
    """
    if head[9:10] == b"1" or not head.startswith(b"http/1.1 "):
        return None
    keep_alive = True
    at = head.find(b"\r\nconnection:")
    if at >= 0:
        value_end = head.find(b"\r\n", at + 13)
        keep_alive = head.find(b"close", at + 13, value_end if value_end >= 0 else len(head)) < 0
    status = head[9:12]
    if status == b"204" or status == b"304":  # never a body, whatever Content-Length says
        return 0, keep_alive
    at = head.find(b"\r\ncontent-length:")
    if at < 0 or head.find(b"\r\ntransfer-encoding:") >= 0:
        return None
    value_end = head.find(b"\r\n", at + 17)
    try:
        length = int(head[at + 17 : value_end] if value_end >= 0 else head[at + 17 :])
    except ValueError:
        return None
    return length, keep_alive


def forwarded_path(rest: bytes) -> bool:
    """Is ``rest`` (a service URL's path after ``/s/{tenant}/{service}/``) forwarded?"""
    if rest.startswith(b"v2"):
        return len(rest) == 2 or rest[2:3] == b"/"
    if rest.startswith(b"openai/v1"):
        return len(rest) == 9 or rest[9:10] == b"/"
    return False
