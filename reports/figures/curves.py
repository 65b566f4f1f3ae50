"""Curves over training: the training metrics and the evaluation success of every table
row against step, environment steps and generated tokens, and rliable's performance
profiles (the fraction of runs above each score threshold)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from analysis.curves import RATE_LIMITS, TRAINING_BY, TRAINING_KEYS, rate_limits
from analysis.diagnostics import Skipped
from reports.figures.base import (
    check_frame,
    draw_bands,
    labelled,
    legend_outside,
    ordered_labels,
    panel_grid,
    save,
    where_label,
)
from reports.style import method_rank, styles, variant_label

TRAINING_COLUMNS = (*TRAINING_BY, "key", "step", "mean", "low", "high", "n_seeds")


CURVE_LABELS = {"train/success": "training success rate", "train/score": "training score",
                "train/episode_length": "episode length (turns)",
                "train/entropy": "policy entropy (nats / token)",
                "writer/invalid_rate": "writer's invalid-output rate"}
AXIS_LABELS = {"step": "training step", "env_steps": "environment steps",
               "tokens": "generated tokens"}


def training_curves(curves: pd.DataFrame | Skipped | None, stem: str | Path, *,
                    keys: Sequence[str] = TRAINING_KEYS) -> list[Path] | Skipped:
    """One panel per (backbone, env, key) with data, one line per row of the tables (a
    cell: method and its swept params) with its band: mean over seeds, 95% t interval
    (a success rate's clipped to [0, 1], :func:`analysis.curves.rate_limits`).

    ``curves``: :func:`analysis.curves.training_bands` output (backbone, env_label, method,
    variant, key, step, n, mean, low, high, n_seeds), or the Skipped it gave.
    """
    name = "training_curves"
    skip = check_frame(curves, TRAINING_COLUMNS, name)
    if skip:
        return skip
    data = labelled(curves[curves["key"].isin(keys)])
    panels = [(b, e, k) for (b, e) in sorted(set(zip(data["backbone"], data["env_label"])))
              for k in keys if ((data["backbone"] == b) & (data["env_label"] == e)
                                & (data["key"] == k)).any()]
    if not panels:
        return Skipped(name, f"histories have none of the keys {list(keys)}")
    labels = ordered_labels(data)
    style = styles(labels)
    fig, axes = panel_grid(len(panels), ncols=len({k for _, _, k in panels}))
    for ax, (backbone, env, key) in zip(axes, panels):
        band = data[(data["backbone"] == backbone) & (data["env_label"] == env)
                    & (data["key"] == key)]
        for label in labels:
            if (band["label"] == label).any():
                draw_bands(ax, band[band["label"] == label], "step", style[label], label)
        n = band.groupby("label")["n_seeds"].max()
        seeds = f"{n.min()}" if n.min() == n.max() else f"{n.min()}–{n.max()}"
        ax.set_title(f"{where_label(backbone, env)} (n = {seeds} seeds)", fontsize=8)
        ax.set_xlabel(AXIS_LABELS["step"])
        ax.set_ylabel(CURVE_LABELS.get(key, key))
    legend_outside(fig, axes)
    clipped = " (rates: clipped to [0, 1])" if any(rate_limits(k) for _, _, k in panels) \
        else ""
    fig.suptitle(f"Training curves: mean over seeds, 95% t interval{clipped}", fontsize=10)
    return save(fig, stem)


def evaluation_curves(curves: pd.DataFrame | Skipped | None, stem: str | Path, *,
                      axes_order: Sequence[str] = ("step", "env_steps", "tokens"),
                      ylabel: str = "evaluation success rate") -> list[Path] | Skipped:
    """Evaluation success against training step, environment steps and generated tokens
    (the axes with data), one row of panels per (backbone, env), one line per table row.

    ``curves``: :func:`analysis.curves.metric_curves` output with ``by`` = backbone,
    env_label, method, label (columns step, n, mean, low, high, env_steps, tokens), its
    intervals clipped to [0, 1] (``limits=RATE_LIMITS``, as the report computes them).
    """
    name = "evaluation_curves"
    skip = check_frame(curves, ["backbone", "env_label", "method", "label", "step", "mean", "low",
                             "high"], name)
    if skip:
        return skip
    axes_used = [a for a in axes_order if a in curves.columns and curves[a].notna().any()]
    strata = sorted(set(zip(curves["backbone"], curves["env_label"])))
    data = curves.assign(rank=[(method_rank(m), lab) for m, lab in
                               zip(curves["method"], curves["label"])],
                         # the caption's promise, whoever computed the curves
                         low=curves["low"].clip(*RATE_LIMITS), high=curves["high"].clip(*RATE_LIMITS))
    labels = ordered_labels(data)
    style = styles(labels)
    fig, axes = panel_grid(len(strata) * len(axes_used), ncols=len(axes_used))
    for i, (backbone, env) in enumerate(strata):
        part = data[(data["backbone"] == backbone) & (data["env_label"] == env)]
        n = part.groupby("label")["n"].max()
        for j, axis in enumerate(axes_used):
            ax = axes[i * len(axes_used) + j]
            for label in labels:
                if (part["label"] == label).any():
                    draw_bands(ax, part[part["label"] == label], axis, style[label], label)
            ax.set_xlabel(AXIS_LABELS.get(axis, axis))
            ax.set_ylabel(ylabel)
            seeds = f"{n.min()}" if n.min() == n.max() else f"{n.min()}–{n.max()}"
            ax.set_title(f"{where_label(backbone, env)} (n = {seeds} seeds)", fontsize=8)
            if axis != "step":
                ax.ticklabel_format(axis="x", style="sci", scilimits=(0, 3))
    legend_outside(fig, axes)
    fig.suptitle("Evaluation on the fixed panels: mean over seeds, 95% t interval clipped to "
                 "[0, 1]", fontsize=10)
    return save(fig, stem)


def performance_profiles(profiles: pd.DataFrame | Skipped | None,
                         stem: str | Path) -> list[Path] | Skipped:
    """rliable performance profiles: fraction of (seed, task) scores above tau, one panel
    per backbone, one line per table row with its 95% stratified bootstrap band.

    ``profiles``: backbone, method, variant, tau, fraction, low, high
    (:func:`analysis.aggregate.row_aggregates`)."""
    name = "performance_profiles"
    skip = check_frame(profiles, ["backbone", "method", "variant", "tau", "fraction", "low",
                               "high"], name)
    if skip:
        return skip
    data = profiles.assign(label=[variant_label(m, v) for m, v in
                                  zip(profiles["method"], profiles["variant"])],
                           step=profiles["tau"], mean=profiles["fraction"])
    data["rank"] = [(method_rank(m), lab) for m, lab in zip(data["method"], data["label"])]
    labels = ordered_labels(data)
    style = styles(labels)
    backbones = sorted(data["backbone"].unique())
    fig, axes = panel_grid(len(backbones), ncols=2)
    for ax, backbone in zip(axes, backbones):
        part = data[data["backbone"] == backbone]
        for label in labels:
            if (part["label"] == label).any():
                draw_bands(ax, part[part["label"] == label], "tau", style[label], label)
        ax.set_xlabel("score threshold τ")
        ax.set_ylabel("fraction of runs with score > τ")
        ax.set_title(str(backbone).rpartition("/")[2] or "all", fontsize=8)
    legend_outside(fig, axes)
    fig.suptitle("Performance profiles across tasks (95% stratified bootstrap band)",
                 fontsize=10)
    return save(fig, stem)
