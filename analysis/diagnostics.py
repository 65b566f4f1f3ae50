"""Diagnostics of hindsight distillation, computed on the loader's frames (no plotting).

Inputs are the run frame of :func:`analysis.loader.load_runs` and the per-turn records of
:func:`analysis.loader.load_records` (contract columns: step, split, task_id, group, traj,
turn, state_key, action, reward, return, success, error_turn_writer, error_turn_true,
delta_pos, delta_neg, gate_mean, region; plus run_id). Every diagnostic returns a tidy
``DataFrame``, or a :class:`Skipped` saying why it could not be computed from what was
given, so that a report can state why a figure is missing instead of failing.

Papers: SEED review (gate g = sigmoid(beta_opd * Delta), Eq. 1; value alignment Eq. 8;
staleness bound Eq. 14) and ETRO (regional alignment Sec. 3.3 / Appendix C.1; writer audit
Sec. 4.4 / Table 5).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps
from scipy.special import expit

from analysis.ranks import spearman
from analysis.stats import bootstrap_ci, mean_std

REGIONS = ("prefix", "error", "suffix")
POLARITIES = ("delta_pos", "delta_neg")
# Disjoint phases of a run (trainer.stages.phases.PhaseTimer charges a nested phase to itself
# alone): the RL step's, then what a trial runs once (Stage 1, the writer panel, the RL setup).
PHASES = ("rollout", "write", "score", "teacher", "reference", "update", "eval", "skill_sft", "writer_panel",
          "start_rl")
_RUN_KEY = "run_id"


@dataclass(frozen=True)
class Skipped:
    """A diagnostic that could not be computed; ``reason`` says what the inputs lacked."""

    diagnostic: str
    reason: str


def need_columns(frame: pd.DataFrame | None, columns: Sequence[str], name: str) -> Skipped | None:
    """A Skipped naming the missing columns (or the empty frame), else None."""
    if frame is None or frame.empty:
        return Skipped(name, "no rows in the input frame")
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        return Skipped(name, f"input lacks columns {missing}")
    return None


def batch_scope(records: pd.DataFrame) -> list[str]:
    """Columns that identify one training batch: run, step and split when present."""
    return [c for c in (_RUN_KEY, "step", "split") if c in records.columns]


# ---------------------------------------------------------------- gate sensitivity


def gate_table(deltas: Sequence[float] = (0.1, 0.3, 0.5, 0.8),
               betas: Sequence[float] = (1.0, 5.0, 10.0, 20.0)) -> pd.DataFrame:
    """The gate g = sigmoid(beta * Delta) (SEED Eq. 1) on a Delta x beta grid, long format.

    Columns: delta, beta, gate. Defaults reproduce the SEED review's sensitivity table
    (e.g. Delta = 0.3, beta = 5 gives 0.818).
    """
    grid = [(float(d), float(b)) for d in deltas for b in betas]
    frame = pd.DataFrame(grid, columns=["delta", "beta"])
    frame["gate"] = expit(frame["beta"] * frame["delta"])
    return frame


def gate_sensitivity(runs: pd.DataFrame, metric: str, *, param: str = "algo.beta_opd",
                     by: Sequence[str] = ("method", "env"), n_boot: int = 2000,
                     seed: int = 0) -> pd.DataFrame | Skipped:
    """Final ``metric`` against ``param`` (beta_opd or lambda_opd), per ``by`` group.

    One row per (by..., param value): n runs (seeds), mean, std, 95% percentile bootstrap
    CI over seeds. Skipped when the param or metric is absent or the study never varies it.
    """
    name = f"gate_sensitivity[{param}]"
    skip = need_columns(runs, [*by, param, metric], name)
    if skip:
        return skip
    if runs[metric].isna().all():
        return Skipped(name, f"no run has a value of {metric!r}")
    values = runs[param].dropna().nunique()
    if values < 2:
        return Skipped(name, f"{param} takes {values} value(s); need 2 or more")
    data = runs.dropna(subset=[param, metric])
    if data[param].nunique() < 2:
        return Skipped(name, f"{param} takes {values} values but only "
                             f"{data[param].nunique()} with a value of {metric!r}")
    rows = []
    for keys, group in data.groupby([*by, param], sort=True):
        values = group[metric].to_numpy(float)
        mean, std = mean_std(values)
        low, high = bootstrap_ci(values, n_boot=n_boot, seed=seed)
        rows.append((*keys, len(values), mean, std, low, high))
    return pd.DataFrame(rows, columns=[*by, param, "n", "mean", "std", "ci_low", "ci_high"])


# Regions of a turn (trainer.records.region): around the writer's boundary of a failed
# trajectory, a failed one without a boundary, and a successful one.
GATE_REGIONS = ("prefix", "error", "suffix", "no_boundary", "success")
ALL_REGIONS = "all"
GATE_QUANTITIES = ("gate_mean", "delta_pos")
QUANTILES = (("q05", 0.05), ("q25", 0.25), ("median", 0.5), ("q75", 0.75), ("q95", 0.95))


def gate_by_region(records: pd.DataFrame, *,
                   by: Sequence[str] = (_RUN_KEY,)) -> pd.DataFrame | Skipped:
    """The measured gate by region: the distribution over scored turns of the records'
    ``gate_mean`` (per turn, the mean over its action tokens of g = sigmoid(beta_opd *
    Delta+), SEED Eq. 1) and of ``delta_pos`` (Delta+ itself), per ``by`` group and region
    of GATE_REGIONS, plus the group's turns of every region (``region`` = ALL_REGIONS).

    One row per (by..., quantity, region): quantity in GATE_QUANTITIES, n_turns, n_runs,
    mean, std and the 5 / 25 / 50 / 75 / 95% quantiles. Turns whose gate was not measured
    (NaN: evaluation, a method without OPD, an invalid hindsight) are left out; Skipped when
    no turn has one.
    """
    name = "gate_by_region"
    skip = need_columns(records, [*by, *GATE_QUANTITIES, "region"], name)
    if skip:
        return skip
    scored = records[np.isfinite(records["gate_mean"].to_numpy(float))]
    if scored.empty:
        return Skipped(name, "no turn has a measured gate (no run scored Delta+: GRPO-only, "
                             "or records without OPD)")
    both = pd.concat([scored, scored.assign(region=ALL_REGIONS)], ignore_index=True)
    order = {r: i for i, r in enumerate((*GATE_REGIONS, ALL_REGIONS))}
    rows = []
    for keys, group in both.groupby([*by, "region"], sort=True):
        n_runs = group[_RUN_KEY].nunique() if _RUN_KEY in group.columns else 1
        for quantity in GATE_QUANTITIES:
            x = group[quantity].to_numpy(float)
            x = x[np.isfinite(x)]
            if not x.size:
                continue
            mean, std = mean_std(x)
            rows.append((*_as_tuple(keys), quantity, x.size, n_runs, mean, std,
                         *np.quantile(x, [q for _, q in QUANTILES])))
    out = pd.DataFrame(rows, columns=[*by, "region", "quantity", "n_turns", "n_runs", "mean",
                                      "std", *(k for k, _ in QUANTILES)])
    rank = out["region"].map(lambda r: order.get(r, len(order)))
    return out.assign(_rank=rank).sort_values([*by, "quantity", "_rank"], kind="stable") \
        .drop(columns="_rank").reset_index(drop=True)


@dataclass(frozen=True)
class GateFrames:
    """What the gate figure draws: the measured gate by region (:func:`gate_by_region` by
    table row), the final success against beta_opd when a study varies it
    (:func:`gate_sensitivity`) and the formula g = sigmoid(beta Delta) at the study's betas
    (:func:`gate_table`), each a frame or the Skipped that says why it is missing."""

    by_region: pd.DataFrame | Skipped
    vs_beta: pd.DataFrame | Skipped
    formula: pd.DataFrame


# ---------------------------------------------------------------- value alignment


def value_alignment(records: pd.DataFrame, *,
                    by: Sequence[str] = (_RUN_KEY,)) -> pd.DataFrame | Skipped:
    """Covariance of the gate with the return, measured from records (SEED review Eq. 8).

    Eq. 8: E_r[Q] - E_pi[Q] = Cov_pi(Q, w) / Z with Z = E_pi[w]. Here w is the turn's
    ``gate_mean`` and Q is estimated by the turn's discounted ``return``; over the scored
    turns of each ``by`` group: n_turns, gate_mean (Z), cov (pooled over turns, ddof=0),
    gain = cov / Z, spearman, and cov_within_state: the covariance after centring gate and
    return within each anchor state (run, step, split, task_id, state_key), which compares
    actions at the same context as Eq. 8 does (NaN when no state repeats).
    """
    name = "value_alignment"
    skip = need_columns(records, [*by, "gate_mean", "return", "task_id", "state_key"], name)
    if skip:
        return skip
    scored = records.dropna(subset=["gate_mean", "return"])
    if scored.empty:
        return Skipped(name, "no turn has a gate (gate_mean is NaN everywhere)")
    anchor = [*batch_scope(scored), "task_id", "state_key"]
    centred = scored[["gate_mean", "return"]] - scored.groupby(anchor)[
        ["gate_mean", "return"]].transform("mean")
    repeated = scored.groupby(anchor)["return"].transform("size") > 1
    rows = []
    for keys, group in scored.groupby(list(by), sort=True):
        g, q = group["gate_mean"].to_numpy(float), group["return"].to_numpy(float)
        cov = float(np.mean((g - g.mean()) * (q - q.mean())))
        c = centred.loc[group.index[repeated.loc[group.index]]]
        within = float(np.mean(c["gate_mean"] * c["return"])) if len(c) else math.nan
        rows.append((*_as_tuple(keys), len(group), float(g.mean()), cov,
                     cov / g.mean() if g.mean() > 0 else math.nan, spearman(g, q), within))
    return pd.DataFrame(rows, columns=[*by, "n_turns", "gate_mean", "cov", "gain",
                                       "spearman", "cov_within_state"])


def _as_tuple(keys) -> tuple:
    return keys if isinstance(keys, tuple) else (keys,)


# ---------------------------------------------------------------- staleness


STALENESS_PAIR = ("env", "backbone", "seed", "algo.beta_opd")
# Run columns that name a run or its method rather than its cell's settings.
_NOT_CELL = ("method", "algo.method", "cell_id", "run_id", "status", "study")


def staleness_pair_keys(runs: pd.DataFrame, refresh: str = "writer.refresh_every") -> list[str]:
    """The columns two runs must agree on to be a staleness pair: :data:`STALENESS_PAIR` and
    every other config param of the cell (dotted keys), except the method name, the writer
    refresh and the run-local ``tracking.*`` / ``output.*`` settings.  So ``seed`` and
    ``seed_stale`` pair (same cell but for the refresh), ``seed_no_sft`` does not."""
    params = {c for c in runs.columns if "." in c and "/" not in c and c != refresh
              and c not in _NOT_CELL and not c.startswith(("tracking.", "output."))}
    return [*STALENESS_PAIR, *sorted(params - set(STALENESS_PAIR))]


def staleness(runs: pd.DataFrame, records: pd.DataFrame, *, delta: str = "delta_pos",
              refresh: str = "writer.refresh_every") -> pd.DataFrame | Skipped:
    """Gate discrepancy between refreshed and stale writers, with the Eq. 14 bound.

    Runs are paired by cell and writer refresh, not by method name: they agree on every key
    of :func:`staleness_pair_keys` (env, backbone, seed, beta_opd and the rest of the cell's
    config) and differ in ``refresh``; the reference is the most often refreshed writer
    (smallest refresh_every >= 1; 0 means never refreshed). Within a pair, turns are matched
    on (step, split, task_id, state_key, action), and for matched turns g = sigmoid(beta *
    Delta) is computed from the turn-mean ``delta`` of each run. Per (stale run, step):
    the :data:`STALENESS_PAIR` keys, the stale run's ``run_id`` and ``method``, the reference
    run's ``ref_run_id``, refresh_every, n_matched, gate_discrepancy = mean |g_ref - g_stale|
    and bound = beta/4 * mean |Delta_ref - Delta_stale| (the Lipschitz step of SEED review
    Eq. 14, which holds exactly for these g). Caveat: the two runs' policies differ too, so
    this measures staleness plus policy divergence; Eq. 14 holds the policy fixed.
    """
    name = "staleness"
    skip = need_columns(runs, [_RUN_KEY, refresh, "method", *STALENESS_PAIR], name) or need_columns(
        records, [_RUN_KEY, "step", "task_id", "state_key", "action", delta], name)
    if skip:
        return skip
    levels = sorted(runs[refresh].dropna().unique())
    fresh = [v for v in levels if v >= 1]
    if len(levels) < 2 or not fresh:
        return Skipped(name, f"{refresh} takes values {levels}; need a refreshed (>= 1) "
                             "writer and a staler one")
    turns = _turn_deltas(records, delta)
    runs = runs[runs[_RUN_KEY].isin(turns[_RUN_KEY])]
    keys = staleness_pair_keys(runs, refresh)
    rows = []
    for _, group in runs.groupby(keys, sort=True, dropna=False):
        ref = group[group[refresh] == fresh[0]]
        for _, stale in group[group[refresh] != fresh[0]].iterrows():
            for _, ref_run in ref.iterrows():
                pair = {k: stale[k] for k in STALENESS_PAIR}
                ids = (ref_run[_RUN_KEY], stale[_RUN_KEY])
                rows.extend(_stale_rows(pair, (stale["method"], *ids), stale[refresh], turns, delta))
    if not rows:
        return Skipped(name, "no matched turns between refreshed and stale runs")
    return pd.DataFrame(rows, columns=[*STALENESS_PAIR, "method", "ref_run_id", _RUN_KEY, "refresh_every",
                                       "step", "n_matched", "gate_discrepancy", "bound"])


def _turn_deltas(records: pd.DataFrame, delta: str) -> pd.DataFrame:
    """Mean ``delta`` per (run, step, split, task_id, state_key, action) occurrence."""
    keys = [*batch_scope(records), "task_id", "state_key", "action"]
    return records.dropna(subset=[delta]).groupby(keys, as_index=False)[delta].mean()


def _stale_rows(pair: dict, who: tuple, level, turns, delta: str) -> list[tuple]:
    """Per step: matched turns of ``who`` = (stale method, reference run, stale run), gate
    gap and Eq. 14 bound."""
    match = [c for c in turns.columns if c not in (_RUN_KEY, delta)]
    ref, stale = (turns[turns[_RUN_KEY] == rid].drop(columns=_RUN_KEY) for rid in who[1:])
    both = ref.merge(stale, on=match, suffixes=("_ref", "_stale"))
    beta = float(pair["algo.beta_opd"])
    rows = []
    for step, group in both.groupby("step", sort=True):
        d_ref, d_stale = group[f"{delta}_ref"].to_numpy(), group[f"{delta}_stale"].to_numpy()
        gap = np.abs(expit(beta * d_ref) - expit(beta * d_stale)).mean()
        rows.append((*pair.values(), *who, level, int(step), len(group), float(gap),
                     beta / 4.0 * float(np.abs(d_ref - d_stale).mean())))
    return rows


# ---------------------------------------------------------------- writer reliability


def writer_reliability(records: pd.DataFrame, *,
                       by: Sequence[str] = (_RUN_KEY,)) -> pd.DataFrame | Skipped:
    """Writer error boundaries against ground truth on failed trajectories (ETRO Table 5).

    Per ``by`` group, over failed trajectories (one per (run, step, split, traj)):
    boundary_acceptance = P(writer gives a boundary | truth has one); exact_turn =
    P(writer turn == true turn | truth has one); false_boundary_rate = P(writer gives a
    boundary | truth has none); mean_offset = mean(writer - true) where both exist. Skipped
    when no trajectory has a ground-truth boundary (error_turn_true is -1 everywhere, e.g.
    an environment without privileged error labels).
    """
    name = "writer_reliability"
    skip = need_columns(records, [*by, "traj", "success", "error_turn_writer", "error_turn_true"], name)
    if skip:
        return skip
    traj = records.drop_duplicates([*batch_scope(records), "traj"])
    traj = traj[~traj["success"].astype(bool)]
    if not (traj["error_turn_true"] >= 0).any():
        return Skipped(name, "no failed trajectory has a ground-truth error turn")
    rows = []
    for keys, group in traj.groupby(list(by), sort=True):
        w, t = group["error_turn_writer"].to_numpy(), group["error_turn_true"].to_numpy()
        has, none = t >= 0, t < 0
        both = has & (w >= 0)
        rows.append((*_as_tuple(keys), len(group), int(has.sum()), int(none.sum()),
                     _rate(w[has] >= 0), _rate(w[has] == t[has]), _rate(w[none] >= 0),
                     float(np.mean(w[both] - t[both])) if both.any() else math.nan))
    return pd.DataFrame(rows, columns=[*by, "n_failed", "n_true_boundary", "n_no_true_boundary",
                                       "boundary_acceptance", "exact_turn",
                                       "false_boundary_rate", "mean_offset"])


def _rate(hits: np.ndarray) -> float:
    return float(hits.mean()) if hits.size else math.nan


# ---------------------------------------------------------------- compute cost


def compute_cost(runs: pd.DataFrame, *, baseline: str = "grpo",
                 by: Sequence[str] = ("env", "backbone")) -> pd.DataFrame | Skipped:
    """Wall time per phase and method, and the overhead ratio against ``baseline``.

    Uses the loader's ``time/<phase>_s/sum`` columns (seconds a run spent in the phase).
    One row per (by..., method, phase) with phase in PHASES plus ``total`` (sum of phases):
    n runs (one per seed), mean_s and std_s over runs, the 95% t interval ci_low / ci_high,
    share of the method's total, and overhead =
    mean_s / the baseline method's mean_s for the same phase and strata (NaN when the
    baseline is absent or spent 0 s there). A missing phase column counts as 0 s.
    """
    name = "compute_cost"
    columns = [f"time/{p}_s/sum" for p in PHASES]
    present = [c for c in columns if c in runs.columns] if runs is not None else []
    skip = need_columns(runs, [*by, "method"], name)
    if skip or not present:
        return skip or Skipped(name, "runs carry no time/<phase>_s metrics")
    times = runs[[*by, "method"]].copy()
    for phase, col in zip(PHASES, columns):
        times[phase] = runs[col].fillna(0.0) if col in runs.columns else 0.0
    times["total"] = times[list(PHASES)].sum(axis=1)
    long = times.melt(id_vars=[*by, "method"], var_name="phase", value_name="seconds")
    out = long.groupby([*by, "method", "phase"], sort=False)["seconds"].agg(
        n="size", mean_s="mean", std_s="std").reset_index()
    half = sps.t.ppf(0.975, np.maximum(out["n"] - 1, 1)) * out["std_s"] / np.sqrt(out["n"])
    out["ci_low"] = np.where(out["n"] > 1, out["mean_s"] - half, np.nan)
    out["ci_high"] = np.where(out["n"] > 1, out["mean_s"] + half, np.nan)
    total = out[out["phase"] == "total"].set_index([*by, "method"])["mean_s"]
    out["share"] = out["mean_s"] / total.reindex(
        pd.MultiIndex.from_frame(out[[*by, "method"]])).to_numpy()
    base = out[out["method"] == baseline].set_index([*by, "phase"])["mean_s"]
    base = base.reindex(pd.MultiIndex.from_frame(out[[*by, "phase"]])).to_numpy()
    out["overhead"] = np.where(base > 0, out["mean_s"] / np.where(base > 0, base, 1.0), np.nan)
    return out
