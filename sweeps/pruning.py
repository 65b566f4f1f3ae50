"""Searches that prune: a ``search.pruner`` names a Ray Tune scheduler (ASHA, median stopping)
that stops a trial whose intermediate evaluations trail the others'.

* The decision is the library's (``ASHAScheduler``, ``MedianStoppingRule``), made on what a
  trial reports: after every evaluation between a run's first and last step, and after each
  of its seeds, the objective so far (:func:`analysis.pruning.objective` of the seeds
  finished and the current evaluation) at the trial's step ``trial_step`` (its training
  steps, its seeds in turn: seed k of a trial of S-step runs is at ``k * S + step``).
* A stopped trial's runs get the MLflow tag ``pruned_at`` (its ``trial_step`` then) and the
  run it was training ends KILLED (``sweeps.trial_runs.settle_search_trial``); Optuna records it
  PRUNED (``sweeps.search``), so it never counts as complete.  A trial's last report carries
  ``complete``: a trial stopped without it was pruned.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from analysis.pruning import objective
from sweeps.keys import REQUIRED, KeySpec
from trainer.config import ConfigError, RunConfig, unknown_key_error

PRUNER_TYPES = ("asha", "median")  # Ray Tune's ASHAScheduler, MedianStoppingRule

# Keys of a search trial's reports to Tune.
OBJECTIVE = "objective"
STEP = "trial_step"  # the schedulers' time: the trial's training steps, its seeds in turn
COMPLETE = "complete"  # 1.0 on a trial's last report (every seed trained)
RUNS = "run_ids"  # the trial's MLflow runs so far, comma-separated
TRAINED = "trained_ids"  # those of them it trained (not reused finished ones)

PRUNER_FIELDS: dict[str, KeySpec] = {
    "type": KeySpec("string", REQUIRED, "`asha`: Ray Tune's ASHAScheduler (asynchronous "
                    "successive halving; asynchronous Hyperband with `brackets` > 1); "
                    "`median`: its MedianStoppingRule.", ", ".join(PRUNER_TYPES)),
    "grace_steps": KeySpec("integer", 1, "Training steps of a trial (its seeds in turn) before "
                           "it may be pruned.", ">= 1"),
    "reduction_factor": KeySpec("integer", 2, "asha only: 1 trial in this many goes on at each "
                                "rung (rungs at grace_steps x factor^k steps).", ">= 2"),
    "brackets": KeySpec("integer", 1, "asha only: Hyperband brackets.", ">= 1"),
    "min_trials": KeySpec("integer", 3, "median only: other trials' results needed at a step "
                          "before a trial is compared with their median.", ">= 1"),
}
PRUNER_KEYS = tuple(PRUNER_FIELDS)
ONLY = {"reduction_factor": "asha", "brackets": "asha", "min_trials": "median"}
TIMING = ("stages.rl.steps", "eval.every")  # keys a pruned search may not vary
MINIMUM = {"grace_steps": 1, "reduction_factor": 2, "brackets": 1, "min_trials": 1}


@dataclass(frozen=True)
class PrunerSpec:
    """A search's pruner (``PRUNER_FIELDS``)."""

    type: str
    grace_steps: int = 1
    reduction_factor: int = 2
    brackets: int = 1
    min_trials: int = 3


def parse_pruner(where: str, data: Any, base: RunConfig, space: tuple[str, ...] = ()) -> PrunerSpec:
    """``search.pruner`` checked against the base run config and the keys of ``search.space``:
    one-line errors name the key, the value and the valid values."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a mapping with type ({', '.join(PRUNER_TYPES)}) "
                          f"and its settings, got {data!r}")
    for key in data:
        if key not in PRUNER_KEYS:
            raise ConfigError(f"{where}: {unknown_key_error(str(key), PRUNER_KEYS)}")
    kind = data.get("type")
    if kind not in PRUNER_TYPES:
        raise ConfigError(f"{where}.type: got {kind!r}; valid: {', '.join(PRUNER_TYPES)}")
    values = {}
    for key, low in MINIMUM.items():
        if key in data and ONLY.get(key, kind) != kind:
            raise ConfigError(f"{where}.{key}: applies to type {ONLY[key]}, not {kind}")
        value = data.get(key, PRUNER_FIELDS[key].default)
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ConfigError(f"{where}.{key}: got {value!r}; valid: an integer >= {low}")
        values[key] = value
    every, steps = base.eval.every, base.stages.rl.steps
    if not 0 < every < steps:  # it acts on the evaluations between a run's first and last step
        raise ConfigError(f"{where}: needs evaluations during a run, got eval.every {every} with "
                          f"stages.rl.steps {steps}; valid: eval.every 1 to {steps - 1}")
    timed = [k for k in space if k in TIMING]
    if timed:  # the scheduler's rungs and max_t are the base's steps: the same for every trial
        raise ConfigError(f"{where}: needs the same steps in every trial, got search.space over "
                          f"{', '.join(timed)}; valid: a space without {' or '.join(TIMING)}")
    if base.parallel.workers != 1:
        raise ConfigError(f"{where}: needs runs of one process, got parallel.workers "
                          f"{base.parallel.workers}; valid: 1")
    return PrunerSpec(kind, **values)


def make_scheduler(pruner: PrunerSpec | None, mode: str, max_steps: int):
    """The Tune scheduler of a search: FIFO without a pruner, else ASHA or median stopping on
    the reported ``objective`` over ``trial_step`` (``max_steps``: a whole trial's steps)."""
    # deferred: Ray (heavy) is loaded by the driver that runs the sweep
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, MedianStoppingRule

    if pruner is None:
        return FIFOScheduler()
    common = {"time_attr": STEP, "metric": OBJECTIVE, "mode": mode,
              "grace_period": min(pruner.grace_steps, max_steps)}
    if pruner.type == "asha":
        return ASHAScheduler(**common, max_t=max_steps, reduction_factor=pruner.reduction_factor,
                             brackets=pruner.brackets)
    # min_time_slice inf: never PAUSE a trial for want of samples (a function trainable without
    # checkpoints would restart from scratch); it goes on instead
    return MedianStoppingRule(**common, min_samples_required=pruner.min_trials,
                              min_time_slice=float("inf"), hard_stop=True)


@dataclass
class TrialReports:
    """What one search trial reports to Tune (``report``: ``ray.tune.report``).  ``stopped``
    turns True when the scheduler stopped the trial at a report: Tune's session then ends the
    reporting thread with ``SystemExit``, caught here so that the run in progress ends KILLED
    rather than FAILED; the trial then calls :meth:`end` (the thread must end so, or Tune cannot
    reuse its actor)."""

    report: Callable[[dict], None]
    metric: str
    steps: int  # RL steps of one run
    seeds: int
    values: list[float] = field(default_factory=list)  # the finished seeds' metric
    run_ids: list[str] = field(default_factory=list)
    trained: list[str] = field(default_factory=list)
    stopped: bool = False

    def on_eval(self, step: int, metrics: Mapping[str, float]) -> bool:
        """The trainer's ``on_eval``: report an evaluation between the run's first and last
        step (the last comes with :meth:`seed_done`); True: stop the run."""
        if not 0 < step < self.steps or self.metric not in metrics:
            return False
        return self._send(step, float(metrics[self.metric]))

    def seed_done(self, value: float) -> bool:
        """A seed's run is finished with ``value``: report the objective so far (the trial's
        result after its last seed); True: the trial was stopped."""
        self.values.append(value)
        return self._send(0, None)

    @property
    def complete(self) -> bool:
        return len(self.values) == self.seeds

    def result(self, step: int, current: float | None) -> dict[str, Any]:
        values = self.values if current is None else [*self.values, current]
        out = {OBJECTIVE: objective(values), STEP: len(self.values) * self.steps + step,
               COMPLETE: float(self.complete), RUNS: ",".join(self.run_ids),
               TRAINED: ",".join(self.trained)}
        return {**out, "done": 1.0} if self.complete else out

    def end(self) -> None:
        """End the stopped trial's thread as Tune's session would have."""
        raise SystemExit(0)

    def _send(self, step: int, current: float | None) -> bool:
        try:
            self.report(self.result(step, current))
        except SystemExit:  # Tune's session: the scheduler stopped this trial at this report
            self.stopped = True
        return self.stopped


def was_pruned(result: Mapping[str, Any] | None) -> bool:
    """Whether a search trial's last result is an intermediate one: its scheduler stopped it."""
    return bool(result) and STEP in result and not result.get(COMPLETE)


def run_ids(result: Mapping[str, Any], key: str = RUNS) -> list[str]:
    """The MLflow run ids of a trial's result (``RUNS`` or ``TRAINED``)."""
    return [r for r in str(result.get(key, "")).split(",") if r]
