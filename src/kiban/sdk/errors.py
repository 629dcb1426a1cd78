"""The SDK's error, in a module of its own so that catching it imports no HTTP client."""

from __future__ import annotations


class ApiError(Exception):
    """An error answer from the API, or no answer at all (status 0), or a request that was
    not sent because a name in its path was empty (status 400, as the API would answer)."""

    def __init__(self, status: int, message: str, problems: list[dict[str, str]] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.problems = problems or []
