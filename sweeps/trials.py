"""A study's trials: one per (cell, seed) of a grid, the configs a study can train, and
their MLflow run names.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from sweeps.study import Study, describe_overrides
from trainer.config import (
    RunConfig,
    apply_overrides,
)
from trainer.run.tracking import cell_id


@dataclass(frozen=True)
class Trial:
    """One (cell, seed) training run of a study."""

    cfg: RunConfig
    cell_id: str
    seed: int
    # The study-level overrides that make this cell (dotted key -> value), seed excluded.
    overrides: tuple[tuple[str, Any], ...]

    @property
    def key(self) -> tuple[str, int]:
        return (self.cell_id, self.seed)

    @property
    def name(self) -> str:
        return f"{self.cell_id}-s{self.seed}"

    def describe(self) -> str:
        return f"{self.name} [{describe_overrides(self.overrides) or 'base'}] seed={self.seed}"


def make_trial(study: Study, overrides: Mapping[str, Any], seed: int) -> Trial:
    """The trial of ``study`` for the cell given by ``overrides`` and ``seed``: outputs
    under ``<out>/trials/<cell_id>-s<seed>``, warm starts cached under ``<out>/cache``,
    tracked in the study's store."""
    cfg = apply_overrides(study.base, {**overrides, "seed": seed})
    cid = cell_id(cfg)
    name = f"{cid}-s{seed}"
    cfg = replace(
        cfg,
        tracking=replace(cfg.tracking, uri=study.store_uri, study=study.name,
                         experiment=study.experiment, run_name=run_name(cfg.algo.method, seed, cid)),
        output=replace(cfg.output, dir=str(study.out_dir / "trials" / name)),
    )
    if not cfg.stages.warm_start.cache_dir:  # trials of a study share warm starts per seed
        warm = replace(cfg.stages.warm_start, cache_dir=str(study.out_dir / "cache"))
        cfg = replace(cfg, stages=replace(cfg.stages, warm_start=warm))
    return Trial(cfg=cfg, cell_id=cid, seed=seed, overrides=tuple(overrides.items()))


def run_name(method: str, seed: int, cid: str) -> str:
    """The MLflow run name of a trial, method and seed first (the UI cuts long names):
    ``etro-s0-77434475``."""
    return f"{method}-s{seed}-{cid[:8]}"


def study_configs(study: Study) -> list[RunConfig]:
    """Every run config the study can train: a grid's trials; for a search, the base with
    each categorical choice and each numeric bound (for checks such as missing extras)."""
    if study.search is None:
        return [t.cfg for t in expand(study)]
    out = [study.base]
    for p in study.search.space:
        values = p.choices if p.type == "categorical" else (p.low, p.high)
        out += [apply_overrides(study.base, {p.key: v}) for v in values]
    return out


def expand(study: Study) -> list[Trial]:
    """All (cell, seed) trials of a grid study: the product of the non-seed axes, each
    with every seed; cells in file order, seeds inner.  Duplicate cells (axis values that
    resolve to the same config) are dropped."""
    if study.search is not None:
        raise ValueError(f"study {study.name!r} is a search; its trials come from Optuna")
    axes = [(k, v) for k, v in study.grid if k != "seed"]
    keys = [k for k, _ in axes]
    trials: dict[tuple[str, int], Trial] = {}
    for combo in itertools.product(*(values for _, values in axes)):
        overrides = dict(zip(keys, combo))
        for seed in study.seeds:
            trial = make_trial(study, overrides, seed)
            trials.setdefault(trial.key, trial)
    return list(trials.values())
