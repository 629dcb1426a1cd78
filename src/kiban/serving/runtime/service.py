"""The model behind the routes: loads it in the background, batches requests, runs them.

All model work happens on one worker thread, so the event loop stays free to
answer health checks and to gather the next batch while a pass runs.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from enum import StrEnum
from typing import TypeVar

from kiban.serving.runtime.batching import MicroBatcher
from kiban.serving.runtime.embedding import Embedder, Embeddings
from kiban.serving.runtime.errors import (
    BadRequest,
    InternalError,
    LoadError,
    ModelNotFound,
    NotReady,
    WrongTask,
)
from kiban.serving.runtime.generation import (
    Completion,
    GenerationParams,
    Generator,
    Prompt,
    batch_key,
)
from kiban.serving.runtime.loading import LoadedModel, load_model
from kiban.serving.runtime.metrics import ServerMetrics
from kiban.serving.runtime.options import ServerOptions, Task

log = logging.getLogger(__name__)
T = TypeVar("T")

TASK_WORDS = {
    Task.TEXT_GENERATION: "text generation (chat and completions)",
    Task.TEXT_EMBEDDING: "text embedding (embeddings)",
}


class State(StrEnum):
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"


class ModelService:
    """One served model: its load state, its batchers and the worker thread that runs it."""

    def __init__(
        self,
        options: ServerOptions,
        metrics: ServerMetrics,
        loader: Callable[[ServerOptions], LoadedModel] = load_model,
    ) -> None:
        self.options = options
        self.metrics = metrics
        self._loader = loader
        self.state = State.LOADING
        self.error: str | None = None
        self.loaded: LoadedModel | None = None
        self.started_at = int(time.time())
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kiban-model")
        self.embedder: Embedder | None = None
        self.generator: Generator | None = None
        wait_s = options.max_batch_wait_ms / 1000.0
        self.embed_batcher: MicroBatcher[list[str], Embeddings] = MicroBatcher(
            self._embed_batch,
            executor=self._executor,
            max_batch_size=options.max_batch_size,
            max_wait_s=wait_s,
            on_batch=metrics.batch_size.observe,
        )
        self.generate_batcher: MicroBatcher[Prompt, Completion] = MicroBatcher(
            self._generate_batch,
            executor=self._executor,
            max_batch_size=options.max_batch_size,
            max_wait_s=wait_s,
            on_batch=metrics.batch_size.observe,
        )

    # -- loading -----------------------------------------------------------------------------

    def load(self) -> None:
        """Load the model (blocking); on failure record the message and raise LoadError."""
        try:
            loaded = self._loader(self.options)
        except LoadError as exc:
            self.state, self.error = State.FAILED, str(exc)
            raise
        except Exception as exc:  # a loader bug still ends as a clean load failure
            self.state, self.error = State.FAILED, f"{type(exc).__name__}: {exc}"
            raise LoadError(self.error) from exc
        self.attach(loaded)

    def load_in_background(self, on_failure: Callable[[str], None] | None = None) -> None:
        """Start loading on a daemon thread; ``on_failure`` gets the one-line message."""

        def run() -> None:
            try:
                self.load()
            except LoadError as exc:
                message = " ".join(str(exc).split())
                log.error("model failed to load: %s", message)
                if on_failure is not None:
                    on_failure(message)

        threading.Thread(target=run, name="kiban-model-load", daemon=True).start()

    def attach(self, loaded: LoadedModel) -> None:
        """Serve an already loaded model (tests share one model among several apps this way)."""
        if loaded.task is Task.TEXT_EMBEDDING:
            if loaded.pooling is None:
                raise LoadError(f"{loaded.directory}: an embedding model needs a pooling config")
            self.embedder = Embedder(
                loaded.model,
                loaded.tokenizer,
                device=loaded.device,
                pooling=loaded.pooling,
                max_length=loaded.context_length,
            )
        else:
            self.generator = Generator(
                loaded.model,
                loaded.tokenizer,
                device=loaded.device,
                context_length=loaded.context_length,
            )
        self.loaded = loaded
        self.state = State.READY
        log.info(
            "model %s ready: %s from %s on %s (%s)",
            self.options.model_name,
            loaded.task,
            loaded.directory,
            loaded.device,
            loaded.dtype,
        )

    async def close(self) -> None:
        """Stop the batchers and the worker thread."""
        await self.embed_batcher.close()
        await self.generate_batcher.close()
        self._executor.shutdown(wait=False, cancel_futures=True)

    # -- checks ------------------------------------------------------------------------------

    def check_name(self, name: str) -> None:
        """404 unless ``name`` is the served model's name."""
        if name != self.options.model_name:
            raise ModelNotFound(
                f"model {name!r} is not served here; this server serves "
                f"{self.options.model_name!r}",
                param="model",
                code="model_not_found",
            )

    def require(self, task: Task | None = None) -> LoadedModel:
        """The loaded model, if it serves ``task``; 503 while loading, 400 for the other task."""
        if self.loaded is None:
            if self.state is State.FAILED:
                raise NotReady(f"model failed to load: {self.error}", code="model_load_failed")
            raise NotReady("model is still loading; retry shortly", code="model_not_ready")
        if task is not None and self.loaded.task is not task:
            raise WrongTask(
                f"model {self.options.model_name!r} serves {TASK_WORDS[self.loaded.task]}, "
                f"not {TASK_WORDS[task]}",
                code="wrong_task",
            )
        return self.loaded

    # -- embeddings --------------------------------------------------------------------------

    async def embed(self, texts: list[str]) -> Embeddings:
        """Vectors for ``texts``, batched with other requests arriving meanwhile."""
        self.require(Task.TEXT_EMBEDDING)
        result = await self._guard(self.embed_batcher.submit(texts))
        self.metrics.prompt_tokens.inc(sum(result.token_counts))
        return result

    def _embed_batch(self, requests: Sequence[list[str]]) -> list[Embeddings]:
        assert self.embedder is not None
        flat = [text for texts in requests for text in texts]
        together = self.embedder.embed(flat)
        results: list[Embeddings] = []
        start = 0
        for texts in requests:
            end = start + len(texts)
            results.append(
                Embeddings(together.vectors[start:end], together.token_counts[start:end])
            )
            start = end
        return results

    # -- generation --------------------------------------------------------------------------

    def prompt(
        self,
        text: str,
        *,
        field: str,
        max_tokens: int | None = None,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | None = None,
        stop: tuple[str, ...] = (),
    ) -> Prompt:
        """Tokenize ``text`` and fit max_tokens to the limit and to what context remains."""
        self.require(Task.TEXT_GENERATION)
        assert self.generator is not None
        limit = self.options.max_tokens_limit
        if max_tokens is not None and max_tokens > limit:
            raise BadRequest(
                f"max_tokens is {max_tokens}, over this server's limit of {limit} "
                "(--max-tokens-limit)",
                param="max_tokens",
                code="max_tokens_exceeded",
            )
        ids = self.generator.encode(text)
        context = self.generator.context_length
        room = context - len(ids)
        if room < 1:
            raise BadRequest(
                f"{field}: the prompt is {len(ids)} tokens; the model's context is {context} "
                "tokens and leaves no room for a completion",
                param=field,
                code="context_length_exceeded",
            )
        wanted = max_tokens if max_tokens is not None else limit
        params = GenerationParams(
            max_tokens=min(wanted, room),
            temperature=temperature,
            top_p=top_p,
            seed=seed,
            stop=stop,
        )
        return Prompt(input_ids=ids, params=params)

    async def complete(self, prompt: Prompt) -> Completion:
        """Generate for one prompt, batched with compatible requests arriving meanwhile."""
        self.require(Task.TEXT_GENERATION)
        self.metrics.prompt_tokens.inc(len(prompt.input_ids))
        return await self._guard(self.generate_batcher.submit(prompt, batch_key(prompt.params)))

    def _generate_batch(self, prompts: Sequence[Prompt]) -> list[Completion]:
        assert self.generator is not None
        started = time.perf_counter()
        completions = self.generator.generate(prompts)
        self.metrics.observe_generation(
            sum(c.completion_tokens for c in completions), time.perf_counter() - started
        )
        return completions

    async def stream(self, prompt: Prompt) -> AsyncIterator[str | Completion]:
        """Text pieces as they are generated, then the whole Completion; runs alone."""
        self.require(Task.TEXT_GENERATION)
        generator = self.generator
        assert generator is not None
        self.metrics.prompt_tokens.inc(len(prompt.input_ids))
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[str | Completion | BaseException] = asyncio.Queue()
        cancelled = threading.Event()

        def deliver(item: str | Completion | BaseException) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the event loop is gone: the client is too
                cancelled.set()

        def work() -> None:
            if cancelled.is_set():
                return
            started = time.perf_counter()
            try:
                completion = generator.stream(prompt, deliver, cancelled)
            except Exception as exc:
                log.exception("streaming generation failed")
                deliver(exc)
                return
            self.metrics.observe_generation(
                completion.completion_tokens, time.perf_counter() - started
            )
            deliver(completion)

        self.metrics.batch_size.observe(1)
        loop.run_in_executor(self._executor, work)
        try:
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise InternalError(f"generation failed: {type(item).__name__}: {item}")
                yield item
                if isinstance(item, Completion):
                    return
        finally:
            cancelled.set()  # a client that hung up stops the generation at the next token

    async def _guard(self, work: Awaitable[T]) -> T:
        """Await model work; an unexpected failure becomes a 500 with a message, no traceback."""
        try:
            return await work
        except (BadRequest, NotReady, WrongTask):
            raise
        except Exception as exc:
            log.exception("model call failed")
            raise InternalError(
                f"the model failed on this request: {type(exc).__name__}: {exc}"
            ) from exc
