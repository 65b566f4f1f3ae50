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

import pandas as pd
import torch

from envs.recovery import Perturbation, first_action_class, recovery_suite
from trainer.episodes.rollout import Sampling, collect
from trainer.episodes.scoring import score_trajectories
from trainer.run.components import Components


def suite_for(ctx: Components, split: str, tasks: int) -> list[Perturbation]:
    """The first ``tasks`` perturbations of panel ``split`` (tasks without one are skipped)."""
    ctx.prompt_env.check_split(split)
    suite = recovery_suite(ctx.make_env, ctx.prompt_env.panel(split))
    return suite[:tasks] if tasks else suite


@torch.no_grad()
def continuations(ctx: Components, suite: Sequence[Perturbation], repeats: int,
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
