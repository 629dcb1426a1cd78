"""Sentence embeddings from a transformers encoder: pooling as sentence-transformers configures it.

The pooling mode comes from ``1_Pooling/config.json`` (mean when absent) and
vectors are L2-normalized when ``modules.json`` lists a Normalize module, so
a sentence-transformers model gives the vectors it was trained to give.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kiban.serving.runtime.errors import LoadError

POOLING_MODES = ("mean", "cls", "max", "mean_sqrt_len")
CHUNK = 32  # texts per forward pass: bounds memory when one request sends many inputs

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Pooling:
    """How token vectors become one sentence vector, and whether it is then normalized."""

    mode: str = "mean"
    normalize: bool = False


def is_sentence_transformer(directory: Path) -> bool:
    """True for a sentence-transformers layout (``modules.json`` or ``1_Pooling``)."""
    return (directory / "modules.json").is_file() or (directory / "1_Pooling").is_dir()


def read_pooling(directory: Path) -> Pooling:
    """The pooling of a model directory: ``1_Pooling/config.json`` and a Normalize module."""
    try:
        modules: list[dict[str, Any]] = []
        if (directory / "modules.json").is_file():
            modules = json.loads((directory / "modules.json").read_text())
        pooling_dir = "1_Pooling"
        for module in modules:
            if str(module.get("type", "")).endswith("Pooling"):
                pooling_dir = str(module.get("path") or pooling_dir)
        normalize = any(str(m.get("type", "")).endswith("Normalize") for m in modules)
        config_path = directory / pooling_dir / "config.json"
        config = json.loads(config_path.read_text()) if config_path.is_file() else {}
    except (OSError, ValueError, AttributeError) as exc:
        raise LoadError(f"{directory}: unreadable sentence-transformers config: {exc}") from exc
    chosen = [
        mode
        for mode in POOLING_MODES
        if config.get(f"pooling_mode_{mode}_tokens") or config.get(f"pooling_mode_{mode}_token")
    ]
    if not config:
        chosen = ["mean"]
    if len(chosen) != 1:
        raise LoadError(
            f"{config_path}: expected exactly one pooling mode of {', '.join(POOLING_MODES)}, "
            f"found {chosen or 'none'}"
        )
    return Pooling(mode=chosen[0], normalize=normalize)


def pool(hidden: torch.Tensor, mask: torch.Tensor, mode: str) -> torch.Tensor:
    """Reduce ``hidden`` [batch, tokens, dim] to [batch, dim], ignoring padding per ``mask``."""
    import torch

    if mode == "cls":
        return hidden[:, 0]
    weights = mask.unsqueeze(-1).to(hidden.dtype)
    if mode == "max":
        return hidden.masked_fill(weights == 0, torch.finfo(hidden.dtype).min).max(dim=1).values
    summed = (hidden * weights).sum(dim=1)
    counts = weights.sum(dim=1).clamp(min=1.0)
    return summed / (counts.sqrt() if mode == "mean_sqrt_len" else counts)


@dataclass(frozen=True)
class Embeddings:
    """Vectors for a list of texts and how many tokens each text took."""

    vectors: list[list[float]]
    token_counts: list[int]


class Embedder:
    """Runs the encoder over texts in padded batches; call it on the model's worker thread."""

    def __init__(
        self, model: Any, tokenizer: Any, *, device: str, pooling: Pooling, max_length: int
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.device = device
        self.pooling = pooling
        self.max_length = max_length

    @property
    def dimension(self) -> int:
        """Length of each vector."""
        return int(self.model.config.hidden_size)

    def embed(self, texts: Sequence[str]) -> Embeddings:
        """Embed every text (truncated to ``max_length`` tokens), in chunks of ``CHUNK``."""
        vectors: list[list[float]] = []
        counts: list[int] = []
        for start in range(0, len(texts), CHUNK):
            chunk_vectors, chunk_counts = self._embed_chunk(list(texts[start : start + CHUNK]))
            vectors.extend(chunk_vectors)
            counts.extend(chunk_counts)
        return Embeddings(vectors=vectors, token_counts=counts)

    def _embed_chunk(self, texts: list[str]) -> tuple[list[list[float]], list[int]]:
        import torch

        encoded = self.tokenizer(
            texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
        ).to(self.device)
        with torch.inference_mode():
            hidden = self.model(**encoded).last_hidden_state
            pooled = pool(hidden, encoded["attention_mask"], self.pooling.mode).float()
            if self.pooling.normalize:
                pooled = torch.nn.functional.normalize(pooled, p=2, dim=-1)
        counts = [int(n) for n in encoded["attention_mask"].sum(dim=1).tolist()]
        return pooled.cpu().tolist(), counts
