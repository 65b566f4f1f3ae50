"""The OPD gate g = sigmoid(beta_opd * Delta) (SEED review Eq. 1): the final metric against
beta_opd, and the gate as the runs measured it beside its formula."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.patches
import matplotlib.ticker
import numpy as np
import pandas as pd

from analysis.diagnostics import (
    ALL_REGIONS,
    GATE_REGIONS,
    GateFrames,
    Skipped,
)
from reports.figures.base import (
    check_frame,
    legend_below,
    ordered_labels,
    panel_grid,
    per_pair,
    save,
    yerr,
)
from reports.prepared import PARAM_SYMBOLS
from reports.style import method_rank, row_label, styles


def gate_sensitivity(sensitivity: pd.DataFrame | Skipped, stem: str | Path, *,
                     param: str = "algo.beta_opd",
                     metric_label: str = "final success") -> list[Path] | Skipped:
    """Final metric vs ``param`` per method, one panel per env, 95% CI error bars.

    ``sensitivity``: :func:`analysis.diagnostics.gate_sensitivity` output (method, env,
    param, n, mean, std, ci_low, ci_high). The x axis is logarithmic when all values > 0.
    """
    name = f"gate_sensitivity[{param}]"
    skip = check_frame(sensitivity, ["method", "env", param, "n", "mean", "ci_low", "ci_high"], name)
    if skip:
        return skip
    envs = sorted(sensitivity["env"].unique())
    fig, axes = panel_grid(len(envs))
    for ax, env in zip(axes, envs):
        for method, part in sensitivity[sensitivity["env"] == env].groupby("method", sort=True):
            part = part.sort_values(param)
            err = np.vstack([part["mean"] - part["ci_low"], part["ci_high"] - part["mean"]])
            ax.errorbar(part[param], part["mean"], yerr=yerr(err), marker="o",
                        capsize=3, label=f"{row_label(method)} (n={part['n'].min()})")
        if (sensitivity[param] > 0).all():
            ax.set_xscale("log")
        ax.set_title(env, fontsize=9)
        ax.set_xlabel(PARAM_SYMBOLS.get(param, param))
        ax.set_ylabel(metric_label)
        ax.legend(fontsize=7)
    fig.suptitle(f"{metric_label} vs {param}: mean over seeds, 95% bootstrap CI", fontsize=10)
    return save(fig, stem)


def gate_curves(gates: GateFrames | Skipped | None, stem: str | Path) -> list[Path] | Skipped:
    """The OPD gate as the runs measured it, beside its formula (SEED Eq. 1), one row of
    panels:

    * the measured g by region (prefix / error / suffix of a failed trajectory around the
      writer's boundary, failed without a boundary, successful): per table row a box of its
      scored turns (box: quartiles, line: median, whiskers: 5% and 95%), n turns per region;
    * when the study varies beta_opd: final success against beta, 95% bootstrap CI over
      seeds, one panel per env;
    * g = sigmoid(beta Delta) at the study's betas, the measured Delta+ (5-95% of the scored
      turns) shaded, so that one sees where on the curve the runs sit.

    ``gates``: :class:`analysis.diagnostics.GateFrames`; a part that is a Skipped is left
    out and its reason is written under the figure's title.
    """
    name = "gate_curves"
    if gates is None or isinstance(gates, Skipped):
        return gates or Skipped(name, "its input frame was not given")
    skip = check_frame(gates.formula, ["delta", "beta", "gate"], name)
    if skip:
        return skip
    measured = None if isinstance(gates.by_region, Skipped) else gates.by_region
    vs_beta = None if isinstance(gates.vs_beta, Skipped) else gates.vs_beta
    envs = sorted(vs_beta["env"].unique()) if vs_beta is not None else []
    fig, axes = panel_grid((measured is not None) + len(envs) + 1, ncols=4)
    axes = list(axes)
    if measured is not None:
        _gate_boxes(axes.pop(0), measured)
    for env in envs:
        _beta_panel(axes.pop(0), vs_beta[vs_beta["env"] == env], env)
    _gate_formula(axes.pop(0), gates.formula, measured)
    missing = [part.reason for part in (gates.by_region, gates.vs_beta)
               if isinstance(part, Skipped)]
    title = "OPD gate g = sigmoid(β Δ+): measured on the training turns, and the formula"
    fig.suptitle(title + "".join(f"\n(not drawn: {r})" for r in missing), fontsize=9)
    return save(fig, stem)


def _gate_boxes(ax, measured: pd.DataFrame) -> None:
    """Boxes of the measured g per region (x) and table row (colour), from the quantiles."""
    data = measured[measured["quantity"] == "gate_mean"]
    data = data.assign(label=per_pair(data["method"], data["variant"], lambda m, v: row_label(v)),
                       rank=per_pair(data["method"], data["variant"],
                                      lambda m, v: (method_rank(m), row_label(v))))
    labels = ordered_labels(data)
    style = styles(labels)
    regions = [r for r in GATE_REGIONS if (data["region"] == r).any()]
    width = 0.8 / max(1, len(labels))
    handles = []
    for i, label in enumerate(labels):
        part = data[data["label"] == label].set_index("region")
        stats, positions = [], []
        for j, region in enumerate(regions):
            if region in part.index:
                r = part.loc[region]
                stats.append({"med": r["median"], "q1": r["q25"], "q3": r["q75"],
                              "whislo": r["q05"], "whishi": r["q95"], "mean": r["mean"],
                              "fliers": []})
                positions.append(j + (i - (len(labels) - 1) / 2) * width)
        drawn = ax.bxp(stats, positions=positions, widths=width * 0.85, patch_artist=True,
                       showmeans=False, manage_ticks=False,
                       medianprops={"color": "black", "linewidth": 1.0})
        for box in drawn["boxes"]:
            box.set(facecolor=style[label]["color"], alpha=0.6, linewidth=0.6)
        runs = part.loc[ALL_REGIONS, "n_runs"] if ALL_REGIONS in part.index else ""
        handles.append(matplotlib.patches.Patch(color=style[label]["color"], alpha=0.6,
                                                label=f"{label} (n = {runs} runs)"))
    turns = data[data["region"].isin(regions)].groupby("region")["n_turns"].sum()
    ax.set_xticks(range(len(regions)),
                  [f"{r.replace('_', ' ')}\nn = {int(turns[r])}" for r in regions], fontsize=7)
    ax.set_xlim(-0.6, len(regions) - 0.4)
    ax.set_ylim(0.0, 1.0)
    ax.axhline(0.5, color="grey", linewidth=0.5)
    ax.set_ylabel("measured gate g (turn mean)")
    ax.set_title("g by region (box: quartiles; whiskers: 5–95%)", fontsize=8)
    legend_below(ax, handles)


def _beta_panel(ax, part: pd.DataFrame, env: str) -> None:
    """Final success against beta_opd per method, 95% bootstrap CI bars."""
    param = "algo.beta_opd"
    for method, rows in part.groupby("method", sort=False):
        rows = rows.sort_values(param)
        err = np.vstack([rows["mean"] - rows["ci_low"], rows["ci_high"] - rows["mean"]])
        ax.errorbar(rows[param], rows["mean"], yerr=yerr(err), marker="o", capsize=3,
                    label=f"{row_label(method)} (n = {rows['n'].min()}–{rows['n'].max()} seeds)"
                    if rows["n"].min() != rows["n"].max() else
                    f"{row_label(method)} (n = {rows['n'].min()} seeds)")
    if (part[param] > 0).all():
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("β (algo.beta_opd)")
    ax.set_ylabel("final success rate")
    ax.set_title(f"{env}: success vs β (95% bootstrap CI)", fontsize=8)
    legend_below(ax)


def _gate_formula(ax, formula: pd.DataFrame, measured: pd.DataFrame | None) -> None:
    """g = sigmoid(beta Delta) per beta; the measured Delta+ range shaded."""
    if measured is not None:
        delta = measured[(measured["quantity"] == "delta_pos")
                         & (measured["region"] == ALL_REGIONS)]
        if len(delta):
            ax.axvspan(delta["q05"].min(), delta["q95"].max(), color="grey", alpha=0.2,
                       linewidth=0, label="measured Δ+ (5–95%)")
    for beta, part in formula.groupby("beta", sort=True):
        part = part.sort_values("delta")
        ax.plot(part["delta"], part["gate"], label=f"β = {beta:g}")
    ax.axhline(0.5, color="grey", linewidth=0.5)
    ax.set_xlabel("Δ = log π(a | h, s) − log π(a | h) (nats / token)")
    ax.set_ylabel("gate g")
    ax.set_title("formula g = sigmoid(β Δ)", fontsize=8)
    legend_below(ax)
