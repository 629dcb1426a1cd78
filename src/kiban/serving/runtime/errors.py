"""Errors the model server returns to clients, each with its HTTP status and OpenAI error type."""

from __future__ import annotations

from typing import Any


class ServingError(Exception):
    """A request the server refuses; rendered as an OpenAI-style error body, never a traceback."""

    status = 400
    error_type = "invalid_request_error"

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        """The JSON body OpenAI clients expect: ``{"error": {message, type, param, code}}``."""
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }


class BadRequest(ServingError):
    """Malformed or out-of-range input; names the offending field in ``param``."""


class WrongTask(ServingError):
    """The model serves another task (e.g. chat asked of an embedding model)."""


class ModelNotFound(ServingError):
    """The request names a model this server does not serve."""

    status = 404
    error_type = "not_found_error"


class RequestTooLarge(ServingError):
    """The request body is over ``--max-request-bytes``."""

    status = 413


class NotReady(ServingError):
    """The model is still loading (or failed to load)."""

    status = 503
    error_type = "service_unavailable"


class InternalError(ServingError):
    """An unexpected failure inside the model; the client sees a message, not the traceback."""

    status = 500
    error_type = "server_error"


class LoadError(Exception):
    """The model could not be resolved or loaded; the message goes on the KIBAN_LOAD_FAILED line."""
