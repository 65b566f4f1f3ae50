"""Compute cost: wall time per run by phase, per table row, with the overhead against the
baseline."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.patches
import matplotlib.ticker
import numpy as np
import pandas as pd

from analysis.diagnostics import (
    PHASES,
    Skipped,
)
from reports.figures.base import (
    check_frame,
    panel_grid,
    save,
    yerr,
)
from reports.style import method_rank, row_label


def compute_cost(cost: pd.DataFrame | Skipped, stem: str | Path) -> list[Path] | Skipped:
    """Horizontal bars of mean wall time per method, stacked by phase, one panel per
    (env, backbone); the total's overhead ratio vs the baseline is written at each bar end.

    ``cost``: :func:`analysis.diagnostics.compute_cost` output (env, backbone, method, phase,
    n, mean_s, std_s, share, overhead). Phases no method spent time in are left out.
    """
    skip = check_frame(cost, ["env", "backbone", "method", "phase", "mean_s", "overhead"],
                    "compute_cost")
    if skip:
        return skip
    strata = list(cost.groupby(["env", "backbone"], sort=True))
    fig, axes = panel_grid(len(strata), ncols=2)
    cycle = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    spent = set(cost.loc[(cost["phase"] != "total") & (cost["mean_s"] > 0), "phase"])
    phases = [p for p in PHASES if p in spent]
    phase_colors = {p: cycle[i % len(cycle)] for i, p in enumerate(phases)}
    for ax, ((env, backbone), part) in zip(axes, strata):
        table = part.pivot_table(index="method", columns="phase", values="mean_s", aggfunc="first")
        order = sorted(table.index, key=lambda m: (method_rank(str(m).split(" (")[0]), str(m)),
                       reverse=True)  # barh draws bottom-up: first method on top
        table = table.loc[order]
        left = np.zeros(len(table))
        for phase in phases:
            seconds = table[phase].fillna(0.0).to_numpy() if phase in table else 0.0 * left
            ax.barh([row_label(m) for m in table.index], seconds, left=left,
                    color=phase_colors[phase], label=phase if ax is axes[0] else None)
            left += seconds
        totals = part[part["phase"] == "total"].set_index("method")
        for y, (method, end) in enumerate(zip(table.index, left)):
            ratio = totals["overhead"].get(method, np.nan)
            if "ci_low" in totals.columns and np.isfinite(totals["ci_low"].get(method, np.nan)):
                err = yerr([[end - totals.at[method, "ci_low"]],
                             [totals.at[method, "ci_high"] - end]])
                ax.errorbar([end], [y], xerr=err, color="black", capsize=3, linewidth=0.8)
            if np.isfinite(ratio):
                ax.annotate(f"×{ratio:.2f}", (end, y), xytext=(6, 5),
                            textcoords="offset points", va="center", fontsize=7)
        n = part["n"].min()
        ax.set_xlabel("wall time per run (s)")
        ax.set_title(f"{env} · {str(backbone).rpartition('/')[2]} (n = {n} seeds)", fontsize=9)
    fig.legend(loc="outside right upper", fontsize=7)
    fig.suptitle("Compute cost by phase (bars: 95% t interval of the total over seeds; "
                 "×: total relative to the baseline)", fontsize=9)
    return save(fig, stem)
