"""A tiny Hugging Face Llama checkpoint generated locally, for a real vLLM server on a CPU box.

``python -m pytest_sskj.models.tiny_llama --out DIR`` writes ``LlamaForCausalLM`` (hidden 128, 2 layers,
4 heads / 2 KV heads, vocab 4096, bf16 safetensors via ``save_pretrained``) and a byte-level BPE tokenizer
trained with ``tokenizers`` on a few KB of deterministic text, wrapped in ``PreTrainedTokenizerFast``
(bos/eos/pad set).  Weights come from a seeded generator, the text from a seeded word list, so two runs
write the same files; the directory loads with ``AutoModelForCausalLM`` / ``AutoTokenizer`` under
``HF_HUB_OFFLINE=1``.  torch, transformers and tokenizers are imported only when a model is built (they
live in the vLLM venv, not necessarily in the one running pytest).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "HIDDEN",
    "LAYERS",
    "MODEL_VERSION",
    "VOCAB_SIZE",
    "build_tiny_llama",
    "corpus_text",
    "main",
]

MODEL_VERSION = 1
VOCAB_SIZE = 4096
HIDDEN = 128
LAYERS = 2
_HEADS, _KV_HEADS, _FFN, _MAX_POS = 4, 2, 256, 4096
_SPECIAL = ("<s>", "</s>", "<pad>")
_SYLLABLES = (
    "ka", "ri", "to", "ne", "su", "mo", "la", "pi", "de", "vu", "gro", "tha", "ex", "pre", "fill", "dec",
    "ode", "ran", "ker", "nel", "mar", "lin", "moe", "gate", "up", "tok", "en", "ba", "tch", "chu", "nk",
    "lat", "en", "cy", "thr", "ough", "put", "ser", "ver", "no", "de", "clu", "ster", "ex", "pert", "sl",
)  # fmt: skip


def corpus_text(n_words: int = 12000, seed: int = 7) -> str:
    """Deterministic pseudo-text (~90 KB): made-up words of 1-4 syllables, digits and punctuation, so
    the BPE trainer finds enough distinct pairs to fill a 4096-entry vocabulary."""
    rng = random.Random(seed)
    words = ["".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(4000)]
    out: list[str] = []
    for i in range(n_words):
        w = rng.choice(words)
        if i % 17 == 0:
            w = w.capitalize()
        if i % 23 == 0:
            w += str(rng.randint(0, 999))
        out.append(w + (". " if i % 11 == 10 else ", " if i % 7 == 6 else " "))
    return "".join(out)


def _tokenizer(vocab_size: int) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(_SPECIAL),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([corpus_text()], trainer=trainer)
    bos, eos, pad = _SPECIAL
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos, eos_token=eos, pad_token=pad)
    fast.model_max_length = _MAX_POS
    return fast


def build_tiny_llama(out: Path, *, seed: int = 0) -> Path:
    """Write the tiny checkpoint and tokenizer into ``out`` (created); returns ``out``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    tok = _tokenizer(VOCAB_SIZE)
    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=HIDDEN,
        intermediate_size=_FFN,
        num_hidden_layers=LAYERS,
        num_attention_heads=_HEADS,
        num_key_value_heads=_KV_HEADS,
        max_position_embeddings=_MAX_POS,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    facts = {"generator": "pytest_sskj.models.tiny_llama", "version": MODEL_VERSION, "seed": seed}
    (out / "sskj_model.json").write_text(json.dumps({**facts, "tokenizer_vocab": len(tok)}) + "\n")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pytest_sskj.models.tiny_llama", description=__doc__)
    p.add_argument("--out", type=Path, required=True, help="directory to write the model into")
    p.add_argument("--seed", type=int, default=0, help="weight seed (default 0)")
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    path = build_tiny_llama(args.out, seed=args.seed)
    sys.stdout.write(f"tiny llama written to {path}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
