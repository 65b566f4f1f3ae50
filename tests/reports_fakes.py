"""Synthetic loader-shaped frames for the reports tests (no MLflow)."""

from __future__ import annotations

import numpy as np
import pandas as pd

SEARCHQA = ("nq", "triviaqa", "popqa", "hotpotqa", "2wiki", "musique", "bamboogle")
NOISE = (-0.02, 0.0, 0.02)  # per seed: mean 0, sample std 0.02 (scaled per method)


def fake_runs(methods: dict[str, float], *, envs=("household", "shop"), backbones=("tiny",),
              seeds=(0, 1, 2), params: dict[str, dict] | None = None) -> pd.DataFrame:
    """One row per (env, backbone, method, seed): metric = base + NOISE[seed] * (1 + i / 10)
    for the i-th method, so every method has mean ``base`` and std 0.02 * (1 + i / 10), and
    paired differences vary across seeds.

    ``params``: method -> {param column: value} added to that method's rows.
    """
    rows = []
    for env in envs:
        for backbone in backbones:
            for i, (method, base) in enumerate(methods.items()):
                for seed in seeds:
                    value = base + NOISE[seed % len(NOISE)] * (1 + i / 10)
                    row = {"run_id": f"{env}-{backbone}-{method}-{seed}", "status": "FINISHED",
                           "study": "s", "cell_id": f"{env}-{backbone}-{method}", "env": env,
                           "method": method, "backbone": backbone, "seed": seed,
                           "algo.beta_opd": 5.0, "algo.suffix_weight": 0.0,
                           **(params or {}).get(method, {})}
                    row.update(_metrics(env, value))
                    rows.append(row)
    return pd.DataFrame(rows)


def _metrics(env: str, value: float) -> dict:
    if env == "household":
        return {"eval/eval_unseen/success": value}
    if env == "shop":
        return {"eval/eval/success": value, "eval/eval/score": min(1.0, value + 0.1)}
    return {f"eval/{d}/success": value + 0.01 * i for i, d in enumerate(SEARCHQA)}


def fake_histories(runs: pd.DataFrame, steps=(0, 1, 2, 3)) -> pd.DataFrame:
    """``run_id, key, step, value`` for train/success and train/entropy."""
    rows = []
    for i, run_id in enumerate(runs["run_id"]):
        for step in steps:
            rows.append((run_id, "train/success", step, 0.1 * step + 0.01 * (i % 3)))
            rows.append((run_id, "train/entropy", step, 1.0 - 0.1 * step))
    return pd.DataFrame(rows, columns=["run_id", "key", "step", "value"])


def fake_cost(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` with time/<phase>_s/sum columns: every method 10 s rollout; ETRO-like +5 s."""
    out = runs.copy()
    out["time/rollout_s/sum"] = 10.0
    out["time/update_s/sum"] = np.where(out["method"] == "grpo", 2.0, 7.0)
    return out
