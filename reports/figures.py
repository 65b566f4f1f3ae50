"""Paper-style figures (matplotlib, Agg, no pyplot state): each function takes analysis frames
and an output path stem, writes ``<stem>.png`` and ``<stem>.pdf`` and returns both paths, or
returns the :class:`~analysis.diagnostics.Skipped` it was given / that explains what is missing.

* :func:`training_curves` -- per method, the mean over seeds of a training metric at each
  step with a 95% percentile-bootstrap band of that mean (ETRO Fig. 3, SEED Fig. 8).
* :func:`gate_sensitivity` -- final metric vs beta_opd (or lambda_opd) with bootstrap CI
  error bars (SEED review, critique 4).
* :func:`gate_curves` -- the measured gate g by region (from the per-turn records), final
  success against beta_opd when a study varies it, and g = sigmoid(beta * Delta) at the
  study's betas with the measured Delta range (SEED Eq. 1).
* :func:`regional_alignment` -- Spearman rho of delta_pos / delta_neg with GiGPO step
  advantages per region (prefix / error / suffix) with cluster-bootstrap CIs (ETRO Fig. 1).
* :func:`compute_cost` -- stacked wall time per phase per method, overhead vs GRPO.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from pathlib import Path

import matplotlib
import matplotlib.patches
import matplotlib.ticker
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.curves import RATE_LIMITS, bands, rate_limits
from analysis.diagnostics import (
    ALL_REGIONS,
    GATE_REGIONS,
    PHASES,
    POLARITIES,
    REGIONS,
    GateFrames,
    Skipped,
)
from analysis.stats import bootstrap_ci
from reports.layouts import METHOD_LABELS, PARAM_SYMBOLS

CURVE_KEYS = ("train/success", "train/episode_length", "train/entropy")
HISTORY_COLUMNS = ("run_id", "method", "key", "step", "value")
POLARITY_LABELS = {"delta_pos": "Δ+ (positive skill)", "delta_neg": "Δ− (negative skill)"}
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
    ncols = max(1, min(ncols, n))
    nrows = -(-n // ncols)
    # Extra width on the right holds the legend outside the data (and a one-panel title).
    fig = Figure(figsize=(_PANEL[0] * ncols + 2.2, _PANEL[1] * nrows + 0.4),
                 layout="constrained")
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
    """Display name of a method or of a variant ("seed (β=1)" -> "SEED (β=1)")."""
    from reports.layouts import variant_label

    base = str(method).split(" (")[0].split(" [")[0]
    return variant_label(base, str(method)) if base != method else METHOD_LABELS.get(method, method)


# ---------------------------------------------------------------- styles

_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")


def styles(labels: Sequence[str]) -> dict[str, dict]:
    """A colour and marker per label, distinct for up to 20 labels (tab20 colours, each
    with its own marker), in the given (table) order, so a method looks the same in every
    figure that lists the same labels."""
    colors = matplotlib.colormaps["tab20"].colors
    ordered = list(dict.fromkeys(labels))
    return {label: {"color": colors[(2 * i) % 20 + (2 * i) // 20 % 2],
                    "marker": _MARKERS[i % len(_MARKERS)]}
            for i, label in enumerate(ordered)}


def method_rank(method: str) -> int:
    """Table order: methods in the order the paper layouts list them, others after."""
    order = _method_order()
    return order.get(method, len(order))


@functools.cache
def _method_order() -> dict[str, int]:
    from reports.layouts import LAYOUTS

    order = dict.fromkeys(m for layout in LAYOUTS.values() for m in layout.methods)
    return {m: i for i, m in enumerate(order)}


def _legend_outside(fig: Figure, axes) -> None:
    handles: dict = {}
    for ax in np.ravel(axes):
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    if handles:
        fig.legend(list(handles.values()), list(handles), loc="outside right upper", fontsize=7)


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


CURVE_LABELS = {"train/success": "training success rate", "train/score": "training score",
                "train/episode_length": "episode length (turns)",
                "train/entropy": "policy entropy (nats / token)"}
AXIS_LABELS = {"step": "training step", "env_steps": "environment steps",
               "tokens": "generated tokens"}


def _curve_frame(histories: pd.DataFrame) -> pd.DataFrame:
    """histories with the panel and line columns a curve figure needs (defaults when the
    report did not join them): backbone, env_label, label (display row name), seed."""
    data = histories.copy()
    if "env_label" not in data.columns:
        data["env_label"] = data["env"] if "env" in data.columns else "all envs"
    if "backbone" not in data.columns:
        data["backbone"] = ""
    if "seed" not in data.columns:
        data["seed"] = data["run_id"]
    if "label" not in data.columns:
        from reports.layouts import variant_label

        variant = data["variant"] if "variant" in data.columns else data["method"]
        data["label"] = _per_pair(data["method"], variant, variant_label)
    data["rank"] = _per_pair(data["method"], data["label"], lambda m, lab: (method_rank(m), lab))
    return data


def _per_pair(a: pd.Series, b: pd.Series, fn) -> list:
    """``[fn(x, y) for x, y in zip(a, b)]``, calling ``fn`` once per distinct pair (a
    history has a row per run, key and step but only a few distinct pairs)."""
    done: dict = {}
    return [done[p] if p in done else done.setdefault(p, fn(*p)) for p in zip(a, b)]


def _ordered_labels(data: pd.DataFrame) -> list[str]:
    """Labels in table order: method rank, then the label with its numbers compared as
    numbers ("β=1" < "β=5" < "β=20")."""
    return [lab for _, lab in sorted(set(data["rank"]), key=lambda r: (r[0], _natural(r[1])))]


def _natural(text: str) -> tuple:
    parts = re.split(r"(\d+(?:\.\d+)?(?:e[-+]?\d+)?)", str(text))
    return tuple((1, float(p), "") if i % 2 else (0, 0.0, p) for i, p in enumerate(parts))


def _draw_bands(ax, band: pd.DataFrame, x: str, style: dict, label: str) -> None:
    band = band.dropna(subset=[x, "mean"]).sort_values(x)
    ax.plot(band[x], band["mean"], label=label, color=style["color"], marker=style["marker"],
            markersize=3, linewidth=1.2)
    ax.fill_between(band[x], band["low"], band["high"], alpha=0.15, color=style["color"],
                    linewidth=0)


def training_curves(histories: pd.DataFrame | None, stem: str | Path, *,
                    keys: Sequence[str] = CURVE_KEYS, n_boot: int = 1000,
                    seed: int = 0) -> list[Path] | Skipped:
    """One panel per (backbone, env, key) with data, one line per row of the tables (a
    cell: method and its swept params) with its band: mean over seeds, 95% t interval
    (a success rate's clipped to [0, 1], :func:`analysis.curves.rate_limits`).

    ``histories``: long frame ``run_id, method, key, step, value``, optionally ``env`` /
    ``env_label``, ``backbone``, ``variant`` and ``seed`` (a report joins them from the
    prepared runs; without ``seed`` each run counts as one seed).
    """
    name = "training_curves"
    skip = _missing(histories, HISTORY_COLUMNS, name)
    if skip:
        return skip
    data = _curve_frame(histories[histories["key"].isin(keys)])
    panels = [(b, e, k) for (b, e) in sorted(set(zip(data["backbone"], data["env_label"])))
              for k in keys if ((data["backbone"] == b) & (data["env_label"] == e)
                                & (data["key"] == k)).any()]
    if not panels:
        return Skipped(name, f"histories have none of the keys {list(keys)}")
    labels = _ordered_labels(data)
    style = styles(labels)
    fig, axes = _panels(len(panels), ncols=len({k for _, _, k in panels}))
    for ax, (backbone, env, key) in zip(axes, panels):
        part = data[(data["backbone"] == backbone) & (data["env_label"] == env)
                    & (data["key"] == key)]
        band = bands(part, ["label"], limits=rate_limits(key))
        for label in labels:
            if (band["label"] == label).any():
                _draw_bands(ax, band[band["label"] == label], "step", style[label], label)
        n = part.groupby("label")["seed"].nunique()
        seeds = f"{n.min()}" if n.min() == n.max() else f"{n.min()}–{n.max()}"
        ax.set_title(f"{_where(backbone, env)} (n = {seeds} seeds)", fontsize=8)
        ax.set_xlabel(AXIS_LABELS["step"])
        ax.set_ylabel(CURVE_LABELS.get(key, key))
    _legend_outside(fig, axes)
    clipped = " (success rates: clipped to [0, 1])" if any(rate_limits(k) for _, _, k in panels) \
        else ""
    fig.suptitle(f"Training curves: mean over seeds, 95% t interval{clipped}", fontsize=10)
    return _save(fig, stem)


def _where(backbone: str, env: str) -> str:
    short = str(backbone).rpartition("/")[2]
    return f"{env} · {short}" if short else str(env)


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
    skip = _missing(curves, ["backbone", "env_label", "method", "label", "step", "mean", "low",
                             "high"], name)
    if skip:
        return skip
    axes_used = [a for a in axes_order if a in curves.columns and curves[a].notna().any()]
    strata = sorted(set(zip(curves["backbone"], curves["env_label"])))
    data = curves.assign(rank=[(method_rank(m), lab) for m, lab in
                               zip(curves["method"], curves["label"])],
                         # the caption's promise, whoever computed the curves
                         low=curves["low"].clip(*RATE_LIMITS), high=curves["high"].clip(*RATE_LIMITS))
    labels = _ordered_labels(data)
    style = styles(labels)
    fig, axes = _panels(len(strata) * len(axes_used), ncols=len(axes_used))
    for i, (backbone, env) in enumerate(strata):
        part = data[(data["backbone"] == backbone) & (data["env_label"] == env)]
        n = part.groupby("label")["n"].max()
        for j, axis in enumerate(axes_used):
            ax = axes[i * len(axes_used) + j]
            for label in labels:
                if (part["label"] == label).any():
                    _draw_bands(ax, part[part["label"] == label], axis, style[label], label)
            ax.set_xlabel(AXIS_LABELS.get(axis, axis))
            ax.set_ylabel(ylabel)
            seeds = f"{n.min()}" if n.min() == n.max() else f"{n.min()}–{n.max()}"
            ax.set_title(f"{_where(backbone, env)} (n = {seeds} seeds)", fontsize=8)
            if axis != "step":
                ax.ticklabel_format(axis="x", style="sci", scilimits=(0, 3))
    _legend_outside(fig, axes)
    fig.suptitle("Evaluation on the fixed panels: mean over seeds, 95% t interval clipped to "
                 "[0, 1]", fontsize=10)
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
    skip = _missing(gates.formula, ["delta", "beta", "gate"], name)
    if skip:
        return skip
    measured = None if isinstance(gates.by_region, Skipped) else gates.by_region
    vs_beta = None if isinstance(gates.vs_beta, Skipped) else gates.vs_beta
    envs = sorted(vs_beta["env"].unique()) if vs_beta is not None else []
    fig, axes = _panels((measured is not None) + len(envs) + 1, ncols=4)
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
    return _save(fig, stem)


def _gate_boxes(ax, measured: pd.DataFrame) -> None:
    """Boxes of the measured g per region (x) and table row (colour), from the quantiles."""
    data = measured[measured["quantity"] == "gate_mean"]
    data = data.assign(label=_per_pair(data["method"], data["variant"], lambda m, v: _label(v)),
                       rank=_per_pair(data["method"], data["variant"],
                                      lambda m, v: (method_rank(m), _label(v))))
    labels = _ordered_labels(data)
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
    _legend_below(ax, handles)


def _beta_panel(ax, part: pd.DataFrame, env: str) -> None:
    """Final success against beta_opd per method, 95% bootstrap CI bars."""
    param = "algo.beta_opd"
    for method, rows in part.groupby("method", sort=False):
        rows = rows.sort_values(param)
        err = np.vstack([rows["mean"] - rows["ci_low"], rows["ci_high"] - rows["mean"]])
        ax.errorbar(rows[param], rows["mean"], yerr=_yerr(err), marker="o", capsize=3,
                    label=f"{_label(method)} (n = {rows['n'].min()}–{rows['n'].max()} seeds)"
                    if rows["n"].min() != rows["n"].max() else
                    f"{_label(method)} (n = {rows['n'].min()} seeds)")
    if (part[param] > 0).all():
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("β (algo.beta_opd)")
    ax.set_ylabel("final success rate")
    ax.set_title(f"{env}: success vs β (95% bootstrap CI)", fontsize=8)
    _legend_below(ax)


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
    _legend_below(ax)


def _legend_below(ax, handles=None) -> None:
    """The panel's legend under its x axis (outside the data)."""
    handles = handles if handles is not None else ax.get_legend_handles_labels()[0]
    ax.legend(handles=handles, fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.22),
              ncol=min(3, max(1, len(handles))), frameon=False)


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
                   label=POLARITY_LABELS.get(polarity, polarity))
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
        order = sorted(table.index, key=lambda m: (method_rank(str(m).split(" (")[0]), str(m)),
                       reverse=True)  # barh draws bottom-up: first method on top
        table = table.loc[order]
        left = np.zeros(len(table))
        for phase in phases:
            seconds = table[phase].fillna(0.0).to_numpy() if phase in table else 0.0 * left
            ax.barh([_label(m) for m in table.index], seconds, left=left,
                    color=phase_colors[phase], label=phase if ax is axes[0] else None)
            left += seconds
        totals = part[part["phase"] == "total"].set_index("method")
        for y, (method, end) in enumerate(zip(table.index, left)):
            ratio = totals["overhead"].get(method, np.nan)
            if "ci_low" in totals.columns and np.isfinite(totals["ci_low"].get(method, np.nan)):
                err = _yerr([[end - totals.at[method, "ci_low"]],
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
    return _save(fig, stem)


# ---------------------------------------------------------------- sensitivity


def sensitivity(s, stem: str | Path, *, metric_label: str = "final success rate",
                param_labels: dict | None = None) -> list[Path] | Skipped:
    """A method's sensitivity study (:class:`analysis.sensitivity.Sensitivity`) as its
    kind asks: ``curve`` (metric vs the one param, 95% t interval bars), ``heatmap`` (cell
    means over a two-param grid, each annotated with mean and interval half-width) or
    ``search`` (a slice per param with interval bars, and a contour of the means per pair
    of params with the cells as points). One row of panels per (backbone, env)."""
    from analysis.sensitivity import log_scale

    cells = s.cells
    if cells.empty:
        return Skipped(f"sensitivity[{s.method}]", "no cell has a value")
    names = {**PARAM_SYMBOLS, **(param_labels or {})}
    strata = sorted(set(zip(cells["backbone"], cells["env_label"])))
    pairs = [(a, b) for i, a in enumerate(s.params) for b in s.params[i + 1:]]
    per_row = {"curve": 1, "heatmap": 1, "search": len(s.params) + len(pairs)}[s.kind]
    fig, axes = _panels(len(strata) * per_row, ncols=per_row)
    for i, (backbone, env) in enumerate(strata):
        part = cells[(cells["backbone"] == backbone) & (cells["env_label"] == env)]
        row = axes[i * per_row:(i + 1) * per_row]
        where = f"{_where(backbone, env)} (n = {part['n'].min()}–{part['n'].max()} seeds)" \
            if part["n"].min() != part["n"].max() else \
            f"{_where(backbone, env)} (n = {part['n'].min()} seeds)"
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
    fig.suptitle(f"{_label(s.method)}: {metric_label} vs "
                 f"{', '.join(names.get(p, p) for p in s.params)} ({kind})", fontsize=9)
    return _save(fig, stem)


def _slice(ax, part, param, names, metric_label, log) -> None:
    part = part.sort_values(param)
    err = np.vstack([part["mean"] - part["ci_low"], part["ci_high"] - part["mean"]])
    ax.errorbar(part[param], part["mean"], yerr=_yerr(err), marker="o", capsize=3,
                linestyle="-" if part[param].is_unique else "none", color="tab:blue")
    if log:
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel(names.get(param, param))
    ax.set_ylabel(metric_label)


def _heatmap(ax, part, a, b, names, metric_label) -> None:
    from reports.layouts import format_value

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
    from analysis.sensitivity import log_scale

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


# ---------------------------------------------------------------- performance profiles


def performance_profiles(profiles: pd.DataFrame | Skipped | None,
                         stem: str | Path) -> list[Path] | Skipped:
    """rliable performance profiles: fraction of (seed, task) scores above tau, one panel
    per backbone, one line per table row with its 95% stratified bootstrap band.

    ``profiles``: backbone, method, variant, tau, fraction, low, high
    (:func:`reports.diagnostic_tables.aggregate_frames`)."""
    name = "performance_profiles"
    skip = _missing(profiles, ["backbone", "method", "variant", "tau", "fraction", "low",
                               "high"], name)
    if skip:
        return skip
    from reports.layouts import variant_label

    data = profiles.assign(label=[variant_label(m, v) for m, v in
                                  zip(profiles["method"], profiles["variant"])],
                           step=profiles["tau"], mean=profiles["fraction"])
    data["rank"] = [(method_rank(m), lab) for m, lab in zip(data["method"], data["label"])]
    labels = _ordered_labels(data)
    style = styles(labels)
    backbones = sorted(data["backbone"].unique())
    fig, axes = _panels(len(backbones), ncols=2)
    for ax, backbone in zip(axes, backbones):
        part = data[data["backbone"] == backbone]
        for label in labels:
            if (part["label"] == label).any():
                _draw_bands(ax, part[part["label"] == label], "tau", style[label], label)
        ax.set_xlabel("score threshold τ")
        ax.set_ylabel("fraction of runs with score > τ")
        ax.set_title(str(backbone).rpartition("/")[2] or "all", fontsize=8)
    _legend_outside(fig, axes)
    fig.suptitle("Performance profiles across tasks (95% stratified bootstrap band)",
                 fontsize=10)
    return _save(fig, stem)
