"""Entry points: :func:`train` (warm start, Stage 1, Stage 2 RL, evaluation, checkpoints,
MLflow) and :func:`evaluate` (a checkpoint on the fixed panels).

The loop is a short sequence of named phases; each lives in its own module:
``stages`` (SFT stages), ``rl`` (rollout, write, score, advantage, update), ``evaluate``,
``records``, ``checkpoint``; tracking goes through :class:`trainer.tracking.RunLogger`.
On data-parallel ranks (an initialized ``torch.distributed`` process group, started by a
launcher; :mod:`trainer.parallel`) the policy is sharded before the warm start and each rank
plays its share of Stage 1 and of every step; rank 0 alone logs to MLflow and writes records,
checkpoints are sharded, and every rank returns the same :class:`RunResult`.
A crash marks the run FAILED with its traceback (``traceback.txt``); ``resume=True``
continues the newest complete checkpoint in the same MLflow run at the same step.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch
from tqdm.auto import tqdm

from trainer.config import RunConfig
from trainer.episodes.records import build_records
from trainer.models.folders import require_model_folder
from trainer.parallel import checkpoint as sharded
from trainer.parallel.batches import global_rows, reduce_step_metrics
from trainer.parallel.group import active, broadcast_object, gather_objects, is_main
from trainer.parallel.run import SilentLogger, prepare_rank, shard_policy
from trainer.run.checkpoint import (
    TrainerState,
    latest_checkpoint,
    load_replay,
    load_trainer_state,
    replay_path,
    rl_init_path,
    save_checkpoint,
    save_module,
    save_replay,
)
from trainer.run.components import Components, build_components, frozen_writer, generating, start_rl
from trainer.run.resolve import resolve
from trainer.run.store import tracking_uri
from trainer.run.tracking import RunLogger
from trainer.stages.evaluate import evaluate_panels
from trainer.stages.phases import PhaseTimer
from trainer.stages.rl import collect_batch, skill_texts, update
from trainer.stages.skill_sft import skill_sft, writer_validity
from trainer.stages.step_metrics import step_metrics
from trainer.stages.warm_start import (
    BUNDLE_META,
    bundle_path,
    check_bundle,
    load_cached_warm_start,
    save_warm_start,
    warm_start,
    warm_start_cache,
)


class NonFiniteLossError(RuntimeError):
    """Too many consecutive RL steps had a NaN/inf loss."""


# Called after each evaluation with (step, eval metrics); True stops the run (train's doc).
OnEval = Callable[[int, dict[str, float]], bool]


@dataclass
class RunResult:
    run_id: str
    status: str
    final_metrics: dict[str, float] = field(default_factory=dict)


def train(cfg: RunConfig, *, run_id: str | None = None, resume: bool = False, progress: bool = True,
          on_eval: OnEval | None = None) -> RunResult:
    """Train ``cfg`` end to end and log it to MLflow (``run_id``: continue that run, as
    sweeps do after creating the child run).  Raises after marking the run FAILED.

    ``on_eval(step, eval_metrics)`` is called after each evaluation of the RL loop (one process
    only); when it returns True the run stops there (after that step's checkpoint, if due) and
    ends KILLED: a search's scheduler stopping a trial that trails the others."""
    started = time.perf_counter()
    cfg = resolve(cfg)
    prepare_rank(cfg)  # data-parallel ranks: the group checked, this rank's device
    out = Path(cfg.output.dir)
    out.mkdir(parents=True, exist_ok=True)
    ckpt = latest_checkpoint(out) if resume else None
    if ckpt is not None and run_id is None:
        run_id = torch.load(ckpt / "trainer_state.pt", weights_only=False)["state"]["run_id"] or None
    if ckpt is None and cfg.stages.warm_start.enabled and cfg.stages.warm_start.checkpoint:
        check_bundle(cfg, bundle_path(cfg.stages.warm_start.checkpoint))  # before any run exists
    logger = RunLogger(tracking_uri(cfg), cfg.tracking.experiment) if is_main() else SilentLogger()
    if is_main():
        run_id = logger.start(cfg, run_id=run_id)
    logger.run_id = run_id = broadcast_object(run_id)  # one run: rank 0's
    try:
        final, stopped = _train(cfg, logger, out, ckpt, progress, on_eval)
        # the whole trial (this process's share: setup, SFT stages, RL, evaluations)
        logger.log_metrics(cfg.stages.rl.steps, {"time/trial_s": time.perf_counter() - started})
        logger.flush()
    except BaseException as exc:
        logger.fail(exc)
        raise
    status = "KILLED" if stopped else "FINISHED"
    logger.finish(status)
    return RunResult(run_id, status, final)


def _train(cfg: RunConfig, logger: RunLogger, out: Path, ckpt: Path | None, progress: bool,
           on_eval: OnEval | None = None) -> tuple[dict[str, float], bool]:
    cache = warm_start_cache(cfg) if ckpt is None else None
    cached = load_cached_warm_start(cache)
    if ckpt is None and cfg.stages.warm_start.enabled and cfg.stages.warm_start.checkpoint:
        cached, cache = _saved_warm_start(cfg, logger), None
    init = str(ckpt / "model") if ckpt is not None else cached
    ctx = build_components(cfg, init_from=init)
    if active():  # every stage that trains (warm start, Stage 1, RL) trains the shards
        shard_policy(ctx)
    if ckpt is None:
        _sft_stages(ctx, logger, progress, cache, cached)
        if cfg.stages.skill_sft.replay > 0 and is_main():  # every rank holds Stage 1's gathered examples
            save_replay(ctx.replay, replay_path(out))  # replayed on resume too
        timer = PhaseTimer()
        with timer("start_rl"):  # reference, writer, and a self-written library
            start_rl(ctx)
        logger.log_metrics(0, timer.metrics())
        if ctx.library is not None and ctx.library.metrics:
            logger.log_metrics(0, ctx.library.metrics)
        if ctx.reference is not None and active():
            sharded.save_reference(ctx.reference, out)  # restored on resume
        elif ctx.reference is not None:
            save_module(ctx.reference, rl_init_path(out))  # restored on resume
        state = TrainerState(run_id=logger.run_id)
        final = _evaluate(ctx, logger, out, 0, batch=None)
    else:
        start_rl(ctx, resume=ckpt)
        if cfg.stages.skill_sft.replay > 0:
            ctx.replay = load_replay(replay_path(out))
        if active():
            if ctx.reference is not None:
                sharded.load_reference(ctx.reference, out)
            state = sharded.load_sharded(ckpt, ctx.model, ctx.optimizer)
        else:
            state = load_trainer_state(ckpt, ctx.optimizer)
        state.run_id = logger.run_id
        final = {}
    steps = cfg.stages.rl.steps if ctx.spec.trains else 0
    bar = tqdm(range(state.step + 1, steps + 1), desc=f"{cfg.algo.method}/{cfg.env.name}",
               disable=not progress or not is_main(), initial=state.step, total=steps)
    stopped = False
    for step in bar:
        metrics, batch = _rl_step(ctx, state, step)
        evaluated = _due(step, cfg.eval.every, steps)
        if evaluated:
            metrics.update(_evaluate(ctx, logger, out, step, batch))
            final = {k: v for k, v in metrics.items() if k.startswith("eval/")}
        elif cfg.tracking.records and cfg.tracking.train_records_every \
                and step % cfg.tracking.train_records_every == 0:  # same steps on every rank (a collective)
            _write_records(ctx, logger, out, step, _train_records(ctx, step, batch))
        logger.log_metrics(step, metrics)
        state.step = step
        if _due(step, cfg.output.checkpoint_every, steps):
            logger.flush()
            if active():
                sharded.save_sharded(out, state, ctx.model, ctx.tokenizer, ctx.optimizer,
                                     cfg.output.keep_checkpoints)
            else:
                save_checkpoint(out, state, ctx.model, ctx.tokenizer, ctx.optimizer, cfg.output.keep_checkpoints,
                                writer_snapshot=frozen_writer(ctx))
        bar.set_postfix(success=f"{metrics['train/success']:.2f}")
        if evaluated and on_eval is not None:
            logger.flush()  # the step is in MLflow before the caller may stop the process
            if on_eval(step, final):
                stopped = True
                break
    logger.flush()
    last = latest_checkpoint(out) if cfg.output.log_checkpoints else None
    if last is not None:
        logger.log_artifacts(last, "checkpoint")
    return final, stopped


def _due(step: int, every: int, last: int) -> bool:
    return step == last or (every > 0 and step % every == 0)


def _saved_warm_start(cfg: RunConfig, logger: RunLogger) -> str:
    """The folder of ``stages.warm_start.checkpoint`` (checked against the run by
    :func:`train`); its
    training figures and panel evaluation are logged at step 0 with ``warm/saved`` = 1."""
    path = bundle_path(cfg.stages.warm_start.checkpoint)
    meta = json.loads((path / BUNDLE_META).read_text())  # checked by train() already
    logger.set_tags({"warm_start": str(path.name), "warm_start_fingerprint": meta["env_fingerprint"]})
    evaluation = {f"warm/{k}": v for k, v in meta.get("evaluation", {}).items()}
    logger.log_metrics(0, {**meta["metrics"], **evaluation, "warm/cached": 1.0, "warm/saved": 1.0})
    return str(path)


def _sft_stages(ctx: Components, logger: RunLogger, progress: bool, cache: Path | None, cached: str | None) -> None:
    stages = ctx.cfg.stages
    if cached is not None:  # a saved warm start logged its figures in _saved_warm_start
        if not stages.warm_start.checkpoint:
            metrics = json.loads((Path(cached).parent / "metrics.json").read_text())
            logger.log_metrics(0, {**metrics, "warm/cached": 1.0})
    elif stages.warm_start.enabled:
        with _bar(progress, "warm start") as bar:
            timer = PhaseTimer()
            with timer("warm_start"):
                metrics = warm_start(ctx, bar)
            metrics.update(timer.metrics())
        logger.log_metrics(0, {**metrics, "warm/cached": 0.0})
        if cache is not None:
            save_warm_start(ctx, cache, metrics)
    if stages.skill_sft.enabled:
        with _bar(progress, "skill SFT") as bar:
            timer = PhaseTimer()
            with timer("skill_sft"):
                metrics = skill_sft(ctx, bar)
            if stages.skill_sft.writer_panel:
                with timer("writer_panel"):
                    metrics.update(writer_validity(ctx, stages.skill_sft.writer_panel))
            logger.log_metrics(0, {**metrics, **timer.metrics()})


@contextlib.contextmanager
def _bar(progress: bool, desc: str):
    bar = tqdm(desc=desc, unit="batch", disable=not progress)
    try:
        yield bar
    finally:
        bar.close()


def _rl_step(ctx: Components, state: TrainerState, step: int):
    timer = PhaseTimer.for_device(ctx.device())
    batch = collect_batch(ctx, step, timer)
    loss_metrics, finite = update(ctx, batch, step, timer)
    ctx.writer.on_update(step, ctx.model)
    in_row = state.extra.get("nonfinite_in_row", 0)
    if finite:
        state.extra["nonfinite_in_row"] = 0
    else:
        state.nonfinite_steps += 1
        state.extra["nonfinite_in_row"] = in_row + 1
        if in_row + 1 >= ctx.cfg.stages.rl.max_nonfinite_in_row:
            raise NonFiniteLossError(
                f"{in_row + 1} consecutive RL steps had a non-finite loss (last at step {step}); "
                "lower algo.lr or check the inputs (stages.rl.max_nonfinite_in_row sets the limit)")
    metrics = reduce_step_metrics(step_metrics(ctx, batch, timer))  # over the ranks' trajectories
    metrics.update({k: v for k, v in loss_metrics.items() if math.isfinite(v)})
    metrics["train/nonfinite_steps"] = state.nonfinite_steps
    return metrics, batch


def _evaluate(ctx: Components, logger: RunLogger, out: Path, step: int, batch) -> dict[str, float]:
    """Panels, per-turn records (evaluation episodes plus the step's training batch) and
    sample skills, logged as artifacts."""
    timer = PhaseTimer()
    with timer("eval"), generating(ctx):  # data parallel: every rank plays the whole panels
        metrics, records = evaluate_panels(ctx, step)
    metrics.update(timer.metrics())
    frames = [records]
    if batch is not None:
        frames += _train_records(ctx, step, batch)
        if batch.hindsights:
            logger.log_text(_skills_text(ctx, batch), f"skills/step_{step:06d}.txt")
    _write_records(ctx, logger, out, step, frames)
    logger.log_metrics(step, metrics)
    return metrics


def _train_records(ctx: Components, step: int, batch) -> list[pd.DataFrame]:
    """The step's training turns as records, every rank's (a collective under ranks: every
    rank calls it at the same steps)."""
    train = build_records(step, "train", batch.trajectories, batch.group_ids, batch.hindsights,
                          batch.deltas, batch.old.turn_ids, batch.old.mask, ctx.cfg.algo.beta_opd)
    if active():  # every rank's trajectories, numbered as rows of the step's global batch
        train["traj"] += global_rows(len(batch.trajectories))[1]
        return gather_objects(train)
    return [train]


def _write_records(ctx: Components, logger: RunLogger, out: Path, step: int, frames: list[pd.DataFrame]) -> None:
    if ctx.cfg.tracking.records and is_main():
        path = out / "records" / f"step_{step:06d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pd.concat(frames, ignore_index=True).to_parquet(path, index=False)
        logger.log_artifact(path, "records")


def _skills_text(ctx: Components, batch, limit: int = 8) -> str:
    """The first ``limit`` trajectories' hindsight as the teacher saw it: per teacher context
    of the method, the exact text spliced in (``skill_texts``), or why there was none; the
    writer's raw output when it was malformed."""
    used = {context: skill_texts(ctx, context, batch) for context in ctx.spec.skills}
    blocks = []
    for i, (traj, h) in enumerate(list(zip(batch.trajectories, batch.hindsights))[:limit]):
        lines = [f"# task {traj.task.id} success={traj.episode.success} valid={h.valid} "
                 f"error_turn={h.error_turn}"]
        for context, texts in used.items():
            lines.append(f"{context}: {texts[i] or _no_skill(h, context)}")
        if not h.valid:
            raw = " ".join(h.raw.split())
            lines.append(f"writer output: {raw[:400] or '(empty)'}")
        blocks.append("\n".join(lines) + "\n")
    return "\n".join(blocks)


def _no_skill(h, context: str) -> str:
    if not h.valid:
        return "(none: the writer's output was malformed; no skill for this trajectory)"
    return f"(none: the writer gave no {context} skill)"


def evaluate(cfg: RunConfig, checkpoint: str | None = None) -> dict[str, float]:
    """Evaluate a checkpoint (default: the newest in ``output.dir``) on the fixed panels."""
    cfg = resolve(cfg)
    path = checkpoint or latest_checkpoint(cfg.output.dir)
    if path is None:
        raise FileNotFoundError(f"no checkpoint under {cfg.output.dir}/checkpoints; pass --checkpoint")
    ctx = build_components(cfg, init_from=str(require_model_folder(str(path), "checkpoint")))
    metrics, _ = evaluate_panels(ctx, step=0)
    return metrics
