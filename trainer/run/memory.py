"""What a run needs of one device's memory, phase by phase, before it starts (``hindsight memory``).

The backbone's architecture comes from its config alone (a local folder, the hub cache, or a
bundled copy of the papers' backbones' configs under ``shape_configs/``) and its parameters
are counted on the meta device: no weights are loaded.  The device is a GPU of ``--gpu-memory``
GiB (this machine's GPU by default, else 80), or on a CPU this machine's memory (a rank's share
of it with ``parallel.workers`` N: the ranks share the machine).  The figures follow the
trainer's timeline (:mod:`trainer.run.loop`), P parameters, c bytes per element of the compute
dtype (2 for bfloat16, 4 for float32), N ranks (the plan is one rank's; FSDP2 shards 1/N):

* start-up (:func:`~trainer.run.components.build_components`): the policy's float32 masters,
  whole on every rank (4P; each rank loads the whole model before it is sharded), and the vLLM
  engine as it is created, awake: ``model.vllm.gpu_memory_utilization`` of the device, or its
  weights (cP) plus ``kv_cache_gb``; it sleeps from then on whenever it does not generate;
* the warm start and Stage 1 (:func:`~trainer.stages.sft.sft`), each with its own AdamW over
  the whole model: masters, moments and gradients (4P + 8P + 4P, 1/N each), the compute-dtype
  weights, and the activations of one micro-batch (``min(batch_size, algo.micro_batch_size)``
  sequences) of their own sequences: Stage 1's the writer's prompt and hindsight
  (``max_prompt_tokens + writer.max_new_tokens``), the warm start's the demonstration turns
  (and its writer examples when ``writer_fraction`` > 0);
* from the RL start (:func:`~trainer.run.components.start_rl`) the RL AdamW's moments (8P/N),
  the KL reference (cP/N, in the compute dtype, when ``algo.kl_coef`` > 0) and a frozen writer
  snapshot (cP, whole: a frozen writer, or a self writer refreshed less than every step);
* rollout: the engine awake (and a frozen or stale writer's second engine), or the transformers
  backend's KV cache of a rank's rows (at most 64 at once) and its prefill, with a sharded policy
  gathered whole (cP) to generate with;
* score (``unsharded(model, reference)`` in :mod:`trainer.stages.rl`): with N > 1 the whole
  policy and the whole reference gathered in the compute dtype (cP each) beside their shards,
  on one rank the autocast copies of the policy (cP when c < 4: autocast's cache keeps them
  through the pass); and a no-gradient pass of one
  micro-batch (student or teacher sequences, the longer), one layer at a time;
* update (and the warm start's and Stage 1's training): the largest of three moments
  (:func:`_add_training`, each checked against a fake-tensor trace, :mod:`trainer.run.memory_trace`): the
  backward's start (every checkpointed layer's input, the last layer recomputed or the head's chunk, the
  head weight's gradient), its end (all gradients but the embeddings', one layer recomputed) and AdamW's
  step (the float32 gradients, 4P/N, and on a GPU foreach AdamW's float32 temporary, 4P/N), with the root
  group and two layers gathered under FSDP; of one micro-batch of the longest sequences it trains on (turns,
  and with ``stages.skill_sft.replay`` the writer's examples).

The engine sleeps through every phase but the rollout (``model.vllm.sleep_level`` 1 keeps its
weights on the host, 2 drops them: no GPU memory either way; 0 keeps it awake); vLLM's CPU build
never sleeps.  Activations per token: each decoder layer keeps its float32 input with gradient
checkpointing (4h bytes; under FSDP c h, its parameters being the compute dtype), about
c (5 i + 2.5 kv + 1.5 h) + 28 h bytes without (16.5 h under autocast; h the width, kv the key/value
width, i the MLP width; SDPA keeps no [L, L] scores), one layer is recomputed at a time, and the LM
head's chunk (its logits and float32 log-softmax) is live once; a pass without gradients holds one
layer's c (3 i + 2 h) + 8 h bytes a token at a time.

The engine's KV cache holds (engine memory - its weights) / (layers * 2 * kv * c) tokens; a
step asks a rank's rows (``tasks_per_step * group_size / N``) times ``max_prompt_tokens +
rollout.max_new_tokens``, and with a writer that writes with the policy's engine the same rows
times ``max_prompt_tokens + writer.max_new_tokens``.  When it asks more, vLLM queues and
preempts (recomputes) requests without saying so: the plan warns.

An estimate, not a measurement: ``scripts/bench_memory.py`` measures a CPU run's score, update
and Stage 1 peaks against it, ``scripts/gpu_check.py`` a GPU's memory at each phase boundary.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

import envs
from trainer.algos import get_method
from trainer.config import RunConfig
from trainer.episodes.scoring import HEAD_CHUNK
from trainer.models.architecture import Architecture, architecture, backbone_config
from trainer.models.backbones import resolve_device, resolve_dtype
from trainer.models.lora import lora_params
from trainer.models.vllm_backend import CPU_KV_CACHE_GB

GIB = 2**30
GPU_RUNTIME_GIB = 2.0  # the CUDA context, kernels' workspaces and the caching allocator's slack

# The phases of a run, in the order it meets them; a plan holds those its run has.
PHASES = ("startup", "warm_start", "stage1", "rollout", "score", "update")
TITLES = {"startup": "start-up", "warm_start": "warm start", "stage1": "Stage 1", "rollout": "rollout",
          "score": "score", "update": "update"}
RL_PHASES = ("rollout", "score", "update")
CPU_RUNTIME_GIB = 1.0  # the process itself on a CPU: Python, torch, transformers, MLflow (0.5 GiB imported)
MEMINFO = Path("/proc/meminfo")  # this machine's memory (tests point it at a file of their own)


@dataclass(frozen=True)
class Part:
    """What one tensor family takes of the device, in which phases, and the setting that
    shrinks it (``""``: none does)."""

    name: str
    bytes: float
    phases: tuple[str, ...]
    setting: str = ""


@dataclass(frozen=True)
class KVCache:
    """The engine's KV cache in tokens against what a step asks of it: ``asks`` are
    ``(what, rows, tokens a row)``, one batch of requests at a time."""

    capacity: float
    asks: tuple[tuple[str, int, int], ...]
    setting: str

    @property
    def asked(self) -> int:
        return max(rows * tokens for _, rows, tokens in self.asks)

    @property
    def short(self) -> bool:
        return self.asked > self.capacity

    def line(self) -> str:
        asks = ", ".join(f"{what} {rows} x {tokens:,} = {_tokens(rows * tokens)}" for what, rows, tokens in self.asks)
        line = f"engine KV cache: {_tokens(self.capacity)} tokens; a step asks {asks}"
        if self.short:
            return (f"{line}: more than it holds, vLLM will queue and preempt (recompute) requests; raise "
                    f"{self.setting} or lower rollout.tasks_per_step")
        return f"{line}: holds them"


def _count(n: float) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M"


def _tokens(n: float) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n / 1e3:.1f}k" if n >= 1e3 else f"{n:.0f}"


@dataclass(frozen=True)
class MemoryPlan:
    """The parts of one device's memory a run needs in each of its phases, the peak and the
    device's size (a GPU, or on a CPU a rank's share of this machine's memory)."""

    parts: tuple[Part, ...]
    device_bytes: float
    arch: Architecture
    workers: int = 1  # the ranks of the run: the plan is one rank's
    phases: tuple[str, ...] = RL_PHASES  # the run's phases, in order
    device: str = "cuda"
    kv: KVCache | None = None
    trained: int = 0  # parameters with float32 masters and AdamW moments (LoRA: the adapters); 0 = all

    def resident(self, phase: str) -> list[Part]:
        """The parts held in ``phase`` (a key of :data:`PHASES`)."""
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}; valid: {', '.join(PHASES)}")
        return [p for p in self.parts if phase in p.phases]

    def phase(self, name: str) -> float:
        """Bytes held in phase ``name`` (0 for a phase the run does not have)."""
        return sum(p.bytes for p in self.resident(name))

    @property
    def peak_phase(self) -> str:
        return max(reversed(self.phases), key=self.phase)

    @property
    def peak(self) -> float:
        return self.phase(self.peak_phase)

    @property
    def fits(self) -> bool:
        return self.peak <= self.device_bytes

    def advice(self, phase: str | None = None) -> str:
        """The setting that shrinks ``phase`` (default: the peak's) the most: that of its
        largest part that has one, with the part and its size."""
        phase = phase or self.peak_phase
        tunable = [p for p in self.resident(phase) if p.setting]
        if not tunable:
            return ""
        part = max(tunable, key=lambda p: p.bytes)
        return f"{part.setting} ({part.name}: {part.bytes / GIB:.1f} GiB)"

    def device_name(self) -> str:
        if self.device == "cpu":
            share = f"a rank's 1/{self.workers} of " if self.workers > 1 else ""
            return f"{share}this machine's memory, {self.device_bytes / GIB:.1f} GiB"
        return f"a {self.device_bytes / GIB:g} GiB GPU"

    def table(self) -> str:
        """One table a phase: what is resident in GiB and the total, then the KV cache's line
        and the peak against the device."""
        rows: list[tuple[str, str]] = []
        for phase in self.phases:
            if rows:
                rows.append(("", ""))
            rows.append((TITLES[phase], "GiB"))
            rows += [(f"  {p.name}", f"{p.bytes / GIB:.2f}") for p in self.resident(phase) if p.bytes > 0]
            rows.append(("  total", f"{self.phase(phase) / GIB:.2f}"))
        width = max(len(name) for name, _ in rows)
        lines = [f"{name.ljust(width)}  {gib:>8}".rstrip() for name, gib in rows]
        if self.kv is not None:
            lines += ["", self.kv.line()]
        lines += ["", f"peak: {TITLES[self.peak_phase]}, {self.peak / GIB:.1f} GiB of {self.device_name()}"]
        return "\n".join(lines)


def machine_memory() -> float:
    """This machine's memory in bytes: ``MemTotal`` of /proc/meminfo, else the pages the OS reports."""
    if MEMINFO.is_file():
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemTotal:"):
                return float(line.split()[1]) * 1024  # kB
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def device_memory(cfg: RunConfig, gpu_gib: float | None = None) -> tuple[str, float]:
    """(``cpu`` or ``cuda``, bytes) of the device a rank of ``cfg`` runs on here: a GPU of
    ``gpu_gib`` GiB (None: this machine's first GPU, else 80), or a rank's share of this
    machine's memory."""
    device = resolve_device(cfg.model.device)
    if device == "cpu":
        return device, machine_memory() / cfg.parallel.workers
    if gpu_gib is None:
        gpu_gib = torch.cuda.get_device_properties(0).total_memory / GIB if torch.cuda.is_available() else 80.0
    return device, gpu_gib * GIB


def run_phases(cfg: RunConfig) -> tuple[str, ...]:
    """The phases a resolved run goes through: a warm start only when it trains one (not a
    saved one it loads), Stage 1 when enabled."""
    warm = cfg.stages.warm_start
    trained = {"warm_start": bool(warm.enabled) and not warm.checkpoint, "stage1": bool(cfg.stages.skill_sft.enabled)}
    return ("startup", *(name for name, on in trained.items() if on), *RL_PHASES)


def _layer_bytes(arch: Architecture, c: int) -> float:
    """Activations one decoder layer keeps for backward, per token, without checkpointing:
    c (5 i + 2.5 kv + 1.5 h) + 28 h bytes, fitted to the tensors autograd saves for a Qwen2
    layer in float32 and under bfloat16 autocast (saved-tensor hooks; PyTorch's SDPA keeps
    no [L, L] scores; the resident set of a float32 CPU run measures about 0.85 of it); a
    checkpointed layer keeps its float32 input, 4 h.  Under autocast the float32 part is 16.5 h (traced at
    1.5B's width: 120,888 B, the norms' outputs saved in the compute dtype)."""
    fp32 = 28 if c == 4 else 16.5
    return c * (5 * arch.intermediate + 2.5 * arch.kv_width + 1.5 * arch.hidden) + fp32 * arch.hidden


def _pass_layer_bytes(arch: Architecture, c: int) -> float:
    """One decoder layer's tensors at once in a pass without gradients, per token: the MLP's
    three [T, i] tensors (gate, up, their product) in the compute dtype, the float32 residual
    and normed input: c (3 i + 2 h) + 8 h (measured on CPU in float32: 1.05x this)."""
    return c * (3 * arch.intermediate + 2 * arch.hidden) + 8 * arch.hidden


CHECKPOINTED_LAYER = 4  # bytes per token and unit of width a checkpointed layer keeps (its float32 input)


def _head_bytes(arch: Architecture, c: int, scored: int, grad: bool) -> float:
    """One LM-head chunk of ``scored`` tokens (at most HEAD_CHUNK): its logits and their
    float32 log-softmax (and, recomputed in the backward pass, its gradient)."""
    return min(HEAD_CHUNK, scored) * arch.vocab * (c + 4 * (3 if grad else 2))


def _scoring_bytes(arch: Architecture, c: int, sequences: int, length: int, targets: int) -> float:
    """A pass without gradients over one micro-batch: one layer at a time, the float32 hidden
    states it ends with, one LM-head chunk."""
    tokens = sequences * length
    return tokens * (_pass_layer_bytes(arch, c) + 4 * arch.hidden) + _head_bytes(arch, c, sequences * targets, False)


def _kv_bytes(arch: Architecture, c: int) -> float:
    """KV-cache bytes a token: a key and a value of the key/value width in every layer."""
    return arch.layers * 2 * arch.kv_width * c


def _writes_with_policy(cfg: RunConfig) -> bool:
    """A writer that generates with the policy's own backend (the self writer refreshed every step)."""
    return bool(get_method(cfg.algo.method).skills) and cfg.writer.kind == "self" and cfg.writer.refresh_every == 1


def _snapshot_writer(cfg: RunConfig) -> bool:
    """A writer with a snapshot of its own (a frozen writer, a self writer refreshed less than every step)."""
    return bool(get_method(cfg.algo.method).skills) and cfg.writer.keeps_snapshot


def plan_memory(cfg: RunConfig, device_gib: float | None = None) -> MemoryPlan:
    """The :class:`MemoryPlan` of a resolved run config, one rank's, phase by phase (the
    module's docstring).  ``device_gib``: the device's memory in GiB (a GPU's; for a CPU run
    the rank's share of the machine); None: what :func:`device_memory` finds here."""
    arch = architecture(cfg.model)
    device, device_bytes = device_memory(cfg, device_gib)
    if device == "cpu" and device_gib is not None:
        device_bytes = device_gib * GIB
    c = resolve_dtype(cfg.model.dtype, device).itemsize
    name = str(resolve_dtype(cfg.model.dtype, device)).removeprefix("torch.")
    p, n = arch.params, cfg.parallel.workers
    adapters = lora_params(backbone_config(cfg.model), cfg.model.lora)  # LoRA: only these train
    trained = adapters or p
    phases = run_phases(cfg)
    later = phases[1:]  # after start-up: the policy is sharded (N > 1)
    shard = f", 1/{n} a rank" if n > 1 else ""
    more = f"parallel.workers (now {n}): shard over more GPUs" if device == "cuda" else "a smaller model.backbone"
    parts: list[Part] = []

    def add(label: str, size: float, where, setting: str = "") -> None:
        where = tuple(ph for ph in where if ph in phases)
        if size > 0 and where:
            parts.append(Part(label, size, where, setting))

    lora = f", LoRA rank {cfg.model.lora.rank}: the adapters' alone" if adapters else ""
    if n > 1:
        add("weights (float32 masters, whole: loaded before sharding)", 4 * p, ("startup",), more)
        add(f"weights (float32 masters{shard})", 4 * (p + adapters) / n, later, more)
    else:
        add("weights (float32 masters)", 4 * (p + adapters), phases, more)
    add(f"AdamW moments (float32{shard}{lora})", 8 * trained / n, RL_PHASES, more)
    add(f"the stage's own AdamW moments (float32{shard}{lora})", 8 * trained / n, ("warm_start", "stage1"), more)
    if device == "cuda":
        add("CUDA context and allocator slack", GPU_RUNTIME_GIB * GIB, phases)
    else:
        add("the process (Python, torch, transformers)", CPU_RUNTIME_GIB * GIB, phases)
    if cfg.algo.keeps_initial and not adapters:  # LoRA: the base with adapters disabled, no copy
        add(f"reference ({name}{shard})", c * p / n, RL_PHASES,
            "algo.kl_coef=0 (no KL reference) and a teacher other than initial")
    if _snapshot_writer(cfg):
        add(f"writer snapshot ({name}, whole)", c * p, RL_PHASES, "writer.refresh_every=1")
    if n > 1:
        add(f"gathered policy, whole ({name}; unsharded to score)", c * p, ("score",))
        if cfg.algo.keeps_initial and not adapters:
            add(f"gathered reference, whole ({name}; unsharded to score)", c * p, ("score",))
    elif c < 4:  # kept by autocast's cache for the whole pass (no backward frees them)
        add(f"autocast weight copies ({name})", c * p, ("score",))
    _add_training(add, cfg, arch, c, device, trained, adapters > 0)
    _add_scoring(add, cfg, arch, c)
    kv = _add_generation(add, cfg, arch, c, name, device, device_bytes, phases)
    return MemoryPlan(tuple(parts), device_bytes, arch, n, phases, device, kv, trained)


def training_batches(cfg: RunConfig) -> dict[str, tuple[int, int, int]]:
    """Each training phase's largest micro-batch, ``(sequences, length, scored tokens a sequence)``: RL turns
    (prompt and response; with ``stages.skill_sft.replay`` the writer's examples too), Stage 1's writer
    examples (prompt and hindsight), the warm start's demonstration turns (a skill in context for
    ``skill_fraction`` > 0) and writer examples (``writer_fraction`` > 0)."""
    micro, prompt = cfg.algo.micro_batch_size, cfg.model.max_prompt_tokens
    turn = (prompt + cfg.rollout.max_new_tokens, scored_a_sequence(cfg))
    writer = (prompt + cfg.writer.max_new_tokens, cfg.writer.max_new_tokens)
    ws, st = cfg.stages.warm_start, cfg.stages.skill_sft
    skilled = (turn[0] + cfg.writer.max_skill_tokens, turn[1]) if ws.skill_fraction > 0 else turn
    shapes = {"update": (micro, [turn, *([writer] if st.replay > 0 else [])]),
              "stage1": (min(st.batch_size, micro), [writer]),
              "warm_start": (min(ws.batch_size, micro), [skilled, *([writer] if ws.writer_fraction > 0 else [])])}
    return {phase: (sequences, *max(candidates)) for phase, (sequences, candidates) in shapes.items()}


def scored_a_sequence(cfg: RunConfig) -> int:
    """Tokens the LM head scores in one RL sequence: its response, or with ``env.context: full`` (one
    sequence a trajectory) every turn's (``env.max_turns``, else the env's default), at most all but its first token."""
    new = cfg.rollout.max_new_tokens
    if cfg.env.context != "full":
        return new
    turns = cfg.env.max_turns or envs.env_class(cfg.env.name).default_max_turns
    return min(new * turns, cfg.model.max_prompt_tokens + new - 1)  # a sequence's first token is never scored


def scoring_batch(cfg: RunConfig) -> tuple[int, int, int]:
    """The score phase's micro-batch, ``(sequences, length, scored)``: the student's turns, or (``algo.teacher:
    old``) the teacher's, whose sequences carry the skill on top of the student's prompt."""
    new = cfg.rollout.max_new_tokens
    teacher = bool(get_method(cfg.algo.method).skills) and cfg.algo.teacher == "old"
    length = cfg.model.max_prompt_tokens + new + (cfg.writer.max_skill_tokens if teacher else 0)
    return cfg.algo.micro_batch_size, length, scored_a_sequence(cfg)


def _add_training(add, cfg: RunConfig, arch: Architecture, c: int, device: str, trained: int, lora: bool) -> None:
    """Each training phase (:func:`training_batches`) at its peak, the largest of three moments:

    * the backward's start: every checkpointed layer's input, the head's chunk or the last layer recomputed
      (the larger), the head weight's gradient (float32 on one rank; under FSDP its unsharded compute-dtype
      gradient, held until the root group reduces), the last hidden states and their gradient; no layer's
      gradient yet (8 ranks traced: 6.07 GiB at 1.5B, 4 x 2,560 tokens);
    * the backward's end, the first layer recomputed: the gradients of all but the embeddings (they arrive
      last), one layer's activations (1 rank traced: 4.76 GiB of 5.75 at 1.5B, one layer's 2.78);
    * AdamW's step: the whole gradients and, on a GPU, foreach AdamW's float32 temporary the size of the
      trained parameters (torch's CUDA default; its sqrt of the second moment), traced 22P at one rank.

    The gathered root group and two layers (prefetch) under FSDP in the two backward moments; without
    checkpointing every layer's activations and, on one rank, autocast's compute-dtype weight copies that the
    matmuls save for backward (with checkpointing they are recast a layer at a time and freed)."""
    micro, ckpt = cfg.algo.micro_batch_size, cfg.model.gradient_checkpointing
    n, h, name = cfg.parallel.workers, arch.hidden, "bfloat16" if c == 2 else "float16" if c < 4 else "float32"
    how = "checkpointed" if ckpt else "no checkpointing"
    setting = f"algo.micro_batch_size (now {micro})" if ckpt else "model.gradient_checkpointing=true"
    more = f"parallel.workers (now {n}): shard over more GPUs" if device == "cuda" else "a smaller model.backbone"
    shard = f", 1/{n} a rank" if n > 1 else ""
    embeddings = 0 if lora else arch.vocab * h
    weights: list[tuple[str, float, str]] = []
    if n > 1:
        weights.append((f"gathered root and two layers ({name})", c * (arch.root_params + 2 * arch.layer_params), ""))
    elif c < 4 and not ckpt:
        weights.append((f"autocast weight copies ({name}, saved for backward)", c * arch.params, setting))
    head_grad = 0 if lora else (c if n > 1 else 4) * arch.vocab * h
    # FSDP's compute-dtype parameters make the residual stream (a checkpointed layer's input) the compute dtype
    kept = c if n > 1 else CHECKPOINTED_LAYER
    for phase, (sequences, length, targets) in training_batches(cfg).items():
        tokens = sequences * length
        layer = tokens * _layer_bytes(arch, c)
        acts = f"activations ({sequences} x {length} tokens, {how}"
        head = _head_bytes(arch, c, sequences * targets, True)
        tail = [("the LM head weight's gradient", head_grad, ""),
                ("the last hidden states and their gradient (float32)", tokens * h * 4 * 2, "")]
        if ckpt:  # then the last layer recomputed, or the head's chunk before it: the larger
            last = (f"{acts}: the last layer recomputed)", layer, setting) if layer > head else \
                ("the LM head's chunk", head, "")
            tail += [(f"{acts}: every layer's input)", tokens * arch.layers * kept * h, setting), last]
        else:
            tail += [(f"{acts}: every layer's)", arch.layers * layer, setting), ("the LM head's chunk", head, "")]
        moments = {
            "the backward's start": [*weights, *tail],
            "the backward's end": [*weights, (f"gradients but the embeddings' (float32{shard})",
                                              4 * (trained - embeddings) / n, more),
                                   (f"{acts}: one layer recomputed)", layer, setting)],
            "AdamW's step": [(f"gradients (float32{shard})", 4 * trained / n, more),
                             *([(f"foreach AdamW's float32 temporary{shard}", 4 * trained / n, more)]
                               if device == "cuda" else [])],
        }
        when, peak = max(moments.items(), key=lambda m: sum(b for _, b, _ in m[1]))
        for label, size, knob in peak:
            add(f"{label} [{when}]", size, (phase,), knob)


def _add_scoring(add, cfg: RunConfig, arch: Architecture, c: int) -> None:
    """The score phase's pass without gradients (:func:`scoring_batch`): old policy, reference and the teacher."""
    micro, length, new = scoring_batch(cfg)
    add(f"scoring pass ({micro} x {length} tokens, no gradients, one layer at a time)",
        _scoring_bytes(arch, c, micro, length, new), ("score",), f"algo.micro_batch_size (now {micro})")


MAX_BATCH = 64  # rows the transformers backend generates at once (TransformersBackend.max_batch)


def _add_generation(add, cfg: RunConfig, arch: Architecture, c: int, name: str, device: str, device_bytes: float,
                    phases: tuple[str, ...]) -> KVCache | None:
    """The rollout's generation: the vLLM engine (and a frozen or stale writer's second one)
    with its KV cache in tokens against a step's requests; or the transformers backend's KV
    cache and prefill of at most :data:`MAX_BATCH` rows, the policy gathered whole to generate
    with when sharded."""
    n, prompt = cfg.parallel.workers, cfg.model.max_prompt_tokens
    rows = cfg.rollout.tasks_per_step * cfg.rollout.group_size // n
    turn, written = prompt + cfg.rollout.max_new_tokens, prompt + cfg.writer.max_new_tokens
    if cfg.model.backend != "vllm":
        batch = min(rows, MAX_BATCH)
        writes = bool(get_method(cfg.algo.method).skills) and cfg.writer.kind in ("self", "frozen")
        length = max(turn, written) if writes else turn
        setting = f"rollout.tasks_per_step (now {cfg.rollout.tasks_per_step})"
        add(f"KV cache ({batch} x {length} tokens)", batch * length * _kv_bytes(arch, c), ("rollout",), setting)
        add(f"prefill ({batch} x {prompt} tokens, one layer at a time)", _scoring_bytes(arch, c, batch, prompt, 1),
            ("rollout",), setting)
        if n > 1:
            add(f"gathered policy, whole ({name}; unsharded to generate)", c * arch.params, ("rollout",))
        return None
    vllm = cfg.model.vllm
    weights = c * arch.params
    if device == "cpu" or vllm.kv_cache_gb:
        kv_gib = vllm.kv_cache_gb or CPU_KV_CACHE_GB
        memory, label = weights + kv_gib * GIB, f"weights and {kv_gib:g} GiB KV cache"
        setting = f"model.vllm.kv_cache_gb (now {kv_gib:g})"
    else:
        memory, label = vllm.gpu_memory_utilization * device_bytes, f"{vllm.gpu_memory_utilization:g} of the device"
        setting = f"model.vllm.gpu_memory_utilization (now {vllm.gpu_memory_utilization:g})"
    if device == "cuda" and vllm.sleep_level:
        add(f"vLLM engine, created awake ({label}; asleep after)", memory, ("startup",), setting)
        add(f"vLLM engine, awake ({label})", memory, ("rollout",), setting)
    else:
        why = f"sleep_level {vllm.sleep_level}" if device == "cuda" else "the CPU build never sleeps"
        add(f"vLLM engine ({label}; {why})", memory, phases, setting)
    if _snapshot_writer(cfg):  # an engine of its own, never asleep (trainer.run.engines: one sleeper a process)
        add(f"writer's engine, a second one, always awake ({label})", memory, RL_PHASES, setting)
    asks = [("rollout", rows, turn), *([("writer", rows, written)] if _writes_with_policy(cfg) else [])]
    kv_setting = setting if device == "cpu" or vllm.kv_cache_gb else f"{setting} or model.vllm.kv_cache_gb"
    return KVCache(max(memory - weights, 0.0) / _kv_bytes(arch, c), tuple(asks), kv_setting)


def describe(plan: MemoryPlan) -> str:
    """One line: the peak, its phase, whether it fits (and what to change when not), and a
    KV cache too small for a step."""
    verdict = "fits" if plan.fits else f"does not fit, by {(plan.peak - plan.device_bytes) / GIB:.1f} GiB"
    ranks = ""
    if plan.workers > 1:
        ranks = f" per rank of {plan.workers}" + (" (a GPU each)" if plan.device == "cuda" else "")
    line = (f"{plan.peak / GIB:.1f} GiB at the peak ({TITLES[plan.peak_phase]}){ranks} of {plan.device_name()}: "
            f"{verdict} ({_count(plan.arch.params)} parameters)")
    state = 12 * (plan.trained or plan.arch.params) / plan.workers  # float32 masters and AdamW's two moments
    if state > plan.device_bytes:
        line += (f"; the float32 masters and AdamW moments alone take {state / GIB:.1f} GiB a rank: shard "
                 f"them over more GPUs (parallel.workers, now {plan.workers})")
    elif not plan.fits and plan.advice():
        line += f"; change {plan.advice()}"
    if plan.kv is not None and plan.kv.short:
        line += (f"; the engine's KV cache holds {_tokens(plan.kv.capacity)} tokens of the {_tokens(plan.kv.asked)} "
                 f"a step asks (raise {plan.kv.setting})")
    return line
