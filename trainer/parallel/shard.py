"""The policy and the reference as FSDP2 modules (``fully_shard`` over every decoder layer,
then the decoder as the root group with the embeddings and the LM head, tied or not), and
the ways a sharded model is read whole: unsharded for generation and scoring passes,
gathered one tensor at a time for an engine or an export.

The root is the decoder, not the causal-LM wrapper: the scoring passes call the decoder and
then the head chunk by chunk (:mod:`trainer.episodes.scoring`), never the wrapper's
forward, and FSDP2 gathers a group only when one of its own modules runs.  The LM head is
registered inside the decoder too (:data:`HEAD_ALIAS`), so that the root group owns its
weight (for tied embeddings: both modules see the same gathered tensor; outside the group
the head would keep the stale original and its gradient would never be reduced).  The root
keeps its parameters gathered from its forward to the end of the backward (FSDP2's root
heuristic), so the head chunks (and their recomputation in the backward) read them whole.
The state-dict keys of the unsharded model are kept (:func:`full_tensors`, exports).

Parameters stay float32 masters (sharded, and AdamW's states with them); on a GPU whose
run computes in a lower dtype (``model.dtype``, :mod:`trainer.models.precision`) the
forward runs in it through ``MixedPrecisionPolicy(param_dtype=..., reduce_dtype=float32)``,
the precision policy of one process; on a CPU everything stays float32.  Gradients are
summed over the ranks, not averaged: each rank's loss is already its share of the global
loss (the aggregation weights use global counts, :mod:`trainer.parallel.batches`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor

from trainer.models.precision import compute_dtype, set_compute_dtype
from trainer.parallel.group import active, world

HEAD_ALIAS = "hindsight_head"  # the LM head's second name, inside the decoder (the root group)
KEYS = "hindsight_state_keys"  # the unsharded model's state-dict keys, kept on the module
UNIQUE = "hindsight_unique_keys"  # those keys without tied duplicates (what an export writes)


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The blocks transformers never splits across devices (``_no_split_modules``: the
    decoder layers, a vision tower's blocks), outermost first."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in names and m is not model]
    if not layers:
        raise ValueError(f"{type(model).__name__}: no decoder layers found to shard (_no_split_modules)")
    inside = {id(sub) for layer in layers for sub in layer.modules() if sub is not layer}
    return [m for m in layers if id(m) not in inside]


def _policy(model: torch.nn.Module) -> MixedPrecisionPolicy:
    param = next(model.parameters())
    dtype = compute_dtype(model)
    if param.device.type == "cuda" and dtype.is_floating_point and dtype.itemsize < param.dtype.itemsize:
        return MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
    return MixedPrecisionPolicy()


def is_sharded(model: torch.nn.Module | None) -> bool:
    return bool(_fsdp_modules(model))


def shard(model: torch.nn.Module, device_type: str | None = None) -> torch.nn.Module:
    """Shard ``model`` in place over all ranks (every decoder layer, then the root); returns it.
    ``device_type``: where the shards will live, for a model still on the meta device
    (default: its parameters' device)."""
    mesh = init_device_mesh(device_type or next(model.parameters()).device.type, (world(),))
    policy = _policy(model)
    object.__setattr__(model, KEYS, tuple(model.state_dict()))
    object.__setattr__(model, UNIQUE, frozenset(n for n, _ in [*model.named_parameters(), *model.named_buffers()]))
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    decoder = model.get_decoder()
    decoder.add_module(HEAD_ALIAS, model.get_output_embeddings())
    fully_shard(decoder, mesh=mesh, mp_policy=policy)
    for module in _fsdp_modules(model):
        module.set_gradient_divide_factor(1.0)  # each rank's loss is its share: sum, not mean
        module.set_force_sum_reduction_for_comms(True)  # a plain SUM (gloo has no PREMUL_SUM)
    return model


def frozen_shards(model: torch.nn.Module) -> torch.nn.Module:
    """A frozen copy of the sharded ``model`` (the KL reference after Stage 1), sharded the
    same way and stored in its compute dtype, without a full tensor ever existing: the copy
    is built on the meta device, sharded over the same ranks (so each rank's shard of a
    parameter covers the same rows as ``model``'s), given storage for its shards alone, and
    each shard copied from this rank's shard of ``model``; buffers (not sharded: rotary
    frequencies) copied whole.  No communication."""
    dtype = compute_dtype(model)
    device = next(model.parameters()).device
    with torch.device("meta"):
        clone = type(model)(model.config)
    clone.to(dtype).eval().requires_grad_(False)
    set_compute_dtype(clone, dtype)
    shard(clone, device.type)
    clone.to_empty(device=device)
    source = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    with torch.no_grad():
        for name, param in clone.named_parameters():
            param.to_local().copy_(source[name].to_local())
        for name, buffer in clone.named_buffers():
            buffer.copy_(buffers[name])
    return clone


def broadcast_module(model: torch.nn.Module) -> None:
    """Rank 0's weights on every rank (before sharding), one tensor at a time."""
    if not active():
        return
    with torch.no_grad():
        for tensor in model.state_dict().values():
            dist.broadcast(tensor, src=0)


def _fsdp_modules(model: torch.nn.Module | None) -> list[FSDPModule]:
    return [] if model is None else [m for m in model.modules() if isinstance(m, FSDPModule)]


@contextlib.contextmanager
def unsharded(*models: torch.nn.Module | None) -> Iterator[None]:
    """Gather the full parameters of the sharded ``models`` once (a collective: every rank
    enters together) and keep them through every forward inside, which then communicates
    nothing: ranks may run different numbers of forwards (a rollout's turns, the scoring
    passes of a window context).  No backward inside; unsharded models pass through.
    Afterwards the layers reshard after each forward again, the root (each model's
    outermost group, kept gathered until the backward by FSDP2's root heuristic) does not."""
    groups = [_fsdp_modules(model) for model in models]
    modules = [m for group in groups for m in group]
    roots = {id(group[0]) for group in groups if group}
    for module in modules:
        module.unshard()
    for module in modules:
        module.set_reshard_after_forward(False, recurse=False)
    try:
        yield
    finally:
        for module in modules:
            module.reshard()
            module.set_reshard_after_forward(id(module) not in roots, recurse=False)


def full_tensors(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """``model``'s state dict, a sharded entry gathered whole (``full_tensor()``) only when
    it is reached, so at most one full tensor beyond the shards exists at a time.  A
    collective for a sharded model: every rank consumes the iterator in step."""
    keys = getattr(model, KEYS, None)
    for name, tensor in model.state_dict().items():
        if keys is None or name in keys:
            yield name, tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def unique_keys(model: torch.nn.Module) -> frozenset[str]:
    """The state-dict keys an export writes: parameters (tied ones once) and buffers, as
    named before sharding."""
    keep = getattr(model, UNIQUE, None)
    if keep is None:
        keep = frozenset(n for n, _ in [*model.named_parameters(), *model.named_buffers()])
    return keep


def norm_value(norm: torch.Tensor) -> float:
    """A gradient norm as a float (``clip_grad_norm_`` of DTensor gradients returns a DTensor)."""
    return float(norm.full_tensor() if isinstance(norm, DTensor) else norm)
