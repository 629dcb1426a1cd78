"""The Python SDK: a typed client of kiban's HTTP API."""

from kiban.sdk.client import ApiError, Client, discover

__all__ = ["ApiError", "Client", "discover"]
