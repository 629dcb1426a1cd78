"""Embeddings from the real all-MiniLM-L6-v2: meaning shows in cosine, pooling as configured."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from kiban.serving.runtime.embedding import Embedder, read_pooling
from kiban.serving.runtime.errors import LoadError
from kiban.serving.runtime.loading import LoadedModel


@pytest.fixture(scope="module")
def embedder(minilm: LoadedModel) -> Embedder:
    assert minilm.pooling is not None
    return Embedder(
        minilm.model,
        minilm.tokenizer,
        device=minilm.device,
        pooling=minilm.pooling,
        max_length=minilm.context_length,
    )


def _cos(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def test_similar_sentences_are_closer_than_unrelated_ones(embedder: Embedder) -> None:
    cat, kitten, gpu = embedder.embed(
        [
            "A cat is sleeping on the sofa.",
            "A kitten naps on the couch.",
            "The quarterly GPU budget was exceeded by the vision team.",
        ]
    ).vectors
    assert _cos(cat, kitten) > _cos(cat, gpu) + 0.2
    assert _cos(cat, kitten) > _cos(kitten, gpu) + 0.2


def test_vectors_are_normalized_and_token_counts_reported(embedder: Embedder) -> None:
    result = embedder.embed(["short", "a somewhat longer sentence than the first one"])
    assert [len(v) for v in result.vectors] == [embedder.dimension] * 2 == [384, 384]
    for vector in result.vectors:
        assert math.isclose(math.sqrt(sum(x * x for x in vector)), 1.0, rel_tol=1e-5)
    assert result.token_counts[0] < result.token_counts[1]


def test_padding_in_a_batch_does_not_change_a_vector(embedder: Embedder) -> None:
    texts = ["one", "two words here and several more to pad the others", "three"]
    together = embedder.embed(texts).vectors
    alone = [embedder.embed([t]).vectors[0] for t in texts]
    assert torch.allclose(torch.tensor(together), torch.tensor(alone), atol=1e-5)


def test_long_inputs_are_truncated_not_refused(embedder: Embedder) -> None:
    result = embedder.embed(["word " * 2000])
    assert result.token_counts == [embedder.max_length]


@pytest.mark.parametrize(
    ("flags", "mode"),
    [
        ({"pooling_mode_cls_token": True}, "cls"),
        ({"pooling_mode_max_tokens": True}, "max"),
        ({"pooling_mode_mean_tokens": True}, "mean"),
    ],
)
def test_pooling_config_is_read(tmp_path: Path, flags: dict[str, bool], mode: str) -> None:
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps(flags))
    pooling = read_pooling(tmp_path)
    assert pooling.mode == mode and pooling.normalize is False


def test_pooling_modes_ignore_padding() -> None:
    from kiban.serving.runtime.embedding import pool

    hidden = torch.tensor([[[1.0, 5.0], [3.0, -1.0], [100.0, 100.0]]])
    mask = torch.tensor([[1, 1, 0]])
    assert pool(hidden, mask, "mean").tolist() == [[2.0, 2.0]]
    assert pool(hidden, mask, "max").tolist() == [[3.0, 5.0]]
    assert pool(hidden, mask, "cls").tolist() == [[1.0, 5.0]]


def test_ambiguous_pooling_is_a_load_error(tmp_path: Path) -> None:
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(
        json.dumps({"pooling_mode_cls_token": True, "pooling_mode_max_tokens": True})
    )
    with pytest.raises(LoadError, match="exactly one pooling mode"):
        read_pooling(tmp_path)
