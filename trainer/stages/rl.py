"""One RL update (SEED Algorithm 1; ETRO Sec. 3.4) as a short sequence of named phases.

rollout -> write -> score (student/behaviour) -> reference -> teacher -> advantage ->
update.  Everything method-specific comes from the :class:`~trainer.algos.MethodSpec` and
the registry (``token_advantages``, ``policy_loss_terms``); nothing here branches on names.

Teacher log-probs (DESIGN.md): the resolved ``algo.teacher`` (the method's default unless
set) decides: ``old`` scores each skill context once with the frozen policy before the
update (ETRO, OPID); ``current`` scores the method's primary context with the live policy
inside each minibatch (SEED, SDAR), and the Delta of the first epoch is kept for the
per-turn records; ``initial`` does the same with the RL initialisation (not in either paper:
a teacher that cannot forget the lesson the policy is distilling). All detached. A row gets
OPD for a context exactly when it has that context's text: the privileged context always (it
never depends on a writer), the Positive skill when the writer's output parsed, the Negative
skill when it also named a boundary; a valid output without a (valid) boundary keeps
Positive throughout (ETRO's k = infinity).

Same history for teacher and student (DESIGN.md, "Skill splicing"): a teacher sequence is
the student's, history truncation included, with the context's text spliced in on top.  That
text has its own budget, ``writer.max_skill_tokens``: a longer one is cut once per step
(``skill/cut_count``, ``skill/cut_rate``), never an error.
"""

from __future__ import annotations

import contextlib
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from envs.base import Hindsight
from trainer.algos import (
    CreditInputs,
    LossInputs,
    aggregation_weights,
    policy_loss_terms,
    token_advantages,
)
from trainer.episodes.rollout import Sampling, collect
from trainer.episodes.samples import Trajectory, assert_same_actions, cut_skill, join_skills
from trainer.episodes.scoring import (
    ActionBatch,
    ActionIndex,
    MicroBatching,
    TopK,
    action_index,
    from_actions,
    gather_actions,
    score_trajectories,
    sequence_logprobs,
    to_actions,
)
from trainer.models.generation import request_seed
from trainer.models.handover import free_cached_memory
from trainer.parallel.batches import (
    combine_loss_metrics,
    global_counts,
    global_rows,
    most,
    share_tasks,
)
from trainer.parallel.group import all_true, rank_parts
from trainer.parallel.shard import norm_value, unsharded
from trainer.run.components import Components, generating
from trainer.stages.gradient_parts import GradientParts
from trainer.stages.phases import PhaseTimer
from trainer.stages.skill_sft import replay_backward


@dataclass
class StepBatch:
    """What the update and the per-turn records need from one step's data phase."""

    trajectories: list[Trajectory]
    group_ids: list[int]
    rollout_skills: list[str | None] | None
    hindsights: list[Hindsight] | None
    old: ActionBatch
    advantages: torch.Tensor
    logp_ref: torch.Tensor | None
    teacher: dict[str, torch.Tensor]
    opd_rows: dict[str, torch.Tensor]
    deltas: dict[str, torch.Tensor]
    generated_tokens: int = 0
    adv_metrics: dict[str, float] = field(default_factory=dict)
    # context -> each row's teacher text within writer.max_skill_tokens (None = none)
    texts: dict[str, list[str | None]] = field(default_factory=dict)
    skill_metrics: dict[str, float] = field(default_factory=dict)
    # tokens of the student's scoring contexts, and those of them that stand for images
    context_tokens: int = 0
    image_tokens: int = 0


LIVE_TEACHERS = ("current", "initial")  # scored inside the update, per micro-batch


def teacher_mode(ctx: Components) -> str:
    """The resolved ``algo.teacher`` (``old`` / ``current`` / ``initial``): the config's value,
    else the method's default (never the spec's own value over the config's)."""
    teacher = ctx.cfg.algo.teacher
    return ctx.spec.teacher if teacher is None else teacher


def context_skills(ctx: Components, context: str, trajectories, hindsights) -> list[str | None]:
    """Each trajectory's own text for teacher context ``context`` (None = none): the
    privileged context whatever the writer said; the writer's Positive skill when its output
    parsed; its Negative skill when it also named a boundary."""
    texts = []
    for traj, h in zip(trajectories, hindsights or [None] * len(trajectories)):
        if context == "privileged":
            texts.append(ctx.privileged(traj.task))
        elif h is None or not h.valid:
            texts.append(None)
        else:
            texts.append((h.positive_skill if context == "positive" else h.negative_skill) or None)
    return texts


def budgeted_texts(ctx: Components, contexts, trajectories, hindsights) -> tuple[dict, dict[str, float]]:
    """Each context's :func:`context_skills`, cut to ``writer.max_skill_tokens`` tokens, and
    ``skill/cut_count`` (texts cut, all contexts) and ``skill/cut_rate`` (of the texts)."""
    budget = ctx.cfg.writer.max_skill_tokens
    texts, cut, present = {}, 0, 0
    for context in contexts:
        pairs = [cut_skill(ctx.tokenizer, t, budget)
                 for t in context_skills(ctx, context, trajectories, hindsights)]
        texts[context] = [t for t, _ in pairs]
        cut += sum(c for _, c in pairs)
        present += sum(t is not None for t, _ in pairs)
    metrics = {"skill/cut_count": float(cut), "skill/cut_rate": cut / present if present else 0.0}
    return texts, metrics


def _added_texts(ctx: Components, context: str, batch: StepBatch) -> list[str | None]:
    """The teacher's own text per row for ``context`` (budgeted when collected)."""
    if context in batch.texts:
        return batch.texts[context]
    return budgeted_texts(ctx, [context], batch.trajectories, batch.hindsights)[0][context]


def skill_texts(ctx: Components, context: str, batch: StepBatch) -> list[str | None]:
    """The text spliced into each trajectory's context for teacher context ``context``:
    the rollout skill (Skill-GRPO) joined with :func:`context_skills` within the skill budget
    (None = no skill)."""
    texts = _added_texts(ctx, context, batch)
    return [join_skills(r, s) for r, s in zip(batch.rollout_skills or [None] * len(texts), texts)]


def _score(ctx: Components, model, trajectories, skills, grad=False, entropy=False) -> tuple[ActionBatch, list]:
    """Scored [B, T] action tokens and the sequences they came from."""
    return score_trajectories(model, ctx.builder, trajectories, skills, micro_batch=MicroBatching.of(ctx.cfg.algo),
                              grad=grad, with_entropy=entropy, temperature=ctx.cfg.rollout.temperature)


def _teacher_logp(ctx: Components, model, batch: StepBatch, context: str, student_seq, rows=None) -> torch.Tensor:
    """Teacher log-probs [B, T] of ``context`` for ``rows`` (default all); rows without that
    skill get the student's own log-probs (Delta = 0).  ``student_seq`` are the student
    sequences of the same rows, already built by the scoring pass; the teacher must score
    identical action tokens (asserted), in the student's context (rollout skill and history
    truncation) with the context's text added."""
    return _teacher_scores(ctx, model, batch, context, student_seq, rows).logp


def _teacher_scores(ctx: Components, model, batch: StepBatch, context: str, student_seq, rows=None,
                    top_k: int = 0) -> ActionBatch:
    """:func:`_teacher_logp` as the whole :class:`ActionBatch`; ``top_k`` adds the teacher's
    k most likely ids and their log-probs per action token (OPSD's distribution matching)."""
    rows = list(range(len(batch.trajectories))) if rows is None else rows
    added = _added_texts(ctx, context, batch)
    student = batch.rollout_skills or [None] * len(batch.trajectories)
    teacher, teacher_seq = score_trajectories(
        model, ctx.builder, [batch.trajectories[i] for i in rows], [student[i] for i in rows],
        micro_batch=MicroBatching.of(ctx.cfg.algo), added_skills=[added[i] for i in rows], with_entropy=False,
        top_k=top_k,
        temperature=ctx.cfg.rollout.temperature)
    assert_same_actions(student_seq, teacher_seq)
    return teacher


def draw_tasks(rng: random.Random, tasks: list, n: int, groups: dict[str, list] | None = None) -> list:
    """``n`` of ``tasks`` without replacement: uniformly (``rng.sample``), or with ``groups``
    (family -> its tasks, :func:`~trainer.run.components.family_groups`) evenly over the
    families, the remainder from families drawn at random, in a shuffled order
    (``rollout.task_draw: family``)."""
    if groups is None:
        return rng.sample(tasks, n)
    names = sorted(groups)
    counts = dict.fromkeys(names, n // len(names))
    for name in rng.sample(names, n % len(names)):
        counts[name] += 1
    drawn = [t for name in names for t in rng.sample(groups[name], counts[name])]
    rng.shuffle(drawn)
    return drawn


def collect_batch(ctx: Components, step: int, timer: PhaseTimer) -> StepBatch:
    """Phases rollout, write, score, reference, teacher (old), advantage."""
    cfg, spec = ctx.cfg, ctx.spec
    rng = random.Random(f"tasks:{cfg.seed}:{step}")
    tasks, first = share_tasks(draw_tasks(rng, ctx.train_tasks, cfg.rollout.tasks_per_step, ctx.train_families))
    batch_tasks = [t for t in tasks for _ in range(cfg.rollout.group_size)]
    group_ids = [first + g for g in range(len(tasks)) for _ in range(cfg.rollout.group_size)]
    rollout_skills = [ctx.library.retrieve(t) for t in batch_tasks] if spec.rollout_skill else None
    sampling = Sampling(cfg.rollout.max_new_tokens, cfg.rollout.temperature, cfg.rollout.top_p)
    with generating(ctx):
        with timer("rollout"):
            trajectories, generated = collect(ctx.make_env, batch_tasks, ctx.builder, ctx.backend, sampling,
                                              rollout_skills, seed=request_seed("rollout", cfg.seed, step,
                                                                                *rank_parts()))
        with timer("write"):
            hindsights = ctx.writer.write(trajectories, seed=request_seed("write", cfg.seed, step, *rank_parts())) \
                if spec.skills else None
    logp_ref = None
    with unsharded(ctx.model, ctx.reference):  # sharded models: whole, so ranks need not pair forwards
        with timer("score"):
            old, student_seq = _score(ctx, ctx.model, trajectories, rollout_skills, entropy=True)
        with ctx.kl_reference() as reference:  # a frozen copy, or the base (LoRA adapters off)
            if reference is not None:
                with timer("reference"):
                    logp_ref = _score(ctx, reference, trajectories, rollout_skills)[0].logp
    texts, skill_metrics = budgeted_texts(ctx, spec.skills, trajectories, hindsights)
    rows = {c: torch.tensor([t is not None for t in texts[c]], device=old.logp.device)
            for c in spec.skills}  # context -> [B] bool
    batch = StepBatch(trajectories, group_ids, rollout_skills, hindsights, old, old.logp.new_zeros(()), logp_ref,
                      {}, rows, {}, generated, texts=texts,
                      skill_metrics=skill_metrics if spec.skills else {},
                      context_tokens=sum(len(s) for s in student_seq),
                      image_tokens=_image_tokens(ctx, student_seq))
    if spec.skills and teacher_mode(ctx) == "old":
        with timer("teacher"), unsharded(ctx.model):
            for context in spec.skills:
                batch.teacher[context] = _teacher_logp(ctx, ctx.model, batch, context, student_seq)
    for context, logp in batch.teacher.items():
        batch.deltas[context] = (logp - old.logp) * old.mask * rows[context][:, None]  # [B, T]
    with timer("advantage"):
        batch.advantages, batch.adv_metrics = token_advantages(spec, credit_inputs(batch, step, cfg.seed), cfg.algo)
    return batch


def _image_tokens(ctx: Components, sequences) -> int:
    """Image placeholder tokens in ``sequences`` (0 without images)."""
    vision = ctx.builder.vision
    if vision is None:
        return 0
    return sum(i == vision.image_token_id for s in sequences for i in s.input_ids)


def credit_inputs(batch: StepBatch, step: int, seed: int) -> CreditInputs:
    episodes = [t.episode for t in batch.trajectories]
    device = batch.old.logp.device
    error_turn = [(-1 if h is None or not h.valid or h.error_turn is None else h.error_turn)
                  for h in (batch.hindsights or [None] * len(episodes))]
    return CreditInputs(
        rewards=torch.tensor([e.total_reward for e in episodes], dtype=torch.float32, device=device),
        group_ids=torch.tensor(batch.group_ids, device=device),
        mask=batch.old.mask, turn_ids=batch.old.turn_ids,
        success=torch.tensor([e.success for e in episodes], device=device),
        error_turn=torch.tensor(error_turn, device=device),
        delta_pos=batch.deltas.get("positive"), delta_neg=batch.deltas.get("negative"),
        delta_priv=batch.deltas.get("privileged"),
        step=step, generator=torch.Generator().manual_seed(seed * 7919 + step),
    )


def update(ctx: Components, batch: StepBatch, step: int, timer: PhaseTimer) -> tuple[dict[str, float], bool]:
    """PPO epochs over trajectory minibatches, one optimizer step each.  Returns (mean loss
    metrics, finite)."""
    cfg = ctx.cfg
    n = len(batch.trajectories)
    total, offset = global_rows(n)  # data parallel: this rank holds rows offset .. offset + n
    size = cfg.algo.minibatch_size or total
    order = list(range(total))
    random.Random(f"mb:{cfg.seed}:{step}").shuffle(order)
    sums: dict[str, float] = {}
    count, finite = 0, True
    with timer("update"):
        for epoch in range(cfg.algo.ppo_epochs):
            for start in range(0, total, size):
                rows = [i - offset for i in order[start:start + size] if offset <= i < offset + n]
                metrics, ok = _minibatch(ctx, batch, rows, timer, record=epoch == 0,
                                         key=f"{step}:{epoch}:{start}")
                finite &= ok
                for k, v in metrics.items():
                    sums[k] = sums.get(k, 0.0) + v
                count += 1
    free_cached_memory()  # the update's gradients and activations, before the engine wakes
    return {k: v / max(count, 1) for k, v in sums.items()}, finite


@dataclass
class _Minibatch:
    """One PPO minibatch's sequences and what its micro-batches gather from the step's
    [B, T] tensors: the student's (and, when scored inside the update, the teacher's)
    sequences, where their tokens are (:class:`~trainer.scoring.ActionIndex`), the
    trajectory rows they belong to, and each token's share of the minibatch's loss."""

    student: list
    teacher: list | None
    index: ActionIndex
    traj_rows: torch.Tensor
    weights: torch.Tensor  # [B, T], the minibatch's rows filled (aggregation_weights)


def _plan(ctx: Components, batch: StepBatch, rows: list[int]) -> _Minibatch:
    """Build the minibatch's sequences and aggregation weights (computed over the whole
    minibatch, on every rank with its global counts, so that its micro-batches' losses add up
    to the minibatch's loss).  A rank that holds no row of it plans its first trajectory,
    weighted 0 (it runs only to pair the sharded model's collectives)."""
    held = rows or [0]
    trajs = [batch.trajectories[i] for i in held]
    skills = None if batch.rollout_skills is None else [batch.rollout_skills[i] for i in rows]
    student = ctx.builder.build_batch(trajs, skills)
    teacher = None
    if ctx.spec.skills and teacher_mode(ctx) in LIVE_TEACHERS:
        added = _added_texts(ctx, ctx.spec.skills[0], batch)
        teacher = ctx.builder.build_batch(trajs, skills, [added[i] for i in rows])
        assert_same_actions(student, teacher)
    traj_rows = torch.tensor(held, device=batch.old.mask.device)
    mask = batch.old.mask[traj_rows] * float(bool(rows))
    tokens, counted = global_counts(mask)  # summed over the ranks (None: one process)
    weights = torch.zeros_like(batch.old.mask)
    weights[traj_rows] = aggregation_weights(mask, ctx.cfg.algo.loss_agg, tokens=tokens, rows=counted)
    return _Minibatch(student, teacher, action_index(student, len(held)), traj_rows, weights)


def _minibatch(ctx: Components, batch: StepBatch, rows: list[int], timer: PhaseTimer,
               record: bool = False, key: str = "") -> tuple[dict[str, float], bool]:
    """One PPO minibatch: forward and backward per micro-batch (``algo.micro_batch_tokens`` or
    ``algo.micro_batch_size``, :class:`~trainer.episodes.scoring.MicroBatching`; gradient
    accumulation), each micro-batch's loss weighted by its tokens' share
    of the minibatch's aggregation (``algo.loss_agg``), so the accumulated gradient is that of
    one backward over the minibatch; then the Stage-1 writer replay when it is on
    (:func:`~trainer.stages.skill_sft.replay_backward`, its draw named by ``key``) and one
    clipped optimizer step.  ``record``: keep the current teacher's Delta of these rows in
    ``batch.deltas`` (the per-turn records read it).

    Data parallel: every rank runs as many micro-batches as the busiest one (the extra ones
    repeat one of its sequences at weight 0; a token budget cuts each rank's sequences into
    its own number of them), the finite check and the metrics are global."""
    cfg = ctx.cfg
    plan = _plan(ctx, batch, rows)
    ctx.optimizer.zero_grad(set_to_none=True)
    totals: dict[str, float] = {}
    tokens = 0.0
    parts = MicroBatching.of(cfg.algo).plan([len(s) for s in plan.student]) if rows else []
    padding = most(len(parts)) - len(parts)
    split = GradientParts(ctx.model.parameters()) if cfg.tracking.gradient_parts else None
    for i, part in enumerate(parts + [[0]] * padding):
        real = i < len(parts)
        terms, metrics, n_tokens = _micro_loss(ctx, batch, plan, part, timer, record and real)
        loss = sum(terms.values())
        if not all_true(bool(torch.isfinite(loss))):
            ctx.optimizer.zero_grad(set_to_none=True)
            return metrics, False
        if split is not None:
            split.backward(terms, scale=1.0 if real else 0.0)
        else:
            (loss if real else loss * 0.0).backward()
        if real:
            _accumulate(totals, metrics, n_tokens)
            tokens += n_tokens
    metrics = _finish(*combine_loss_metrics(totals, tokens, _SUMMED, _MAXED))
    if split is not None:
        metrics.update(split.restore())
    if cfg.stages.skill_sft.replay > 0:  # the same on every rank, as the check's collective needs
        with timer("replay"):
            replayed = replay_backward(ctx, key)
        if not all_true(all(math.isfinite(v) for v in replayed.values())):
            ctx.optimizer.zero_grad(set_to_none=True)
            return metrics, False
        metrics.update(replayed)
    if cfg.algo.grad_clip > 0:
        norm = torch.nn.utils.clip_grad_norm_(ctx.model.parameters(), cfg.algo.grad_clip)
        metrics["update/grad_norm"] = norm_value(norm)
    ctx.optimizer.step()
    ctx.optimizer.zero_grad(set_to_none=True)  # the gradients' memory is free until the next backward
    return metrics, True


@contextlib.contextmanager
def _teacher_model(ctx: Components) -> Iterator[torch.nn.Module]:
    """The model a live teacher scores with inside the update: the policy as it is now
    (``current``), or its RL initialisation (``initial``: :meth:`Components.initial_policy`)."""
    if teacher_mode(ctx) == "initial":
        with ctx.initial_policy() as model:
            yield model
    else:
        yield ctx.model


def teacher_rows(opd_mask: torch.Tensor, top_k: int = 0) -> list[int]:
    """The rows of a micro-batch (``opd_mask`` [n, A]) the current teacher must score: those
    with OPD tokens, as every other row's Delta is 0 whatever the teacher says; every row
    with OPSD's top-k support (the student's support comes from the teacher)."""
    if top_k:
        return list(range(opd_mask.shape[0]))
    return opd_mask.bool().any(dim=1).nonzero().flatten().tolist()


def _micro_loss(ctx: Components, batch: StepBatch, plan: _Minibatch, part: list[int], timer: PhaseTimer,
                record: bool) -> tuple[dict[str, torch.Tensor], dict[str, float], float]:
    """The weighted loss terms of one micro-batch (the sequences ``part`` of the minibatch;
    :func:`~trainer.algos.policy_loss_terms`), in the sequence-action layout [n, A]; its
    metrics and its number of tokens."""
    cfg, spec = ctx.cfg, ctx.spec
    index = plan.index.part(part)
    take = lambda x: None if x is None else gather_actions(x, index, plan.traj_rows)  # [B, T] -> [n, A]
    student = [plan.student[i] for i in part]
    top_k = cfg.algo.opsd_top_k if spec.opd_loss == "opsd" and plan.teacher is not None else 0
    opd_mask = None
    if spec.skills:
        opd_mask = take(batch.old.mask * batch.opd_rows[spec.skills[0]][:, None])
    teacher, support, scored_rows = None, None, []
    if plan.teacher is not None:  # the current (or initial) policy's teacher, scored on the same tokens
        scored_rows = teacher_rows(opd_mask, top_k)
    # data parallel: a rank without such rows still scores one (and drops it) while another
    # rank scores, so that the sharded model's forwards pair up across the ranks
    if plan.teacher is not None and most(len(scored_rows)):
        teacher_seqs = [plan.teacher[part[j]] for j in scored_rows or [0]]
        teacher_index = action_index(teacher_seqs)  # positions in its own sequences
        with timer("teacher"), torch.no_grad(), _teacher_model(ctx) as model:
            scored = sequence_logprobs(model, teacher_seqs, len(teacher_seqs), with_entropy=False,
                                       topk=TopK(k=top_k) if top_k else None,
                                       temperature=cfg.rollout.temperature, vision=ctx.builder.vision)
        if scored_rows:
            teacher = to_actions(scored[0], teacher_index)  # [n', A']
        if top_k and scored_rows:
            support = (to_actions(scored[2][0], teacher_index), to_actions(scored[2][1], teacher_index))
    topk = None
    if support is not None:  # the student on the teacher's support, in its own positions
        topk = TopK(ids=from_actions(support[1], index, max(len(s) for s in student)))
    scored = sequence_logprobs(ctx.model, student, len(part), grad=True, with_entropy=False, topk=topk,
                               temperature=cfg.rollout.temperature, vision=ctx.builder.vision)
    logp = to_actions(scored[0], index)  # [n, A], with gradient
    mask = index.mask.to(logp.device).float()
    if plan.teacher is not None and len(scored_rows) < len(part):  # the rest: Delta = 0
        full = logp.detach().clone()
        if scored_rows:
            full[torch.tensor(scored_rows, device=full.device), :teacher.shape[1]] = teacher.to(full.dtype)
        teacher = full
    if spec.skills:
        primary = spec.skills[0]
        if plan.teacher is None:
            teacher = take(batch.teacher[primary])
        elif record:
            _record_delta(batch, primary, plan, index,
                          torch.where(opd_mask.bool(), teacher - logp.detach(), 0.0))
    inputs = LossInputs(logp=logp, logp_old=take(batch.old.logp), advantages=take(batch.advantages),
                        mask=mask, logp_ref=take(batch.logp_ref), logp_teacher=teacher, opd_mask=opd_mask,
                        topk_logp=None if support is None else to_actions(scored[2][0], index),
                        topk_logp_teacher=None if support is None else support[0],
                        agg_weights=take(plan.weights))
    terms, metrics = policy_loss_terms(spec, inputs, cfg.algo)
    return terms, metrics, float(mask.sum())


# Loss metrics of a micro-batch that are its weighted share of the minibatch's loss (they add
# up over micro-batches), and those that are maxima; every other metric is a mean over the
# micro-batch's tokens, combined weighted by its tokens.
_SUMMED = ("loss/total", "loss/rl", "loss/opd", "ppo/pg_loss")


_MAXED = ("ppo/ratio_max",)


def _accumulate(totals: dict[str, float], metrics: dict[str, float], tokens: float) -> None:
    for key, value in metrics.items():
        if key in _SUMMED:
            totals[key] = totals.get(key, 0.0) + value
        elif key in _MAXED:
            totals[key] = max(totals.get(key, -math.inf), value)
        else:
            totals[key] = totals.get(key, 0.0) + value * tokens


def _finish(totals: dict[str, float], tokens: float) -> dict[str, float]:
    return {k: v if k in _SUMMED or k in _MAXED else v / max(tokens, 1.0) for k, v in totals.items()}


def _record_delta(batch: StepBatch, context: str, plan: _Minibatch, index: ActionIndex, delta: torch.Tensor) -> None:
    """Write a micro-batch's Delta ``[n, A]`` into ``batch.deltas[context]`` ``[B, T]``."""
    full = batch.deltas.setdefault(context, torch.zeros_like(batch.old.logp))
    keep = index.mask.to(full.device)
    rows = plan.traj_rows.to(full.device)[index.rows.to(full.device)]
    full[rows[keep], index.cols.to(full.device)[keep]] = delta.detach().to(full.dtype)[keep]
