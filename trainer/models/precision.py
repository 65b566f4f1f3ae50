"""Mixed precision: float32 master weights, forward passes in ``model.dtype``.

The policy's parameters, their gradients and AdamW's states are float32 whatever
``model.dtype`` says (an AdamW step at lr 1e-6 moves about 2% of the entries of a bfloat16
weight and every entry of a float32 one).  ``model.dtype`` is the *compute* dtype: with
bfloat16 every forward of the policy runs under :func:`torch.autocast`, so its matmuls run in
bfloat16 on bfloat16 copies of the masters, as FSDP2's ``MixedPrecisionPolicy(param_dtype=
bfloat16)`` does, while the LM head's log-softmax stays in float32 (:mod:`trainer.scoring`).
Models that never train (the KL reference, frozen writer snapshots) are stored in the
compute dtype itself (:func:`frozen_copy`).

The compute dtype travels with the module (:func:`set_compute_dtype`), so a deep copy keeps
it and every forward site asks :func:`autocast` for the module it runs.
"""

from __future__ import annotations

import contextlib
import copy

import torch

MASTER_DTYPE = torch.float32
_ATTR = "hindsight_compute_dtype"


def set_compute_dtype(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """Record ``dtype`` as the dtype ``model``'s forward passes compute in; returns ``model``."""
    object.__setattr__(model, _ATTR, dtype)  # a plain attribute, not a submodule or buffer
    return model


def compute_dtype(model: torch.nn.Module) -> torch.dtype:
    """The recorded compute dtype, else the dtype of ``model``'s first parameter."""
    dtype = getattr(model, _ATTR, None)
    return dtype if dtype is not None else next(model.parameters()).dtype


def autocast(model: torch.nn.Module):
    """A context in which ``model``'s forward runs in its compute dtype: ``torch.autocast``
    when that is lower than the parameters' dtype, else nothing."""
    dtype = compute_dtype(model)
    param = next(model.parameters())
    if dtype == param.dtype or not dtype.is_floating_point or dtype.itemsize >= param.dtype.itemsize:
        return contextlib.nullcontext()
    return torch.autocast(device_type=param.device.type, dtype=dtype)


def frozen_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``model`` that never trains (the KL reference, a frozen writer snapshot): in
    eval mode, without gradients, its floating-point parameters and buffers stored in the
    compute dtype.

    Built tensor by tensor: each parameter and buffer is cast into its compute-dtype copy
    first and handed to ``copy.deepcopy`` through its memo, so the deep copy reuses them and
    never clones the float32 masters (a 7B policy would otherwise hold a second float32 model,
    28 GiB, for the length of the copy).  Tied parameters stay tied (one memo entry)."""
    dtype = compute_dtype(model)
    memo: dict[int, torch.Tensor] = {}
    for tensor in (*model.parameters(), *model.buffers()):
        if id(tensor) not in memo:
            data = tensor.detach()
            data = data.to(dtype, copy=True) if data.is_floating_point() else data.clone()
            memo[id(tensor)] = torch.nn.Parameter(data, requires_grad=False) \
                if isinstance(tensor, torch.nn.Parameter) else data
    clone = copy.deepcopy(model, memo)
    return set_compute_dtype(clone.eval(), dtype)
