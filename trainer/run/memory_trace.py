"""One step of the trainer traced at any size without its memory: the check on :mod:`trainer.run.memory`.

The policy and the reference are built from the backbone's config (:func:`trainer.models.architecture.backbone_config`)
under PyTorch's ``FakeTensorMode``: every tensor has its shape, dtype and device but no storage, so a 7B step
runs on this CPU in seconds.  PyTorch's own trackers (``torch.distributed._tools``, the tools TorchTitan's
memory estimator runs) count what the step allocates and frees, by storage, and keep the peak: ``MemTracker``
for one rank, ``FSDPMemTracker`` for N ranks, sharded with :func:`trainer.parallel.shard` exactly as a run
shards them, over a fake process group of N ranks (``dist.init_process_group("fake")``: collectives return
at once, each rank's shapes are real) of which this process is rank 0.

Two phases, as the planner names them:

* **update**: one micro-batch of the planner's update (:func:`trainer.run.memory.training_batches`: RL turns,
  and the writer's examples with Stage 1's replay), through the trainer's scoring path
  (:func:`trainer.models.vision.decoder_states`, then the LM head on the scored positions in chunks of
  :data:`~trainer.episodes.scoring.HEAD_CHUNK`, recomputed in the backward pass), the backward pass, gradient
  clipping when ``algo.grad_clip`` > 0, then AdamW's step.  AdamW's moments exist before the step (a run's
  second step onwards) and the gradients are freed after it, as :func:`trainer.stages.rl._minibatch` does.
* **score**: the policy (with entropies, as the old policy is scored) then the reference, one micro-batch each
  (:func:`trainer.run.memory.scoring_batch`), without gradients, inside :func:`trainer.parallel.unsharded`
  (both gathered whole for the whole phase).

What a GPU run would do differently, and how the trace stands in for it.  A CPU build of torch cannot fake
``cuda`` tensors through autograd (a gradient accumulator asks the CUDA device guard, which the CPU build
lacks), so the fake tensors live on ``cpu`` and are counted as the GPU's: the precision policy is the GPU's
(FSDP2 ``MixedPrecisionPolicy(param_dtype=model.dtype)``, via ``shard(..., precision_device="cuda")``), the forward
runs under CPU autocast in the compute dtype (for a Qwen2 decoder the same casts as CUDA autocast: matmuls
and attention in the compute dtype; the norms, rotary tables and the head's log-softmax are float32 by the
model's own code), and AdamW is built with ``foreach=True``, what torch picks for CUDA tensors (its step
holds one float32 temporary the size of the parameters).  Not counted: the CUDA allocator's 512-byte
rounding and cache, kernels' workspaces and the CUDA context (the planner's 2 GiB runtime part), and the
attention mask: the traced micro-batch has no padding, so the model drops its mask (``attention_mask=None``
lets SDPA run causal without an [L, L] mask), as a run's micro-batch of equal lengths does.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed._tools.common_utils import get_untyped_storages
from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
from torch.distributed._tools.mem_tracker import MemTracker
from torch.testing._internal.distributed.fake_pg import FakeStore
from transformers import AutoModelForCausalLM

from trainer.config import RunConfig
from trainer.episodes.scoring import HEAD_CHUNK, head_logprobs, recomputed_head
from trainer.models.architecture import backbone_config
from trainer.models.backbones import resolve_dtype
from trainer.models.precision import MASTER_DTYPE, autocast, set_compute_dtype
from trainer.models.vision import decoder_states
from trainer.parallel.shard import shard, unsharded
from trainer.run.memory import scoring_batch, training_batches

PHASES = ("update", "score")
UNTRACKED = "Reference shards"  # a part FSDPMemTracker cannot be told about (its track_external does nothing)


@dataclass(frozen=True)
class PhaseTrace:
    """A phase's peak on one rank's device, in bytes, with the tracker's parts at that moment
    (parameters, gradients, optimizer states, activations, temporaries, FSDP's gathered copies ...)."""

    peak: int
    parts: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class MemoryTrace:
    """The traced peaks of a run's update and score phases on one of its ``workers`` ranks."""

    backward: PhaseTrace  # the update's forward and backward passes
    step: PhaseTrace  # the update's gradient clipping and optimizer step
    score: PhaseTrace
    workers: int
    params: int
    seconds: float

    @property
    def update(self) -> PhaseTrace:
        return max(self.backward, self.step, key=lambda p: p.peak)

    def phase(self, when: str) -> int:
        if when not in PHASES:
            raise ValueError(f"phase: {when!r} is not traced; valid phases: {', '.join(PHASES)}")
        return getattr(self, when).peak


class _Scoring(torch.nn.Module):
    """One micro-batch of the trainer's scoring pass as one module call: the decoder's last hidden states,
    then the LM head and its float32 log-softmax on the scored positions, :data:`HEAD_CHUNK` at a time, by
    :mod:`trainer.episodes.scoring`'s own head functions.  The scored positions are the last ``scored`` of
    each sequence, taken by slicing: the trainer's boolean selection has a data-dependent shape, which a
    fake tensor cannot have.  (One call also keeps the head's repeated calls inside one parent module, as
    the trackers require.)"""

    def __init__(self, model: torch.nn.Module, scored: int, entropy: bool):
        super().__init__()
        self.model, self.scored, self.entropy = model, scored, entropy

    def forward(self, ids: torch.Tensor) -> list[torch.Tensor]:
        hidden = decoder_states(self.model, ids, None)  # [n, L, H]; no padding: no mask
        states = hidden[:, -self.scored - 1:-1].reshape(-1, hidden.shape[-1])  # [n * scored, H]
        targets = ids[:, -self.scored:].reshape(-1)  # [n * scored]
        head = recomputed_head if torch.is_grad_enabled() else head_logprobs
        parts = [head(self.model, states[i:i + HEAD_CHUNK], targets[i:i + HEAD_CHUNK], self.entropy)
                 for i in range(0, len(targets), HEAD_CHUNK)]
        return [torch.cat([p[0] for p in parts]), *([torch.cat([p[1] for p in parts])] if self.entropy else [])]


@contextlib.contextmanager
def _process_group(workers: int) -> Iterator[None]:
    """A fake process group of ``workers`` ranks, this process rank 0, for the block (none for one rank)."""
    if workers == 1:
        yield
        return
    if dist.is_initialized():
        raise RuntimeError("trace_memory needs its own fake process group; one is already initialized")
    dist.init_process_group("fake", rank=0, world_size=workers, store=FakeStore())
    try:
        yield
    finally:
        dist.destroy_process_group()


def _bytes(*modules: torch.nn.Module | None) -> int:
    """What the parameters and buffers of ``modules`` hold on this rank (a shard's local storage), each
    storage once."""
    storages = {st for m in modules if m is not None for t in [*m.parameters(), *m.buffers()]
                for st in get_untyped_storages(t)}
    return sum(st.nbytes() for st in storages)


def _tracker(model, optimizer, reference, ids, workers: int) -> tuple[MemTracker, int]:
    """The tracker of one phase, told about what already lives on the device, and the bytes it cannot be told
    about (added to its peak)."""
    if workers == 1:
        tracker = MemTracker()
        tracker.track_external(*[m for m in (model, optimizer, reference, ids) if m is not None])
        return tracker, 0
    tracker = FSDPMemTracker(model.get_decoder(), optimizer)  # the root group: the decoder (shard's layout)
    tracker.track_inputs((ids,))
    return tracker, _bytes(reference)


def _peak(tracker: MemTracker, untracked: int) -> PhaseTrace:
    (snapshot,) = tracker.get_tracker_snapshot("peak").values()  # one device: the rank's
    parts = {str(getattr(k, "value", k)): int(v) for k, v in snapshot.items() if k != "Total" and v}
    if untracked:
        parts[UNTRACKED] = untracked
    return PhaseTrace(int(snapshot["Total"]) + untracked, parts)


def trace_memory(cfg: RunConfig, workers: int | None = None) -> MemoryTrace:
    """Trace one rank's update and score phases of ``cfg`` (a resolved run config) on ``workers`` ranks
    (default ``parallel.workers``), allocating none of their memory.  Seconds: the whole trace's."""
    start = time.perf_counter()
    workers = workers or cfg.parallel.workers
    device = "cpu" if cfg.model.device == "cpu" else "cuda"  # the device the run's settings are for
    dtype = resolve_dtype(cfg.model.dtype, device)
    config = backbone_config(cfg.model)
    if getattr(config, "vision_config", None) is not None:
        raise ValueError(f"model.backbone: {cfg.model.backbone!r} has a vision tower; the memory trace builds "
                         "text decoders only")
    (sequences, length, scored), scoring = training_batches(cfg)["update"], scoring_batch(cfg)
    fake = FakeTensorMode(allow_non_fake_inputs=True)
    with _process_group(workers):
        with fake:
            model = set_compute_dtype(AutoModelForCausalLM.from_config(config, dtype=MASTER_DTYPE), dtype)
            if cfg.model.gradient_checkpointing:
                model.gradient_checkpointing_enable()
            model.train()
            params = sum(p.numel() for p in model.parameters())
            reference = None
            if cfg.algo.keeps_initial:  # stored in the compute dtype; it runs only without gradients, so
                # requires_grad (which MemTracker needs to hook a module's parameters) changes no byte
                reference = set_compute_dtype(AutoModelForCausalLM.from_config(config, dtype=dtype).eval(), dtype)
        if workers > 1:  # outside the fake mode: the device mesh reads its ranks' ids
            for module in (model, reference):
                if module is not None:
                    shard(module, precision_device=device)
        with fake:
            optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.algo.lr, weight_decay=cfg.algo.weight_decay,
                                          foreach=True)
            _warm_up(cfg, model, optimizer)
            vocab = config.get_text_config().vocab_size
            ids = torch.randint(0, vocab, (sequences, length))  # [n, L]
            backward, step = _trace_update(cfg, model, optimizer, reference, ids, scored, workers)
            ids = torch.randint(0, vocab, scoring[:2])
            score = _trace_score(model, optimizer, reference, ids, scoring[2], workers)
    return MemoryTrace(backward, step, score, workers, params, time.perf_counter() - start)


def _warm_up(cfg: RunConfig, model, optimizer) -> None:
    """A step on zero gradients before the trace: AdamW's moments exist from a run's second step on, and a
    sharded model's DTensor operations (the gradient norm, AdamW's foreach updates) have their sharding
    propagation cached.  Uncached, DTensor derives an operation's output shapes by running it on fake tensors
    of the *global* shapes under the active fake mode, which is the trace's own, so the tracker would count
    every gradient whole (4P on each rank) for an instant no GPU ever sees."""
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    _step(cfg, model, optimizer)


def _step(cfg: RunConfig, model, optimizer) -> None:
    """What :func:`trainer.stages.rl._minibatch` does after the backward passes."""
    if cfg.algo.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.algo.grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def _trace_update(cfg, model, optimizer, reference, ids, scored: int, workers: int) -> tuple[PhaseTrace, PhaseTrace]:
    """The peaks of the update's forward and backward passes, and of its step (each its own tracker, which
    starts from what is resident: the gradients, for the step)."""
    gc.collect()
    tracker, untracked = _tracker(model, optimizer, reference, ids, workers)
    with tracker:
        with autocast(model):
            (logp,) = _Scoring(model, scored, entropy=False)(ids)
        (-logp.mean()).backward()
        del logp
    backward = _peak(tracker, untracked)
    tracker, untracked = _tracker(model, optimizer, reference, ids, workers)
    with tracker:
        _step(cfg, model, optimizer)
    return backward, _peak(tracker, untracked)


def _trace_score(model, optimizer, reference, ids, scored: int, workers: int) -> PhaseTrace:
    gc.collect()
    tracker, untracked = _tracker(model, optimizer, reference, ids, workers)
    with tracker, torch.no_grad(), unsharded(model, reference):
        with autocast(model):
            old = _Scoring(model, scored, entropy=True)(ids)
        del old
        if reference is not None:
            with autocast(reference):
                ref = _Scoring(reference, scored, entropy=False)(ids)
            del ref
    return _peak(tracker, untracked)
