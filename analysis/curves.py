"""Learning curves over seeds: training and evaluation metrics against step, environment
steps and generated tokens (sample efficiency), with intervals over seeds. Pure pandas.

Inputs are the loader's metric histories (``run_id, key, step, value``) and a run frame
with one row per run carrying ``seed`` and the grouping columns (a report passes
:func:`reports.prepared.prepare_runs`, so a curve is one cell: env, backbone, variant).
:func:`training_bands` gives the training curves of a report (the histories joined with
those columns), :func:`metric_curves` its evaluation curves; ``reports.figures`` draws both.

Budget axes (per run, cumulative over training steps 1..t, from what the trainer logs):

* ``env_steps`` = sum of ``train/episode_length`` x ``rollout.group_size`` x
  ``rollout.tasks_per_step`` (episodes per step times their mean length);
* ``tokens`` = sum of ``perf/tokens_per_s`` x ``time/rollout_s`` (tokens generated in the
  rollout phase of each step).

A curve point at step t is the mean over seeds of the metric at t with the Student t
interval over seeds (:func:`analysis.stats.t_ci`); its budget coordinate is the mean over
seeds of their cumulative budget at t.  A success rate's interval is clipped to [0, 1]
(``limits``): a t interval over 2 seeds is +-12.7 standard errors and would leave the range
the rate lives in.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.diagnostics import Skipped
from analysis.stats import bootstrap_ci, mean_ci

BUDGET_KEYS = ("train/episode_length", "perf/tokens_per_s", "time/rollout_s")
BUDGET_PARAMS = ("rollout.group_size", "rollout.tasks_per_step")
AXES = ("step", "env_steps", "tokens")
BAND_COLUMNS = ("n", "mean", "low", "high")
RATE_LIMITS = (0.0, 1.0)  # the range of a success rate
# the writer's invalid-output rate per RL step: whether SEED's self writer keeps writing
# through RL (issue 28, item 3); a method without a writer logs none and draws no line
TRAINING_KEYS = ("train/success", "train/episode_length", "train/entropy", "writer/invalid_rate")
RATE_SUFFIXES = ("/success", "/invalid_rate")
HISTORY_COLUMNS = ("run_id", "method", "key", "step", "value")
TRAINING_BY = ("backbone", "env_label", "method", "variant")


def rate_limits(key: str) -> tuple[float, float] | None:
    """RATE_LIMITS for a rate's metric key (``train/success``, ``eval/<split>/success``,
    ``writer/invalid_rate``), None for a metric with no fixed range."""
    return RATE_LIMITS if key.endswith(RATE_SUFFIXES) else None


def budgets(histories: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """Per (run_id, step) the cumulative ``env_steps`` and ``tokens`` (NaN where the run
    did not log what the axis needs)."""
    hist = histories[histories["key"].isin(BUDGET_KEYS)]
    if hist.empty:
        return pd.DataFrame(columns=["run_id", "step", "env_steps", "tokens"])
    wide = hist.pivot_table(index=["run_id", "step"], columns="key", values="value",
                            aggfunc="last").reset_index()
    for key in BUDGET_KEYS:
        if key not in wide.columns:
            wide[key] = np.nan
    params = runs.set_index("run_id").reindex(wide["run_id"])
    episodes = np.ones(len(wide))
    for p in BUDGET_PARAMS:
        episodes = episodes * (params[p].to_numpy(float) if p in params.columns else np.nan)
    wide["env_steps"] = wide["train/episode_length"].to_numpy(float) * episodes
    wide["tokens"] = wide["perf/tokens_per_s"] * wide["time/rollout_s"]
    wide = wide.sort_values(["run_id", "step"])
    for axis in ("env_steps", "tokens"):
        wide[axis] = wide.groupby("run_id")[axis].cumsum(skipna=False)
    return wide[["run_id", "step", "env_steps", "tokens"]].reset_index(drop=True)


def bands(frame: pd.DataFrame, by: Sequence[str], *, value: str = "value",
          seed: str = "seed", ci: str = "t", extra: Sequence[str] = (),
          limits: tuple[float, float] | None = None) -> pd.DataFrame:
    """Per (by..., step): n seeds, mean over seeds and the CI (``ci``: analysis.stats
    CI_METHODS), clipped to ``limits`` (the metric's range, e.g. RATE_LIMITS) when given;
    runs of one seed are averaged first. ``extra`` columns (budget axes) are averaged over
    seeds."""
    keys = [*by, "step"]
    per_seed = frame.groupby([*keys, seed], dropna=False, sort=True)[[value, *extra]].mean()
    rows = []
    for group, part in per_seed.groupby(level=list(range(len(keys))), sort=True):
        values = part[value].to_numpy(float)
        finite = values[np.isfinite(values)]
        low, high = mean_ci(finite, ci)
        if limits is not None:
            low, high = (float(np.clip(x, *limits)) for x in (low, high))
        rows.append((*group, int(finite.size), float(finite.mean()) if finite.size else np.nan,
                     low, high, *(float(part[e].mean()) for e in extra)))
    return pd.DataFrame(rows, columns=[*keys, *BAND_COLUMNS, *extra])


def training_bands(histories: pd.DataFrame | None,
                   keys: Sequence[str] = TRAINING_KEYS) -> pd.DataFrame | Skipped:
    """Training curves of every table row: per (backbone, env_label, method, variant, key,
    step) the :func:`bands` over seeds of each history key in ``keys`` (Student t interval),
    a success rate's clipped to [0, 1] (:func:`rate_limits`), and ``n_seeds``, the seeds of the row
    that logged the key at any step.

    ``histories``: long frame ``run_id, method, key, step, value``, optionally ``env`` /
    ``env_label``, ``backbone``, ``variant`` and ``seed`` (a report joins them from the
    prepared runs; without them: env_label = env or "all envs", backbone "", variant = the
    method and each run one seed). A Skipped says what is missing.
    Returns ``by..., key, step, n, mean, low, high, n_seeds`` (by = TRAINING_BY).
    """
    name = "training_curves"
    if histories is None:
        return Skipped(name, "its input frame was not given")
    if len(histories) == 0:
        return Skipped(name, "no rows in the input frame")
    lacking = [c for c in HISTORY_COLUMNS if c not in histories.columns]
    if lacking:
        return Skipped(name, f"input lacks columns {lacking}")
    data = _with_row_columns(histories[histories["key"].isin(keys)])
    if data.empty:
        return Skipped(name, f"histories have none of the keys {list(keys)}")
    by = list(TRAINING_BY)
    parts = [bands(part, by, limits=rate_limits(key)).assign(key=key)
             for key, part in data.groupby("key", sort=True)]
    seeds = data.groupby([*by, "key"], dropna=False)["seed"].nunique().rename("n_seeds")
    out = pd.concat(parts, ignore_index=True).merge(seeds, left_on=[*by, "key"],
                                                    right_index=True)
    return out[[*by, "key", "step", *BAND_COLUMNS, "n_seeds"]]


def _with_row_columns(histories: pd.DataFrame) -> pd.DataFrame:
    """``histories`` with the columns of a table row, defaulted when not joined."""
    data = histories.copy()
    if "env_label" not in data.columns:
        data["env_label"] = data["env"] if "env" in data.columns else "all envs"
    if "backbone" not in data.columns:
        data["backbone"] = ""
    if "seed" not in data.columns:
        data["seed"] = data["run_id"]
    if "variant" not in data.columns:
        data["variant"] = data["method"]
    return data


def run_bands(histories: pd.DataFrame, *, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Per (method, key, step): n runs, mean over runs and the 95% percentile bootstrap CI
    of the mean (:func:`analysis.stats.bootstrap_ci`; NaN band where fewer than 2 runs
    logged the step). Every run counts as one sample, whatever its seed."""
    rows = []
    for (method, key, step), group in histories.groupby(["method", "key", "step"], sort=True):
        values = group["value"].to_numpy(float)
        low, high = bootstrap_ci(values, n_boot=n_boot, seed=seed)
        finite = np.isfinite(values)
        rows.append((method, key, step, int(finite.sum()),
                     float(values[finite].mean()) if finite.any() else np.nan, low, high))
    return pd.DataFrame(rows, columns=["method", "key", "step", "n", "mean", "low", "high"])


def metric_curves(histories: pd.DataFrame, runs: pd.DataFrame, keys_of: pd.Series, *,
                  by: Sequence[str], ci: str = "t",
                  limits: tuple[float, float] | None = None) -> pd.DataFrame:
    """Curves of one metric per run: ``keys_of`` maps run_id -> tuple of history keys whose
    per-step mean is the run's value (e.g. the eval split's success, or the QA datasets);
    intervals clipped to ``limits`` (see :func:`bands`).
    Returns ``by..., step, n, mean, low, high, env_steps, tokens``."""
    per_step = _per_step(histories, keys_of)
    if per_step.empty:
        return pd.DataFrame(columns=[*by, "step", *BAND_COLUMNS, "env_steps", "tokens"])
    per_step = per_step.merge(budgets(histories, runs), on=["run_id", "step"], how="left")
    start = per_step["step"] == 0  # evaluated before any training step: no budget spent
    per_step.loc[start, ["env_steps", "tokens"]] = per_step.loc[start, ["env_steps", "tokens"]
                                                                ].fillna(0.0)
    per_step = per_step.merge(runs[["run_id", "seed", *by]], on="run_id")
    return bands(per_step, by, ci=ci, extra=("env_steps", "tokens"), limits=limits)


def eval_gain(histories: pd.DataFrame, keys_of: pd.Series) -> pd.DataFrame:
    """Per run, its evaluation before RL against its last one: ``run_id, first,
    last_step, last, gain, rose`` (``gain`` = last - first, ``rose`` = 1.0 when the
    last is above the first).  ``keys_of`` as in :func:`metric_curves`; only runs evaluated
    at step 0 (before any RL step, i.e. the warm start) and at a later step are kept."""
    rows = []
    for run_id, part in _per_step(histories, keys_of).sort_values("step").groupby("run_id"):
        if part["step"].iloc[0] != 0 or len(part) < 2:
            continue
        first, last = float(part["value"].iloc[0]), float(part["value"].iloc[-1])
        rows.append((run_id, first, int(part["step"].iloc[-1]), last, last - first,
                     float(last > first)))
    return pd.DataFrame(rows, columns=["run_id", "first", "last_step", "last", "gain", "rose"])


def _per_step(histories: pd.DataFrame, keys_of: pd.Series) -> pd.DataFrame:
    """``run_id, step, value``: per run and step, the mean of the run's ``keys_of`` keys."""
    want = pd.DataFrame([(r, k) for r, ks in keys_of.items() for k in ks],
                        columns=["run_id", "key"])
    hist = histories.merge(want, on=["run_id", "key"])
    return hist.groupby(["run_id", "step"], as_index=False)["value"].mean()
