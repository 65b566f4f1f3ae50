"""Regional alignment (ETRO Sec. 3.3, Fig. 1): Spearman rho of the OPD gaps with GiGPO step
advantages per region around the writer's boundary."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis.diagnostics import (
    POLARITIES,
    REGIONS,
    Skipped,
)
from reports.figures.base import (
    check_frame,
    panel_grid,
    save,
    yerr,
)
from reports.style import row_label

POLARITY_LABELS = {"delta_pos": "Δ+ (positive skill)", "delta_neg": "Δ− (negative skill)"}


def regional_alignment(alignment: pd.DataFrame | Skipped, stem: str | Path) -> list[Path] | Skipped:
    """Bars of Spearman rho per region (prefix / error / suffix), one bar per polarity
    (delta_pos, delta_neg), 95% cluster-bootstrap CI error bars, n turns (pos / neg) per region.

    ``alignment``: :func:`analysis.diagnostics.regional_alignment` output (region, polarity,
    n_turns, n_traj, rho, ci_low, ci_high), optionally with a ``method`` column (one panel
    per method).
    """
    skip = check_frame(alignment, ["region", "polarity", "n_turns", "rho", "ci_low", "ci_high"],
                    "regional_alignment")
    if skip:
        return skip
    frame = alignment if "method" in alignment.columns else alignment.assign(method="all runs")
    methods = sorted(frame["method"].unique())
    fig, axes = panel_grid(len(methods))
    width = 0.38
    for ax, method in zip(axes, methods):
        part = frame[frame["method"] == method]
        counts = []
        for i, polarity in enumerate(POLARITIES):
            rows = part[part["polarity"] == polarity].set_index("region").reindex(list(REGIONS))
            x = np.arange(len(REGIONS)) + (i - 0.5) * width
            err = np.vstack([rows["rho"] - rows["ci_low"], rows["ci_high"] - rows["rho"]])
            ax.bar(x, rows["rho"].fillna(0.0), width, yerr=yerr(err), capsize=3,
                   label=POLARITY_LABELS.get(polarity, polarity))
            counts.append(rows["n_turns"].fillna(0).astype(int).to_numpy())
        ax.axhline(0.0, color="black", linewidth=0.6)
        ticks = [f"{r}\nn = {' / '.join(str(c[j]) for c in counts)}" for j, r in enumerate(REGIONS)]
        ax.set_xticks(np.arange(len(REGIONS)), ticks)
        ax.set_ylabel("Spearman ρ with step advantage")
        ax.set_title(row_label(method), fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle("Regional alignment of OPD gaps (95% CI, trajectories resampled)", fontsize=10)
    return save(fig, stem)
