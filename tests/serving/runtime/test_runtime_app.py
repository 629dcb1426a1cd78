"""The HTTP API against both real models: OpenAI routes, OIP v2, errors, batching, metrics."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from fastapi.testclient import TestClient

from kiban.serving.runtime.app import create_app
from kiban.serving.runtime.loading import LoadedModel
from kiban.serving.runtime.options import ServerOptions
from kiban.serving.runtime.service import ModelService
from kiban.testing import eventually


def _chat(client: TestClient, content: str = "Hello", **extra: Any) -> Any:
    body = {"model": "tiny", "messages": [{"role": "user", "content": content}], **extra}
    return client.post("/openai/v1/chat/completions", json=body)


def _error(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert "Traceback" not in error["message"]
    return error


# -- chat and completions --------------------------------------------------------------------


def test_chat_completion(lm_client: TestClient) -> None:
    response = _chat(lm_client, max_tokens=7, temperature=0)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "chat.completion" and body["model"] == "tiny"
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant" and choice["message"]["content"]
    assert choice["finish_reason"] == "length"
    usage = body["usage"]
    assert usage["completion_tokens"] == 7
    assert usage["prompt_tokens"] > 1
    assert usage["total_tokens"] == usage["prompt_tokens"] + 7


def test_chat_stream_is_openai_chunks_ending_with_done(lm_client: TestClient) -> None:
    plain = _chat(lm_client, max_tokens=10, temperature=0).json()
    with lm_client.stream(
        "POST",
        "/openai/v1/chat/completions",
        json={
            "model": "tiny",
            "messages": [{"role": "user", "content": "Hello"}],
            "max_tokens": 10,
            "temperature": 0,
            "stream": True,
        },
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == plain["choices"][0]["message"]["content"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert all("usage" not in c for c in chunks)  # as OpenAI: only when asked for


def _stream_chunks(client: TestClient, path: str, body: dict[str, object]) -> list[Any]:
    with client.stream("POST", path, json={**body, "stream": True}) as response:
        assert response.status_code == 200
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    return [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]


@pytest.mark.parametrize(
    ("path", "prompt"),
    [
        ("/openai/v1/chat/completions", {"messages": [{"role": "user", "content": "Hello"}]}),
        ("/openai/v1/completions", {"prompt": "the quick brown fox"}),
    ],
)
def test_include_usage_adds_a_last_chunk_with_the_usage(
    lm_client: TestClient, path: str, prompt: dict[str, object]
) -> None:
    body = {"model": "tiny", "max_tokens": 9, "temperature": 0, **prompt}
    whole = lm_client.post(path, json=body).json()
    chunks = _stream_chunks(lm_client, path, {**body, "stream_options": {"include_usage": True}})
    *pieces, last = chunks
    assert last["choices"] == [] and last["usage"] == whole["usage"]
    assert last["usage"]["completion_tokens"] == 9
    assert all(c["usage"] is None and len(c["choices"]) == 1 for c in pieces)
    assert pieces[-1]["choices"][0]["finish_reason"] == "length"
    assert last["id"] == pieces[0]["id"]


def test_stream_options_without_streaming_is_refused(lm_client: TestClient) -> None:
    response = lm_client.post(
        "/openai/v1/chat/completions",
        json={
            "model": "tiny",
            "messages": [{"role": "user", "content": "Hello"}],
            "stream_options": {"include_usage": True},
        },
    )
    assert response.status_code == 400
    assert "stream_options" in response.json()["error"]["message"]


def test_text_completion_with_stop(lm_client: TestClient) -> None:
    free = lm_client.post(
        "/openai/v1/completions",
        json={
            "model": "tiny",
            "prompt": "the quick brown fox",
            "max_tokens": 20,
            "temperature": 0,
        },
    ).json()["choices"][0]
    stop = free["text"][2:4]
    cut = lm_client.post(
        "/openai/v1/completions",
        json={
            "model": "tiny",
            "prompt": ["the quick brown fox"],
            "max_tokens": 20,
            "temperature": 0,
            "stop": [stop],
        },
    ).json()["choices"][0]
    assert cut["finish_reason"] == "stop"
    assert cut["text"] == free["text"][: free["text"].find(stop)]


def test_sampling_with_a_seed_repeats(lm_client: TestClient) -> None:
    def sample() -> str:
        body = _chat(lm_client, max_tokens=12, temperature=1.2, top_p=0.9, seed=42).json()
        return str(body["choices"][0]["message"]["content"])

    assert sample() == sample()


def test_concurrent_chats_are_batched_and_match_unbatched(
    tiny_lm: LoadedModel, make_client: Callable[..., TestClient]
) -> None:
    contents = ["Hello", "GPUs are shared", "a small model serves", "fox"]
    with make_client(tiny_lm, "--model_name", "tiny", "--max-batch-wait-ms", "200") as client:
        alone = [_chat(client, c, max_tokens=6, temperature=0).json() for c in contents]
        service: ModelService = client.app.state.service  # type: ignore[attr-defined]
        assert set(service.generate_batcher.batch_sizes) == {1}
        with ThreadPoolExecutor(len(contents)) as pool:
            together = list(
                pool.map(lambda c: _chat(client, c, max_tokens=6, temperature=0).json(), contents)
            )
        assert max(service.generate_batcher.batch_sizes) > 1
    texts = [[b["choices"][0]["message"]["content"] for b in run] for run in (alone, together)]
    assert texts[0] == texts[1]


def test_max_tokens_over_the_limit_is_refused_with_the_limit(lm_client: TestClient) -> None:
    error = _error(_chat(lm_client, max_tokens=65), 400)
    assert error["param"] == "max_tokens" and "64" in error["message"]


def test_a_prompt_longer_than_the_context_is_refused(lm_client: TestClient) -> None:
    error = _error(_chat(lm_client, "the fox " * 200, max_tokens=5), 400)
    assert error["param"] == "messages" and "256" in error["message"]


# -- embeddings ------------------------------------------------------------------------------


def test_embeddings_for_a_list_and_a_string(embed_client: TestClient) -> None:
    response = embed_client.post(
        "/openai/v1/embeddings",
        json={
            "model": "minilm",
            "input": ["A cat sleeps.", "A kitten naps.", "Stock prices fell."],
        },
    )
    assert response.status_code == 200, response.text
    body = response.json()
    vectors = [d["embedding"] for d in sorted(body["data"], key=lambda d: d["index"])]
    assert [len(v) for v in vectors] == [384] * 3
    cos = [sum(a * b for a, b in zip(vectors[0], v, strict=True)) for v in vectors[1:]]
    assert cos[0] > cos[1]
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > 3
    single = embed_client.post(
        "/openai/v1/embeddings", json={"model": "minilm", "input": "A cat sleeps."}
    ).json()
    assert single["data"][0]["embedding"] == pytest.approx(vectors[0], abs=1e-5)


def test_embeddings_in_base64(embed_client: TestClient) -> None:
    import base64
    import struct

    body = embed_client.post(
        "/openai/v1/embeddings",
        json={"model": "minilm", "input": "hello", "encoding_format": "base64"},
    ).json()
    raw = base64.b64decode(body["data"][0]["embedding"])
    vector = struct.unpack(f"<{len(raw) // 4}f", raw)
    assert len(vector) == 384
    assert math.isclose(math.sqrt(sum(x * x for x in vector)), 1.0, rel_tol=1e-5)


def test_concurrent_embeddings_share_a_forward_pass(
    minilm: LoadedModel, make_client: Callable[..., TestClient]
) -> None:
    texts = ["alpha", "a much longer sentence about GPUs", "gamma ray", "delta"]
    with make_client(minilm, "--model_name", "minilm", "--max-batch-wait-ms", "200") as client:

        def embed(text: str) -> list[float]:
            response = client.post("/openai/v1/embeddings", json={"model": "minilm", "input": text})
            vector: list[float] = response.json()["data"][0]["embedding"]
            return vector

        with ThreadPoolExecutor(len(texts)) as pool:
            together = list(pool.map(embed, texts))
        service: ModelService = client.app.state.service  # type: ignore[attr-defined]
        assert max(service.embed_batcher.batch_sizes) > 1
        alone = [embed(t) for t in texts]
    for a, b in zip(together, alone, strict=True):
        assert a == pytest.approx(b, abs=1e-5)


# -- errors ----------------------------------------------------------------------------------


def test_wrong_task_names_the_task_served(lm_client: TestClient, embed_client: TestClient) -> None:
    error = _error(
        embed_client.post(
            "/openai/v1/chat/completions",
            json={"model": "minilm", "messages": [{"role": "user", "content": "hi"}]},
        ),
        400,
    )
    assert "text embedding" in error["message"] and error["code"] == "wrong_task"
    error = _error(
        lm_client.post("/openai/v1/embeddings", json={"model": "tiny", "input": "x"}), 400
    )
    assert "text generation" in error["message"]


def test_unknown_model_is_404(lm_client: TestClient) -> None:
    error = _error(
        lm_client.post(
            "/openai/v1/chat/completions",
            json={"model": "gpt-9", "messages": [{"role": "user", "content": "hi"}]},
        ),
        404,
    )
    assert "gpt-9" in error["message"] and "tiny" in error["message"]
    _error(lm_client.get("/v2/models/gpt-9"), 404)
    _error(lm_client.get("/no/such/route"), 404)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": [{"role": "user", "content": "hi"}]}, "model"),
        ({"model": "tiny", "messages": []}, "messages"),
        ({"model": "tiny", "messages": [{"content": "hi"}]}, "messages.0.role"),
        (
            {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "temperature": 3},
            "temperature",
        ),
        ({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "n": 2}, "n"),
        (
            {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 0},
            "max_tokens",
        ),
    ],
)
def test_malformed_requests_name_the_field(
    lm_client: TestClient, body: dict[str, Any], param: str
) -> None:
    error = _error(lm_client.post("/openai/v1/chat/completions", json=body), 400)
    assert error["param"] == param and param.split(".")[0] in error["message"]


def test_invalid_json_and_oversized_bodies(lm_client: TestClient) -> None:
    error = _error(lm_client.post("/openai/v1/chat/completions", content=b"{not json"), 400)
    assert "JSON" in error["message"]
    huge = {"model": "tiny", "messages": [{"role": "user", "content": "x" * 5000}]}
    error = _error(lm_client.post("/openai/v1/chat/completions", json=huge), 413)
    assert "4096" in error["message"]


def test_not_ready_while_loading_then_ready(tiny_lm: LoadedModel) -> None:
    release = threading.Event()

    def slow_loader(options: ServerOptions) -> LoadedModel:
        release.wait(10)
        return tiny_lm

    app = create_app(ServerOptions(model_name="tiny"))
    service: ModelService = app.state.service
    service._loader = slow_loader  # a load we can hold open
    with TestClient(app) as client:
        assert client.get("/v2/health/live").status_code == 200
        assert client.get("/v2/health/ready").status_code == 503
        assert client.get("/v2/models/tiny/ready").status_code == 503
        error = _error(_chat(client), 503)
        assert "loading" in error["message"]
        release.set()
        eventually(
            lambda: client.get("/v2/health/ready").status_code == 200,
            what="the model to be ready once its load is released",
            interval=0.02,
        )
        assert _chat(client, max_tokens=2).status_code == 200


def test_a_failed_load_is_reported_and_not_ready() -> None:
    failures: list[str] = []
    app = create_app(
        ServerOptions(model_name="m", model_dir="/nonexistent/model"),
        on_load_failure=failures.append,
    )
    with TestClient(app) as client:
        eventually(lambda: failures, what="the load failure to be reported", interval=0.02)
        assert "/nonexistent/model" in failures[0]
        assert client.get("/v2/health/ready").status_code == 503
        error = _error(client.post("/openai/v1/embeddings", json={"model": "m", "input": "x"}), 503)
        assert "failed to load" in error["message"]


# -- Open Inference Protocol v2 and models ---------------------------------------------------


def test_v2_infer_embeddings(embed_client: TestClient) -> None:
    response = embed_client.post(
        "/v2/models/minilm/infer",
        json={
            "id": "r1",
            "inputs": [
                {"name": "text", "shape": [2], "datatype": "BYTES", "data": ["a cat", "a dog"]}
            ],
        },
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["id"] == "r1" and body["model_name"] == "minilm"
    output = body["outputs"][0]
    assert output["datatype"] == "FP32" and output["shape"] == [2, 384]
    assert len(output["data"]) == 2 * 384
    meta = embed_client.get("/v2/models/minilm").json()
    assert meta["outputs"][0]["shape"] == [-1, 384]


def test_v2_infer_generation(lm_client: TestClient) -> None:
    response = lm_client.post(
        "/v2/models/tiny/infer",
        json={
            "inputs": [
                {"name": "text_input", "shape": [1], "datatype": "BYTES", "data": ["hello"]}
            ],
            "parameters": {"max_tokens": 5, "temperature": 0},
        },
    )
    assert response.status_code == 200, response.text
    output = response.json()["outputs"][0]
    assert output["name"] == "text_output" and output["datatype"] == "BYTES"
    completion = lm_client.post(
        "/openai/v1/completions",
        json={"model": "tiny", "prompt": "hello", "max_tokens": 5, "temperature": 0},
    ).json()
    assert output["data"] == [completion["choices"][0]["text"]]


@pytest.mark.parametrize(
    ("tensor", "param"),
    [
        ({"name": "text", "shape": [3], "datatype": "BYTES", "data": ["a"]}, "inputs.0.shape"),
        ({"name": "text", "shape": [1], "datatype": "FP32", "data": [1.0]}, "inputs.0.datatype"),
        ({"name": "text", "shape": [1], "datatype": "BYTES", "data": [1]}, "inputs.0.data"),
        ({"name": "text", "shape": [1], "datatype": "BYTES"}, "inputs.0.data"),
    ],
)
def test_v2_bad_tensors_name_the_field(
    embed_client: TestClient, tensor: dict[str, Any], param: str
) -> None:
    response = embed_client.post("/v2/models/minilm/infer", json={"inputs": [tensor]})
    assert _error(response, 400)["param"] == param


def test_health_models_and_metrics(lm_client: TestClient) -> None:
    assert lm_client.get("/v2/health/live").json() == {"live": True}
    assert lm_client.get("/v2/health/ready").json() == {"ready": True}
    assert lm_client.get("/v2/models/tiny/ready").json() == {"name": "tiny", "ready": True}
    models = lm_client.get("/openai/v1/models").json()
    assert [m["id"] for m in models["data"]] == ["tiny"]
    _chat(lm_client, max_tokens=3, temperature=0)
    text = lm_client.get("/metrics").text
    samples = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }
    route = "/openai/v1/chat/completions"
    assert samples[f'kiban_model_request_duration_seconds_count{{route="{route}"}}'] >= 1
    assert samples['kiban_model_generated_tokens_total{model_name="tiny"}'] >= 3
    assert samples['kiban_model_tokens_per_second{model_name="tiny"}'] > 0
    assert samples["kiban_model_requests_in_flight"] == 0  # the scrape does not count itself


def test_a_request_is_in_flight_until_its_last_byte(lm_client: TestClient) -> None:
    """The gauge read as each streamed chunk leaves the server: one request in flight."""
    app = lm_client.app
    registry = app.state.metrics.registry  # type: ignore[attr-defined]
    seen: list[float | None] = []

    async def watching(scope: Any, receive: Any, send: Any) -> None:
        async def look_then_send(message: Any) -> None:
            if message["type"] == "http.response.body" and message.get("more_body"):
                seen.append(registry.get_sample_value("kiban_model_requests_in_flight"))
            await send(message)

        await app(scope, receive, look_then_send)

    client = TestClient(watching)  # no lifespan: the model is lm_client's, already loaded
    body = {"model": "tiny", "prompt": "hi", "max_tokens": 4, "stream": True}
    lines = client.post("/openai/v1/completions", json=body).text.splitlines()
    assert "data: [DONE]" in lines
    assert seen and set(seen) == {1.0}
    assert registry.get_sample_value("kiban_model_requests_in_flight") == 0


def test_text_completion_stream_on_the_v1_alias(lm_client: TestClient) -> None:
    body = {"model": "tiny", "prompt": "hello", "max_tokens": 6, "temperature": 0}
    whole = lm_client.post("/v1/completions", json=body).json()["choices"][0]["text"]
    with lm_client.stream("POST", "/v1/completions", json={**body, "stream": True}) as response:
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    assert all(c["object"] == "text_completion" for c in chunks)
    assert "".join(c["choices"][0]["text"] for c in chunks) == whole
