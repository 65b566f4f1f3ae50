"""Checkpoints: model weights (safetensors), tokenizer, optimizer and RNG state, step count.

Layout under ``<output.dir>/checkpoints/step_<NNNNNN>/``::

    model/                 save_pretrained (safetensors) + tokenizer; under LoRA the adapter
                           naming its base (trainer.models.lora.save_adapter) + tokenizer
    trainer_state.pt       optimizer state, RNG states, step, run id, counters
    writer.pt              the frozen self-writer snapshot (stale / refresh_every > 1 writers)
    COMPLETE               written last: a checkpoint without it is ignored (crash-safe)

and, once per run, ``<output.dir>/checkpoints/rl_init.pt``: the policy at the start of RL
(the KL reference); under LoRA instead, when the base has no other name,
``<output.dir>/checkpoints/rl_base/``: the base (the RL initialisation, with adapters
disabled the KL reference) that the checkpoints' adapters name.  ``--resume`` restores the
newest complete checkpoint, the reference and the writer snapshot bit for bit (not rebuilt
from the resumed policy) and continues the same MLflow run at the same step.
"""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trainer.models.lora import has_adapters, save_adapter

STEP_PREFIX = "step_"
RL_INIT = "rl_init.pt"
RL_BASE = "rl_base"
WRITER = "writer.pt"
REPLAY = "replay.pt"


@dataclass
class TrainerState:
    """Everything besides the weights that a resumed run needs."""

    step: int = 0
    run_id: str = ""
    nonfinite_steps: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def rng_state() -> dict[str, Any]:
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def checkpoint_dir(root: str | Path, step: int) -> Path:
    return Path(root) / "checkpoints" / f"{STEP_PREFIX}{step:06d}"


def save_checkpoint(
    root: str | Path,
    state: TrainerState,
    model,
    tokenizer,
    optimizer: torch.optim.Optimizer | None,
    keep: int = 2,
    writer_snapshot: torch.nn.Module | None = None,
) -> Path:
    """Write a complete checkpoint for ``state.step`` (with the frozen writer snapshot when
    given); prune all but the newest ``keep``."""
    path = checkpoint_dir(root, state.step)
    if path.exists():
        shutil.rmtree(path)
    (path / "model").mkdir(parents=True)
    save_model(model, tokenizer, path / "model")
    torch.save(
        {
            "state": state.__dict__,
            "optimizer": optimizer.state_dict() if optimizer is not None else None,
            "rng": rng_state(),
        },
        path / "trainer_state.pt",
    )
    if writer_snapshot is not None:
        save_module(writer_snapshot, path / WRITER)
    (path / "COMPLETE").write_text("ok\n")
    for old in list_checkpoints(root)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return path


def save_model(model, tokenizer, folder: str | Path) -> None:
    """``model`` and ``tokenizer`` as a folder :func:`trainer.models.backbones.load_pretrained`
    reads: ``save_pretrained``, or under LoRA the adapter and the name of its base."""
    if has_adapters(model):
        save_adapter(model, folder)
    else:
        model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)


def list_checkpoints(root: str | Path) -> list[Path]:
    """Complete checkpoints under ``root``, oldest first."""
    base = Path(root) / "checkpoints"
    if not base.is_dir():
        return []
    found = [p for p in base.glob(f"{STEP_PREFIX}*") if (p / "COMPLETE").exists()]
    return sorted(found, key=lambda p: int(p.name[len(STEP_PREFIX):]))


def latest_checkpoint(root: str | Path) -> Path | None:
    found = list_checkpoints(root)
    return found[-1] if found else None


def load_trainer_state(path: str | Path, optimizer: torch.optim.Optimizer | None) -> TrainerState:
    """Restore optimizer and RNG state from checkpoint ``path``; return the trainer state."""
    blob = torch.load(Path(path) / "trainer_state.pt", weights_only=False)
    if optimizer is not None and blob["optimizer"] is not None:
        optimizer.load_state_dict(blob["optimizer"])
    set_rng_state(blob["rng"])
    return TrainerState(**blob["state"])


def rl_init_path(root: str | Path) -> Path:
    """Where the run's RL-initial policy (the KL reference) is saved."""
    return Path(root) / "checkpoints" / RL_INIT


def replay_path(root: str | Path) -> Path:
    """Where the run's Stage-1 writer examples are kept for replay (``stages.skill_sft.replay``)."""
    return Path(root) / "checkpoints" / REPLAY


def _save_atomically(obj, path: str | Path) -> None:
    """``torch.save`` to a temporary file renamed into place: never a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    tmp.replace(path)


def save_replay(examples, path: str | Path) -> None:
    """The Stage-1 examples a run replays (token sequences, their images included), so a
    resumed run replays the same ones without rerunning Stage 1."""
    _save_atomically(list(examples), path)


def load_replay(path: str | Path) -> list:
    """The examples :func:`save_replay` wrote (a file this run wrote itself, hence pickled;
    [] when Stage 1 kept none); refused when missing, since resuming without them would
    change the run."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"stages.skill_sft.replay: {path} (the run's Stage-1 examples) is "
                                f"missing, so this run cannot resume with its replay; restore the "
                                f"file or start a new run")
    return torch.load(path, weights_only=False)


def save_module(model: torch.nn.Module, path: str | Path) -> None:
    """The exact state dict of ``model`` (tied weights included), written atomically."""
    _save_atomically(model.state_dict(), path)


def load_module(model: torch.nn.Module, path: str | Path) -> None:
    """Load a state dict written by :func:`save_module` into ``model`` (same architecture)."""
    device = next(model.parameters()).device
    model.load_state_dict(torch.load(Path(path), map_location=device, weights_only=True))
