"""What every figure of a report shares: saving, panel grids, input checks, error bars,
legends outside the data, table-row labels in table order, and axis scales."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.diagnostics import Skipped
from reports.style import method_rank, table_order, variant_label

PANEL = (4.2, 3.2)  # inches per panel


def save(fig: Figure, stem: str | Path) -> list[Path]:
    """Write ``stem``.png (150 dpi) and ``stem``.pdf; return [png, pdf]."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    png, pdf = stem.with_suffix(".png"), stem.with_suffix(".pdf")
    fig.savefig(png, dpi=150)
    fig.savefig(pdf, metadata={"CreationDate": None})
    return [png, pdf]


def panel_grid(n: int, ncols: int = 3) -> tuple[Figure, np.ndarray]:
    """A figure with ``n`` visible panels, ``ncols`` to a row, room for a legend outside."""
    ncols = max(1, min(ncols, n))
    nrows = -(-n // ncols)
    # Extra width on the right holds the legend outside the data (and a one-panel title).
    fig = Figure(figsize=(PANEL[0] * ncols + 2.2, PANEL[1] * nrows + 0.4),
                 layout="constrained")
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False).ravel())
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]


def check_frame(frame, columns: Sequence[str], name: str) -> Skipped | None:
    """The Skipped that says why ``frame`` cannot be drawn (given as a Skipped, not given,
    empty, lacking ``columns``), else None."""
    if isinstance(frame, Skipped):
        return frame
    if frame is None:
        return Skipped(name, "its input frame was not given")
    if len(frame) == 0:
        return Skipped(name, "no rows in the input frame")
    lacking = [c for c in columns if c not in frame.columns]
    return Skipped(name, f"input lacks columns {lacking}") if lacking else None


def yerr(err: np.ndarray) -> np.ndarray:
    """Error-bar lengths [2, n] from (mean - low, high - mean): NaN -> 0, and clipped at 0
    because a percentile bootstrap interval need not contain the point estimate."""
    return np.clip(np.nan_to_num(np.asarray(err, dtype=float)), 0.0, None)


def legend_outside(fig: Figure, axes) -> None:
    """One legend for all ``axes`` (each label once), outside the data on the right."""
    handles: dict = {}
    for ax in np.ravel(axes):
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    if handles:
        fig.legend(list(handles.values()), list(handles), loc="outside right upper", fontsize=7)


def labelled(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (columns method, variant) with each row's display ``label`` and its
    ``rank`` (method rank, label) for the table order."""
    data = frame.assign(label=per_pair(frame["method"], frame["variant"], variant_label))
    data["rank"] = per_pair(data["method"], data["label"], lambda m, lab: (method_rank(m), lab))
    return data


def per_pair(a: pd.Series, b: pd.Series, fn) -> list:
    """``[fn(x, y) for x, y in zip(a, b)]``, calling ``fn`` once per distinct pair (a
    history has a row per run, key and step but only a few distinct pairs)."""
    done: dict = {}
    return [done[p] if p in done else done.setdefault(p, fn(*p)) for p in zip(a, b)]


def ordered_labels(data: pd.DataFrame) -> list[str]:
    """The ``label`` values in table order (:func:`reports.style.table_order` of ``rank``)."""
    return table_order(data["rank"])


def draw_bands(ax, band: pd.DataFrame, x: str, style: dict, label: str) -> None:
    """One line (``mean`` against ``x``) with its shaded ``low``-``high`` band."""
    band = band.dropna(subset=[x, "mean"]).sort_values(x)
    ax.plot(band[x], band["mean"], label=label, color=style["color"], marker=style["marker"],
            markersize=3, linewidth=1.2)
    ax.fill_between(band[x], band["low"], band["high"], alpha=0.15, color=style["color"],
                    linewidth=0)


def where_label(backbone: str, env: str) -> str:
    """A panel's place: "<env> · <backbone's short name>"."""
    short = str(backbone).rpartition("/")[2]
    return f"{env} · {short}" if short else str(env)


def legend_below(ax, handles=None) -> None:
    """The panel's legend under its x axis (outside the data)."""
    handles = handles if handles is not None else ax.get_legend_handles_labels()[0]
    ax.legend(handles=handles, fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.22),
              ncol=min(3, max(1, len(handles))), frameon=False)


def log_scale(values: Sequence[float]) -> bool:
    """Whether an axis over ``values`` reads better logarithmic (all > 0, span >= 10x)."""
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    return bool(x.size and (x > 0).all() and x.max() / x.min() >= 10.0)
