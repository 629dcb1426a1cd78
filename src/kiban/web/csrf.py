"""The dashboard's credentials: the session cookie as a bearer token, and the CSRF check.

A browser signed in at ``/web/session`` holds two cookies: ``kiban_session`` (the token,
HttpOnly) and ``kiban_csrf`` (random, readable by the page's script). A request that carries
an ``Authorization`` header is authenticated by it alone; otherwise the session cookie stands
for ``Authorization: Bearer <cookie>``. A cookie rides along with any request the browser
makes, a forged one from another site included, so a request authenticated by the cookie that
changes anything (a method other than GET, HEAD, OPTIONS) must also carry ``X-CSRF-Token``
equal to the ``kiban_csrf`` cookie, which another site can neither read nor set (the double
submit cookie pattern of OWASP's CSRF cheat sheet; SameSite=Strict on both adds to it).

``credentials`` and ``check_csrf`` work on an ASGI scope's raw headers, so admission (``/api/``)
and the notebooks' route (``/nb/``) apply the same rule before anything else runs.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie

from kiban.services.errors import Forbidden

SESSION_COOKIE = "kiban_session"
CSRF_COOKIE = "kiban_csrf"
CSRF_HEADER = "X-CSRF-Token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
"""Methods that change nothing: a cookie alone is enough for them."""
MAX_COOKIE_CHARS = 8192


@dataclass(frozen=True, slots=True)
class Credentials:
    """What a request offers to say who it is: an ``Authorization`` header's value (from the
    header, or made from the session cookie), and the CSRF token pair when it is the cookie."""

    authorization: str | None
    by_cookie: bool = False
    csrf_cookie: str | None = None
    csrf_header: str | None = None


def read_cookies(header: str) -> dict[str, str]:
    """The cookies of a ``Cookie`` header, by name (an unreadable header: none)."""
    if len(header) > MAX_COOKIE_CHARS:
        return {}
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(header)
    except CookieError:
        return {}
    return {name: morsel.value for name, morsel in jar.items()}


def credentials(headers: Iterable[tuple[bytes, bytes]]) -> Credentials:
    """The request's credentials from its raw ASGI headers: the ``Authorization`` header wins;
    without it, the ``kiban_session`` cookie (with the CSRF cookie and header beside it)."""
    authorization = cookie = csrf_header = None
    for name, value in headers:
        if name == b"authorization":
            authorization = value.decode("latin-1")
        elif name == b"cookie":
            text = value.decode("latin-1")
            cookie = text if cookie is None else f"{cookie}; {text}"
        elif name == b"x-csrf-token":
            csrf_header = value.decode("latin-1")
    if authorization is not None or cookie is None:
        return Credentials(authorization)
    jar = read_cookies(cookie)
    session = jar.get(SESSION_COOKIE, "").strip()
    if not session:
        return Credentials(None)
    return Credentials(
        f"Bearer {session}",
        by_cookie=True,
        csrf_cookie=jar.get(CSRF_COOKIE),
        csrf_header=csrf_header,
    )


def check_csrf(method: str, offered: Credentials) -> None:
    """Refuse (Forbidden, 403) a change made on the session cookie without ``X-CSRF-Token``
    equal to the ``kiban_csrf`` cookie; anything else passes."""
    if not offered.by_cookie or method.upper() in SAFE_METHODS:
        return
    cookie, header = offered.csrf_cookie or "", offered.csrf_header or ""
    if not cookie or not header or not hmac.compare_digest(cookie.encode(), header.encode()):
        raise Forbidden(
            f"missing or wrong CSRF token: a change made with the session cookie needs the "
            f"header {CSRF_HEADER} equal to the {CSRF_COOKIE} cookie"
        )
