"""OpenAI-compatible routes: chat completions, completions, embeddings, models.

Thin: each route parses its body, asks the ModelService and shapes the
answer (or the server-sent event stream) the way OpenAI clients expect.
"""

from __future__ import annotations

import base64
import json
import struct
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from kiban.serving.runtime.errors import ServingError
from kiban.serving.runtime.generation import Completion, Prompt, render_chat
from kiban.serving.runtime.options import Task
from kiban.serving.runtime.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    EmbeddingRequest,
    SamplingFields,
    parse_body,
    read_body,
)
from kiban.serving.runtime.service import ModelService


def _service(request: Request) -> ModelService:
    service: ModelService = request.app.state.service
    return service


def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def _prompt(service: ModelService, text: str, body: SamplingFields, field: str) -> Prompt:
    return service.prompt(
        text,
        field=field,
        max_tokens=body.max_completion_tokens or body.max_tokens,
        temperature=body.temperature,
        top_p=body.top_p,
        seed=body.seed,
        stop=body.stop_strings(),
    )


def _sse(payload: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n".encode()


def _event_stream(
    service: ModelService,
    prompt: Prompt,
    chunk: Callable[[str | None, str | None], dict[str, Any]],
    *,
    include_usage: bool,
) -> StreamingResponse:
    """An SSE response as OpenAI streams one: a chunk per text piece, one with the finish
    reason, and with ``stream_options.include_usage`` a last one with no choices and the usage
    (every chunk before it then says ``usage: null``)."""

    def event(payload: dict[str, Any]) -> bytes:
        if include_usage:
            payload["usage"] = None
        return _sse(payload)

    async def events() -> AsyncIterator[bytes]:
        try:
            async for item in service.stream(prompt):
                if isinstance(item, Completion):
                    yield event(chunk(None, item.finish_reason))
                    if include_usage:
                        last = chunk(None, None)
                        last["choices"] = []
                        last["usage"] = _usage(item.prompt_tokens, item.completion_tokens)
                        yield _sse(last)
                elif item:
                    yield event(chunk(item, None))
        except ServingError as exc:  # headers are sent: the error travels as an event
            yield _sse(exc.body())
        yield b"data: [DONE]\n\n"

    return StreamingResponse(
        events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
    )


async def chat_completions(request: Request) -> Any:
    """Chat: messages rendered with the tokenizer's chat template, then generated."""
    service = _service(request)
    body = parse_body(
        await read_body(request, service.options.max_request_bytes), ChatCompletionRequest
    )
    service.check_name(body.model)
    loaded = service.require(Task.TEXT_GENERATION)
    messages = [{"role": m.role, "content": m.text()} for m in body.messages]
    prompt = _prompt(service, render_chat(loaded.tokenizer, messages), body, "messages")
    ident, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())

    if body.stream:
        first = True

        def chunk(text: str | None, finish: str | None) -> dict[str, Any]:
            nonlocal first
            delta: dict[str, str] = {}
            if first:
                delta["role"] = "assistant"
                first = False
            if text is not None:
                delta["content"] = text
            return {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": created,
                "model": service.options.model_name,
                "choices": [
                    {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
                ],
            }

        return _event_stream(service, prompt, chunk, include_usage=body.include_usage)

    done = await service.complete(prompt)
    return {
        "id": ident,
        "object": "chat.completion",
        "created": created,
        "model": service.options.model_name,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": done.text},
                "finish_reason": done.finish_reason,
                "logprobs": None,
            }
        ],
        "usage": _usage(done.prompt_tokens, done.completion_tokens),
    }


async def completions(request: Request) -> Any:
    """Plain text completion of one prompt."""
    service = _service(request)
    body = parse_body(
        await read_body(request, service.options.max_request_bytes), CompletionRequest
    )
    service.check_name(body.model)
    prompt = _prompt(service, body.prompt_text(), body, "prompt")
    ident, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())

    if body.stream:

        def chunk(text: str | None, finish: str | None) -> dict[str, Any]:
            return {
                "id": ident,
                "object": "text_completion",
                "created": created,
                "model": service.options.model_name,
                "choices": [
                    {"index": 0, "text": text or "", "finish_reason": finish, "logprobs": None}
                ],
            }

        return _event_stream(service, prompt, chunk, include_usage=body.include_usage)

    done = await service.complete(prompt)
    return {
        "id": ident,
        "object": "text_completion",
        "created": created,
        "model": service.options.model_name,
        "choices": [
            {"index": 0, "text": done.text, "finish_reason": done.finish_reason, "logprobs": None}
        ],
        "usage": _usage(done.prompt_tokens, done.completion_tokens),
    }


def _encode(vector: list[float], encoding: str) -> list[float] | str:
    if encoding == "base64":  # little-endian float32, as OpenAI's clients decode it
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
    return vector


async def embeddings(request: Request) -> Any:
    """Vectors for a string or a list of strings."""
    service = _service(request)
    body = parse_body(await read_body(request, service.options.max_request_bytes), EmbeddingRequest)
    service.check_name(body.model)
    result = await service.embed(body.texts())
    tokens = sum(result.token_counts)
    return {
        "object": "list",
        "data": [
            {"object": "embedding", "index": i, "embedding": _encode(v, body.encoding_format)}
            for i, v in enumerate(result.vectors)
        ],
        "model": service.options.model_name,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


async def models(request: Request) -> Any:
    """The one model this server serves."""
    service = _service(request)
    return {
        "object": "list",
        "data": [
            {
                "id": service.options.model_name,
                "object": "model",
                "created": service.started_at,
                "owned_by": "kiban",
            }
        ],
    }


def build_router(prefix: str) -> APIRouter:
    """The OpenAI routes under ``prefix`` (full paths, so metrics label routes by them)."""
    router = APIRouter()
    router.add_api_route(f"{prefix}/chat/completions", chat_completions, methods=["POST"])
    router.add_api_route(f"{prefix}/completions", completions, methods=["POST"])
    router.add_api_route(f"{prefix}/embeddings", embeddings, methods=["POST"])
    router.add_api_route(f"{prefix}/models", models, methods=["GET"])
    return router
