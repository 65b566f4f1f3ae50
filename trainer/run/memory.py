"""What a run needs of one device's memory, before it starts (``hindsight memory``).

The backbone's architecture comes from its config alone (a local folder, the hub cache, or a
bundled copy of the papers' backbones' configs under ``shape_configs/``) and its parameters
are counted on the meta device: no weights are loaded.  The figures follow the trainer as it
runs (:mod:`trainer.models.precision`, :mod:`trainer.stages.rl`), P parameters, c bytes per element of the
compute dtype (2 for bfloat16, 4 for float32):

* always held: the float32 master weights (4P) and AdamW's two float32 moments (8P), on a
  GPU also 2 GiB for the CUDA context and the allocator's slack; the KL
  reference (cP, stored in the compute dtype) when ``algo.kl_coef`` > 0; a frozen writer
  snapshot (cP) for a self writer refreshed less than every step or a frozen writer;
* while rolling out: the vLLM engine (``model.vllm.gpu_memory_utilization`` of the device,
  or its weights plus ``kv_cache_gb``), or the transformers backend's KV cache;
* while updating: the float32 gradients (4P), the compute-dtype copies of the weights that
  autocast makes and the graph keeps (cP when c < 4), and the activations of one
  micro-batch (``algo.micro_batch_size`` sequences of the longest prompt plus response):
  each decoder layer keeps its float32 input with gradient checkpointing (4h bytes a token),
  about c (5 i + 2.5 kv + 1.5 h) + 28 h bytes a token without (h the width, kv the
  key/value width, i the MLP width; attention through SDPA keeps no [L, L] scores), one
  layer is recomputed at a time,
  and the LM head's chunk (its logits and float32 log-softmax) is live once; the vLLM engine
  too unless it sleeps (``model.vllm.sleep_level``).

With ``parallel.workers`` N > 1 the plan is one rank's (a GPU each): FSDP2 shards the
masters, the moments, the gradients and the reference (1/N each); the
rank's compute-dtype copies are the root group (embeddings and LM head, gathered from the
forward to the end of the backward) and two decoder layers (one running, one prefetched)
instead of the whole model's autocast copies; each rank's vLLM engine holds the full weights
(tensor parallel 1); a rank's transformers KV cache holds its share of the step's rows.

The peak is the larger of the two phases.  Stage 1 and the warm start update the same way on
their own sequences (the writer's prompt and hindsight), so the update phase takes the
longest sequence of the stages the run has.  An estimate, not a measurement:
``scripts/bench_memory.py`` measures a CPU run's peak against it, ``scripts/gpu_check.py`` a
GPU's.
"""

from __future__ import annotations

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
    RunConfig,
)
from trainer.episodes.scoring import HEAD_CHUNK
from trainer.models.backbones import resolve_dtype
from trainer.models.lora import lora_params
from trainer.models.paper_shapes import CONFIG_DIR, shape_config

GIB = 2**30
GPU_RUNTIME_GIB = 2.0  # the CUDA context, kernels' workspaces and the caching allocator's slack
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


@dataclass(frozen=True)
class Part:
    name: str
    bytes: float
    when: str  # "always" or a phase: "rollout", "score", "update"


PHASES = ("rollout", "score", "update")


@dataclass(frozen=True)
class MemoryPlan:
    """The parts of one device's memory a run needs, its peak and the device's size."""

    parts: tuple[Part, ...]
    device_bytes: float
    arch: Architecture
    workers: int = 1  # the ranks of the run: the plan is one rank's, on its own GPU

    def phase(self, when: str) -> float:
        return sum(p.bytes for p in self.parts if p.when in ("always", when))

    @property
    def peak(self) -> float:
        return max(self.phase(p) for p in PHASES)

    @property
    def peak_phase(self) -> str:
        return max(reversed(PHASES), key=self.phase)

    @property
    def fits(self) -> bool:
        return self.peak <= self.device_bytes

    def table(self) -> str:
        """Rows ``part  GiB  when``, then the phases, the peak and the device."""
        rows = [(p.name, p.bytes / GIB, p.when) for p in self.parts]
        rows += [(f"{phase} phase", self.phase(phase) / GIB, "") for phase in PHASES]
        rows += [(f"peak ({self.peak_phase})", self.peak / GIB, ""), ("device", self.device_bytes / GIB, "")]
        width = max(len(r[0]) for r in rows)
        return "\n".join(f"{name.ljust(width)}  {gib:8.2f}  {when}".rstrip() for name, gib, when in rows)


def _layer_bytes(arch: Architecture, c: int) -> float:
    """Activations one decoder layer keeps for backward, per token, without checkpointing:
    c (5 i + 2.5 kv + 1.5 h) + 28 h bytes, fitted to the tensors autograd saves for a Qwen2
    layer in float32 and under bfloat16 autocast (saved-tensor hooks; PyTorch's SDPA keeps
    no [L, L] scores); a checkpointed layer keeps its float32 input, 4 h."""
    return c * (5 * arch.intermediate + 2.5 * arch.kv_width + 1.5 * arch.hidden) + 28 * arch.hidden


CHECKPOINTED_LAYER = 4  # bytes per token and unit of width a checkpointed layer keeps (its float32 input)


def _stage_length(cfg: RunConfig) -> int:
    """The longest sequence a training stage runs: a turn (prompt and response) or, with
    Stage 1 or the warm start, a writer example (the writer's prompt and hindsight)."""
    lengths = [cfg.model.max_prompt_tokens + cfg.rollout.max_new_tokens]
    if cfg.stages.skill_sft.enabled or cfg.stages.warm_start.enabled:
        lengths.append(cfg.model.max_prompt_tokens + cfg.writer.max_new_tokens)
    return max(lengths)


def _head_bytes(cfg: RunConfig, arch: Architecture, c: int, grad: bool) -> float:
    """One LM-head chunk: its logits and their float32 log-softmax (and, recomputed in the
    backward pass, its gradient)."""
    scored = min(HEAD_CHUNK, cfg.algo.micro_batch_size * max(cfg.rollout.max_new_tokens, cfg.writer.max_new_tokens))
    return scored * arch.vocab * (c + 4 * (3 if grad else 2))


def _update_bytes(cfg: RunConfig, arch: Architecture, c: int) -> tuple[float, str]:
    """Activations of one micro-batch of the longest sequences any training stage runs."""
    length = _stage_length(cfg)
    sequences = cfg.algo.micro_batch_size
    tokens = sequences * length
    layer = tokens * _layer_bytes(arch, c)
    if cfg.model.gradient_checkpointing:  # the layers' inputs, and one layer recomputed
        kept, how = tokens * arch.layers * CHECKPOINTED_LAYER * arch.hidden + layer, "checkpointed"
    else:
        kept, how = arch.layers * layer, "no checkpointing"
    hidden = tokens * arch.hidden * 4 * 2  # the last hidden states and their gradient
    return kept + _head_bytes(cfg, arch, c, True) + hidden, f"{sequences} x {length} tokens, {how}"


def _score_bytes(cfg: RunConfig, arch: Architecture, c: int) -> float:
    """A scoring pass without gradients (old policy, reference, teacher): one layer of one
    micro-batch at a time."""
    tokens = cfg.algo.micro_batch_size * _stage_length(cfg)
    return tokens * (_layer_bytes(arch, c) + arch.hidden * 4) + _head_bytes(cfg, arch, c, False)


def plan_memory(cfg: RunConfig, device_gib: float = 80.0) -> MemoryPlan:
    """The :class:`MemoryPlan` of a resolved run config on a device of ``device_gib`` GiB:
    with ``parallel.workers`` N > 1, one rank's, whose FSDP2 shards hold 1/N of the masters,
    AdamW's moments, the gradients and the reference (:mod:`trainer.parallel`)."""
    arch = architecture(cfg.model)
    dtype = resolve_dtype(cfg.model.dtype, "cpu" if cfg.model.device == "cpu" else "cuda")  # a GPU unless cpu
    c = dtype.itemsize
    p = arch.params
    adapters = lora_params(backbone_config(cfg.model), cfg.model.lora)  # LoRA: only these train
    trained = adapters or p
    n = cfg.parallel.workers
    name = str(dtype).removeprefix("torch.")
    shard = f", 1/{n} a rank" if n > 1 else ""
    parts = [Part(f"weights (float32 masters{shard})", 4 * (p + adapters) / n, "always"),
             Part(f"optimizer (AdamW moments, float32{shard})", 8 * trained / n, "always")]
    if cfg.model.device != "cpu":
        parts.append(Part("CUDA context and allocator slack", GPU_RUNTIME_GIB * GIB, "always"))
    if cfg.algo.kl_coef > 0 and not adapters:  # LoRA: the base with adapters disabled, no copy
        parts.append(Part(f"reference ({name}{shard})", c * p / n, "always"))
    if cfg.writer.kind == "frozen" or (cfg.writer.kind == "self" and cfg.writer.refresh_every != 1):
        parts.append(Part(f"writer snapshot ({name})", c * p, "always"))  # not sharded
    parts.append(Part(f"gradients (float32{shard})", 4 * trained / n, "update"))
    if n > 1:  # gathered in the compute dtype: the root from forward to the end of backward, two layers (prefetch)
        gathered = c * (arch.root_params + 2 * arch.layer_params)
        parts.append(Part(f"gathered root and two layers ({name})", gathered, "update"))
        parts.append(Part(f"gathered root and two layers ({name})", gathered, "score"))
    elif c < 4:
        parts.append(Part(f"autocast weight copies ({name})", c * p, "update"))
    activations, shape = _update_bytes(cfg, arch, c)
    parts.append(Part(f"activations ({shape})", activations, "update"))
    parts.append(Part("scoring pass (no gradients, one layer at a time)", _score_bytes(cfg, arch, c), "score"))
    if cfg.model.backend == "vllm":
        vllm = cfg.model.vllm
        engine = c * p + vllm.kv_cache_gb * GIB if vllm.kv_cache_gb else vllm.gpu_memory_utilization * device_gib * GIB
        label = f"{vllm.kv_cache_gb:g} GiB KV cache" if vllm.kv_cache_gb else \
            f"{vllm.gpu_memory_utilization:g} of the device"
        parts.append(Part(f"vLLM engine ({label})", engine, "rollout"))
        if not vllm.sleep_level:
            parts.append(Part("vLLM engine, awake through the update", engine, "update"))
    else:
        rows = min(cfg.rollout.tasks_per_step * cfg.rollout.group_size // n, 64)  # a rank's rows, at most max_batch
        length = cfg.model.max_prompt_tokens + cfg.rollout.max_new_tokens
        parts.append(Part(f"KV cache ({rows} x {length} tokens)", rows * length * arch.layers * 2 * arch.kv_width * c,
                          "rollout"))
    return MemoryPlan(tuple(parts), device_gib * GIB, arch, n)


def describe(plan: MemoryPlan) -> str:
    """One line: the peak, its phase and whether it fits."""
    verdict = "fits" if plan.fits else f"does not fit, by {(plan.peak - plan.device_bytes) / GIB:.1f} GiB"
    ranks = f" per rank of {plan.workers} (a GPU each)" if plan.workers > 1 else ""
    line = (f"{plan.peak / GIB:.1f} GiB at the peak ({plan.peak_phase}){ranks} of a {plan.device_bytes / GIB:g} GiB "
            f"device: {verdict} ({plan.arch.params / 1e9:.2f}B parameters)")
    state = 12 * plan.arch.params / plan.workers  # float32 masters and AdamW's two moments
    if state > plan.device_bytes:
        line += (f"; the float32 masters and AdamW moments alone take {state / GIB:.1f} GiB a GPU: shard "
                 f"them over more GPUs (parallel.workers, now {plan.workers})")
    return line
