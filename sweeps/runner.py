"""Run a study on Ray Tune, tracked in MLflow, resumable after a crash.

* Local Ray by default (started here with the dashboard and usage stats off), or a cluster
  by address.  One Tune trial per (cell, seed) with ``tune.with_resources``, FIFO at full
  budget; each trial calls the train function in-process (no subprocess, no argv).
* MLflow: one parent run per study (``hindsight.kind=study``, reused on relaunch); one child
  run per (cell, seed) (tag ``mlflow.parentRunId``), created with ``MlflowClient`` in the
  trial's worker when the trial starts, so that its MLflow start and end times, and the UI's
  Duration, are the trial's own rather than the sweep's launch.  A relaunched study passes
  the pair's existing child run id in the Tune trial config (with the trial's output folder,
  its checkpoints), so the trial continues the same run with ``resume=True``; a trial Tune
  retries after its worker died finds the run its first attempt created and continues it.
* Relaunch: FINISHED pairs are skipped; RUNNING/SCHEDULED children (a killed driver) are
  reused; FAILED ones are skipped unless ``retry_failed`` (then reused too), so no pair ever
  gets a second child run.  A trial that raises is FAILED with ``traceback.txt``; the other
  trials finish.
* Search studies: Optuna (``sweeps.search``) proposes overrides; each Tune trial trains them
  for ``seeds_per_trial`` seeds (reusing finished (cell, seed) runs) and reports the mean.
"""

from __future__ import annotations

import ctypes.util
import functools
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from analysis.pruning import objective
from sweeps import rounds
from sweeps import search as optuna_search
from sweeps.locks import study_lock
from sweeps.pruning import COMPLETE, OBJECTIVE, STEP, TrialReports, make_scheduler, was_pruned
from sweeps.ranks import TRIAL_CPU, train_on_ranks, trial_concurrency
from sweeps.ray_auth import token_source
from sweeps.ray_session import init_ray
from sweeps.reach import check_ray_address, check_uri
from sweeps.status import (
    StudyStatus,
    child_runs,
    study_children,
)
from sweeps.study import Study, describe_overrides
from sweeps.trial_runs import (
    LOG_NAME,
    LOG_TAG,
    NODE_TAG,
    child_config,
    claim_child,
    ensure_parent,
    finish_parent,
    mark_failed,
    node_id,
    plan_trials,
    prepare_child,
    settle_search_trial,
    spec_run_id,
    trial_log,
)
from sweeps.trials import Trial, make_trial
from trainer.config import from_dict, to_dict
from trainer.run.store import experiment_id, make_client, with_retry
from trainer.run.tracking import (
    TERMINAL_STATUSES,
    RunLogger,
)

TrainFn = Callable[..., Any]


def default_train_fn(cfg, *, run_id=None, resume=False, progress=True, on_eval=None):
    """``trainer.run.train``, imported lazily (inside the trial's worker)."""
    # deferred: the trainer (torch) loads in the trial's worker, not in the driver
    from trainer.run.loop import train

    return train(cfg, run_id=run_id, resume=resume, progress=progress, on_eval=on_eval)


def study_workers(study: Study) -> int:
    """The ranks of each of the study's runs (``parallel.workers`` of its base config)."""
    return study.base.parallel.workers


def trial_resources(study: Study) -> dict[str, float]:
    """What ``tune.with_resources`` books a trial: the study's per-trial resources, or for
    a parallel study a hundredth of a CPU (Tune needs some), since its ranks book their
    shares themselves (Train V2's controller takes no CPU) and the same GPUs must not be
    booked twice."""
    return {"cpu": TRIAL_CPU} if study_workers(study) > 1 else study.resources.ray()


class TrialFailed(RuntimeError):
    """The train function returned a non-FINISHED status."""


class TrialStopped(RuntimeError):
    """A search trial's scheduler stopped its run (the run's ``on_eval`` said so): pruned."""


def check_services(study: Study, address: str = "") -> None:
    """One-line errors (exit 2) when the study's tracking server or database, its Optuna
    storage or the Ray head at ``address`` cannot be reached, or ``RAY_AUTH_TOKEN_PATH``
    names no token."""
    check_uri(study.store_uri, "MLflow tracking store")
    if study.search is not None:
        check_uri(study.search.storage, "Optuna storage")
    check_ray_address(address)
    if address not in ("", "local"):
        token_source(os.environ)


def run_trial(cfg, run_id: str, resume: bool, train_fn: TrainFn | None,
              on_eval=None) -> dict[str, float]:
    """Train ``cfg`` into child run ``run_id`` in this process and return its numeric final
    metrics; the process's output goes to ``<output.dir>/trial.log`` meanwhile (tag
    ``hindsight.log``), and the Ray node it runs on is the tag ``hindsight.node_id``.  An
    exception marks the run FAILED with ``traceback.txt`` and propagates; a returned
    non-FINISHED status raises :class:`TrialFailed`, or :class:`TrialStopped` when ``on_eval``
    (given to the train function) stopped the run."""
    log_path = Path(cfg.output.dir).expanduser().resolve() / LOG_NAME
    with trial_log(log_path):
        print(f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} run {run_id} "
              f"({'resumed' if resume else 'started'})", flush=True)
        return _run_trial(cfg, run_id, resume, train_fn, log_path, on_eval)


def _run_trial(cfg, run_id: str, resume: bool, train_fn: TrainFn | None,
               log_path: Path, on_eval=None) -> dict[str, float]:
    logger = RunLogger(cfg.tracking.uri, cfg.tracking.experiment)
    # A run that started before (not SCHEDULED) continues from its checkpoint: the same
    # trial retried by Tune after its worker or node died, or a relaunched study.
    resume = resume or with_retry(logger.client.get_run, run_id).info.status != "SCHEDULED"
    logger.start(cfg, run_id=run_id)
    logger.set_tags({LOG_TAG: str(log_path), **({NODE_TAG: n} if (n := node_id()) else {})})
    try:
        stop = {} if on_eval is None else {"on_eval": on_eval}
        result = (train_fn or default_train_fn)(cfg, run_id=run_id, resume=resume, progress=False, **stop)
    except BaseException as exc:
        logger.fail(exc)
        raise
    status = getattr(result, "status", "FINISHED")
    if with_retry(logger.client.get_run, run_id).info.status not in TERMINAL_STATUSES:
        logger.finish(status if status in TERMINAL_STATUSES else "FINISHED")
    if status == "KILLED" and on_eval is not None:
        raise TrialStopped(f"run {run_id}: stopped by its search trial's scheduler")
    if status != "FINISHED":
        raise TrialFailed(f"run {run_id}: train returned status {status!r}")
    final = getattr(result, "final_metrics", {}) or {}
    return {k: float(v) for k, v in final.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


# Tune retries a grid trial whose worker or node died this many times (the run continues
# from its checkpoint); a trial whose training raised is not retried (its run is FAILED,
# ``--retry-failed`` reruns it).
SYSTEM_RETRIES = 2


def grid_trainable(train_fn: TrainFn | None) -> Callable[[dict], None]:
    """Tune function trainable for one (cell, seed): ``config["trial"]`` carries the config
    dict, the child run id to continue (None: :func:`claim_child` finds or creates it as the
    trial starts) and the resume flag.  An exception of the training itself is reported as
    ``failed`` (its run is already FAILED with ``traceback.txt``) rather than raised, so
    that Tune's retries are kept for workers and nodes that die."""

    def hindsight_trial(config: dict) -> None:
        from ray import tune

        spec = config["trial"]
        try:
            cfg = from_dict(spec["cfg"])
            launch = claim_child(cfg, spec["run_id"], spec["resume"])
            if launch is None:  # trained by an earlier attempt of this trial
                tune.report({"done": 1.0})
                return
            metrics = run_trial(cfg, launch.run_id, launch.resume, train_fn)
        except Exception as exc:  # recorded on the run (FAILED), reported to the driver
            reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
            tune.report({"done": 1.0, "failed": 1.0, "error": reason})
            return
        tune.report({**metrics, "done": 1.0})

    return hindsight_trial


def search_trainable(study: Study, parent_id: str, train_fn: TrainFn | None):
    """Tune function trainable for one Optuna trial: trains the suggested overrides for
    every seed (a finished (cell, seed) run is reused, not retrained) and reports the mean
    of ``search.metric`` as ``objective``.  With a pruner it reports after every evaluation
    and every seed (:class:`sweeps.pruning.TrialReports`) and ends where its scheduler stops
    it."""

    def hindsight_search_trial(config: dict) -> None:
        from ray import tune

        spec = study.search
        overrides = optuna_search.overrides_of(spec, config)
        reports = None if spec.pruner is None else TrialReports(
            tune.report, spec.metric, study.base.stages.rl.steps, len(study.seeds))
        values = []
        for seed in study.seeds:
            try:
                values.append(_seed_objective(study, parent_id, overrides, seed, train_fn, reports))
            except TrialStopped:
                reports.end()
            if reports is not None and reports.seed_done(values[-1]):
                reports.end()
        if reports is None:
            tune.report({OBJECTIVE: objective(values), COMPLETE: 1.0, "done": 1.0})

    return hindsight_search_trial


def _seed_objective(study: Study, parent_id: str, overrides: dict, seed: int,
                    train_fn: TrainFn | None, reports: TrialReports | None = None) -> float:
    """Train (or reuse) one (cell, seed) of a search.  The pair's study-wide lock is held
    meanwhile: a second driver (or Optuna trial) that proposes the same cell waits for it
    and reuses the finished run instead of training the pair again."""
    trial = make_trial(study, overrides, seed)
    with study_lock(study, trial.name):
        return _pair_objective(study, parent_id, trial, train_fn, reports)


def _pair_objective(study: Study, parent_id: str, trial: Trial, train_fn: TrainFn | None,
                    reports: TrialReports | None = None) -> float:
    client = make_client(study.store_uri)
    exp_id = experiment_id(client, study.experiment)
    runs = child_runs(client, exp_id, study.name).get(trial.key, [])
    metric = study.search.metric
    done = [r for r in runs if r.info.status == "FINISHED"]
    if done:
        metrics = done[0].data.metrics
        if reports is not None:
            reports.run_ids.append(done[0].info.run_id)
    else:
        launch = plan_trials([trial], {trial.key: runs}, retry_failed=True).launch[0]
        run_id = prepare_child(client, exp_id, parent_id, launch)
        if reports is not None:
            reports.run_ids.append(run_id)
            reports.trained.append(run_id)
        metrics = run_trial(child_config(trial, parent_id), run_id, launch.resume, train_fn,
                            reports.on_eval if reports is not None else None)
        metrics = {**with_retry(client.get_run, run_id).data.metrics, **metrics}
    if metric not in metrics:
        raise KeyError(f"search.metric {metric!r} not logged by run of {trial.name}; "
                       f"logged: {', '.join(sorted(metrics)) or 'none'}")
    return metrics[metric]


class Console:
    """The sweep's console: one line per trial start and end and, with ``bar``, a progress
    bar of the study (tqdm, on stderr) kept below the lines."""

    def __init__(self, echo: Callable[[str], None], total: int, bar: bool = False) -> None:
        self.echo, self.total, self.done = echo, total, 0
        self.bar = None
        if bar and total:
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="trial", desc="study", file=sys.stderr,
                            dynamic_ncols=True, leave=True)

    def __getstate__(self) -> dict:  # Tune pickles its callbacks; a bar holds a stream
        return {**self.__dict__, "bar": None}

    def line(self, text: str) -> None:
        if self.bar is not None:
            self.bar.clear()
            self.echo(text)
            sys.stdout.flush()
            self.bar.refresh()
        else:
            self.echo(text)

    def ended(self) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _error_reason(trial) -> str:
    """The last line of a failed Tune trial's error (its exception), if Tune kept it."""
    path = getattr(trial, "error_file", None) or ""
    try:
        lines = [x.strip() for x in Path(path).read_text().splitlines() if x.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def _progress_callback(console: Console, describe: Callable[[Any], str],
                       log_of: Callable[[Any], str], on_error: Callable[[Any, str], None],
                       on_end: Callable[[dict], None]):
    from ray import tune

    class Progress(tune.Callback):
        """One line per trial as it starts, and one as it finishes or fails with the trial's
        own wall time (from its first start: a trial waiting for a slot is not counting)."""

        def __init__(self) -> None:
            self.start = time.time()
            self.started: dict[str, float] = {}  # Tune trial id -> first start

        def on_trial_start(self, iteration, trials, trial, **info) -> None:
            self.started.setdefault(getattr(trial, "trial_id", ""), time.time())
            console.line(f"  started  {describe(trial)}")

        def _line(self, trial, what: str, extra: str = "") -> None:
            console.ended()
            elapsed = time.time() - self.started.get(getattr(trial, "trial_id", ""), self.start)
            console.line(f"[{console.done}/{console.total}] {what:<8} {describe(trial)} "
                         f"({elapsed:.0f} s){extra}")

        def on_trial_complete(self, iteration, trials, trial, **info) -> None:
            result = trial.last_result or {}
            if result.get("failed"):
                self._failed(trial, str(result.get("error", "")))
                return
            on_end(result)
            if was_pruned(result):
                self._line(trial, "pruned", f" at step {int(result[STEP])}")
            else:
                self._line(trial, "finished")

        def on_trial_error(self, iteration, trials, trial, **info) -> None:
            reason = _error_reason(trial)
            on_error(trial, reason)
            self._failed(trial, reason)

        def _failed(self, trial, reason: str) -> None:
            log = log_of(trial)
            self._line(trial, "FAILED", (f": {reason}" if reason else "")
                       + (f" (log: {log})" if log else ""))

    return Progress()


def runs_vllm(study: Study) -> bool:
    """Whether any of the study's trials runs a vLLM engine in its process."""
    backends = {study.base.model.backend, *(v for k, values in study.grid if k == "model.backend" for v in values)}
    return "vllm" in backends


def reuse_actors(study: Study) -> bool:
    """Whether Tune may run a trial in the process of a finished one (it saves the start-up).
    Not when a trial runs a vLLM engine in its process: an engine's memory is not given back
    when its trial ends, so every trial would add one (three SmolLM2 trials in one process on
    CPU: 11.7 GB, then 21 GB, then killed by Ray's OOM killer)."""
    return not runs_vllm(study)


TCMALLOC = "tcmalloc_minimal"  # Debian: apt-get install libtcmalloc-minimal4


def engine_env(study: Study, address: str = "", echo: Callable[[str], None] = lambda line: None) -> dict[str, str]:
    """What a local Ray's processes get in their environment for this study's trials:
    ``LD_PRELOAD`` of tcmalloc when a trial runs vLLM's CPU engine (no GPUs booked) and the
    library is installed (``echo`` says which, or how to install it).  vLLM's CPU guide asks
    for it; on the SmolLM2 step it took the step from 191 to 158 s and the update by a quarter
    (docs/results/step_cost.md).  Set for a local Ray only (a preload must be in a process's
    environment when it starts; a cluster's nodes are started by their owners), and never for
    GPU trials."""
    preload = os.environ.get("LD_PRELOAD", "")
    if address not in ("", "local") or study.resources.gpus or not runs_vllm(study) or TCMALLOC in preload:
        return {}
    lib = ctypes.util.find_library(TCMALLOC)  # a soname: ld.so finds it as it finds any library
    if lib is None:
        echo("vLLM CPU trials: `apt-get install libtcmalloc-minimal4` makes a SmolLM2 step about 17% "
             "faster (docs/results/step_cost.md)")
        return {}
    env = {"LD_PRELOAD": " ".join(p for p in (lib, preload) if p)}
    echo(f"vLLM CPU trials: LD_PRELOAD={env['LD_PRELOAD']} (vLLM's CPU guide; a faster step)")
    return env


def _fit(study: Study, trainable, *, param_space: dict, num_samples: int, search_alg=None,
         max_concurrent: int, total: int, echo, describe, bar: bool = False,
         log_of: Callable[[Any], str] = lambda t: "",
         on_error: Callable[[Any, str], None] = lambda t, reason: None,
         on_end: Callable[[dict], None] = lambda result: None,
         max_failures: int = 0) -> None:
    import ray
    from ray import tune

    resources = trial_resources(study)
    if study_workers(study) > 1 and not max_concurrent:  # Tune sees no resources: count them here
        max_concurrent = trial_concurrency(study.resources.ray(), ray.cluster_resources())
    console = Console(echo, total, bar)
    name_of = (lambda t: t.config["trial"]["name"]) if "trial" in param_space else (lambda t: f"search_{t.trial_id}")
    tuner = tune.Tuner(
        tune.with_resources(trainable, resources),
        param_space=param_space,
        tune_config=tune.TuneConfig(
            num_samples=num_samples, search_alg=search_alg, scheduler=_scheduler(study),
            max_concurrent_trials=max_concurrent or None, reuse_actors=reuse_actors(study),
            trial_name_creator=name_of, trial_dirname_creator=name_of,
        ),
        run_config=tune.RunConfig(
            name=f"{study.name}-{time.strftime('%Y%m%d-%H%M%S')}",
            storage_path=str(study.out_dir / "ray"), verbose=0,
            failure_config=tune.FailureConfig(max_failures=max_failures),
            callbacks=[_progress_callback(console, describe, log_of, on_error, on_end)],
        ),
    )
    try:
        tuner.fit()
    finally:
        console.close()


def _scheduler(study: Study):
    """FIFO at full budget, or a search's pruner (``sweeps.pruning``) over a trial's steps."""
    spec = study.search
    if spec is None:
        return make_scheduler(None, "max", 1)
    return make_scheduler(spec.pruner, spec.mode, study.base.stages.rl.steps * len(study.seeds))


def run_study(study: Study, *, train_fn: TrainFn | None = None, retry_failed: bool = False,
              max_concurrent: int | None = None, address: str | None = None,
              dry_run: bool = False, echo: Callable[[str], None] = print,
              bar: bool = False) -> StudyStatus | None:
    """Launch (or continue) ``study``; return its status afterwards (None for a dry run).
    ``echo`` gets one line per trial start and end; ``bar`` adds a progress bar (stderr).

    ``train_fn`` defaults to ``trainer.run.train`` (imported lazily in the worker); tests
    inject a fake with the same signature ``(cfg, *, run_id, resume, progress)``.
    """
    conc = study.max_concurrent if max_concurrent is None else max_concurrent
    check_services(study, "" if dry_run else (address or study.ray_address))
    if train_fn is None and study_workers(study) > 1:
        # the ranks as Ray Train workers, each taking its share of the trial's resources
        train_fn = functools.partial(train_on_ranks, trial_resources=study.resources.ray())
    if study.search is not None:
        return _run_search(study, train_fn, conc, address, dry_run, echo, bar)
    first = plan_trials(rounds.first_trials(study), study_children(study), retry_failed)
    echo(first.format() if dry_run else first.format().splitlines()[0])
    if dry_run:
        return None
    client = make_client(study.store_uri)
    exp_id = experiment_id(client, study.experiment)
    with study_lock(study, "parent"):  # drivers launched at once share one parent run
        parent_id = ensure_parent(client, exp_id, study)
    for plan in rounds.launches(study, first, client, parent_id, echo):
        # A fresh pair's child run is created by its trial as it starts (claim_child).
        specs = [{"name": x.trial.name, "desc": x.trial.describe(), "key": list(x.trial.key),
                  "run_id": prepare_child(client, exp_id, parent_id, x) if x.run_id else None,
                  "resume": x.resume, "cfg": to_dict(child_config(x.trial, parent_id))}
                 for x in plan.launch]
        address = address or study.ray_address
        init_ray(address, env=engine_env(study, address, echo))
        from ray import tune

        _fit(study, grid_trainable(train_fn), param_space={"trial": tune.grid_search(specs)},
             num_samples=1, max_concurrent=conc, total=len(specs), echo=echo,
             describe=lambda t: t.config["trial"]["desc"], bar=bar,
             log_of=lambda t: str(Path(t.config["trial"]["cfg"]["output"]["dir"]) / LOG_NAME),
             on_error=lambda t, reason: mark_failed(
                 client, spec_run_id(client, exp_id, study, t.config["trial"]), reason),
             max_failures=SYSTEM_RETRIES)
    return finish_parent(client, parent_id, study)


def _run_search(study, train_fn, conc, address, dry_run, echo, bar) -> StudyStatus | None:
    todo = optuna_search.remaining_trials(study)
    echo(f"search {study.name}: {todo} of {study.search.trials} Optuna trials to run, "
         f"{len(study.seeds)} seed(s) each, objective mean {study.search.metric} "
         f"({study.search.mode})")
    if dry_run:
        return None
    client = make_client(study.store_uri)
    exp_id = experiment_id(client, study.experiment)
    with study_lock(study, "parent"):  # drivers launched at once share one parent run
        parent_id = ensure_parent(client, exp_id, study)
    if todo:
        address = address or study.ray_address
        init_ray(address, env=engine_env(study, address, echo))
        _fit(study, search_trainable(study, parent_id, train_fn), param_space={},
             num_samples=todo, search_alg=optuna_search.make_searcher(study),
             max_concurrent=conc, total=todo, echo=echo, bar=bar,
             describe=lambda t: describe_overrides(t.config),
             on_end=lambda result: settle_search_trial(client, result))
    best = optuna_search.best_trial(study)
    if best is not None:
        echo(f"best: {describe_overrides(best.params)} -> {study.search.metric} {best.value:.4g}")
    return finish_parent(client, parent_id, study)
