"""Paper-shaped backbones without weights: a measuring tool, never a model that acts.

``model.backbone: qwen2.5-1.5b-shape`` (also ``-0.5b-``, ``-3b-``, ``-7b-``) builds the
Qwen2.5 architecture of that size from a small bundled config (``shape_configs/*.json``:
the architecture fields of the released ``config.json``, vocabulary size included) with
random weights, so that step time, peak memory and throughput at the papers' sizes (Qwen2.5
1.5B to 7B, bf16) can be measured offline: no hub download, nothing but the config travels.
``qwen2.5-tiny-shape`` is the same architecture and vocabulary at a tiny width and depth,
the CPU stand-in that tests and ``scripts/gpu_check.py --cpu`` run.

The tokenizer is the local byte-level BPE of the ``tiny`` backbone (trained on environment
text, ``model.tiny.vocab_size`` entries): its ids are a subset of Qwen2.5's vocabulary, the
remaining rows of the embedding are never produced by encoding but may be sampled (they
decode to nothing).  A random model emits noise, so every rollout runs to its token and turn
budgets: the measured cost is the budget's, not a trained policy's.  Figures measured this
way say how fast and how big, never how well.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerBase, Qwen2Config, Qwen2ForCausalLM

from trainer.config import SHAPE_SUFFIX, TINY_BACKBONES
from trainer.models.chat import IM_END
from trainer.models.tokenizers import train_tokenizer

CONFIG_DIR = Path(__file__).resolve().parent / "shape_configs"
# Released parameter counts (model cards: 0.49B, 1.54B, 3.09B, 7.61B), the check that a
# bundled config is the architecture it names.
PAPER_SIZES = {"qwen2.5-0.5b-shape": 0.49e9, "qwen2.5-1.5b-shape": 1.54e9,
               "qwen2.5-3b-shape": 3.09e9, "qwen2.5-7b-shape": 7.61e9}


def shape_names() -> list[str]:
    """Every shaped backbone name (``<config file stem>-shape``), sorted."""
    return sorted(p.stem + SHAPE_SUFFIX for p in CONFIG_DIR.glob("*.json"))


def is_shape(backbone: str) -> bool:
    """Whether ``backbone`` names a shaped backbone (known or not: see :func:`check_shape`)."""
    return backbone.endswith(SHAPE_SUFFIX)


def check_shape(backbone: str) -> None:
    """Raise a one-line ValueError when ``backbone`` ends in ``-shape`` but is not bundled."""
    if is_shape(backbone) and backbone not in shape_names():
        raise ValueError(f"model.backbone: unknown shape {backbone!r}; valid shapes: {', '.join(shape_names())}")


def shape_config(backbone: str, tokenizer: PreTrainedTokenizerBase | None = None) -> Qwen2Config:
    """The Qwen2Config of ``backbone`` from its bundled file.

    With ``tokenizer``, its special ids become the config's end-of-sequence and padding ids
    (as in :func:`trainer.models.build_tiny_model`), after checking that its ids fit in the
    shape's vocabulary."""
    check_shape(backbone)
    if not is_shape(backbone):
        raise ValueError(f"{backbone!r} is not a shaped backbone; valid shapes: {', '.join(shape_names())}")
    data = json.loads((CONFIG_DIR / f"{backbone[: -len(SHAPE_SUFFIX)]}.json").read_text())
    config = Qwen2Config.from_dict(data)
    if tokenizer is not None:
        if len(tokenizer) > config.vocab_size:
            raise ValueError(f"{backbone}: the tokenizer has {len(tokenizer)} ids, more than the "
                             f"shape's vocabulary of {config.vocab_size}")
        config.bos_token_id = None
        config.eos_token_id = tokenizer.convert_tokens_to_ids(IM_END)
        config.pad_token_id = tokenizer.pad_token_id
    return config


def parameter_count(backbone: str) -> int:
    """Exact number of parameters of ``backbone`` (tied embeddings counted once), from a
    model built on the meta device: no memory, no initialisation."""
    with torch.device("meta"):
        model = Qwen2ForCausalLM(shape_config(backbone))
    return sum(p.numel() for p in model.parameters())


def build_shaped_model(
    backbone: str,
    tokenizer: PreTrainedTokenizerBase,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
) -> Qwen2ForCausalLM:
    """A random-init ``backbone`` built directly on ``device`` in ``dtype`` (a 7B shape never
    passes through CPU memory or float32).  Initialisation draws from forked RNGs seeded with
    ``seed`` (transformers' normal(0, initializer_range) init), so global RNGs are untouched."""
    config = shape_config(backbone, tokenizer)
    devices = [torch.device(device)] if torch.device(device).type == "cuda" else []
    with torch.random.fork_rng(devices=devices), torch.device(device):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM._from_config(config, dtype=dtype)
    return model


def load_shape(
    backbone: str,
    env_texts: Iterable[str] | None,
    vocab_size: int,
    seed: int,
    dtype: torch.dtype,
    device: str,
) -> tuple[Qwen2ForCausalLM, PreTrainedTokenizerBase]:
    """``(model, tokenizer)`` of a shaped backbone: the local tokenizer trained on
    ``env_texts`` with ``vocab_size`` entries, then the random-init model on ``device``."""
    check_shape(backbone)
    if env_texts is None:
        raise ValueError(f"backbone {backbone!r} needs env_texts to train its tokenizer")
    tokenizer = train_tokenizer(env_texts, vocab_size)
    return build_shaped_model(backbone, tokenizer, seed, dtype, device), tokenizer


def uses_local_tokenizer(backbone: str) -> bool:
    """Backbones whose tokenizer is trained on environment text: ``tiny``, ``tiny-vl`` and
    the shapes."""
    return backbone in TINY_BACKBONES or is_shape(backbone)
