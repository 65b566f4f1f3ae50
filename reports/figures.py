"""Paper-style figures (matplotlib, Agg, no pyplot state): each function takes analysis frames
and an output path stem, writes ``<stem>.png`` and ``<stem>.pdf`` and returns both paths, or
returns the :class:`~analysis.diagnostics.Skipped` it was given / that explains what is missing.

* :func:`training_curves` -- per method, the mean over seeds of a training metric at each
  step with a 95% percentile-bootstrap band of that mean (ETRO Fig. 3, SEED Fig. 8).
* :func:`gate_sensitivity` -- final metric vs beta_opd (or lambda_opd) with bootstrap CI
  error bars (SEED review, critique 4).
* :func:`gate_curves` -- g = sigmoid(beta * Delta) over Delta for several beta (SEED Eq. 1).
* :func:`regional_alignment` -- Spearman rho of delta_pos / delta_neg with GiGPO step
  advantages per region (prefix / error / suffix) with cluster-bootstrap CIs (ETRO Fig. 1).
* :func:`compute_cost` -- stacked wall time per phase per method, overhead vs GRPO.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.diagnostics import PHASES, POLARITIES, REGIONS, Skipped
from analysis.stats import bootstrap_ci
from reports.layouts import METHOD_LABELS, PARAM_SYMBOLS

CURVE_KEYS = ("train/success", "train/episode_length", "train/entropy")
HISTORY_COLUMNS = ("run_id", "method", "key", "step", "value")
_PANEL = (4.2, 3.2)  # inches per panel


def _save(fig: Figure, stem: str | Path) -> list[Path]:
    """Write ``stem``.png (150 dpi) and ``stem``.pdf; return [png, pdf]."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    png, pdf = stem.with_suffix(".png"), stem.with_suffix(".pdf")
    fig.savefig(png, dpi=150)
    fig.savefig(pdf, metadata={"CreationDate": None})
    return [png, pdf]


def _panels(n: int, ncols: int = 3) -> tuple[Figure, np.ndarray]:
    ncols = min(ncols, n)
    nrows = -(-n // ncols)
    fig = Figure(figsize=(_PANEL[0] * ncols, _PANEL[1] * nrows), layout="constrained")
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False).ravel())
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]


def _missing(frame, columns: Sequence[str], name: str) -> Skipped | None:
    if isinstance(frame, Skipped):
        return frame
    if frame is None:
        return Skipped(name, "its input frame was not given")
    if len(frame) == 0:
        return Skipped(name, "no rows in the input frame")
    lacking = [c for c in columns if c not in frame.columns]
    return Skipped(name, f"input lacks columns {lacking}") if lacking else None


def _yerr(err: np.ndarray) -> np.ndarray:
    """Error-bar lengths [2, n] from (mean - low, high - mean): NaN -> 0, and clipped at 0
    because a percentile bootstrap interval need not contain the point estimate."""
    return np.clip(np.nan_to_num(np.asarray(err, dtype=float)), 0.0, None)


def _label(method: str) -> str:
    return METHOD_LABELS.get(method, method)


# ---------------------------------------------------------------- training curves


def curve_bands(histories: pd.DataFrame, *, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Per (method, key, step): n runs, mean over runs and the 95% bootstrap CI of the mean
    (``analysis.stats.bootstrap_ci``; NaN band where fewer than 2 runs logged the step)."""
    rows = []
    for (method, key, step), group in histories.groupby(["method", "key", "step"], sort=True):
        values = group["value"].to_numpy(float)
        low, high = bootstrap_ci(values, n_boot=n_boot, seed=seed)
        finite = np.isfinite(values)
        rows.append((method, key, step, int(finite.sum()),
                     float(values[finite].mean()) if finite.any() else np.nan, low, high))
    return pd.DataFrame(rows, columns=["method", "key", "step", "n", "mean", "low", "high"])


def training_curves(histories: pd.DataFrame | None, stem: str | Path, *,
                    keys: Sequence[str] = CURVE_KEYS, n_boot: int = 1000,
                    seed: int = 0) -> list[Path] | Skipped:
    """One panel per (env, key) with data, one line per method with its band.

    ``histories``: long frame ``run_id, method, key, step, value`` (the loader's histories
    joined with each run's method), optionally ``env`` (one row of panels per env; without
    it all runs of a method are pooled). The runs of a method are its seeds.
    """
    name = "training_curves"
    skip = _missing(histories, HISTORY_COLUMNS, name)
    if skip:
        return skip
    data = histories[histories["key"].isin(keys)]
    if "env" not in data.columns:
        data = data.assign(env="all envs")
    panels = [(env, k) for env in sorted(data["env"].unique()) for k in keys
              if ((data["env"] == env) & (data["key"] == k)).any()]
    if not panels:
        return Skipped(name, f"histories have none of the keys {list(keys)}")
    fig, axes = _panels(len(panels), ncols=len({k for _, k in panels}))
    for ax, (env, key) in zip(axes, panels):
        part = data[(data["env"] == env) & (data["key"] == key)]
        for method, band in curve_bands(part, n_boot=n_boot, seed=seed).groupby("method"):
            line, = ax.plot(band["step"], band["mean"], label=_label(method))
            ax.fill_between(band["step"], band["low"], band["high"], alpha=0.2,
                            color=line.get_color(), linewidth=0)
        n = part.groupby("method")["run_id"].nunique()
        seeds = f"{n.min()}" if n.min() == n.max() else f"{n.min()}–{n.max()}"
        ax.set_title(f"{env}: {key} (n = {seeds} seeds)", fontsize=9)
        ax.set_xlabel("step")
    axes[0].legend(fontsize=7)
    fig.suptitle("Training curves: mean over seeds, 95% bootstrap band", fontsize=10)
    return _save(fig, stem)


# ---------------------------------------------------------------- gate


def gate_sensitivity(sensitivity: pd.DataFrame | Skipped, stem: str | Path, *,
                     param: str = "algo.beta_opd",
                     metric_label: str = "final success") -> list[Path] | Skipped:
    """Final metric vs ``param`` per method, one panel per env, 95% CI error bars.

    ``sensitivity``: :func:`analysis.diagnostics.gate_sensitivity` output (method, env,
    param, n, mean, std, ci_low, ci_high). The x axis is logarithmic when all values > 0.
    """
    name = f"gate_sensitivity[{param}]"
    skip = _missing(sensitivity, ["method", "env", param, "n", "mean", "ci_low", "ci_high"], name)
    if skip:
        return skip
    envs = sorted(sensitivity["env"].unique())
    fig, axes = _panels(len(envs))
    for ax, env in zip(axes, envs):
        for method, part in sensitivity[sensitivity["env"] == env].groupby("method", sort=True):
            part = part.sort_values(param)
            err = np.vstack([part["mean"] - part["ci_low"], part["ci_high"] - part["mean"]])
            ax.errorbar(part[param], part["mean"], yerr=_yerr(err), marker="o",
                        capsize=3, label=f"{_label(method)} (n={part['n'].min()})")
        if (sensitivity[param] > 0).all():
            ax.set_xscale("log")
        ax.set_title(env, fontsize=9)
        ax.set_xlabel(PARAM_SYMBOLS.get(param, param))
        ax.set_ylabel(metric_label)
        ax.legend(fontsize=7)
    fig.suptitle(f"{metric_label} vs {param}: mean over seeds, 95% bootstrap CI", fontsize=10)
    return _save(fig, stem)


def gate_curves(gates: pd.DataFrame | Skipped, stem: str | Path) -> list[Path] | Skipped:
    """g = sigmoid(beta * Delta) against Delta, one line per beta (SEED Eq. 1).

    ``gates``: :func:`analysis.diagnostics.gate_table` on a Delta grid (delta, beta, gate).
    """
    skip = _missing(gates, ["delta", "beta", "gate"], "gate_curves")
    if skip:
        return skip
    fig = Figure(figsize=_PANEL, layout="constrained")
    ax = fig.subplots()
    for beta, part in gates.groupby("beta", sort=True):
        part = part.sort_values("delta")
        ax.plot(part["delta"], part["gate"], label=f"β = {beta:g}")
    ax.axhline(0.5, color="grey", linewidth=0.5)
    ax.set_xlabel("Δ = log π(a | h, s) − log π(a | h)")
    ax.set_ylabel("gate g")
    ax.set_title("g = sigmoid(β Δ)", fontsize=9)
    ax.legend(fontsize=7)
    return _save(fig, stem)


# ---------------------------------------------------------------- regional alignment


def regional_alignment(alignment: pd.DataFrame | Skipped, stem: str | Path) -> list[Path] | Skipped:
    """Bars of Spearman rho per region (prefix / error / suffix), one bar per polarity
    (delta_pos, delta_neg), 95% cluster-bootstrap CI error bars, n turns (pos / neg) per region.

    ``alignment``: :func:`analysis.diagnostics.regional_alignment` output (region, polarity,
    n_turns, n_traj, rho, ci_low, ci_high), optionally with a ``method`` column (one panel
    per method).
    """
    skip = _missing(alignment, ["region", "polarity", "n_turns", "rho", "ci_low", "ci_high"],
                    "regional_alignment")
    if skip:
        return skip
    frame = alignment if "method" in alignment.columns else alignment.assign(method="all runs")
    methods = sorted(frame["method"].unique())
    fig, axes = _panels(len(methods))
    width = 0.38
    for ax, method in zip(axes, methods):
        part = frame[frame["method"] == method]
        counts = []
        for i, polarity in enumerate(POLARITIES):
            rows = part[part["polarity"] == polarity].set_index("region").reindex(list(REGIONS))
            x = np.arange(len(REGIONS)) + (i - 0.5) * width
            err = np.vstack([rows["rho"] - rows["ci_low"], rows["ci_high"] - rows["rho"]])
            ax.bar(x, rows["rho"].fillna(0.0), width, yerr=_yerr(err), capsize=3,
                   label=polarity)
            counts.append(rows["n_turns"].fillna(0).astype(int).to_numpy())
        ax.axhline(0.0, color="black", linewidth=0.6)
        ticks = [f"{r}\nn = {' / '.join(str(c[j]) for c in counts)}" for j, r in enumerate(REGIONS)]
        ax.set_xticks(np.arange(len(REGIONS)), ticks)
        ax.set_ylabel("Spearman ρ with step advantage")
        ax.set_title(_label(method), fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle("Regional alignment of OPD gaps (95% CI, trajectories resampled)", fontsize=10)
    return _save(fig, stem)


# ---------------------------------------------------------------- compute cost


def compute_cost(cost: pd.DataFrame | Skipped, stem: str | Path) -> list[Path] | Skipped:
    """Horizontal bars of mean wall time per method, stacked by phase, one panel per
    (env, backbone); the total's overhead ratio vs the baseline is written at each bar end.

    ``cost``: :func:`analysis.diagnostics.compute_cost` output (env, backbone, method, phase,
    n, mean_s, std_s, share, overhead). Phases no method spent time in are left out.
    """
    skip = _missing(cost, ["env", "backbone", "method", "phase", "mean_s", "overhead"],
                    "compute_cost")
    if skip:
        return skip
    strata = list(cost.groupby(["env", "backbone"], sort=True))
    fig, axes = _panels(len(strata), ncols=2)
    cycle = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    spent = set(cost.loc[(cost["phase"] != "total") & (cost["mean_s"] > 0), "phase"])
    phases = [p for p in PHASES if p in spent]
    phase_colors = {p: cycle[i % len(cycle)] for i, p in enumerate(phases)}
    for ax, ((env, backbone), part) in zip(axes, strata):
        table = part.pivot_table(index="method", columns="phase", values="mean_s", aggfunc="first")
        left = np.zeros(len(table))
        for phase in phases:
            seconds = table[phase].fillna(0.0).to_numpy() if phase in table else 0.0 * left
            ax.barh([_label(m) for m in table.index], seconds, left=left,
                    color=phase_colors[phase], label=phase if ax is axes[0] else None)
            left += seconds
        total = part[part["phase"] == "total"].set_index("method")["overhead"]
        for y, (method, end) in enumerate(zip(table.index, left)):
            ratio = total.get(method, np.nan)
            if np.isfinite(ratio):
                ax.annotate(f"×{ratio:.2f}", (end, y), xytext=(3, 0),
                            textcoords="offset points", va="center", fontsize=7)
        ax.set_xlabel("wall time per run (s)")
        ax.set_title(f"{env} / {backbone}", fontsize=9)
    fig.legend(loc="outside lower center", ncols=len(phases), fontsize=7)
    fig.suptitle("Compute cost by phase (×: total time relative to the baseline)", fontsize=10)
    return _save(fig, stem)
