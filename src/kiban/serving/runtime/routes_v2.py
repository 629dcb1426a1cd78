"""Open Inference Protocol v2 routes: health, model metadata and readiness, infer.

An embedding model takes a BYTES tensor of strings and answers an FP32
tensor of shape [n, dim]; a generation model takes BYTES ``text_input`` and
answers BYTES ``text_output``, one completion per string.
"""

from __future__ import annotations

import asyncio
import math
import uuid
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from kiban.serving.runtime.errors import BadRequest
from kiban.serving.runtime.options import Task
from kiban.serving.runtime.protocol import InferRequest, InferTensor, parse_body, read_body
from kiban.serving.runtime.service import ModelService, State

router = APIRouter()

PLATFORM = "kiban-transformers"
GENERATION_PARAMETERS = ("max_tokens", "temperature", "top_p", "seed", "stop")


def _service(request: Request) -> ModelService:
    service: ModelService = request.app.state.service
    return service


@router.get("/v2/health/live")
async def live() -> Any:
    """The process answers: always 200 once the HTTP server is up."""
    return {"live": True}


@router.get("/v2/health/ready")
async def ready(request: Request) -> Any:
    """200 once the model is loaded; 503 while loading or after a failed load."""
    service = _service(request)
    is_ready = service.state is State.READY
    return JSONResponse({"ready": is_ready}, status_code=200 if is_ready else 503)


@router.get("/v2")
async def server_metadata() -> Any:
    """Server name, version and protocol extensions (none)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        kiban_version = version("kiban")
    except PackageNotFoundError:
        kiban_version = "unknown"
    return {"name": "kiban-model-server", "version": kiban_version, "extensions": []}


@router.get("/v2/models/{name}")
async def model_metadata(name: str, request: Request) -> Any:
    """Inputs and outputs the model takes, which depend on its task."""
    service = _service(request)
    service.check_name(name)
    loaded = service.require()
    if loaded.task is Task.TEXT_EMBEDDING:
        assert service.embedder is not None
        inputs = [{"name": "text", "datatype": "BYTES", "shape": [-1]}]
        outputs = [
            {"name": "embedding", "datatype": "FP32", "shape": [-1, service.embedder.dimension]}
        ]
    else:
        inputs = [{"name": "text_input", "datatype": "BYTES", "shape": [-1]}]
        outputs = [{"name": "text_output", "datatype": "BYTES", "shape": [-1]}]
    return {
        "name": name,
        "versions": [],
        "platform": PLATFORM,
        "inputs": inputs,
        "outputs": outputs,
    }


@router.get("/v2/models/{name}/ready")
async def model_ready(name: str, request: Request) -> Any:
    """200 when this model is loaded, 503 before."""
    service = _service(request)
    service.check_name(name)
    is_ready = service.state is State.READY
    return JSONResponse({"name": name, "ready": is_ready}, status_code=200 if is_ready else 503)


def _strings(tensor: InferTensor, index: int) -> list[str]:
    """The tensor's elements as strings, after checking datatype and shape."""
    where = f"inputs.{index}"
    if tensor.datatype.upper() != "BYTES":
        raise BadRequest(
            f"{where}.datatype: expected BYTES (strings), got {tensor.datatype}",
            param=f"{where}.datatype",
        )
    flat: list[Any] = []
    pending: list[Any] = list(tensor.data)
    while pending:
        item = pending.pop(0)
        if isinstance(item, list):
            pending[:0] = item
        else:
            flat.append(item)
    if not all(isinstance(item, str) for item in flat):
        raise BadRequest(f"{where}.data: every element must be a string", param=f"{where}.data")
    if any(d < 0 for d in tensor.shape) or math.prod(tensor.shape) != len(flat):
        raise BadRequest(
            f"{where}.shape: {tensor.shape} does not hold the {len(flat)} elements in data",
            param=f"{where}.shape",
        )
    if not flat:
        raise BadRequest(f"{where}.data: must not be empty", param=f"{where}.data")
    return flat


def _pick(body: InferRequest, name: str) -> tuple[int, InferTensor]:
    """The input called ``name``, else the only input there is."""
    for index, tensor in enumerate(body.inputs):
        if tensor.name == name:
            return index, tensor
    if len(body.inputs) == 1:
        return 0, body.inputs[0]
    names = ", ".join(t.name for t in body.inputs)
    raise BadRequest(f"inputs: expected one named {name!r}, got {names}", param="inputs")


def _generation_settings(body: InferRequest, tensor: InferTensor) -> dict[str, Any]:
    """Sampling settings from the request's (or the input's) parameters, type-checked."""
    given = {**(body.parameters or {}), **(tensor.parameters or {})}
    settings: dict[str, Any] = {}
    kinds: dict[str, tuple[type, ...]] = {
        "max_tokens": (int,),
        "temperature": (int, float),
        "top_p": (int, float),
        "seed": (int,),
    }
    for key, kinds_ok in kinds.items():
        if key in given and given[key] is not None:
            value = given[key]
            if isinstance(value, bool) or not isinstance(value, kinds_ok):
                raise BadRequest(f"parameters.{key}: must be a number", param=f"parameters.{key}")
            settings[key] = value
    if settings.get("max_tokens", 1) < 1:
        raise BadRequest("parameters.max_tokens: must be at least 1", param="parameters.max_tokens")
    if not 0 <= settings.get("temperature", 1.0) <= 2:
        raise BadRequest(
            "parameters.temperature: must be within [0, 2]", param="parameters.temperature"
        )
    if not 0 < settings.get("top_p", 1.0) <= 1:
        raise BadRequest("parameters.top_p: must be within (0, 1]", param="parameters.top_p")
    stop = given.get("stop")
    if stop is not None:
        stops = [stop] if isinstance(stop, str) else stop
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise BadRequest(
                "parameters.stop: must be a string or a list of strings", param="parameters.stop"
            )
        settings["stop"] = tuple(s for s in stops if s)
    return settings


@router.post("/v2/models/{name}/infer")
async def infer(name: str, request: Request) -> Any:
    """Embeddings or generations for a batch of strings, per the model's task."""
    service = _service(request)
    service.check_name(name)
    body = parse_body(await read_body(request, service.options.max_request_bytes), InferRequest)
    loaded = service.require()
    ident = body.id or uuid.uuid4().hex
    if loaded.task is Task.TEXT_EMBEDDING:
        index, tensor = _pick(body, "text")
        result = await service.embed(_strings(tensor, index))
        dimension = len(result.vectors[0])
        output = {
            "name": "embedding",
            "datatype": "FP32",
            "shape": [len(result.vectors), dimension],
            "data": [value for vector in result.vectors for value in vector],
        }
    else:
        index, tensor = _pick(body, "text_input")
        texts = _strings(tensor, index)
        settings = _generation_settings(body, tensor)
        prompts = [service.prompt(text, field=f"inputs.{index}.data", **settings) for text in texts]
        done = await asyncio.gather(*(service.complete(p) for p in prompts))
        output = {
            "name": "text_output",
            "datatype": "BYTES",
            "shape": [len(done)],
            "data": [c.text for c in done],
        }
    return {"model_name": name, "id": ident, "parameters": {}, "outputs": [output]}
