"""The sweep's rounds: a grid launches its trials once; a grid with a ``seeds:`` plan launches
the pairs its plan calls for, then, round by round, those the next look adds
(:mod:`sweeps.sequential` asks :mod:`analysis.sequential`), until a round adds none."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from mlflow.tracking import MlflowClient

from sweeps import sequential
from sweeps.status import study_children
from sweeps.study import Study
from sweeps.trial_runs import Plan, plan_trials
from sweeps.trials import Trial, expand


def first_trials(study: Study) -> list[Trial]:
    """A grid's trials, or those its ``seeds:`` plan calls for now (a relaunch: the same
    plan, resumed from the store)."""
    if study.seeds_plan is None:
        return expand(study)
    return sequential.round_trials(study, study_children(study))


def launches(study: Study, plan: Plan, client: MlflowClient, parent_id: str,
             echo: Callable[[str], None]) -> Iterator[Plan]:
    """The plans to launch in turn: a grid's ``plan`` when it launches anything; with a
    ``seeds:`` plan, after recording it on the parent run, each round's plan (the next is
    planned once the caller has run the previous one; failed pairs stay skipped) until one
    launches nothing, each cell's n and decision recorded after every round."""
    if study.seeds_plan is None:
        if plan.launch:
            yield plan
        return
    sequential.record_plan(client, parent_id, study)
    while plan.launch:
        yield plan
        children = study_children(study)
        sequential.record_round(client, parent_id, study, children)
        plan = plan_trials(sequential.round_trials(study, children), children)
        echo(f"seeds: next round: {plan.format().splitlines()[0]}")
    sequential.record_round(client, parent_id, study, study_children(study))
