"""Load a model directory with transformers' Auto classes, choosing the task when asked to.

Only local files are read (``local_files_only=True``, ``HF_HUB_OFFLINE=1``).
Every failure becomes a LoadError with a one-line message, which the server
prints as ``KIBAN_LOAD_FAILED: <message>`` before exiting with code 3.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kiban.serving.runtime.embedding import Pooling, is_sentence_transformer, read_pooling
from kiban.serving.runtime.errors import LoadError
from kiban.serving.runtime.options import ServerOptions, Task, parse_dtype, parse_task
from kiban.serving.runtime.storage import resolve_model_dir

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

UNBOUNDED = 1_000_000  # tokenizers report a huge model_max_length when they do not know it


@dataclass
class LoadedModel:
    """A model ready to run: its task, weights, tokenizer and where it runs."""

    task: Task
    model: Any
    tokenizer: Any
    directory: Path
    device: str
    dtype: str
    context_length: int
    pooling: Pooling | None = None


def detect_task(directory: Path, config: Any) -> Task:
    """Embedding for sentence-transformers layouts and non-causal encoders; else generation."""
    if is_sentence_transformer(directory):
        return Task.TEXT_EMBEDDING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    causal = set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())
    architectures = getattr(config, "architectures", None) or []
    if any(arch in causal for arch in architectures):
        return Task.TEXT_GENERATION
    return Task.TEXT_EMBEDDING


def load_model(options: ServerOptions) -> LoadedModel:
    """Resolve, validate and load the model the options name; LoadError on any failure."""
    try:
        task = parse_task(options.task)
        dtype_name = parse_dtype(options.dtype)
    except ValueError as exc:
        raise LoadError(str(exc)) from exc
    directory = resolve_model_dir(options)
    try:
        return _load(directory, task, dtype_name, options.max_length)
    except LoadError:
        raise
    except Exception as exc:  # transformers raises anything from OSError to KeyError
        message = " ".join(str(exc).split()) or type(exc).__name__
        raise LoadError(f"{directory}: {type(exc).__name__}: {message}") from exc


def _load(directory: Path, task: Task, dtype_name: str, max_length: int | None) -> LoadedModel:
    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as transformers_logging

    quiet: Any = transformers_logging.disable_progress_bar  # untyped in transformers
    quiet()  # one log line per event, not a progress bar

    if not (directory / "config.json").is_file():
        raise LoadError(f"{directory}: no config.json (not a transformers model directory)")
    config = AutoConfig.from_pretrained(directory, local_files_only=True)
    if task is Task.AUTO:
        task = detect_task(directory, config)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype: Any = getattr(torch, dtype_name) if dtype_name != "auto" else None
    if dtype is None:
        dtype = torch.float32 if device == "cpu" else "auto"
    tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
    pooling: Pooling | None = None
    model: Any
    if task is Task.TEXT_GENERATION:
        model = AutoModelForCausalLM.from_pretrained(directory, local_files_only=True, dtype=dtype)
        tokenizer.padding_side = "left"  # batched generation continues every row at the end
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
    else:
        pooling = read_pooling(directory)
        model = AutoModel.from_pretrained(directory, local_files_only=True, dtype=dtype)
    model.to(device)
    model.eval()
    return LoadedModel(
        task=task,
        model=model,
        tokenizer=tokenizer,
        directory=directory,
        device=device,
        dtype=str(model.dtype).removeprefix("torch."),
        context_length=_context_length(directory, config, tokenizer, max_length),
        pooling=pooling,
    )


def _context_length(directory: Path, config: Any, tokenizer: Any, max_length: int | None) -> int:
    """The most tokens one sequence may hold: the smallest limit the model and options state."""
    limits = [max_length] if max_length else []
    for name in ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            limits.append(value)
            break
    model_max = getattr(tokenizer, "model_max_length", None)
    if isinstance(model_max, int) and 0 < model_max < UNBOUNDED:
        limits.append(model_max)
    st_config = directory / "sentence_bert_config.json"
    if st_config.is_file():
        try:
            seq = json.loads(st_config.read_text()).get("max_seq_length")
        except (OSError, ValueError, AttributeError):
            seq = None
        if isinstance(seq, int) and seq > 0:
            limits.append(seq)
    return min(limits) if limits else 2048
