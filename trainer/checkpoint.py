"""Checkpoints: model weights (safetensors), tokenizer, optimizer and RNG state, step count.

Layout under ``<output.dir>/checkpoints/step_<NNNNNN>/``::

    model/                 save_pretrained (safetensors) + tokenizer
    trainer_state.pt       optimizer state, RNG states, step, run id, counters
    COMPLETE               written last: a checkpoint without it is ignored (crash-safe)

``--resume`` restores the newest complete checkpoint and continues the same MLflow run at
the same step.
"""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

STEP_PREFIX = "step_"


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
) -> Path:
    """Write a complete checkpoint for ``state.step``; prune all but the newest ``keep``."""
    path = checkpoint_dir(root, state.step)
    if path.exists():
        shutil.rmtree(path)
    (path / "model").mkdir(parents=True)
    model.save_pretrained(path / "model", safe_serialization=True)
    tokenizer.save_pretrained(path / "model")
    torch.save(
        {
            "state": state.__dict__,
            "optimizer": optimizer.state_dict() if optimizer is not None else None,
            "rng": rng_state(),
        },
        path / "trainer_state.pt",
    )
    (path / "COMPLETE").write_text("ok\n")
    for old in list_checkpoints(root)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return path


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
