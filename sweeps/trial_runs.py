"""A study's MLflow runs: the parent run, one child run per (cell, seed) created when its
trial starts (so its start and end times are the trial's), a failed trial's run marked
FAILED, the study's note; and each trial's log file beside its run.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from mlflow.entities import Run
from mlflow.tracking import MlflowClient

from analysis.pruning import PRUNED_TAG
from sweeps.pruning import STEP, TRAINED, run_ids, was_pruned
from sweeps.status import (
    StudyStatus,
    child_runs,
    find_parent,
    pair_state,
    reusable_run,
    study_status,
)
from sweeps.study import Study
from sweeps.trials import Trial
from trainer.run.store import EXPERIMENT_KIND_TAGS, experiment_id, git_sha, make_client, with_retry
from trainer.run.tracking import (
    KIND_TAG,
    NOTE_TAG,
    TERMINAL_STATUSES,
    cell_id,
    redact,
    run_tags,
    secret_values,
)


@dataclass(frozen=True)
class Launch:
    """A trial to run: its child run to continue (None = create one) and whether the run
    had started before (then the trainer resumes from its checkpoint)."""

    trial: Trial
    run_id: str | None = None
    resume: bool = False


@dataclass
class Plan:
    launch: list[Launch] = field(default_factory=list)
    finished: list[Trial] = field(default_factory=list)
    failed: list[Trial] = field(default_factory=list)  # skipped; --retry-failed reruns them

    def format(self) -> str:
        head = (f"launch {len(self.launch)}, skip {len(self.finished)} finished, "
                f"skip {len(self.failed)} failed (use --retry-failed to rerun)")
        lines = [head]
        lines += [f"  launch {x.trial.describe()}"
                  + (f" (continue run {x.run_id})" if x.run_id else "") for x in self.launch]
        lines += [f"  skip   {t.describe()} (finished)" for t in self.finished]
        lines += [f"  skip   {t.describe()} (failed)" for t in self.failed]
        return "\n".join(lines)


def plan_trials(trials: list[Trial], children: Mapping[tuple[str, int], list[Run]],
                retry_failed: bool = False) -> Plan:
    """Decide per (cell, seed): skip finished, skip failed unless ``retry_failed``, continue
    an existing unfinished child run, or launch fresh."""
    plan = Plan()
    for trial in trials:
        runs = children.get(trial.key, [])
        state = pair_state(runs)
        if state == "finished":
            plan.finished.append(trial)
        elif state == "failed" and not retry_failed:
            plan.failed.append(trial)
        else:
            reuse = reusable_run(runs)
            started = reuse is not None and reuse.info.status != "SCHEDULED"
            plan.launch.append(Launch(trial, reuse.info.run_id if reuse else None, started))
    return plan


def ensure_parent(client: MlflowClient, exp_id: str, study: Study) -> str:
    """The study's parent run id, created on first launch and set RUNNING on relaunch.  The
    experiment and the parent run carry descriptions that say where the study file, the
    outputs and the report are."""
    with_retry(client.set_experiment_tag, exp_id, NOTE_TAG, experiment_note(study))
    for key, value in EXPERIMENT_KIND_TAGS.items():  # experiments created before the tag
        with_retry(client.set_experiment_tag, exp_id, key, value)
    parent = find_parent(client, exp_id, study.name)
    if parent is not None:
        with_retry(client.update_run, parent.info.run_id, status="RUNNING")
        with_retry(client.set_tag, parent.info.run_id, NOTE_TAG, parent_note(study))
        return parent.info.run_id
    tags = {"study": study.name, KIND_TAG: "study", "git_sha": git_sha(),
            NOTE_TAG: parent_note(study)}
    run = with_retry(client.create_run, exp_id, tags=tags, run_name=study.name)
    if study.path is not None:
        text = redact(study.path.read_text(), secret_values(study.base))  # a pasted API key
        with_retry(client.log_text, run.info.run_id, text, "study.yaml")
    return run.info.run_id


def experiment_note(study: Study) -> str:
    """The experiment's description (Markdown, shown above its runs in the MLflow UI)."""
    source = f"`{study.path}`" if study.path is not None else "an inline study"
    return (f"Study **{study.name}** from {source}; outputs and checkpoints under "
            f"`{study.out_dir}`. The run named `{study.name}` is the study itself (its report is "
            f"under its Artifacts, `report/index.html`); each child run is one (cell, seed), "
            f"named `<method>-s<seed>-<cell id>`.")


def parent_note(study: Study) -> str:
    """The parent run's description: where its report is and how to rebuild it."""
    command = f"hindsight report {study.path}" if study.path is not None else "hindsight report"
    return (f"Study **{study.name}**. Report: open **Artifacts > report > index.html** of this "
            f"run (tables and figures; `index.md` is the same in Markdown); rebuild it with "
            f"`{command}`. Child runs are the (cell, seed) trials; a trial's checkpoints are in "
            f"its `hindsight.checkpoints` tag.")


def child_config(trial: Trial, parent_id: str):
    return replace(trial.cfg, tracking=replace(trial.cfg.tracking, parent_run_id=parent_id))


def prepare_child(client: MlflowClient, exp_id: str, parent_id: str, launch: Launch) -> str:
    """Create the child run of ``launch`` (status SCHEDULED) or mark the reused one
    SCHEDULED; return its id."""
    cfg = child_config(launch.trial, parent_id)
    run_id = launch.run_id
    if run_id is None:
        run = with_retry(client.create_run, exp_id, tags=run_tags(cfg),
                         run_name=cfg.tracking.run_name)
        run_id = run.info.run_id
    with_retry(client.update_run, run_id, status="SCHEDULED")
    return run_id


def claim_child(cfg, run_id: str | None = None, resume: bool = False) -> Launch | None:
    """In a grid trial's worker, as the trial starts: the child run it trains into.

    ``run_id`` (a relaunched study's unfinished run, chosen by the driver) is used as it is.
    Otherwise the pair's runs are looked up: an unfinished run that an earlier attempt of
    this trial created (Tune retried it after its worker died) is continued, else a run is
    created now, so that its MLflow start time is the trial's own start, not the sweep's
    launch.  None when the pair already has a FINISHED run (the attempt that trained it
    died before reporting): nothing is left to train."""
    trial = Trial(cfg, cell_id(cfg), cfg.seed, ())
    if run_id is not None:
        return Launch(trial, run_id, resume)
    client = make_client(cfg.tracking.uri)
    exp_id = experiment_id(client, cfg.tracking.experiment)
    runs = child_runs(client, exp_id, cfg.tracking.study).get(trial.key, [])
    plan = plan_trials([trial], {trial.key: runs}, retry_failed=True)
    if not plan.launch:
        return None
    launch = plan.launch[0]
    return replace(launch, run_id=prepare_child(client, exp_id, cfg.tracking.parent_run_id,
                                                launch))


LOG_NAME = "trial.log"


LOG_TAG = "hindsight.log"


NODE_TAG = "hindsight.node_id"


@contextlib.contextmanager
def trial_log(path: Path):
    """Send everything this process writes to its stdout and stderr (prints, ``logging``,
    tqdm bars, C libraries) to ``path`` (appended) while the block runs, then restore them:
    a trial's own output goes to its log file, not to the sweep's console."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        with open(path, "ab", buffering=0) as log:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            try:
                yield path
            finally:
                for stream in (sys.stdout, sys.stderr):
                    with contextlib.suppress(Exception):
                        stream.flush()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
    finally:
        for fd in saved:
            os.close(fd)


def node_id() -> str:
    """The Ray node this process runs on ("" outside Ray)."""
    try:
        import ray

        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""
    except Exception:  # a tag is not worth failing a trial for
        return ""


FAILURE_TAG = "hindsight.failure"


def spec_run_id(client: MlflowClient, exp_id: str, study: Study, spec: dict) -> str | None:
    """The child run of a grid trial's spec: the one it continues, else the unfinished run
    its worker created (None when the trial died before creating one)."""
    if spec["run_id"]:
        return spec["run_id"]
    runs = child_runs(client, exp_id, study.name).get(tuple(spec["key"]), [])
    run = reusable_run([r for r in runs if r.info.status not in TERMINAL_STATUSES])
    return run.info.run_id if run is not None else None


def mark_failed(client: MlflowClient, run_id: str | None, reason: str) -> None:
    """A trial Tune gave up on (its worker or node died past the retries): its run, left
    RUNNING by the dead worker, ends FAILED with the reason as the tag ``hindsight.failure``
    (``--retry-failed`` continues it).  No run (``None``): nothing to mark."""
    if run_id is None:
        return
    run = with_retry(client.get_run, run_id)
    if run.info.status in TERMINAL_STATUSES:
        return
    with_retry(client.set_tag, run_id, FAILURE_TAG, reason[:5000] or "the trial's worker died")
    with_retry(client.set_terminated, run_id, status="FAILED")


def settle_search_trial(client: MlflowClient, result: Mapping) -> None:
    """A search trial that reported through :class:`sweeps.pruning.TrialReports` has ended.
    Pruned: the runs it trained get the tag ``pruned_at`` (its ``trial_step`` then) and the
    one it was training ends KILLED.  Complete: its runs lose a ``pruned_at`` left by an
    earlier, pruned trial of the same cell (it trained them to the end)."""
    if was_pruned(result):
        for run_id in run_ids(result, TRAINED):
            with_retry(client.set_tag, run_id, PRUNED_TAG, str(int(result[STEP])))
            if with_retry(client.get_run, run_id).info.status not in TERMINAL_STATUSES:
                with_retry(client.set_terminated, run_id, status="KILLED")
        return
    for run_id in run_ids(result):
        if PRUNED_TAG in with_retry(client.get_run, run_id).data.tags:
            with_retry(client.delete_tag, run_id, PRUNED_TAG)


def finish_parent(client: MlflowClient, parent_id: str, study: Study) -> StudyStatus:
    status = study_status(study)
    if not any(s == "running" for s in status.states.values()):
        with_retry(client.set_terminated, parent_id,
                   status="FINISHED" if status.complete else "FAILED")
    return status
