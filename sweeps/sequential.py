"""The rounds of a grid with a ``seeds:`` plan (:mod:`sweeps.seeds`): which (cell, seed) pairs
the plan calls for now, from what the study's store holds.

Each round the sweep reads its finished child runs, gives each cell's values by seed to
:func:`analysis.sequential.plan_round` (the rule: it decides, this module only asks) and
launches the pairs its targets add: the first ``k`` seeds of ``study.seeds`` for a cell
with target ``k``. A relaunch reads the same store and so resumes the same plan; the
parent run records the plan (tag :data:`PLAN_TAG`, and a relaunch with another plan is
refused), the rule (:data:`RULE_TAG`) and after every round each cell's n and decision
(:data:`CELLS_TAG`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace

from mlflow.entities import Run
from mlflow.tracking import MlflowClient

from analysis.sequential import Round, describe_rule, plan_round
from sweeps.seeds import POINTS, SPLITS
from sweeps.study import Study, describe_overrides, distinguishing
from sweeps.trials import Trial, expand, make_trial
from trainer.config import ConfigError
from trainer.run.store import with_retry

PLAN_TAG = "hindsight.seeds.plan"
RULE_TAG = "hindsight.seeds.rule"
CELLS_TAG = "hindsight.seeds.cells"
Key = tuple[str, int]


def comparisons(study: Study, baseline: str | None = None) -> dict[str, str]:
    """Compared cell id -> its baseline cell id: the cell with the same grid values but
    ``algo.method`` ``baseline`` (default: the plan's)."""
    baseline = baseline or _spec(study).baseline
    cells = {t.cell_id: t for t in expand(study) if t.seed == study.seeds[0]}
    methods = sorted({t.cfg.algo.method for t in cells.values()})
    if baseline not in methods:
        raise ConfigError(f"baseline: {baseline!r} is not a method of study {study.name}; "
                          f"valid: {', '.join(methods)}")
    out = {}
    for cid, trial in cells.items():
        if trial.cfg.algo.method == baseline:
            continue
        base = make_trial(study, {**dict(trial.overrides), "algo.method": baseline},
                          study.seeds[0]).cell_id
        if base not in cells:
            raise ConfigError(f"baseline: the cell {trial.describe()} has no {baseline} cell "
                              f"with the same grid values to be compared with")
        out[cid] = base
    return out


def cell_labels(study: Study) -> dict[str, str]:
    """Cell id -> the grid values that set it apart (``algo.method=seed``)."""
    cells = {t.cell_id: dict(t.overrides) for t in expand(study)}
    return {cid: describe_overrides(d) or cid
            for cid, d in zip(cells, distinguishing(list(cells.values())))}


def held_out_metric(names) -> str | None:
    """The held-out panel's success among logged metric ``names`` (:data:`SPLITS` first,
    then any other ``eval/<split>/success`` but train's), None when none is logged."""
    names = set(names)
    for split in SPLITS:
        if f"eval/{split}/success" in names:
            return f"eval/{split}/success"
    rest = sorted(n for n in names if n.startswith("eval/") and n.endswith("/success")
                  and n.count("/") == 2 and n != "eval/train/success")
    return rest[0] if rest else None


def study_metric(study: Study, children: Mapping[Key, list[Run]]) -> str | None:
    """The plan's metric, or the held-out success its finished runs logged."""
    spec = _spec(study)
    if spec.metric:
        return spec.metric
    names = {k for runs in children.values() for r in runs if r.info.status == "FINISHED"
             for k in r.data.metrics}
    return held_out_metric(names)


def cell_values(children: Mapping[Key, list[Run]], metric: str | None) -> dict[str, dict[int, float]]:
    """cell id -> {seed: ``metric`` of the pair's FINISHED run} (pairs without one left out)."""
    out: dict[str, dict[int, float]] = {}
    for (cid, seed), runs in children.items():
        done = [r for r in runs if r.info.status == "FINISHED" and metric in r.data.metrics]
        if done:
            out.setdefault(cid, {})[seed] = float(done[0].data.metrics[metric])
    return out


def current_round(study: Study, children: Mapping[Key, list[Run]]) -> Round:
    """The rule's round (:func:`analysis.sequential.plan_round`) on the store's runs."""
    values = cell_values(children, study_metric(study, children))
    return plan_round(values, comparisons(study), _spec(study).plan, study.seeds)


def round_trials(study: Study, children: Mapping[Key, list[Run]]) -> list[Trial]:
    """The (cell, seed) trials the plan calls for so far, in grid order: each cell's first
    ``target`` seeds."""
    targets = current_round(study, children).targets
    seeds = study.seeds
    return [t for t in expand(study) if t.seed in seeds[: targets.get(t.cell_id, 0)]]


def record_plan(client: MlflowClient, parent_id: str, study: Study) -> None:
    """Record the plan and its rule on the parent run; a relaunch with another plan than
    the one recorded is refused (its looks would not be the ones the spending was for)."""
    spec = _spec(study)
    tags = with_retry(client.get_run, parent_id).data.tags
    recorded = tags.get(PLAN_TAG)
    if recorded is not None and recorded != spec.record():
        raise ConfigError(f"seeds: the study's parent run {parent_id} recorded the plan {recorded}; "
                          f"the file now says {spec.record()}; a relaunch resumes the recorded "
                          f"plan: restore it, or give the study another name")
    with_retry(client.set_tag, parent_id, PLAN_TAG, spec.record())
    with_retry(client.set_tag, parent_id, RULE_TAG, rule_text(study))


def record_round(client: MlflowClient, parent_id: str, study: Study,
                 children: Mapping[Key, list[Run]]) -> Round:
    """Record each cell's seeds and decision on the parent run (tag :data:`CELLS_TAG`, JSON:
    cell id -> n, state, interval in points) and return the round."""
    step = current_round(study, children)
    counts = {c: len(v) for c, v in cell_values(children, study_metric(study, children)).items()}
    cells = {c: {"n": counts.get(c, 0)} for c in step.targets}
    for cid, look in step.looks.items():
        cells[cid].update(state=look.state, final=look.final, n_paired=look.n,
                          low=_points(look.low), high=_points(look.high))
    with_retry(client.set_tag, parent_id, CELLS_TAG, json.dumps(cells, sort_keys=True))
    return step


def rule_text(study: Study) -> str:
    """The rule as the report and the parent run state it (the effect in points)."""
    spec = _spec(study)
    return describe_rule(replace(spec.plan, effect=spec.effect), len(comparisons(study)),
                         " points")


def _points(value: float) -> float | None:
    return None if value != value else round(value * POINTS, 3)  # NaN -> None


def _spec(study: Study):
    if study.seeds_plan is None:
        raise ValueError(f"study {study.name!r} has no seeds: plan")
    return study.seeds_plan
