"""Generation with the tiny LM: stop rules, limits, seeds, streaming, and batching equivalence."""

from __future__ import annotations

import threading

import pytest

from kiban.serving.runtime.generation import (
    GenerationParams,
    Generator,
    Prompt,
    batch_key,
    render_chat,
)
from kiban.serving.runtime.loading import LoadedModel


@pytest.fixture(scope="module")
def generator(tiny_lm: LoadedModel) -> Generator:
    return Generator(
        tiny_lm.model,
        tiny_lm.tokenizer,
        device=tiny_lm.device,
        context_length=tiny_lm.context_length,
    )


def _prompt(generator: Generator, text: str, **params: object) -> Prompt:
    settings: dict[str, object] = {"max_tokens": 12, "temperature": 0.0, **params}
    return Prompt(generator.encode(text), GenerationParams(**settings))  # type: ignore[arg-type]


def test_chat_template_is_used_when_the_tokenizer_has_one(tiny_lm: LoadedModel) -> None:
    text = render_chat(tiny_lm.tokenizer, [{"role": "user", "content": "hi"}])
    assert text == "<|bos|>user\nhi<|eos|>\n<|bos|>assistant\n"

    class NoTemplate:
        chat_template = None

    plain = render_chat(
        NoTemplate(), [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    )
    assert plain == "system: be brief\nuser: hi\nassistant:"


def test_greedy_is_deterministic_and_stops_at_max_tokens(generator: Generator) -> None:
    prompt = _prompt(generator, "the quick brown fox", max_tokens=9)
    first, second = generator.generate([prompt]), generator.generate([prompt])
    assert first == second
    done = first[0]
    assert done.prompt_tokens == len(prompt.input_ids)
    assert (done.finish_reason, done.completion_tokens) == ("length", 9)
    assert done.text


def test_stop_string_cuts_the_text_and_finishes_with_stop(generator: Generator) -> None:
    free = generator.generate([_prompt(generator, "Hello, world!", max_tokens=30)])[0]
    assert len(free.text) > 6, "the tiny model should say something to cut"
    stop = free.text[3:5]
    cut = generator.generate([_prompt(generator, "Hello, world!", max_tokens=30, stop=(stop,))])[0]
    assert cut.finish_reason == "stop"
    assert cut.text == free.text[: free.text.find(stop)]
    assert stop not in cut.text
    assert cut.completion_tokens < free.completion_tokens


def test_a_batch_gives_each_prompt_what_it_gets_alone(generator: Generator) -> None:
    prompts = [
        _prompt(generator, "a small model", max_tokens=5),
        _prompt(generator, "GPUs are shared fairly among the teams of the platform", max_tokens=11),
        _prompt(generator, "hello", max_tokens=8, stop=("e",)),
    ]
    assert generator.generate(prompts) == [generator.generate([p])[0] for p in prompts]


def test_seeded_sampling_repeats_and_differs_from_another_seed(generator: Generator) -> None:
    def sample(seed: int) -> str:
        prompt = _prompt(generator, "the cat", max_tokens=20, temperature=1.5, seed=seed)
        return generator.generate([prompt])[0].text

    assert sample(1) == sample(1)
    assert len({sample(seed) for seed in range(1, 5)}) > 1


def test_stream_pieces_add_up_to_the_completion(generator: Generator) -> None:
    prompt = _prompt(generator, "Hello, world!", max_tokens=20)
    pieces: list[str] = []
    streamed = generator.stream(prompt, pieces.append, threading.Event())
    assert "".join(pieces) == streamed.text == generator.generate([prompt])[0].text
    assert len(pieces) > 1


def test_stream_holds_back_a_stop_string(generator: Generator) -> None:
    free = generator.generate([_prompt(generator, "Hello, world!", max_tokens=30)])[0]
    stop = free.text[4:7]
    pieces: list[str] = []
    prompt = _prompt(generator, "Hello, world!", max_tokens=30, stop=(stop,))
    streamed = generator.stream(prompt, pieces.append, threading.Event())
    assert "".join(pieces) == streamed.text == free.text[: free.text.find(stop)]


def test_a_cancelled_stream_stops_early(generator: Generator) -> None:
    cancelled = threading.Event()
    cancelled.set()
    done = generator.stream(_prompt(generator, "the", max_tokens=50), lambda _: None, cancelled)
    assert done.completion_tokens <= 1


def test_batch_keys() -> None:
    greedy = GenerationParams(max_tokens=5, temperature=0.0)
    assert batch_key(greedy) == batch_key(
        GenerationParams(max_tokens=50, temperature=0.0, stop=("x",))
    )
    sampled = GenerationParams(max_tokens=5, temperature=0.7, top_p=0.9)
    assert batch_key(sampled) != batch_key(greedy)
    assert batch_key(GenerationParams(max_tokens=5, temperature=0.7, seed=3)) is None
