"""Sensitivity studies (:class:`analysis.sensitivity.Sensitivity`): a method's final metric
against the params it varied, as a curve, a heatmap, or slices and contours of a search."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.patches
import matplotlib.ticker
import numpy as np

from analysis.diagnostics import Skipped
from reports.figures.base import (
    log_scale,
    panel_grid,
    save,
    where_label,
    yerr,
)
from reports.prepared import PARAM_SYMBOLS, format_value
from reports.style import row_label


def sensitivity(s, stem: str | Path, *, metric_label: str = "final success rate",
                param_labels: dict | None = None) -> list[Path] | Skipped:
    """A method's sensitivity study (:class:`analysis.sensitivity.Sensitivity`) as its
    kind asks: ``curve`` (metric vs the one param, 95% t interval bars), ``heatmap`` (cell
    means over a two-param grid, each annotated with mean and interval half-width) or
    ``search`` (a slice per param with interval bars, and a contour of the means per pair
    of params with the cells as points). One row of panels per (backbone, env)."""
    cells = s.cells
    if cells.empty:
        return Skipped(f"sensitivity[{s.method}]", "no cell has a value")
    names = {**PARAM_SYMBOLS, **(param_labels or {})}
    strata = sorted(set(zip(cells["backbone"], cells["env_label"])))
    pairs = [(a, b) for i, a in enumerate(s.params) for b in s.params[i + 1:]]
    per_row = {"curve": 1, "heatmap": 1, "search": len(s.params) + len(pairs)}[s.kind]
    fig, axes = panel_grid(len(strata) * per_row, ncols=per_row)
    for i, (backbone, env) in enumerate(strata):
        part = cells[(cells["backbone"] == backbone) & (cells["env_label"] == env)]
        row = axes[i * per_row:(i + 1) * per_row]
        where = f"{where_label(backbone, env)} (n = {part['n'].min()}–{part['n'].max()} seeds)" \
            if part["n"].min() != part["n"].max() else \
            f"{where_label(backbone, env)} (n = {part['n'].min()} seeds)"
        if s.kind == "heatmap":
            _heatmap(row[0], part, *s.params, names, metric_label)
        else:
            for ax, p in zip(row, s.params):
                _slice(ax, part, p, names, metric_label, log_scale(part[p]))
            for ax, (a, b) in zip(row[len(s.params):], pairs):
                _contour(ax, part, a, b, names, metric_label)
        for ax in row:
            ax.set_title(where, fontsize=8)
    kind = {"curve": "mean over seeds, 95% t interval", "heatmap": "mean over seeds (± half "
            "width of the 95% t interval)", "search": "cells of the search: mean over seeds, "
            "95% t interval; contour of the means"}[s.kind]
    fig.suptitle(f"{row_label(s.method)}: {metric_label} vs "
                 f"{', '.join(names.get(p, p) for p in s.params)} ({kind})", fontsize=9)
    return save(fig, stem)


def _slice(ax, part, param, names, metric_label, log) -> None:
    part = part.sort_values(param)
    err = np.vstack([part["mean"] - part["ci_low"], part["ci_high"] - part["mean"]])
    ax.errorbar(part[param], part["mean"], yerr=yerr(err), marker="o", capsize=3,
                linestyle="-" if part[param].is_unique else "none", color="tab:blue")
    if log:
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel(names.get(param, param))
    ax.set_ylabel(metric_label)


def _heatmap(ax, part, a, b, names, metric_label) -> None:
    grid = part.pivot_table(index=b, columns=a, values="mean", aggfunc="first")
    half = part.assign(h=(part["ci_high"] - part["ci_low"]) / 2).pivot_table(
        index=b, columns=a, values="h", aggfunc="first")
    image = ax.imshow(grid.to_numpy(float), origin="lower", aspect="auto", cmap="viridis")
    ax.set_xticks(range(grid.shape[1]), [format_value(v) for v in grid.columns])
    ax.set_yticks(range(grid.shape[0]), [format_value(v) for v in grid.index])
    for (y, x), value in np.ndenumerate(grid.to_numpy(float)):
        if np.isfinite(value):
            h = half.to_numpy(float)[y, x]
            text = f"{value:.2f}" + (f"\n±{h:.2f}" if np.isfinite(h) else "")
            ax.text(x, y, text, ha="center", va="center", fontsize=7, color="white")
    ax.set_xlabel(names.get(a, a))
    ax.set_ylabel(names.get(b, b))
    ax.figure.colorbar(image, ax=ax, label=metric_label)


def _contour(ax, part, a, b, names, metric_label) -> None:
    x, y, z = (part[c].to_numpy(float) for c in (a, b, "mean"))
    lx, ly = log_scale(x), log_scale(y)
    tx, ty = (np.log10(x) if lx else x), (np.log10(y) if ly else y)
    drawn = None
    if len(part) >= 3 and np.linalg.matrix_rank(np.c_[tx - tx.mean(), ty - ty.mean()]) == 2:
        drawn = ax.tricontourf(tx, ty, z, levels=8, cmap="viridis", alpha=0.8)
    points = ax.scatter(tx, ty, c=z, cmap="viridis", edgecolors="black", zorder=3)
    ax.figure.colorbar(drawn or points, ax=ax, label=metric_label)
    ax.set_xlabel(("log10 " if lx else "") + names.get(a, a))
    ax.set_ylabel(("log10 " if ly else "") + names.get(b, b))
