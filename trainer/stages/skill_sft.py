"""SEED's Stage 1, hindsight-skill SFT (SEED review, Stage 1): rollouts of the base
policy annotated by a strong writer (an external endpoint when configured, else
the privileged oracle standing in for it), valid pairs kept, trajectory -> skill
fine-tuning with NLL; the self writer's validity on a fixed panel; and the opt-in replay
of Stage-1 examples in the RL update (``stages.skill_sft.replay``, not in SEED).

Data parallel (the policy sharded before Stage 1, as for RL): each rank plays and annotates
its block of Stage 1's rollouts (so the annotator sees each trajectory once), the examples
are gathered in rollout order and every rank trains on its block of each minibatch
(:func:`~trainer.stages.sft.sft`); the writer panel is split the same way.
"""

from __future__ import annotations

import random

from envs.base import demo_policy, error_turn, run_episode
from trainer.episodes.rollout import Sampling, collect
from trainer.episodes.samples import Trajectory
from trainer.episodes.scoring import MicroBatching
from trainer.hindsight.writers import ExternalWriter, OracleWriter
from trainer.models.generation import request_seed
from trainer.parallel.batches import share_block
from trainer.parallel.group import all_sum, gather_objects, is_main, rank, rank_parts, world
from trainer.run.components import Components, generating, policy_writer
from trainer.stages.sft import demo_trajectory, nll_backward, sft, writer_example


def skill_sft(ctx: Components, progress=None) -> dict[str, float]:
    """SEED Stage 1: annotate base-policy rollouts with a strong writer, keep valid pairs,
    fine-tune trajectory -> skill.  Data parallel: see the module docstring; rollout i is
    seeded as one process seeds it, the annotator's requests with the rank's own seeds."""
    st, cfg = ctx.cfg.stages.skill_sft, ctx.cfg
    rng = random.Random(f"sft:{cfg.seed}")
    tasks = rng.sample(ctx.train_tasks, min(st.tasks, len(ctx.train_tasks)))
    batch = [t for t in tasks for _ in range(st.rollouts_per_task)]
    lo, hi, split = share_block(len(batch))  # fewer rollouts than ranks: all play, rank 0 annotates
    sampling = Sampling(cfg.rollout.max_new_tokens, cfg.rollout.temperature, cfg.rollout.top_p)
    with generating(ctx):
        trajectories, _ = collect(ctx.make_env, batch[lo:hi], ctx.builder, ctx.backend, sampling,
                                  seed=request_seed("stage1", cfg.seed), first=lo)
    if not (split or is_main()):
        trajectories = []
    annotator = ExternalWriter(ctx.prompt_env.domain_description(), cfg.writer) if cfg.writer.endpoint \
        else OracleWriter(ctx.make_env)
    hindsights = annotator.write(trajectories, seed=request_seed("stage1-write", cfg.seed, *rank_parts()))
    pairs = [(t.episode, h) for t, h in zip(trajectories, hindsights) if h.valid and h.boundary_valid]
    examples = [e for part in gather_objects([writer_example(ctx, e, h) for e, h in pairs]) for e in part]
    played, successes = all_sum([len(trajectories), sum(t.episode.success for t in trajectories)])
    metrics = {"sft/acceptance_rate": len(examples) / max(1, played),
               "sft/rollout_success": successes / max(1, played)}
    if examples:
        metrics.update(sft(ctx.model, examples, epochs=st.epochs, lr=st.lr, batch_size=st.batch_size,
                           seed=cfg.seed, progress=progress, vision=ctx.builder.vision,
                           micro_batch=MicroBatching.of(cfg.algo)))
        if st.replay > 0:
            ctx.replay = examples
    return metrics


def replay_backward(ctx: Components, key: str) -> dict[str, float]:
    """Stage-1 writer replay (``stages.skill_sft.replay``; a departure from SEED): backpropagate
    the weight times the token-mean NLL of ``replay_batch`` of ``ctx.replay`` drawn at random
    (``key`` names the minibatch, so each draws its own, the same on a rerun) into the
    gradients of the RL minibatch about to step.  Data parallel: every rank holds all of
    Stage 1's examples (gathered) and draws its own from them, its loss divided by the ranks
    (the gradients are summed).  Returns ``{"loss/replay"}``, the NLL (the ranks' mean), or {} when replay is
    off or Stage 1 kept no example."""
    st = ctx.cfg.stages.skill_sft
    if st.replay <= 0 or not ctx.replay:
        return {}
    rng = random.Random(f"replay:{ctx.cfg.seed}:{key}:{rank()}")
    drawn = [ctx.replay[i] for i in rng.sample(range(len(ctx.replay)), min(st.replay_batch, len(ctx.replay)))]
    nll = nll_backward(ctx.model, drawn, scale=st.replay / world(), micro_batch=MicroBatching.of(ctx.cfg.algo),
                       vision=ctx.builder.vision)
    return {"loss/replay": all_sum([nll])[0] / world()}


# -- the self writer's validity on a fixed panel -------------------------------------------
WRITER_PANEL_SIZE = 64  # the default of stages.skill_sft.writer_panel


WRITER_PANEL_EPSILON = 0.3  # demonstrator mistakes, so that about half the episodes fail


def writer_panel(ctx: Components, size: int = WRITER_PANEL_SIZE) -> list[Trajectory]:
    """A fixed panel of ``size`` trajectories for measuring a writer: the demonstrator with
    mistakes on the first tasks of the env's first evaluation split (same every run)."""
    env = ctx.make_env()
    split = next(s for s in env.splits if s != ctx.cfg.env.train_split)
    act = demo_policy(WRITER_PANEL_EPSILON, seed="writer-panel")
    return [demo_trajectory(ctx, run_episode(env, task, act)) for task in env.panel(split)[:size]]


def writer_validity(ctx: Components, size: int = WRITER_PANEL_SIZE) -> dict[str, float]:
    """How often the policy's own hindsight output is usable on :func:`writer_panel`:
    ``writer/panel_valid_rate`` (parses, names a real turn, non-empty skill, boundary included),
    ``writer/invalid_rate`` (its complement) and ``writer/panel_boundary_agreement`` (valid
    outputs on failed episodes whose error turn is the true first unrecovered error).  Data
    parallel: each rank writes its block of the panel (with its own seeds) and the counts are
    summed."""
    trajectories = writer_panel(ctx, size)
    lo, hi, split = share_block(len(trajectories))
    trajectories = trajectories[lo:hi]
    with generating(ctx):
        hindsights = policy_writer(ctx).write(
            trajectories, seed=request_seed("writer-panel", ctx.cfg.seed, *rank_parts()))
    valid = [h.valid and h.boundary_valid for h in hindsights]
    failed = [(t, h) for t, h, ok in zip(trajectories, hindsights, valid) if ok and not t.episode.success]
    counts = [sum(valid), len(valid), sum(h.error_turn == error_turn(t.episode) for t, h in failed), len(failed)]
    n_valid, n, agree, n_failed = all_sum(counts) if split else counts
    rate = n_valid / max(1, n)
    return {"writer/panel_valid_rate": rate, "writer/invalid_rate": 1.0 - rate,
            "writer/panel_boundary_agreement": agree / max(1, n_failed)}
