"""Optuna search for a study's ``search`` block, run through Ray Tune's ``OptunaSearch``.

The search space is a pure define-by-run function from an Optuna trial to config overrides
(optuna-examples ``rl/sb3_simple.py``); each Optuna trial's overrides are trained for
``seeds_per_trial`` seeds and the mean of ``search.metric`` over the seeds is its objective.
The Optuna study (named after the study) lives in ``search.storage`` (sqlite or any RDB URL),
so a relaunch continues it: only ``trials - completed`` new trials are asked for.

Several drivers may feed one study at once (a shared RDB storage such as PostgreSQL): the
``trials`` budget is shared (a driver asks for a trial only while fewer than ``trials`` are
complete or running, and a trial asked for beyond it in a race is marked FAIL as surplus,
never trained), each asked trial records its driver (``host:pid``), and a relaunch fails
only the RUNNING trials whose driver is gone.  That the same (cell, seed) is not trained
twice is the runner's pair lock (``sweeps.locks``).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState
from ray.tune.search import Searcher
from ray.tune.search.optuna import OptunaSearch

from sweeps.pruning import OBJECTIVE, STEP, was_pruned
from sweeps.study import ParamSpace, SearchSpec, Study
from trainer.run.store import db_lock

DRIVER_ATTR = "hindsight_driver"
SURPLUS_ATTR = "hindsight_surplus"
# Trials that count against the budget (a pruned trial has spent its share).
LIVE = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING, TrialState.WAITING)
# A RUNNING trial without a driver attribute older than this is an abandoned one (the
# attribute is set right after the trial is asked for).
UNCLAIMED_AFTER_S = 60.0


def driver_id() -> str:
    """This driver process, as recorded on the trials it asks for: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _driver_alive(driver: str) -> bool:
    """False when ``driver`` ran on this host and its process is gone; True otherwise
    (a driver on another host is presumed alive)."""
    host, _, pid = driver.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class BudgetedOptunaSearch(OptunaSearch):
    """``OptunaSearch`` whose ``trials`` budget is shared by every driver of the study."""

    def __init__(self, *args: Any, budget: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._budget = budget

    def _live_numbers(self) -> list[int]:
        trials = self._ot_study.get_trials(deepcopy=False, states=LIVE)
        return sorted(t.number for t in trials)

    def suggest(self, trial_id: str):
        if trial_id not in self._ot_trials and len(self._live_numbers()) >= self._budget:
            return Searcher.FINISHED
        config = super().suggest(trial_id)
        ot_trial = self._ot_trials.get(trial_id)
        if ot_trial is None or not isinstance(config, dict):
            return config
        storage = self._ot_study._storage
        storage.set_trial_system_attr(ot_trial._trial_id, DRIVER_ATTR, driver_id())
        # Trial numbers are assigned in order under a lock on the study's row: a trial is in
        # the budget when fewer than ``budget`` live trials were asked for before it.
        before = [n for n in self._live_numbers() if n < ot_trial.number]
        if len(before) >= self._budget:
            storage.set_trial_system_attr(ot_trial._trial_id, SURPLUS_ATTR, True)
            self._ot_study.tell(ot_trial, state=TrialState.FAIL)
            del self._ot_trials[trial_id]
            return Searcher.FINISHED
        return config

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        """An intermediate objective, at the trial's own step (``trial_step``: its training
        steps) rather than Tune's count of reports."""
        if STEP not in result:
            super().on_trial_result(trial_id, result)
        elif trial_id in self._ot_trials and trial_id not in self._completed_trials:
            self._report(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False) -> None:
        """A trial its scheduler stopped is PRUNED with its last intermediate objective
        (Ray's ``OptunaSearch`` would tell Optuna it COMPLETE with that value)."""
        if error or not was_pruned(result) or trial_id not in self._ot_trials \
                or trial_id in self._completed_trials:
            super().on_trial_complete(trial_id, result, error)
            return
        self._report(trial_id, result)  # the result it was stopped at (Tune skips telling it)
        self._ot_study.tell(self._ot_trials[trial_id], state=TrialState.PRUNED)
        self._completed_trials.add(trial_id)

    def _report(self, trial_id: str, result: dict) -> None:
        ot_trial = self._ot_trials[trial_id]
        step = int(result[STEP])
        if step not in self._ot_study._storage.get_trial(ot_trial._trial_id).intermediate_values:
            ot_trial.report(float(result[OBJECTIVE]), step)

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
    return BudgetedOptunaSearch(
        budget=spec.trials,
        space=Space(spec),
        metric=OBJECTIVE,
        mode=spec.mode,
        sampler=optuna.samplers.TPESampler(seed=spec.sampler_seed),
        study_name=study.name,
        storage=_storage(spec),
    )


def remaining_trials(study: Study) -> int:
    """``trials`` minus the Optuna trials COMPLETE in storage or RUNNING under a live driver
    (another driver feeding the same study).  Trials left RUNNING by a driver that is gone
    (killed on this host, or never claimed) are marked FAIL first: they never reported."""
    spec = _spec(study)
    storage = _storage(spec)
    try:
        ot_study = optuna.load_study(study_name=study.name, storage=storage)
    except KeyError:  # no such study yet
        return spec.trials
    live = 0
    for trial in ot_study.get_trials(deepcopy=False):
        if trial.state == TrialState.RUNNING and _abandoned(trial):
            storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
            continue
        live += trial.state in LIVE
    return max(0, spec.trials - live)


def _abandoned(trial: optuna.trial.FrozenTrial) -> bool:
    driver = trial.system_attrs.get(DRIVER_ATTR)
    if driver is None:
        started = trial.datetime_start.timestamp() if trial.datetime_start else 0.0
        return time.time() - started > UNCLAIMED_AFTER_S
    # This very process runs no search while it counts: its own RUNNING trials are leftovers.
    return str(driver) == driver_id() or not _driver_alive(str(driver))


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
    with db_lock(spec.storage, "optuna-schema"):  # drivers starting at once: one creates it
        return optuna.storages.RDBStorage(spec.storage)


def _spec(study: Study) -> SearchSpec:
    if study.search is None:
        raise ValueError(f"study {study.name!r} has no search block")
    return study.search
