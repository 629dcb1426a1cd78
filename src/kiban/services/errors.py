"""Errors the services raise; the API maps each to an HTTP status."""

from __future__ import annotations

from kiban.domain.errors import FieldProblem, SpecError


class ServiceError(Exception):
    """Base: a message for the user."""

    status = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Unauthorized(ServiceError):
    status = 401


class Forbidden(ServiceError):
    """Not allowed; ``problems`` name the request's fields at fault where some are (a
    tenant-admin's quota above their tenant's ceiling: ``quota.h100.gpu``)."""

    status = 403

    def __init__(self, message: str, problems: list[FieldProblem] | None = None) -> None:
        super().__init__(message)
        self.problems = list(problems or [])


class NotFound(ServiceError):
    status = 404


class Conflict(ServiceError):
    status = 409


class Unavailable(ServiceError):
    """No room for the call now (the API at capacity, a caller at its limit): try again after
    ``retry_after_s`` seconds."""

    status = 503

    def __init__(self, message: str, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class InvalidInput(SpecError):
    """A spec or request field that cannot be accepted (HTTP 422)."""

    status = 422

    def __init__(self, problems: list[FieldProblem]) -> None:
        super().__init__(problems)


def invalid(field_path: str, message: str) -> InvalidInput:
    return InvalidInput([FieldProblem(field_path, message)])
