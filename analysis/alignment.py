"""Where a hindsight skill lands and whether it points where the outcome does: GiGPO step
advantages, ETRO's regional alignment (Sec. 3.3 / Fig. 1 / Appendix C.1), the per-turn
|Delta| profile and the gate over beta_opd recomputed from the recorded Delta. Pure pandas /
numpy on the per-turn records of :func:`analysis.loader.load_records` (or a frozen-actor
protocol's ``records.parquet``).

DESIGN.md, Diagnostics: a correlation that cannot be computed is never a number. Every row
of :func:`regional_alignment` says why its rho is undefined (``reason``) and whether it
exists only between tasks (``between_tasks_only``: the step advantage is constant within
every task's batch, so rho compares tasks, not the actions taken on one task).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy.special import expit

from analysis.diagnostics import POLARITIES, REGIONS, Skipped, batch_scope, need_columns
from analysis.ranks import cluster_spearman_ci, spearman

STEP_ADV_COLUMNS = ("task_id", "state_key", "action", "return")


# How step advantages are estimated: ETRO's definition (App. C.1, the default) or
# verl-agent's GiGPO step advantage, without or with the anchor-group std normalisation.
ADVANTAGE_MODES = ("etro", "gigpo", "gigpo_std")
GAMMA = 0.95  # the discount of the records' returns (trainer.records.GAMMA)
MIN_TURNS = 3  # fewer turns give no rank correlation (analysis.ranks.spearman)
GATE_BETAS = (0.0, 1.0, 2.0, 5.0, 10.0, 20.0)  # the beta_opd axis of gate_over_beta by default


def step_advantages(records: pd.DataFrame, mode: str = "etro") -> pd.DataFrame | Skipped:
    """GiGPO step-level advantages, one row per kept turn.

    Within one batch of one task (run_id, step, split, task_id), turns are grouped by anchor
    state ``state_key``.

    * ``etro`` (ETRO Appendix C.1: "pooled action returns against a shared-state
      baseline"): for each (state o, action a) the pooled action value is Q-hat(o, a) = mean
      of the discounted returns G_{i,t} (column ``return``, gamma 0.95) over all its
      occurrences H(o, a); the step advantage is Q-hat(o, a) minus the mean return of the
      whole anchor group. Anchor groups with one occurrence, or whose occurrences all took
      the same action (exact string match), are discarded.
    * ``gigpo`` / ``gigpo_std`` (verl-agent's GiGPO): each turn's own return minus the anchor
      group's mean (``gigpo_std``: divided by the group's std + 1e-6); a singleton group gives
      0 and is kept, groups of one action are kept. The return is verl-agent's: the outcome
      rewards discounted, plus an invalid-step penalty (a negative ``reward``, when the column
      is there) at its own turn only, not discounted back to earlier turns.

    Adds columns q_hat (the value the advantage subtracts from: Q-hat or the turn's return),
    anchor_mean, anchor_size, step_adv to the kept records.
    """
    name = "step_advantages"
    if mode not in ADVANTAGE_MODES:
        raise ValueError(f"mode={mode!r}; valid: {list(ADVANTAGE_MODES)}")
    skip = need_columns(records, STEP_ADV_COLUMNS, name)
    if skip:
        return skip
    anchor = [*batch_scope(records), "task_id", "state_key"]
    if mode != "etro":
        return _gigpo_advantages(records, anchor, mode == "gigpo_std")
    grouped = records.groupby(anchor, sort=False, dropna=False)
    out = records.assign(anchor_size=grouped["return"].transform("size"),
                         anchor_mean=grouped["return"].transform("mean"),
                         n_actions=grouped["action"].transform("nunique"))
    out = out[(out["anchor_size"] > 1) & (out["n_actions"] > 1)].drop(columns="n_actions")
    if out.empty:
        return Skipped(name, "no anchor state repeats with two or more distinct actions")
    q_hat = out.groupby([*anchor, "action"], sort=False, dropna=False)["return"]
    out = out.assign(q_hat=q_hat.transform("mean"))
    out["step_adv"] = out["q_hat"] - out["anchor_mean"]
    return out.reset_index(drop=True)


def _gigpo_advantages(records: pd.DataFrame, anchor: list[str], std: bool) -> pd.DataFrame:
    out = records.assign(q_hat=_verl_agent_returns(records))
    grouped = out.groupby(anchor, sort=False, dropna=False)["q_hat"]
    out = out.assign(anchor_size=grouped.transform("size"), anchor_mean=grouped.transform("mean"))
    adv = out["q_hat"] - out["anchor_mean"]
    if std:
        adv = adv / (grouped.transform("std").fillna(0.0) + 1e-6)
    out["step_adv"] = adv.where(out["anchor_size"] > 1, 0.0)
    return out.reset_index(drop=True)


def _verl_agent_returns(records: pd.DataFrame) -> pd.Series:
    """Per turn: the discounted outcome rewards from that turn on, plus the turn's own
    invalid-step penalty (its negative ``reward``); the ``return`` column without ``reward``."""
    if "reward" not in records.columns or "traj" not in records.columns or "turn" not in records.columns:
        return records["return"].astype(float)
    reward = records["reward"].astype(float)
    penalty, outcome = reward.clip(upper=0.0), reward.clip(lower=0.0)
    result = pd.Series(0.0, index=records.index)
    for _, part in records.assign(_o=outcome).groupby([*batch_scope(records), "traj"], sort=False):
        running = 0.0
        for i in part.sort_values("turn").index[::-1]:
            running = part.at[i, "_o"] + GAMMA * running
            result.at[i] = running
    return result + penalty


# ---------------------------------------------------------------- regional alignment

ALIGNMENT_COLUMNS = ["region", "polarity", "n_turns", "n_traj", "n_tasks", "rho", "ci_low",
                     "ci_high", "between_tasks_only", "reason"]
_GAP = {"delta_pos": "Δ+", "delta_neg": "Δ−"}


def regional_alignment(records: pd.DataFrame, *, n_boot: int = 1000, confidence: float = 0.95,
                       seed: int = 0, advantage: str = "etro") -> pd.DataFrame | Skipped:
    """Spearman correlation of turn-level OPD gaps with GiGPO step advantages, per region.

    ETRO Sec. 3.3 / Fig. 1: step advantages are estimated from all turns (successful and
    failed, see :func:`step_advantages`; ``advantage`` picks ETRO's or verl-agent's estimate);
    the correlated subset is turns of failed trajectories with a valid writer boundary
    k = error_turn_writer >= 0, split into prefix (turn < k), error (turn == k) and suffix
    (turn > k). The expected signs (ETRO Fig. 1): Delta+ rises with the step advantage in the
    prefix (a Positive skill raises the good actions); Delta- rises with it at the error (a
    Negative skill lowers the taken action the more, the worse it was).

    One row per region and polarity (delta_pos, delta_neg): n_turns, n_traj, n_tasks (task
    batches: run, step, split, task), rho and a percentile bootstrap CI that resamples
    **whole trajectories** (cluster bootstrap: the turns of one trajectory are not
    independent), ``n_boot`` resamples with ``seed``. ``reason``: why rho is undefined (NaN),
    "" when it is defined. ``between_tasks_only``: the step advantage is constant within every
    task batch of the region, so rho compares tasks (which deal, which move was wrong) and
    says nothing of the actions taken on one task.
    """
    name = "regional_alignment"
    skip = need_columns(records, [*STEP_ADV_COLUMNS, "traj", "turn", "success", "error_turn_writer",
                           *POLARITIES], name)
    if skip:
        return skip
    adv = step_advantages(records, advantage)
    if isinstance(adv, Skipped):
        return Skipped(name, adv.reason)
    failed = adv[~adv["success"].astype(bool) & (adv["error_turn_writer"] >= 0)]
    if failed.empty:
        return Skipped(name, "no kept turns of failed trajectories with a writer boundary")
    failed = failed.assign(region=error_regions(failed))
    cluster, task = [*batch_scope(failed), "traj"], [*batch_scope(failed), "task_id"]
    rows = []
    for region in REGIONS:
        part = failed[failed["region"] == region]
        for polarity in POLARITIES:
            sub = part.dropna(subset=[polarity, "step_adv"])
            codes = sub.groupby(cluster, sort=True).ngroup().to_numpy()
            x, y = sub[polarity].to_numpy(float), sub["step_adv"].to_numpy(float)
            reason = undefined_reason(region, polarity, x, y)
            # an undefined rho has no interval: no bootstrap is drawn for it
            low, high = (math.nan, math.nan) if reason else cluster_spearman_ci(x, y, codes, n_boot, confidence, seed)
            within = sub.groupby(task, sort=False)["step_adv"].nunique()  # distinct advantages per task
            rows.append((region, polarity, len(sub), len(np.unique(codes)), len(within), spearman(x, y),
                         low, high, bool(not reason and (within <= 1).all()), reason))
    return pd.DataFrame(rows, columns=ALIGNMENT_COLUMNS)


def error_regions(frame: pd.DataFrame) -> pd.Series:
    """prefix / error / suffix of each turn against its writer boundary (turn - k < 0, = 0,
    > 0); the frame's turns must have a boundary k >= 0."""
    offset = np.sign(frame["turn"] - frame["error_turn_writer"]).astype(int)
    return offset.map({-1: "prefix", 0: "error", 1: "suffix"})


def undefined_reason(region: str, polarity: str, gap: np.ndarray, adv: np.ndarray) -> str:
    """Why Spearman's rho of ``gap`` with ``adv`` (both [n_turns]) is undefined in ``region``,
    or "" when it is defined: too few turns, or a side without two distinct values."""
    n = gap.size
    if n < MIN_TURNS:
        return f"{n} turn{'' if n == 1 else 's'} (a rank correlation needs {MIN_TURNS})"
    if np.ptp(adv) == 0:
        if region == "suffix":
            return (f"step advantage constant over the {n} turns after the error: every action "
                    "there ends in the same return (the outcome is settled)")
        return f"step advantage constant over the {n} turns (every action there as good as another)"
    if np.ptp(gap) == 0:
        return f"{_GAP.get(polarity, polarity)} constant over the {n} turns (the skill moves none of them)"
    return ""


# ---------------------------------------------------------------- where the skill lands


def delta_profile(records: pd.DataFrame) -> pd.DataFrame | Skipped:
    """Where a skill moves the played tokens: per polarity, the turn-mean gap by turn index
    (``axis`` = "turn", every scored turn) and by offset from the writer's boundary (``axis`` =
    "offset", turn - k on failed trajectories with k >= 0: 0 is the diagnosed error).

    One row per (axis, position, polarity): n_turns, mean (signed Delta, nats a token, turn
    mean), mean_abs and q95_abs (of |Delta|). A skill that lands on the decisive turn shows a
    peak at offset 0; one that moves the first turn alone shows it at turn 0.
    """
    name = "delta_profile"
    skip = need_columns(records, ["turn", "success", "error_turn_writer", *POLARITIES], name)
    if skip:
        return skip
    failed = records[~records["success"].astype(bool) & (records["error_turn_writer"] >= 0)]
    views = (("turn", records, records["turn"]),
             ("offset", failed, failed["turn"] - failed["error_turn_writer"]))
    rows = []
    for axis, frame, position in views:
        for polarity in POLARITIES:
            values = frame[polarity].astype(float)
            for pos, x in values.groupby(position.to_numpy(), sort=True):
                x = x.to_numpy()
                x = x[np.isfinite(x)]
                if x.size:
                    rows.append((axis, int(pos), polarity, x.size, float(x.mean()),
                                 float(np.abs(x).mean()), float(np.quantile(np.abs(x), 0.95))))
    if not rows:
        return Skipped(name, "no turn has a recorded Delta (records of a method without OPD)")
    return pd.DataFrame(rows, columns=["axis", "position", "polarity", "n_turns", "mean",
                                       "mean_abs", "q95_abs"])


def gate_over_beta(records: pd.DataFrame, betas: Sequence[float] = GATE_BETAS, *, by: Sequence[str] = ("region",),
                   beta_run: float | None = None) -> pd.DataFrame | Skipped:
    """The gate SEED would apply at each beta_opd in ``betas``, from the recorded Delta+
    (no retraining: g = sigmoid(beta Delta+), SEED Eq. 1), per ``by`` group and beta: n_turns,
    mean gate and its 5-95% turn quantiles.

    The records keep each turn's mean Delta+ over its tokens, not every token's, so this is
    the gate of the turn-mean gap, sigmoid(beta * mean Delta); the trainer's gate is the mean
    of the per-token gates. ``jensen_gap`` is their difference at the run's own beta (the
    records' ``gate_mean`` less this function's value at that beta, mean over turns; NaN where
    the records have no ``gate_mean`` or ``beta_run`` is not in ``betas``).
    """
    name = "gate_over_beta"
    skip = need_columns(records, [*by, "delta_pos"], name)
    if skip:
        return skip
    scored = records[np.isfinite(records["delta_pos"].to_numpy(float))]
    if scored.empty:
        return Skipped(name, "no turn has a recorded Delta+ (records of a method without OPD)")
    rows = []
    for keys, group in scored.groupby(list(by), sort=True):  # keys: a tuple (by is a list)
        delta = group["delta_pos"].to_numpy(float)  # [n_turns]
        measured = group["gate_mean"].to_numpy(float) if "gate_mean" in group.columns else None
        for beta in betas:
            gate = expit(beta * delta)
            q05, q95 = np.quantile(gate, [0.05, 0.95])
            rows.append((*keys, float(beta), delta.size, float(gate.mean()), float(q05), float(q95),
                         _jensen(measured, gate) if beta == beta_run else float("nan")))
    return pd.DataFrame(rows, columns=[*by, "beta", "n_turns", "gate", "q05", "q95", "jensen_gap"])


def _jensen(measured: np.ndarray | None, gate: np.ndarray) -> float:
    """Mean of the trainer's per-turn gate less the turn-mean-Delta gate, over turns that have both."""
    if measured is None:
        return float("nan")
    both = np.isfinite(measured)
    return float((measured[both] - gate[both]).mean()) if both.any() else float("nan")

