"""Request bodies of the OpenAI API and the Open Inference Protocol v2, validated with pydantic.

Bodies are read with a size limit and parsed here so that every malformed
request becomes a 400 naming the field, never a traceback.
"""

from __future__ import annotations

import json
from typing import Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from starlette.requests import Request

from kiban.serving.runtime.errors import BadRequest, RequestTooLarge

Body = TypeVar("Body", bound=BaseModel)


class _Lenient(BaseModel):
    """OpenAI clients send many optional fields; those this server does not use are ignored."""

    model_config = ConfigDict(extra="ignore")


class ContentPart(_Lenient):
    type: Literal["text"]
    text: str


class ChatMessage(_Lenient):
    role: str = Field(min_length=1)
    content: str | list[ContentPart] | None = None

    def text(self) -> str:
        """The message's text, with text parts joined."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class StreamOptions(_Lenient):
    include_usage: bool = False
    """A last chunk, with no choices, carries the usage; every chunk before has ``usage: null``."""


class SamplingFields(_Lenient):
    """Sampling fields shared by chat and text completions."""

    model: str
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    seed: int | None = None
    stop: str | list[str] | None = None
    n: int = 1
    stream: bool = False
    stream_options: StreamOptions | None = None

    @model_validator(mode="after")
    def _stream_options_only_when_streaming(self) -> SamplingFields:
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options is only allowed when stream is true")
        return self

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    @field_validator("n")
    @classmethod
    def _one_choice(cls, value: int) -> int:
        if value != 1:
            raise ValueError("only n=1 is supported")
        return value

    @field_validator("stop")
    @classmethod
    def _few_stops(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and len(value) > 4:
            raise ValueError("at most 4 stop strings")
        return value

    def stop_strings(self) -> tuple[str, ...]:
        """The stop strings as a tuple, empty ones dropped."""
        if self.stop is None:
            return ()
        stops = [self.stop] if isinstance(self.stop, str) else self.stop
        return tuple(s for s in stops if s)


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)


class CompletionRequest(SamplingFields):
    prompt: str | list[str]
    max_tokens: int | None = Field(default=16, ge=1)

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, list) and len(value) != 1:
            raise ValueError("exactly one prompt is supported (n=1, no prompt batches)")
        return value

    def prompt_text(self) -> str:
        """The single prompt's text."""
        return self.prompt if isinstance(self.prompt, str) else self.prompt[0]


class EmbeddingRequest(_Lenient):
    model: str
    input: str | list[str]
    encoding_format: Literal["float", "base64"] = "float"

    @field_validator("input")
    @classmethod
    def _some_input(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, list) and not value:
            raise ValueError("must not be empty")
        return value

    def texts(self) -> list[str]:
        """The inputs as a list."""
        return [self.input] if isinstance(self.input, str) else list(self.input)


class InferTensor(_Lenient):
    name: str
    shape: list[int]
    datatype: str
    data: list[Any]
    parameters: dict[str, Any] | None = None


class InferRequest(_Lenient):
    id: str | None = None
    inputs: list[InferTensor] = Field(min_length=1)
    parameters: dict[str, Any] | None = None


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused with 413 as soon as it is known to be over ``limit`` bytes."""
    too_large = RequestTooLarge(
        f"request body is over the limit of {limit} bytes (--max-request-bytes)",
        code="request_too_large",
    )
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


def parse_body(raw: bytes, model: type[Body]) -> Body:
    """Validate a JSON body; the first problem becomes a 400 naming its field."""
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}", code="invalid_json") from exc
    if not isinstance(data, dict):
        raise BadRequest("request body must be a JSON object", code="invalid_json")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or None
        problem = first["msg"]
        if first["type"] == "missing":
            problem = "is required"
        raise BadRequest(f"{field}: {problem}" if field else problem, param=field) from exc
