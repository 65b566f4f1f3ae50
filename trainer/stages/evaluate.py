"""Evaluation on the environment's fixed panels (never sampled), without skills except for
methods whose spec keeps a library skill at evaluation (Skill-Prompt, Skill-GRPO*)."""

from __future__ import annotations

import dataclasses

import pandas as pd

from trainer.episodes.records import build_records
from trainer.episodes.rollout import Sampling, collect
from trainer.models.generation import request_seed
from trainer.parallel.batches import share_block
from trainer.parallel.group import all_sum, gather_objects
from trainer.run.components import Components


def panel_tasks(ctx: Components, split: str):
    tasks = ctx.prompt_env.panel(split)
    limit = ctx.cfg.eval.max_tasks
    return tasks[:limit] if limit else tasks


def evaluate_panels(ctx: Components, step: int) -> tuple[dict[str, float], pd.DataFrame]:
    """Play every task of each ``eval.splits`` panel ``eval.samples`` times (once when
    greedy); returns ``eval/<split>/*`` metrics, means over all episodes, and the per-turn
    records of the episodes (a task's samples share its group id).

    Every evaluation of a run draws the same seeds (the run seed, the split, the turn and the
    episode; never the step): common random numbers, so two evaluations of the same weights
    agree and the difference between two steps' evaluations is not inflated by sampling
    noise of its own.  Data-parallel ranks each play a block of a panel's episodes, seeded
    as one process seeds them; the metrics are over all blocks and every rank gets all the
    records."""
    cfg = ctx.cfg
    sampling = Sampling(cfg.rollout.max_new_tokens, cfg.eval.temperature, 1.0)
    samples = cfg.eval.samples if cfg.eval.temperature > 0 else 1  # greedy episodes are identical
    metrics, frames = {}, []
    for split in cfg.eval.splits:
        panel = panel_tasks(ctx, split)
        tasks = [task for task in panel for _ in range(samples)]
        lo, hi, split_up = share_block(len(tasks))
        tasks = tasks[lo:hi]
        skills = [ctx.library.retrieve(t) for t in tasks] if ctx.spec.eval_skill else None
        trajectories, _ = collect(ctx.make_env, tasks, ctx.builder, ctx.backend, sampling, skills,
                                  seed=request_seed("eval", cfg.seed, split), first=lo)
        episodes = [t.episode for t in trajectories]
        turns = [t for e in episodes for t in e.turns]
        counts = [sum(e.success for e in episodes), sum(e.score for e in episodes),
                  sum(len(e.turns) for e in episodes), len(episodes), sum(not t.valid for t in turns),
                  sum(bool(t.info.get("matched")) for t in turns), len(turns)]
        success, score, length, n, invalid, matched, n_turns = all_sum(counts) if split_up else counts
        n, n_turns = max(1, n), max(1, n_turns)
        metrics[f"eval/{split}/success"] = success / n
        metrics[f"eval/{split}/score"] = score / n
        metrics[f"eval/{split}/episode_length"] = length / n
        metrics[f"eval/{split}/invalid_rate"] = invalid / n_turns
        metrics[f"eval/{split}/matched_rate"] = matched / n_turns
        frame = build_records(step, split, trajectories, [(lo + i) // samples for i in range(len(trajectories))])
        if lo:
            frame["traj"] += lo  # rows of the whole panel
        frames += gather_objects(frame) if split_up else [frame]
    return metrics, pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def evaluate_policy(ctx: Components, max_tasks: int) -> dict[str, float]:
    """Success of the current policy on every eval panel of the env (the first
    ``max_tasks`` tasks of each), greedy and at the config's evaluation temperature:
    ``{"eval_seen/success/greedy": ..., "eval_seen/success/t0.7": ..., ...}``."""
    cfg, out = ctx.cfg, {}
    splits = tuple(s for s in ctx.prompt_env.splits if s != cfg.env.train_split)
    for temperature in sorted({0.0, cfg.eval.temperature}):
        ctx.cfg = dataclasses.replace(cfg, eval=dataclasses.replace(
            cfg.eval, splits=splits, max_tasks=max_tasks, temperature=temperature))
        metrics, _ = evaluate_panels(ctx, step=0)
        mode = "greedy" if temperature == 0 else f"t{temperature:g}"
        out.update({f"{k.removeprefix('eval/')}/{mode}": v for k, v in metrics.items()})
    ctx.cfg = cfg
    ctx.model.train()
    return out
