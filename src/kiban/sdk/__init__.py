"""The Python SDK: a typed client of kiban's HTTP API.

``Client`` and ``discover`` are imported on first use, so that ``kiban.sdk.errors`` (which the
CLI imports to catch ``ApiError``) costs no HTTP client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kiban.sdk.errors import ApiError

if TYPE_CHECKING:
    from kiban.sdk.client import Client, discover

__all__ = ["ApiError", "Client", "discover"]


def __getattr__(name: str) -> Any:
    if name in ("Client", "discover"):
        from kiban.sdk import client

        return getattr(client, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
