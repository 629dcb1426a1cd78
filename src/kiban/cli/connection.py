"""The API client a command talks through, made when the command runs (so that listing or
parsing imports no HTTP client, and tests can stand a client of their own in for it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kiban.sdk.client import Client


def client() -> Client:
    """A client of the API at ``KIBAN_URL`` (or the kiban home's), with the caller's token."""
    from kiban.cli.quick import loading

    with loading():  # the HTTP client's modules: httpx, and httpcore as the client is made
        from kiban.sdk.client import Client

        return Client()
