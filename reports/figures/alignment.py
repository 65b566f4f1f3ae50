"""Regional alignment (ETRO Sec. 3.3, Fig. 1): Spearman rho of the OPD gaps with GiGPO step
advantages per region around the writer's boundary."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.diagnostics import (
    POLARITIES,
    REGIONS,
    Skipped,
)
from reports.diagnostic_tables import BETWEEN_TASKS
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
    An undefined rho draws no bar but "n/a" and a footnote with its reason; a rho that
    compares tasks only is hatched and footnoted (DESIGN.md, Diagnostics).

    ``alignment``: :func:`analysis.alignment.regional_alignment` output (region, polarity,
    n_turns, n_traj, rho, ci_low, ci_high, between_tasks_only, reason), optionally with a
    ``method`` column (one panel per method).
    """
    skip = check_frame(alignment, ["region", "polarity", "n_turns", "rho", "ci_low", "ci_high",
                                   "between_tasks_only", "reason"], "regional_alignment")
    return skip or save(alignment_figure(alignment), stem)


def alignment_figure(alignment: pd.DataFrame) -> Figure:
    """The figure :func:`regional_alignment` saves (its frame checked there)."""
    frame = alignment if "method" in alignment.columns else alignment.assign(method="all runs")
    methods = sorted(frame["method"].unique())
    fig, axes = panel_grid(len(methods))
    width = 0.38
    notes: list[str] = []
    for ax, method in zip(axes, methods):
        part = frame[frame["method"] == method]
        counts = []
        for i, polarity in enumerate(POLARITIES):
            rows = part[part["polarity"] == polarity].set_index("region").reindex(list(REGIONS))
            x = np.arange(len(REGIONS)) + (i - 0.5) * width
            err = np.vstack([rows["rho"] - rows["ci_low"], rows["ci_high"] - rows["rho"]])
            defined = np.isfinite(rows["rho"].to_numpy(float))
            hatch = ["//" if between else "" for between in rows["between_tasks_only"].fillna(False)]
            bars = ax.bar(x[defined], rows["rho"].to_numpy(float)[defined], width,
                          yerr=yerr(err[:, defined]), capsize=3, hatch=[h for h, d in zip(hatch, defined) if d],
                          label=POLARITY_LABELS.get(polarity, polarity))
            for xi, region, reason in zip(x[~defined], rows.index[~defined], rows["reason"][~defined]):
                ax.text(xi, 0.02, "n/a", ha="center", va="bottom", fontsize=7, rotation=90,
                        color=bars.patches[0].get_facecolor() if bars.patches else "grey")
                notes.append(f"{row_label(method)}, {region} {POLARITY_LABELS.get(polarity, polarity)}: "
                             f"n/a, {reason or 'no turns'}")
            notes += [f"{row_label(method)}, {region} {POLARITY_LABELS.get(polarity, polarity)}: "
                      f"hatched, {BETWEEN_TASKS}" for region, h in zip(REGIONS, hatch) if h]
            counts.append(rows["n_turns"].fillna(0).astype(int).to_numpy())
        ax.axhline(0.0, color="black", linewidth=0.6)
        ax.set_ylim(-1.05, 1.05)
        ticks = [f"{r}\nn = {' / '.join(str(c[j]) for c in counts)}" for j, r in enumerate(REGIONS)]
        ax.set_xticks(np.arange(len(REGIONS)), ticks)
        ax.set_ylabel("Spearman ρ with step advantage")
        ax.set_title(row_label(method), fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle("Regional alignment of OPD gaps (95% CI, trajectories resampled)", fontsize=10)
    if notes:  # below the panels, in the room constrained layout keeps for a figure x label
        lines = [line for note in notes for line in textwrap.wrap(note, 130, subsequent_indent="    ")]
        fig.set_figheight(fig.get_figheight() + 0.12 * len(lines))
        fig.supxlabel("\n".join(lines), fontsize=6, x=0.01, ha="left")
    return fig


def delta_profile(profile: pd.DataFrame | Skipped, stem: str | Path) -> list[Path] | Skipped:
    """Where each skill moves the played tokens: mean |Delta| (nats a token, turn means) by turn
    index, one line per polarity, one panel per method; the offset view (turns from the
    writer's boundary, 0 = the diagnosed error) dashed. A skill whose peak sits at turn 0 and
    not at offset 0 moves the first token, not the decisive one.

    ``profile``: :func:`analysis.alignment.delta_profile` output (axis, position, polarity,
    n_turns, mean_abs), optionally with a ``method`` column.
    """
    skip = check_frame(profile, ["axis", "position", "polarity", "n_turns", "mean_abs"], "delta_profile")
    if skip:
        return skip
    frame = profile if "method" in profile.columns else profile.assign(method="all runs")
    methods = sorted(frame["method"].unique())
    fig, axes = panel_grid(len(methods))
    for ax, method in zip(axes, methods):
        part = frame[frame["method"] == method]
        for i, polarity in enumerate(POLARITIES):
            for axis, style in (("turn", "-o"), ("offset", "--s")):
                line = part[(part["polarity"] == polarity) & (part["axis"] == axis)].sort_values("position")
                if len(line):
                    ax.plot(line["position"], line["mean_abs"], style, color=f"C{i}", markersize=3,
                            label=f"{POLARITY_LABELS.get(polarity, polarity)}, by {axis}")
        ax.axvline(0.0, color="grey", linewidth=0.5)
        ax.set_xlabel("turn (solid) or turns from the diagnosed error (dashed)")
        ax.set_ylabel("mean |Δ| (nats a token)")
        ax.set_title(row_label(method), fontsize=9)
        ax.legend(fontsize=6)
    fig.suptitle("Where the skill moves the played tokens", fontsize=10)
    return save(fig, stem)
