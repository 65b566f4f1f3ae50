"""Per-turn records (the frame analysis.loader.load_records gives and the frozen-actor
protocols write) built to known answers: one record with neutral defaults, and records whose
OPD gaps are drawn with planted correlations to the step advantage in each region."""

from __future__ import annotations

import numpy as np
import pandas as pd


def turn_record(**kw) -> dict:
    """One per-turn record (the contract columns of analysis.loader.load_records) with
    neutral defaults; keyword arguments override them."""
    base = {"run_id": "r", "step": 0, "split": "train", "task_id": "t0", "group": 0,
            "traj": 0, "turn": 0, "state_key": "s", "action": "a", "reward": 0.0,
            "return": 0.0, "success": False, "error_turn_writer": -1, "error_turn_true": -1,
            "delta_pos": np.nan, "delta_neg": np.nan, "gate_mean": np.nan,
            "region": "no_boundary"}
    return {**base, **kw}


# Planted Pearson correlations of each gap with the step advantage (bivariate normal), per
# region: ETRO Fig. 1's signs (Delta+ with the advantage before the error, Delta- at it,
# neither after), and Delta+ against it at the error so that a swapped polarity shows.
PLANTED = {("prefix", "delta_pos"): 0.6, ("prefix", "delta_neg"): 0.0,
           ("error", "delta_pos"): -0.4, ("error", "delta_neg"): 0.6,
           ("suffix", "delta_pos"): 0.0, ("suffix", "delta_neg"): 0.0}
K, TURNS = 3, 7  # the error turn and the episode length of every failed trajectory


def planted_spearman(r: float) -> float:
    """Spearman's rho of a bivariate normal with Pearson r: (6 / pi) asin(r / 2)."""
    return 6.0 / np.pi * np.arcsin(r / 2.0)


def planted_records(rng: np.random.Generator, n_tasks: int = 60, run_id: str = "r") -> pd.DataFrame:
    """Per task one failed trajectory (boundary K) and one successful one through the same
    anchor states with another action: the failure's return at turn t is x_t and the
    success's -x_t, so the step advantage (Q-hat minus the anchor mean) is exactly x_t; each
    gap is drawn with its region's planted correlation to x_t."""
    rows = []
    for i in range(n_tasks):
        for t in range(TURNS):
            region = "prefix" if t < K else "error" if t == K else "suffix"
            x = rng.normal()
            gaps = {p: PLANTED[(region, p)] * x + np.sqrt(1 - PLANTED[(region, p)] ** 2) * rng.normal()
                    for p in ("delta_pos", "delta_neg")}
            common = {"run_id": run_id, "task_id": f"t{i}", "turn": t, "state_key": f"s{t}"}
            rows.append(turn_record(traj=2 * i, action="good", success=True, **common, **{"return": -x}))
            rows.append(turn_record(traj=2 * i + 1, action="taken", error_turn_writer=K, **common, **gaps,
                                     **{"return": x}))
    return pd.DataFrame(rows)
