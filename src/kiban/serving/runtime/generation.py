"""Text generation with a causal LM: prompts, sampling parameters, stop rules and streaming.

One Generator serves a batch of prompts (left-padded, one ``generate`` call)
or one streamed prompt. Each row stops on its own: at an end-of-sequence
token, at one of its stop strings, or after its own ``max_tokens``; the row's
finish reason is ``stop`` for the first two and ``length`` for the last.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class GenerationParams:
    """What one request asks of the sampler; temperature 0 means greedy decoding."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()

    @property
    def greedy(self) -> bool:
        """Whether decoding takes the most likely token each step (no randomness)."""
        return self.temperature == 0.0


def batch_key(params: GenerationParams) -> Hashable | None:
    """Requests with equal keys may share one ``generate`` call; None means run alone.

    Greedy requests all batch together; sampled ones batch by temperature and
    top_p; a seeded sampled request runs alone so its seed gives the same text
    whatever else is in flight.
    """
    if params.greedy:
        return ("greedy",)
    if params.seed is not None:
        return None
    return ("sample", params.temperature, params.top_p)


@dataclass(frozen=True)
class Prompt:
    """A tokenized prompt with the parameters it runs under."""

    input_ids: tuple[int, ...]
    params: GenerationParams


@dataclass(frozen=True)
class Completion:
    """The text generated for one prompt, why it ended and the tokens it took."""

    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int


def render_chat(tokenizer: Any, messages: Sequence[Mapping[str, str]]) -> str:
    """The prompt text for chat messages: the tokenizer's chat template, else ``role: content``."""
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(
            [dict(m) for m in messages], tokenize=False, add_generation_prompt=True
        )
        return str(text)
    lines = [f"{m['role']}: {m['content']}" for m in messages]
    return "\n".join([*lines, "assistant:"])


def _stop_index(text: str, stops: Sequence[str]) -> int | None:
    """Where the first stop string starts in ``text``, if any appears."""
    found = [i for i in (text.find(s) for s in stops if s) if i >= 0]
    return min(found) if found else None


def _held_back(text: str, stops: Sequence[str]) -> int:
    """How many trailing characters might begin a stop string and must not be streamed yet."""
    longest = 0
    for stop in stops:
        for size in range(min(len(stop) - 1, len(text)), longest, -1):
            if text.endswith(stop[:size]):
                longest = size
                break
    return longest


class _RowStops:
    """A stopping criterion for ``generate`` that ends each row on its own and records why."""

    def __init__(
        self,
        prompt_length: int,
        prompts: Sequence[Prompt],
        eos_ids: frozenset[int],
        decode: Callable[[list[int]], str],
        cancelled: threading.Event | None = None,
    ) -> None:
        self.prompt_length = prompt_length
        self.prompts = prompts
        self.eos_ids = eos_ids
        self.decode = decode
        self.cancelled = cancelled
        self.ends: list[int | None] = [None] * len(prompts)
        self.reasons: list[str] = ["length"] * len(prompts)

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
        import torch

        generated = input_ids[:, self.prompt_length :]
        step = int(generated.shape[1])
        for row, prompt in enumerate(self.prompts):
            if self.ends[row] is not None or step == 0:
                continue
            tokens = generated[row].tolist()
            if tokens[-1] in self.eos_ids:
                self.ends[row], self.reasons[row] = step - 1, "stop"
            elif prompt.params.stop and self._stopped(tokens, prompt.params.stop):
                self.ends[row], self.reasons[row] = step, "stop"
            elif step >= prompt.params.max_tokens:
                self.ends[row], self.reasons[row] = step, "length"
        if self.cancelled is not None and self.cancelled.is_set():
            self.ends = [step if end is None else end for end in self.ends]
        done = [end is not None for end in self.ends]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)

    def _stopped(self, tokens: list[int], stops: Sequence[str]) -> bool:
        # A stop string of n characters spans at most n tokens (plus a few partial ones).
        tail = tokens[-(max(len(s) for s in stops) + 4) :]
        return _stop_index(self.decode(tail), stops) is not None


class _DeltaStreamer:
    """Receives token ids from ``generate`` and emits new text, holding back partial stops."""

    def __init__(
        self,
        decode: Callable[[list[int]], str],
        stops: Sequence[str],
        eos_ids: frozenset[int],
        emit: Callable[[str], None],
    ) -> None:
        self.decode = decode
        self.stops = stops
        self.eos_ids = eos_ids
        self.emit = emit
        self.ids: list[int] = []
        self.sent = ""
        self.seen_prompt = False
        self.finished = False

    def put(self, value: torch.Tensor) -> None:
        if not self.seen_prompt:  # generate hands over the prompt first
            self.seen_prompt = True
            return
        if self.finished:
            return
        for token in value.flatten().tolist():
            if token in self.eos_ids:
                self.finished = True
                break
            self.ids.append(int(token))
        text = self.decode(self.ids)
        cut = _stop_index(text, self.stops)
        if cut is not None:
            self.finished = True
            safe = text[:cut]
        else:
            safe = text[: len(text) - _held_back(text, self.stops)]
        safe = safe.rstrip("\ufffd")  # an incomplete multi-byte character: wait for the rest
        self.send_upto(safe)

    def send_upto(self, text: str) -> None:
        """Emit what ``text`` adds to what was sent (nothing if it does not extend it)."""
        if len(text) > len(self.sent) and text.startswith(self.sent):
            self.emit(text[len(self.sent) :])
            self.sent = text

    def end(self) -> None:
        pass


class Generator:
    """Generates text for prompts with one model; call its methods on the model's worker thread."""

    def __init__(self, model: Any, tokenizer: Any, *, device: str, context_length: int) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.device = device
        self.context_length = context_length
        eos: set[int] = set()
        for source in (model.generation_config.eos_token_id, tokenizer.eos_token_id):
            if isinstance(source, int):
                eos.add(source)
            elif isinstance(source, list):
                eos.update(int(t) for t in source)
        self.eos_ids = frozenset(eos)
        self.pad_id = int(
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(eos or {0})
        )

    def encode(self, text: str) -> tuple[int, ...]:
        """Token ids of a prompt (with the tokenizer's special tokens, e.g. BOS)."""
        return tuple(int(t) for t in self.tokenizer(text)["input_ids"])

    def _decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))

    def generate(self, prompts: Sequence[Prompt]) -> list[Completion]:
        """Complete every prompt in one left-padded ``generate`` call (they share sampling)."""
        generated, stops = self._run(prompts, streamer=None, cancelled=None)
        return [
            self._completion(prompt, generated[row], stops, row)
            for row, prompt in enumerate(prompts)
        ]

    def stream(
        self, prompt: Prompt, emit: Callable[[str], None], cancelled: threading.Event
    ) -> Completion:
        """Complete one prompt, emitting text pieces as tokens arrive; returns the whole result."""
        streamer = _DeltaStreamer(self._decode, prompt.params.stop, self.eos_ids, emit)
        generated, stops = self._run([prompt], streamer=streamer, cancelled=cancelled)
        completion = self._completion(prompt, generated[0], stops, 0)
        streamer.send_upto(completion.text)
        return completion

    def _run(
        self,
        prompts: Sequence[Prompt],
        streamer: _DeltaStreamer | None,
        cancelled: threading.Event | None,
    ) -> tuple[list[list[int]], _RowStops]:
        import torch
        from transformers import StoppingCriteriaList

        width = max(len(p.input_ids) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, prompt in enumerate(prompts):
            ids[row, width - len(prompt.input_ids) :] = torch.tensor(prompt.input_ids)
            mask[row, width - len(prompt.input_ids) :] = 1
        params = prompts[0].params
        stops = _RowStops(width, prompts, self.eos_ids, self._decode, cancelled)
        sampling: dict[str, Any] = {"do_sample": False}
        if not params.greedy:
            sampling = {
                "do_sample": True,
                "temperature": params.temperature,
                "top_p": params.top_p,
                "top_k": 0,
            }
            if params.seed is not None:
                torch.manual_seed(params.seed)
        with torch.inference_mode():
            output = self.model.generate(
                input_ids=ids.to(self.device),
                attention_mask=mask.to(self.device),
                max_new_tokens=max(p.params.max_tokens for p in prompts),
                stopping_criteria=StoppingCriteriaList([stops]),
                pad_token_id=self.pad_id,
                streamer=streamer,
                **sampling,
            )
        return output[:, width:].tolist(), stops

    def _completion(
        self, prompt: Prompt, generated: list[int], stops: _RowStops, row: int
    ) -> Completion:
        end = stops.ends[row]
        tokens = generated[:end] if end is not None else generated
        text = self._decode(tokens)
        cut = _stop_index(text, prompt.params.stop)
        if cut is not None:
            text = text[:cut]
        return Completion(
            text=text,
            finish_reason=stops.reasons[row],
            prompt_tokens=len(prompt.input_ids),
            completion_tokens=len(tokens),
        )
