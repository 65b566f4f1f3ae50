"""``hindsight power STUDY``: before launch, how many seeds each of the study's comparisons
needs, from a pilot's seed-to-seed spread (:mod:`analysis.power` computes; this module finds
the pilot's runs, pairs them with the study's cells and prints the table)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pandas as pd

from analysis.loader import load_runs
from analysis.power import POWER, SD_CONFIDENCE, comparison_power
from sweeps.cli.errors import CommandError
from sweeps.seeds import POINTS
from sweeps.sequential import cell_labels, comparisons, held_out_metric
from sweeps.status import store_exists
from sweeps.study import Study, load_study
from sweeps.trials import expand
from trainer.config import ConfigError

STUDY_SUFFIXES = (".yaml", ".yml")


def power_command(args: argparse.Namespace) -> int:
    """Print, per comparison of the study with its baseline, the pilot's SD of paired
    differences, the seeds needed to find ``--effect`` and the minimum detectable effect."""
    study = load_study(args.study, out=args.out)
    if study.search is not None:
        raise ConfigError(f"{args.study}: a search study has no fixed comparisons; "
                          "hindsight power plans grid studies")
    if args.effect is not None and not (math.isfinite(args.effect) and args.effect > 0):
        raise ConfigError(f"--effect: {args.effect!r}; valid: points > 0")
    if not 0.0 < args.alpha < 1.0:
        raise ConfigError(f"--alpha: {args.alpha!r}; valid: a number strictly between 0 and 1")
    plan = study.seeds_plan
    baseline = args.baseline or (plan.baseline if plan is not None else "grpo")
    effect = args.effect if args.effect is not None else (plan.effect if plan else None)
    pairs = comparisons(study, baseline)
    uri, name = pilot_source(study, args.pilot, args.out)
    runs = _finished(uri, name)
    metric = args.metric or (plan.metric if plan is not None and plan.metric else "") \
        or held_out_metric(runs.columns)
    if metric is None or metric not in runs.columns:
        raise ConfigError(f"--metric: {metric!r} is not logged by the pilot's runs; valid: "
                          f"{', '.join(sorted(c for c in runs.columns if c.startswith('eval/')))}")
    values = pilot_values(study, runs, metric)
    alpha = args.alpha
    table = comparison_power(values, pairs, alpha=alpha,
                             effect=None if effect is None else effect / POINTS)
    print(header(study, name, uri, metric, effect, alpha, len(pairs)))
    print(format_table(table, cell_labels(study), effect is not None))
    return 0


def pilot_source(study: Study, pilot: str | None, out: str | None) -> tuple[str, str]:
    """(tracking URI, study name) of the pilot: the study's own store, another study file,
    or a store URI holding runs of a study with the same name."""
    if not pilot:
        return study.store_uri, study.name
    path = Path(pilot).expanduser()
    if path.suffix in STUDY_SUFFIXES:
        if not path.is_file():
            raise ConfigError(f"--pilot: {pilot!r} does not exist; valid: a study file or a "
                              f"tracking URI")
        other = load_study(path)
        return other.store_uri, other.name
    if "://" not in pilot and not path.is_file():
        raise ConfigError(f"--pilot: {pilot!r} is neither a study file nor a tracking URI "
                          f"(sqlite:///path/mlruns.db, http://host:port, postgresql://...)")
    return (pilot if "://" in pilot else f"sqlite:///{path.resolve()}"), study.name


def _finished(uri: str, name: str) -> pd.DataFrame:
    if not store_exists(uri):
        raise CommandError(f"--pilot: no runs of study {name!r} yet: {uri} does not exist; "
                           f"launch a pilot (`hindsight sweep`) or name one with --pilot")
    try:
        runs = load_runs(uri, name)
    except ValueError as exc:
        raise CommandError(f"--pilot: {exc}") from None
    runs = runs[runs["status"] == "FINISHED"]
    if runs.empty:
        raise CommandError(f"--pilot: study {name!r} in {uri} has no finished runs yet")
    return runs


def pilot_values(study: Study, runs: pd.DataFrame, metric: str) -> dict[str, dict[int, float]]:
    """Study cell id -> {seed: metric} from the pilot's runs: the pilot cell with the same
    id, else the pilot's only cell of the same method (a pilot of fewer steps or a smaller
    panel, say); a cell with neither gets nothing."""
    per_seed = runs.dropna(subset=[metric]).groupby(["cell_id", "seed"])[metric].mean()
    by_cell: dict[str, dict[int, float]] = {}
    for (cid, seed), value in per_seed.items():
        by_cell.setdefault(str(cid), {})[int(seed)] = float(value)
    method_cells = runs.groupby("method")["cell_id"].unique()
    out = {}
    for trial in expand(study):
        if trial.cell_id in out:
            continue
        method = trial.cfg.algo.method
        if trial.cell_id in by_cell:
            out[trial.cell_id] = by_cell[trial.cell_id]
        elif method in method_cells.index and len(method_cells[method]) == 1:
            out[trial.cell_id] = by_cell.get(str(method_cells[method][0]), {})
    return out


def header(study: Study, name: str, uri: str, metric: str, effect: float | None, alpha: float,
           m: int) -> str:
    source = "its own runs" if name == study.name and uri == study.store_uri else \
        f"the runs of {name} in {uri}"
    target = f"{effect:g} points" if effect is not None else "no effect given (--effect POINTS)"
    return (f"study {study.name}: {m} comparison{'s' if m != 1 else ''} with the baseline, "
            f"paired by seed, on {metric} (points = the metric x {POINTS:g}); pilot: {source}.\n"
            f"Each comparison at Holm's first step, alpha {alpha:g} / {m} = {alpha / max(m, 1):.3g} "
            f"(paired t, noncentral t power {POWER:g}); effect to detect: {target}; "
            f"SD upper limit: one-sided {SD_CONFIDENCE:.0%} (chi-square).")


def format_table(table: pd.DataFrame, names: dict[str, str], with_effect: bool) -> str:
    """The printed table: one line per comparison."""
    head = ["comparison", "n pilot", "mean diff", "SD", "SD upper", "MDE at n"]
    if with_effect:
        head += ["seeds (SD)", "seeds (SD upper)"]
    rows = [head]
    for _, r in table.iterrows():
        row = [f"{names.get(r['cell'], r['cell'])} vs {names.get(r['baseline'], r['baseline'])}",
               str(int(r["n_paired"])), _pts(r["mean_diff"], signed=True), _pts(r["sd"]),
               _pts(r["sd_upper"]), _pts(r["mde"])]
        if with_effect:
            row += [_count(r["seeds_needed"]), _count(r["seeds_needed_upper"])]
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in
                       enumerate(zip(row, widths))) for row in rows]
    return "\n".join([lines[0], "  ".join("-" * w for w in widths), *lines[1:]])


def _pts(value: float, signed: bool = False) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value * POINTS:+.2f}" if signed else f"{value * POINTS:.2f}"


def _count(value) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return str(int(value))
