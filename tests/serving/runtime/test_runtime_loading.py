"""Loading: the task is chosen from the files, dtype is honoured, failures are one clear line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kiban.serving.runtime.errors import LoadError
from kiban.serving.runtime.loading import LoadedModel, load_model
from kiban.serving.runtime.options import Task, parse_options


def test_auto_task_picks_generation_for_a_causal_lm(tiny_lm: LoadedModel) -> None:
    assert tiny_lm.task is Task.TEXT_GENERATION
    assert tiny_lm.dtype == "float32"  # auto on CPU
    assert tiny_lm.tokenizer.padding_side == "left"
    assert tiny_lm.context_length == 256


def test_auto_task_picks_embedding_for_sentence_transformers(minilm: LoadedModel) -> None:
    assert minilm.task is Task.TEXT_EMBEDDING
    assert minilm.pooling is not None
    assert (minilm.pooling.mode, minilm.pooling.normalize) == ("mean", True)
    assert minilm.context_length == 256  # sentence_bert_config's max_seq_length


def test_an_encoder_without_sentence_transformers_files_embeds(tmp_path: Path) -> None:
    from kiban.testing.models import embedding_model_path

    source = embedding_model_path()
    for name in (
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.txt",
        "special_tokens_map.json",
    ):
        shutil.copy(source / name, tmp_path / name)
    loaded = load_model(parse_options(["--model_dir", str(tmp_path)]))
    assert loaded.task is Task.TEXT_EMBEDDING
    assert loaded.pooling is not None and loaded.pooling.normalize is False


def test_dtype_and_max_length_are_honoured(tiny_lm_dir: Path) -> None:
    loaded = load_model(
        parse_options(
            [
                "--model_dir",
                str(tiny_lm_dir),
                "--dtype",
                "bfloat16",
                "--max_length",
                "64",
                "--task",
                "generate",
            ]
        )
    )
    assert loaded.dtype == "bfloat16"
    assert loaded.context_length == 64


def test_explicit_task_overrides_detection(tiny_lm_dir: Path) -> None:
    loaded = load_model(parse_options(["--model_dir", str(tiny_lm_dir), "--task", "embed"]))
    assert loaded.task is Task.TEXT_EMBEDDING


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dtype", "float8"], "unknown dtype 'float8'"),
        (["--task", "translate"], "unknown task 'translate'"),
    ],
)
def test_bad_options_fail_the_load(tiny_lm_dir: Path, args: list[str], message: str) -> None:
    with pytest.raises(LoadError, match=message):
        load_model(parse_options(["--model_dir", str(tiny_lm_dir), *args]))


def test_missing_weights_and_bad_config_fail_with_one_line(
    tmp_path: Path, tiny_lm_dir: Path
) -> None:
    with pytest.raises(LoadError, match=r"no config\.json"):
        load_model(parse_options(["--model_dir", str(tmp_path)]))
    broken = tmp_path / "broken"
    shutil.copytree(tiny_lm_dir, broken)
    (broken / "model.safetensors").unlink()
    with pytest.raises(LoadError) as missing:
        load_model(parse_options(["--model_dir", str(broken)]))
    assert str(broken) in str(missing.value) and "\n" not in str(missing.value)
    (broken / "config.json").write_text(json.dumps({"model_type": "no-such-architecture"}))
    with pytest.raises(LoadError, match="no-such-architecture"):
        load_model(parse_options(["--model_dir", str(broken)]))
