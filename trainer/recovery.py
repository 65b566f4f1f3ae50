"""ETRO's post-error recovery protocol (App. C.2, Table 6) for trained actors.

Every actor (a checkpoint) starts from the same perturbed states of held-out tasks
(:mod:`envs.recovery`: the expert's reference trajectory up to a pre-registered,
recoverable wrong action, played as forced turns) and plays ``repeats`` continuations
without hindsight skills at the evaluation temperature.  Per continuation: recovery
success and score, the class of its first action (recovers / invalid / wrong-branch
continuation, from the distance trace) and the mean entropy of the policy over the tokens
of that first response (nats per token).

    hindsight recovery CONFIG --actor A --actor B [--label ...] [--tasks 20]

writes ``recovery.csv`` (one row per continuation) and the Table 6 layout
(``recovery.md/.tex/.json``, :func:`reports.diagnostic_tables.recovery_table`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import torch

from envs.recovery import Perturbation, first_action_class, recovery_suite
from trainer.context import Context
from trainer.rollout import Sampling, collect
from trainer.scoring import score_trajectories


def suite_for(ctx: Context, split: str, tasks: int) -> list[Perturbation]:
    """The first ``tasks`` perturbations of panel ``split`` (tasks without one are skipped)."""
    ctx.prompt_env.check_split(split)
    suite = recovery_suite(ctx.make_env, ctx.prompt_env.panel(split))
    return suite[:tasks] if tasks else suite


@torch.no_grad()
def continuations(ctx: Context, suite: Sequence[Perturbation], repeats: int,
                  seed: int = 0) -> pd.DataFrame:
    """One row per (perturbation, repeat): task_id, repeat, turn (where the actor takes
    over), success, score, first_action, first_class, wrong_branch, invalid_first, recovers,
    entropy."""
    cfg = ctx.cfg
    sampling = Sampling(cfg.rollout.max_new_tokens, cfg.eval.temperature, 1.0)
    env = ctx.make_env()
    plan = [p for p in suite for _ in range(repeats)]
    forced = {p.task.id: p.responses(env) for p in suite}
    trajectories, _ = collect(ctx.make_env, [p.task for p in plan], ctx.builder, ctx.backend,
                              sampling, forced=[forced[p.task.id] for p in plan], seed=seed)
    was_training = ctx.model.training
    ctx.model.eval()
    scored, _ = score_trajectories(ctx.model, ctx.builder, trajectories, None, micro_batch=16,
                                   with_entropy=True)
    ctx.model.train(was_training)
    rows = []
    for i, (p, traj) in enumerate(zip(plan, trajectories)):
        k = len(p.actions)
        turns = traj.episode.turns
        first = turns[k] if len(turns) > k else None
        kind = first_action_class(first) if first is not None else "none"
        on_first = (scored.turn_ids[i] == k) & scored.mask[i].bool()
        entropy = float(scored.entropy[i][on_first].mean()) if on_first.any() else math.nan
        rows.append({"task_id": p.task.id, "repeat": i % repeats, "turn": k,
                     "success": float(traj.episode.success), "score": float(traj.episode.score),
                     "first_action": first.action if first is not None else "",
                     "first_class": kind, "wrong_branch": float(kind == "wrong_branch"),
                     "invalid_first": float(kind == "invalid"),
                     "recovers": float(kind == "recovers"), "entropy": entropy})
    return pd.DataFrame(rows)


def recovery_command(args) -> int:
    """Run ETRO's recovery protocol on checkpoints; write the Table 6 layout."""
    from analysis.recovery import summarize_recovery
    from reports.diagnostic_tables import recovery_table
    from reports.tables import Provenance, to_markdown, write_table
    from trainer.config import ConfigError, load_config, require_model_folder, resolve
    from trainer.context import build_context
    from trainer.tracking import git_sha

    labels = args.label or [Path(c).name for c in args.actor]
    if len(labels) != len(args.actor):
        raise ConfigError(f"--label: {len(labels)} labels for {len(args.actor)} actors")
    folders = [require_model_folder(checkpoint, "--actor") for checkpoint in args.actor]
    cfg = resolve(load_config(args.config, args.overrides))
    out = Path(args.recovery_dir)
    frames, suite = [], None
    for label, checkpoint, folder in zip(labels, args.actor, folders):
        ctx = build_context(cfg, init_from=str(folder))
        suite = suite if suite is not None else suite_for(ctx, args.split, args.tasks)
        if not suite:
            raise ConfigError(f"--split {args.split}: no task has a recoverable perturbation "
                              "(the env needs admissible actions and a distance to the goal)")
        print(f"{label}: {len(suite)} perturbed tasks x {args.repeats} continuations")
        frames.append(continuations(ctx, suite, args.repeats, seed=cfg.seed).assign(
            label=label, checkpoint=str(checkpoint)))
    frame = pd.concat(frames, ignore_index=True)
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "recovery.csv", index=False)
    table = recovery_table(summarize_recovery(frame), split=args.split)
    stamp = pd.Timestamp.now(tz="UTC").isoformat(timespec="seconds")
    write_table(table, out / "recovery", Provenance(str(args.config), git_sha(), stamp))
    print(to_markdown(table))
    print(f"written: {out / 'recovery.csv'}, {out / 'recovery.md'} (.tex, .json)")
    return 0
