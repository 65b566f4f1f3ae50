"""Optuna search for a study's ``search`` block, run through Ray Tune's ``OptunaSearch``.

The search space is a pure define-by-run function from an Optuna trial to config overrides
(optuna-examples ``rl/sb3_simple.py``); each Optuna trial's overrides are trained for
``seeds_per_trial`` seeds and the mean of ``search.metric`` over the seeds is its objective.
The Optuna study (named after the study) lives in ``search.storage`` (sqlite or any RDB URL),
so a relaunch continues it: only ``trials - completed`` new trials are asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from ray.tune.search.optuna import OptunaSearch

from sweeps.study import ParamSpace, SearchSpec, Study

OBJECTIVE = "objective"

# ParamSpace.type -> how an Optuna trial suggests it.
_SUGGEST: dict[str, Callable[[optuna.Trial, ParamSpace], Any]] = {
    "float": lambda t, p: t.suggest_float(p.key, p.low, p.high, log=p.log),
    "int": lambda t, p: t.suggest_int(p.key, p.low, p.high, log=p.log),
    "categorical": lambda t, p: t.suggest_categorical(p.key, list(p.choices)),
}


@dataclass(frozen=True)
class Space:
    """Define-by-run space: suggests every dimension of ``spec.space`` by its dotted key.
    A picklable callable (Tune checkpoints the searcher with pickle)."""

    spec: SearchSpec

    def __call__(self, trial: optuna.Trial) -> None:
        for param in self.spec.space:
            _SUGGEST[param.type](trial, param)


def overrides_of(spec: SearchSpec, config: dict[str, Any]) -> dict[str, Any]:
    """The dotted-key overrides of one Tune trial's config (its suggested values)."""
    return {p.key: config[p.key] for p in spec.space}


def make_searcher(study: Study) -> OptunaSearch:
    """``OptunaSearch`` over the study's space, TPE seeded by ``sampler_seed``, storing the
    Optuna study ``study.name`` in ``search.storage``; the objective is ``"objective"``."""
    spec = _spec(study)
    return OptunaSearch(
        space=Space(spec),
        metric=OBJECTIVE,
        mode=spec.mode,
        sampler=optuna.samplers.TPESampler(seed=spec.sampler_seed),
        study_name=study.name,
        storage=_storage(spec),
    )


def remaining_trials(study: Study) -> int:
    """``trials`` minus the Optuna trials already COMPLETE in storage.  Trials left RUNNING
    by a killed driver are marked FAIL first (they never reported)."""
    spec = _spec(study)
    storage = _storage(spec)
    try:
        ot_study = optuna.load_study(study_name=study.name, storage=storage)
    except KeyError:  # no such study yet
        return spec.trials
    done = 0
    for trial in ot_study.get_trials(deepcopy=False):
        if trial.state == optuna.trial.TrialState.RUNNING:
            storage.set_trial_state_values(trial._trial_id, optuna.trial.TrialState.FAIL)
        done += trial.state == optuna.trial.TrialState.COMPLETE
    return max(0, spec.trials - done)


def best_trial(study: Study) -> optuna.trial.FrozenTrial | None:
    """The best COMPLETE Optuna trial in storage, or None."""
    spec = _spec(study)
    try:
        ot_study = optuna.load_study(study_name=study.name, storage=_storage(spec))
    except KeyError:
        return None
    complete = ot_study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    return ot_study.best_trial if complete else None


def _storage(spec: SearchSpec) -> optuna.storages.RDBStorage:
    """The Optuna RDB storage (a sqlite file's folder is created first)."""
    if spec.storage.startswith("sqlite:///"):
        Path(spec.storage[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
    return optuna.storages.RDBStorage(spec.storage)


def _spec(study: Study) -> SearchSpec:
    if study.search is None:
        raise ValueError(f"study {study.name!r} has no search block")
    return study.search
