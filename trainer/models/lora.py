"""LoRA adapters (peft) on any backbone (DESIGN.md, LoRA; ``model.lora``).

Each target linear layer ``W`` of the policy becomes ``W x + s * B A x`` (Hu et al. 2021;
``A`` [rank, in], ``B`` [out, rank], ``s = alpha / rank``), with ``W`` frozen and ``A``,
``B`` trained.  The adapters are injected into the model in place
(``peft.inject_adapter_in_model``), not wrapped in a ``PeftModel``: the model keeps its
class and its module tree (``get_decoder``, the vision tower, ``_no_split_modules``, the
LM head the scoring passes call), so nothing downstream branches on LoRA.  Only a linear
layer's own state-dict names change (``q_proj.weight`` -> ``q_proj.base_layer.weight``
beside ``q_proj.lora_A.default.weight``); :func:`merged_tensors` gives the base's names back.

* The KL reference is the base with the adapters disabled (:func:`adapters_disabled`, what
  ``PeftModel.disable_adapter()`` does, and what TRL scores its reference with), never a
  copy.  It equals the RL initialisation only while the adapters of the warm start and
  Stage 1 are folded into the base: :func:`merge_into_base` does that at the start of RL
  and gives the run fresh adapters (B = 0).
* The engine receives merged weights, ``W + s * B A`` under ``W``'s name, one tensor at a
  time (:func:`engine_tensors`); the policy's own weights are never merged in place.
* A checkpoint is the adapter (peft's ``adapter_model.safetensors`` and
  ``adapter_config.json``) plus the name of its base (``base_model_name_or_path``: a
  backbone name, a hub name, or a folder, relative to the adapter's when inside it)
  (:func:`save_adapter`, :func:`load_adapter`).

Masters stay float32 (:mod:`trainer.models.precision`): the adapters are float32; the
frozen base keeps the dtype it was loaded in.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import torch
from peft import (
    LoraConfig,
    get_peft_model_state_dict,
    inject_adapter_in_model,
    set_peft_model_state_dict,
)
from peft.tuners.lora import LoraLayer
from safetensors.torch import load_file, save_file
from torch.distributed.tensor import DTensor

from trainer.config import ConfigError, LoRAConfig
from trainer.models.precision import MASTER_DTYPE
from trainer.parallel.group import is_main
from trainer.parallel.shard import full_tensors, is_sharded

ADAPTER = "default"  # peft's name of the one adapter a model carries
ADAPTER_WEIGHTS = "adapter_model.safetensors"  # peft's file names: PeftModel.from_pretrained reads them
ADAPTER_CONFIG = "adapter_config.json"
BASE_NAME = "hindsight_lora_base"  # the name of the weights the base holds, kept on the model
SAVED_BASE = "base"  # an adapter folder's own copy of a base that has no other name


def adapter_layers(model: torch.nn.Module) -> dict[str, LoraLayer]:
    """``{module name: LoRA layer}`` of ``model`` (empty without adapters)."""
    return {name: m for name, m in model.named_modules() if isinstance(m, LoraLayer)}


def has_adapters(model: torch.nn.Module | None) -> bool:
    return model is not None and any(isinstance(m, LoraLayer) for m in model.modules())


def peft_config(cfg: LoRAConfig) -> LoraConfig:
    return LoraConfig(r=cfg.rank, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout,
                      target_modules=list(cfg.target_modules))


def _same(config: LoraConfig, cfg: LoRAConfig) -> bool:
    return (config.r, float(config.lora_alpha), float(config.lora_dropout), set(config.target_modules)) == \
        (cfg.rank, cfg.alpha, cfg.dropout, set(cfg.target_modules))


def with_lora(model: torch.nn.Module, cfg: LoRAConfig, seed: int = 0) -> torch.nn.Module:
    """``model`` carrying exactly the adapters ``cfg`` asks for (rank 0: none), in place.

    Adapters it already has (a LoRA checkpoint or warm start) are kept when their settings
    are ``cfg``'s, else folded into the base first.  New adapters start at B = 0 (the model
    computes what its base does), A drawn from a forked RNG seeded with ``seed`` (the global
    RNG is left as it was).  The base is frozen; the adapters are float32 and train."""
    if has_adapters(model):
        if cfg.rank > 0 and _same(model.peft_config[ADAPTER], cfg):
            return model
        unload(model)
    if cfg.rank == 0:
        return model
    linear = {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    missing = sorted(set(cfg.target_modules) - linear)
    if missing or not cfg.target_modules:
        raise ConfigError(f"model.lora.target_modules: {missing or '[]'} name no linear layer of "
                          f"{type(model).__name__}; its linear layers: {', '.join(sorted(linear))}")
    model.requires_grad_(False)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        inject_adapter_in_model(peft_config(cfg), model, adapter_name=ADAPTER)
    for layer in adapter_layers(model).values():
        layer.lora_A.to(MASTER_DTYPE)
        layer.lora_B.to(MASTER_DTYPE)
    return model


@contextlib.contextmanager
def adapters_disabled(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """``model`` computing as its base inside the block (the KL reference), the adapters
    switched back on afterwards with their ``requires_grad`` as before (peft's switch
    resets it)."""
    layers = list(adapter_layers(model).values())
    trains = [(p, p.requires_grad) for layer in layers for p in layer.parameters()]
    for layer in layers:
        layer.enable_adapters(False)
    try:
        yield model
    finally:
        for layer in layers:
            layer.enable_adapters(True)
        for p, flag in trains:
            p.requires_grad_(flag)


def _delta(layer: LoraLayer, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``s * B A`` [out, in] from the adapter's full ``A`` [rank, in] and ``B`` [out, rank]."""
    delta = (b.float() @ a.float()) * layer.scaling[ADAPTER]
    return delta.T if layer.fan_in_fan_out else delta


def merge_into_base(model: torch.nn.Module, seed: int = 0) -> bool:
    """Fold the adapters into the base (``W <- W + s * B A``) and restart them (B = 0, A
    from a forked RNG seeded with ``seed``), so that the base with adapters disabled is the
    model as it is now.  Returns whether any adapter was non-zero (else nothing changes);
    then the base holds weights no name gives (:func:`base_name` None)."""
    layers = adapter_layers(model)
    # whole B (a collective when sharded): every rank must take the same branch
    if not any(_whole(layer.lora_B[ADAPTER].weight).any() for layer in layers.values()):
        return False
    set_base_name(model, None)
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for layer in layers.values():
            weight = layer.get_base_layer().weight
            weight += _delta(layer, layer.lora_A[ADAPTER].weight, layer.lora_B[ADAPTER].weight).to(weight.dtype)
            layer.reset_lora_parameters(ADAPTER, init_lora_weights=True)
    return True


def unload(model: torch.nn.Module) -> torch.nn.Module:
    """Fold the adapters into the base and remove them: a plain model again, in place."""
    merge_into_base(model)
    for name, layer in adapter_layers(model).items():
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent), child, layer.get_base_layer())
    if hasattr(model, "peft_config"):
        del model.peft_config
    return model


_BASE_PART = ".base_layer."
_LORA_PARTS = (f".lora_A.{ADAPTER}.weight", f".lora_B.{ADAPTER}.weight")
_LORA_NAMES = (".lora_A.", ".lora_B.")


def merged_tensors(model: torch.nn.Module, tensors: Iterable[tuple[str, torch.Tensor]],
                   merge: bool = True) -> Iterator[tuple[str, torch.Tensor]]:
    """The base model's ``(name, tensor)`` pairs from ``model``'s (``tensors``, state-dict
    names, any order): every adapted weight as ``W + s * B A`` (``merge``; else ``W`` alone)
    under ``W``'s own name, the adapters' entries dropped, everything else as it comes.

    Streams: an adapted weight waits only for its own ``W``, ``A`` and ``B``, so with the
    state dict's order (``W`` first) at most one weight and its adapter are held."""
    layers = adapter_layers(model)
    pending: dict[str, dict[str, torch.Tensor]] = {}
    for name, tensor in tensors:
        key = next((name[: -len(part)] for part in _LORA_PARTS if name.endswith(part)), None)
        part = "A" if name.endswith(_LORA_PARTS[0]) else "B"
        if key is None and name.endswith(_BASE_PART + "weight") and name[: -len(_BASE_PART + "weight")] in layers:
            key, part = name[: -len(_BASE_PART + "weight")], "W"
        if key is None:
            yield name.replace(_BASE_PART, "."), tensor
            continue
        parts = pending.setdefault(key, {})
        parts[part] = tensor
        if len(parts) == 3:
            del pending[key]
            weight = parts["W"]
            if merge:
                weight = (weight.float() + _delta(layers[key], parts["A"], parts["B"])).to(weight.dtype)
            yield f"{key}.weight", weight
    if pending:
        raise ValueError(f"adapted weights without their base or adapter: {sorted(pending)}")


def engine_tensors(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """What a generation engine loads for ``model``: its state dict (a sharded entry gathered
    when reached, :func:`trainer.parallel.shard.full_tensors`), adapters merged under the
    base's names (:func:`merged_tensors`)."""
    tensors = full_tensors(model)
    return merged_tensors(model, tensors) if has_adapters(model) else tensors


def save_merged(model: torch.nn.Module, folder: str | Path, merge: bool = True, write: bool = True) -> None:
    """An HF folder (weights and config) of ``model`` with its adapters merged (``merge``)
    or left out (the base alone); ``model.save_pretrained`` for a model without adapters.

    A sharded model's tensors are gathered whole one at a time (a collective: every rank
    calls this in step); only a rank with ``write`` keeps them and writes the folder, the
    others gather and drop them (one folder for all ranks: ``write=is_main()``)."""
    if not has_adapters(model) and not is_sharded(model):
        if write:
            model.save_pretrained(folder, safe_serialization=True)
        return
    tensors = merged_tensors(model, full_tensors(model), merge) if has_adapters(model) else full_tensors(model)
    if not write:
        for _ in tensors:
            pass
        return
    state = {name: tensor.detach().to("cpu") for name, tensor in tensors}
    model.save_pretrained(folder, safe_serialization=True, state_dict=state)


def base_name(model: torch.nn.Module) -> str | None:
    """The name of the weights ``model``'s base holds (:func:`set_base_name`), None when they
    exist only in memory (a random-init backbone, a base with adapters merged in)."""
    return getattr(model, BASE_NAME, None)


def set_base_name(model: torch.nn.Module, name: str | None) -> torch.nn.Module:
    object.__setattr__(model, BASE_NAME, name)  # a plain attribute, not a submodule
    return model


def save_adapter(model: torch.nn.Module, folder: str | Path) -> None:
    """``folder`` as peft writes an adapter (its weights and ``adapter_config.json`` naming
    the base) plus the model's ``config.json``.  A base without a name
    (:func:`base_name`) is saved once inside, as ``folder/base``.  A sharded model's
    adapters are gathered on every rank (a collective), rank 0 writes."""
    folder = Path(folder)
    if is_main():
        folder.mkdir(parents=True, exist_ok=True)
    base = base_name(model)
    if base is None:  # never for a sharded policy: start_rl saves its base (rl_base) first
        save_merged(model, folder / SAVED_BASE, merge=False)
        base = SAVED_BASE
    elif Path(base).is_dir():
        base = os.path.relpath(Path(base).resolve(), folder.resolve())
    adapters = {name: _whole(tensor).detach().to("cpu").contiguous()  # sharded: a collective
                for name, tensor in model.state_dict().items() if any(p in name for p in _LORA_NAMES)}
    if not is_main():
        return
    state = get_peft_model_state_dict(model, state_dict=adapters, adapter_name=ADAPTER, save_embedding_layers=False)
    save_file(state, str(folder / ADAPTER_WEIGHTS), metadata={"format": "pt"})
    config = LoraConfig(**{**model.peft_config[ADAPTER].to_dict(), "base_model_name_or_path": base})
    config.save_pretrained(str(folder))
    model.config.save_pretrained(folder)


def _whole(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def adapter_base(folder: str | Path) -> str | None:
    """The base an adapter folder names (a folder named relative to it resolved), None when
    ``folder`` holds no adapter."""
    config = Path(folder) / ADAPTER_CONFIG
    if not config.is_file():
        return None
    base = json.loads(config.read_text())["base_model_name_or_path"]
    inside = Path(folder) / base
    return str(inside.resolve()) if inside.is_dir() else base


def load_adapter(model: torch.nn.Module, folder: str | Path) -> torch.nn.Module:
    """Put the adapter saved in ``folder`` (:func:`save_adapter`) on ``model`` (its base),
    exactly as saved; returns ``model``."""
    config = LoraConfig.from_pretrained(str(folder))
    model.requires_grad_(False)
    inject_adapter_in_model(config, model, adapter_name=ADAPTER)
    for layer in adapter_layers(model).values():
        layer.lora_A.to(MASTER_DTYPE)
        layer.lora_B.to(MASTER_DTYPE)
    result = set_peft_model_state_dict(model, load_file(str(Path(folder) / ADAPTER_WEIGHTS)), adapter_name=ADAPTER)
    if result.unexpected_keys:
        raise ValueError(f"{folder}: adapter weights {result.unexpected_keys[:3]} fit no layer of the base")
    return model


def lora_params(arch, cfg: LoRAConfig) -> int:
    """Trainable parameters of ``cfg``'s adapters on a decoder of config ``arch`` (a
    transformers config: hidden_size, intermediate_size, heads, layers): per layer and
    target, rank * (in + out)."""
    if cfg.rank == 0:
        return 0
    hidden, layers = arch.hidden_size, arch.num_hidden_layers
    head = getattr(arch, "head_dim", None) or hidden // arch.num_attention_heads
    kv = head * (getattr(arch, "num_key_value_heads", None) or arch.num_attention_heads)
    inter = arch.intermediate_size
    shapes = {"q_proj": (hidden, head * arch.num_attention_heads), "k_proj": (hidden, kv), "v_proj": (hidden, kv),
              "o_proj": (head * arch.num_attention_heads, hidden), "gate_proj": (hidden, inter),
              "up_proj": (hidden, inter), "down_proj": (inter, hidden)}
    unknown = sorted(set(cfg.target_modules) - set(shapes))
    if unknown:
        raise ConfigError(f"model.lora.target_modules: cannot size {unknown} from the config; "
                          f"known: {', '.join(shapes)}")
    return layers * sum(cfg.rank * sum(shapes[t]) for t in cfg.target_modules)
