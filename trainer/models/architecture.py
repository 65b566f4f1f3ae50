"""What the memory planner (:mod:`trainer.run.memory`) and its fake-tensor trace read of a
backbone: its architecture from its config alone (a local folder, the hub cache, or a bundled
copy of the papers' backbones' configs under ``shape_configs/``), its parameters counted on the
meta device: no weights are loaded."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText, Qwen2Config

from trainer.config import (
    SHAPE_SUFFIX,
    SMOLLM2_BACKBONE,
    TINY_BACKBONES,
    TINY_VL_BACKBONE,
    ModelConfig,
)
from trainer.models.paper_shapes import CONFIG_DIR, shape_config

# The papers' backbones by hub name, for machines that have neither their weights nor their
# config in the hub cache: the text ones are the bundled shapes' architectures.
HUB_CONFIGS = {
    "Qwen/Qwen2.5-0.5B-Instruct": CONFIG_DIR / "qwen2.5-0.5b.json",
    "Qwen/Qwen2.5-1.5B-Instruct": CONFIG_DIR / "qwen2.5-1.5b.json",
    "Qwen/Qwen2.5-3B-Instruct": CONFIG_DIR / "qwen2.5-3b.json",
    "Qwen/Qwen2.5-7B-Instruct": CONFIG_DIR / "qwen2.5-7b.json",
    "Qwen/Qwen2.5-VL-3B-Instruct": CONFIG_DIR / "hub" / "Qwen2.5-VL-3B-Instruct.json",
}
# SmolLM2-135M-Instruct's architecture (its GGUF file's metadata), so that no GGUF is read.
SMOLLM2 = {"model_type": "llama", "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
           "num_attention_heads": 9, "num_key_value_heads": 3, "vocab_size": 49152, "tie_word_embeddings": True,
           "max_position_embeddings": 8192}


@dataclass(frozen=True)
class Architecture:
    """What the estimate reads of a backbone: its parameters (tied ones once) and the text
    tower's width, key/value width, MLP width, depth and vocabulary."""

    params: int
    hidden: int
    kv_width: int
    intermediate: int
    layers: int
    vocab: int
    heads: int
    tied: bool = True  # the LM head shares the input embeddings' weight

    @property
    def root_params(self) -> int:
        """The embeddings and the LM head (once when tied): FSDP's root group."""
        return self.vocab * self.hidden * (1 if self.tied else 2)

    @property
    def layer_params(self) -> float:
        """One decoder layer's parameters (what is not the root, over the depth)."""
        return max(self.params - self.root_params, 0) / self.layers


def backbone_config(model_cfg: ModelConfig):
    """The transformers config of ``model_cfg.backbone``, without weights or network."""
    backbone = model_cfg.backbone
    if backbone in TINY_BACKBONES:
        tiny = model_cfg.tiny
        config = Qwen2Config(vocab_size=tiny.vocab_size, hidden_size=tiny.hidden_size,
                             intermediate_size=tiny.intermediate_size, num_hidden_layers=tiny.num_layers,
                             num_attention_heads=tiny.num_heads, num_key_value_heads=tiny.num_kv_heads,
                             max_position_embeddings=tiny.max_position_embeddings, tie_word_embeddings=True)
        return config  # tiny-vl's one-block vision tower is left out (a few percent)
    if backbone.endswith(SHAPE_SUFFIX):
        return shape_config(backbone)
    if backbone == SMOLLM2_BACKBONE:
        return AutoConfig.for_model(**SMOLLM2)
    folder = Path(backbone)
    if (folder / "config.json").is_file():
        return AutoConfig.from_pretrained(folder)
    if (folder / "model" / "config.json").is_file():  # a run checkpoint
        return AutoConfig.from_pretrained(folder / "model")
    if backbone in HUB_CONFIGS:
        data = json.loads(HUB_CONFIGS[backbone].read_text())
        return AutoConfig.for_model(**{k: v for k, v in data.items() if k != "architectures"})
    try:
        return AutoConfig.from_pretrained(backbone, local_files_only=True)
    except OSError:
        known = ", ".join(sorted(HUB_CONFIGS))
        raise ValueError(f"model.backbone: no config for {backbone!r} on this machine (not a folder, not "
                         f"in the hub cache, not one of the bundled {known})") from None


@functools.lru_cache(maxsize=32)  # a study plans many configs of one backbone
def architecture(model_cfg: ModelConfig) -> Architecture:
    """:class:`Architecture` of the backbone, its parameters counted on the meta device."""
    config = backbone_config(model_cfg)
    vision = getattr(config, "vision_config", None) is not None and model_cfg.backbone != TINY_VL_BACKBONE
    with torch.device("meta"):
        model = (AutoModelForImageTextToText if vision else AutoModelForCausalLM).from_config(config)
    text = config.get_text_config()
    heads = text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    return Architecture(params=sum(p.numel() for p in model.parameters()), hidden=text.hidden_size,
                        kv_width=head_dim * text.num_key_value_heads, intermediate=text.intermediate_size,
                        layers=text.num_hidden_layers, vocab=text.vocab_size, heads=heads,
                        tied=bool(getattr(config, "tie_word_embeddings", getattr(text, "tie_word_embeddings", True))))
