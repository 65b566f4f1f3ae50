"""Does the skill in context move a frozen actor?  The signal SEED's and ETRO's teacher needs.

``hindsight diagnose skill CONFIG --actor DIR --writer self|oracle`` (issue 28): on a fixed
panel (the first ``tasks`` tasks of the training split, each played ``samples`` times at the
rollout temperature without a skill, as RL plays them) the writer writes hindsight of every
trajectory; where its Positive skill is valid, that skill is spliced into the teacher context
exactly as at RL time (the student's history, ``added_skills``, cut to
``writer.max_skill_tokens``) and both contexts score the sampled action tokens:

    Delta = log pi(y_tok | x, s) - log pi(y_tok | x)          (SEED's Delta, ETRO's Delta+)
    g     = sigmoid(beta_opd * Delta)                         (SEED's gate)

over every action token of a trajectory with a valid skill.  A response is mostly tokens that
its own earlier tokens settle (the format, a thought that copies the cards), where any skill
leaves the log-prob where it was, so the mean |Delta| is diluted by them: the tokens the skill
moves by at least :data:`MOVED` nats are counted apart (their share, and their mean |Delta|),
and by the part of the response they lie in (:func:`response_parts`: the thought, the action,
the format around them), with the most moved of them and the text before each: whether the
skill moves the decisive token or the first words of a reasoning the policy without it never
writes (EZPoints' first rule warm start: its reasoning's first comma, by 9-13 nats, and no
action token; a distillation of that context onto the policy's own samples teaches the
comma away, not the lesson).  Then the same trajectories'
tasks are played again twice with common request seeds: with the skill in the actor's context
(Skill-Prompt) and without.  Each replayed task gives one paired difference
(success with - success without, in {-1, 0, 1}); their mean is the Skill-Prompt lift, and
``hindsight diagnose skill`` puts a bootstrap interval on it, which the pairing narrows (the
common seeds make the two replays of a task differ only where the skill moved an action).

``transfer`` (``--transfer``, issue 44): a lift from a skill that names the deal's own answer
says nothing about a lesson to internalize.  The transfer mode replays each task twice more
with the same seeds: with the skill written on ANOTHER task of its family
(:meth:`envs.base.TextEnv.family`, :func:`envs.base.lesson_donor`; EZPoints' deck rules: the
same rule, another deal), whose lift over no skill measures transfer, and with a skill of
ANOTHER family (the shuffled control: a lesson that is wrong here).  A task without a donor
is left out of that comparison.
Never an update, and nothing here reaches evaluation.
"""

from __future__ import annotations

import re

import torch
from tqdm.auto import tqdm

from envs.base import lesson_donors
from trainer.episodes.rollout import Sampling, collect
from trainer.episodes.samples import assert_same_actions
from trainer.episodes.scoring import MicroBatching, score_trajectories
from trainer.models.generation import request_seed
from trainer.run.components import Components
from trainer.stages.rl import budgeted_texts


def _success(trajectories) -> float:
    return sum(t.episode.success for t in trajectories) / max(1, len(trajectories))


# nats: a token whose probability the skill multiplies or divides by e or more is "moved"
MOVED = 1.0
PARTS = ("thought", "action", "format")  # where a response token lies (response_parts)
MOST_MOVED = 8  # moved tokens listed, with the text before each
_TAG = re.compile(r"<(/?)(think|action)>")


def response_parts(pieces: list[str]) -> list[str]:
    """The part of a response each of its decoded token ``pieces`` lies in: ``thought`` inside
    ``<think>...</think>``, ``action`` inside ``<action>...</action>``, ``format`` for the tags
    themselves and anything outside them.  A piece is labelled by its first character that is
    not a space (so a piece that begins a tag, "</", is ``format``)."""
    text = "".join(pieces)
    label, inside, at = [], "format", 0
    for tag in _TAG.finditer(text):
        label += [inside] * (tag.start() - at) + ["format"] * (tag.end() - tag.start())
        inside, at = ("format" if tag[1] else {"think": "thought", "action": "action"}[tag[2]]), tag.end()
    label += [inside] * (len(text) - at)
    parts, at = [], 0
    for piece in pieces:
        first = next((i for i, ch in enumerate(piece) if not ch.isspace()), 0)
        parts.append(label[at + first] if piece else "format")
        at += len(piece)
    return parts


PHASES = ("play", "write", "score", "replay with skill", "replay without")
# the transfer mode's donors: the same family on another task, and another family
TRANSFERS = {"transfer": True, "shuffled": False}


@torch.no_grad()
def skill_signal(ctx: Components, tasks: int, samples: int, progress: bool = False,
                 transfer: bool = False) -> dict:
    """The skill signal of the actor in ``ctx`` with its writer ``ctx.writer`` (module
    docstring): ``delta_abs``, ``delta_mean``, ``gate_std``, ``gate_mean`` over ``tokens``
    action tokens of ``skilled`` trajectories (of ``trajectories``, ``valid_rate`` of them with a
    valid skill), ``success_skill`` and ``success_no_skill`` on the replays of those, and
    ``paired_differences`` (a list: one per replayed task, with - without).
    ``moved_share`` of those tokens have |Delta| >= :data:`MOVED`, with mean |Delta|
    ``moved_delta_abs`` (0 when none).  ``progress``: a bar over :data:`PHASES` (minutes each
    on household).  ``transfer`` (module docstring) adds, for each of :data:`TRANSFERS`,
    ``success_<name>`` and ``success_no_skill_<name>`` over the tasks that have a donor and
    their ``paired_differences_<name>``."""
    phases = PHASES + tuple(f"replay with a {name} skill" for name in TRANSFERS if transfer)
    with tqdm(phases, desc="diagnose skill", disable=not progress) as bar:
        return _signal(ctx, tasks, samples, bar, transfer)


def _signal(ctx: Components, tasks: int, samples: int, bar, transfer: bool) -> dict:
    def phase(name: str) -> None:
        bar.update(name != PHASES[0])  # a phase is done when the next begins
        bar.set_postfix_str(name)

    cfg = ctx.cfg
    phase("play")
    panel = ctx.prompt_env.panel(cfg.env.train_split)[:tasks]
    batch_tasks = [task for task in panel for _ in range(samples)]
    sampling = Sampling(cfg.rollout.max_new_tokens, cfg.rollout.temperature, cfg.rollout.top_p)
    played, _ = collect(ctx.make_env, batch_tasks, ctx.builder, ctx.backend, sampling,
                        seed=request_seed("skill-signal", cfg.seed))
    phase("write")
    hindsights = ctx.writer.write(played, seed=request_seed("skill-signal-write", cfg.seed))
    skills = budgeted_texts(ctx, ["positive"], played, hindsights)[0]["positive"]
    rows = [i for i, s in enumerate(skills) if s]
    out = {"trajectories": float(len(played)), "skilled": float(len(rows)),
           "valid_rate": len(rows) / max(1, len(played)), "success_played": _success(played)}
    if not rows:
        return out
    phase("score")
    trajs, texts = [played[i] for i in rows], [skills[i] for i in rows]
    score = {"micro_batch": MicroBatching.of(cfg.algo), "with_entropy": False,
             "temperature": cfg.rollout.temperature}
    student, student_seq = score_trajectories(ctx.model, ctx.builder, trajs, None, **score)
    teacher, teacher_seq = score_trajectories(ctx.model, ctx.builder, trajs, None, added_skills=texts, **score)
    assert_same_actions(student_seq, teacher_seq)
    mask = student.mask.bool()  # [B, T]
    delta = (teacher.logp - student.logp)[mask]  # [N] action tokens
    out.update(where_moved(ctx.tokenizer, student_seq, teacher.logp - student.logp, mask))
    gate = torch.sigmoid(cfg.algo.beta_opd * delta)
    size = delta.abs()
    moved = size[size >= MOVED]
    seed = request_seed("skill-signal-replay", cfg.seed)
    replay = [t.task for t in trajs]
    phase("replay with skill")
    with_skill, _ = collect(ctx.make_env, replay, ctx.builder, ctx.backend, sampling, texts, seed=seed)
    phase("replay without")
    without, _ = collect(ctx.make_env, replay, ctx.builder, ctx.backend, sampling, seed=seed)
    if transfer:
        families = [ctx.prompt_env.family(task) for task in replay]
        for name, same in TRANSFERS.items():
            phase(f"replay with a {name} skill")
            donors = lesson_donors(families, [t.id for t in replay], same, f"skill-signal-{name}:{cfg.seed}")
            out.update(_donor_replay(ctx, name, replay, [None if j is None else texts[j] for j in donors],
                                     without, sampling, seed))
    bar.update(1)
    return {**out, "tokens": float(delta.numel()), "delta_abs": float(size.mean()),
            "delta_mean": float(delta.mean()), "moved_share": moved.numel() / delta.numel(),
            "moved_delta_abs": float(moved.mean()) if moved.numel() else 0.0, "gate_mean": float(gate.mean()),
            "gate_std": float(gate.std()), "success_skill": _success(with_skill),
            "success_no_skill": _success(without),
            "paired_differences": [float(a.episode.success) - float(b.episode.success)
                                   for a, b in zip(with_skill, without, strict=True)]}


def where_moved(tokenizer, sequences, delta: torch.Tensor, mask: torch.Tensor) -> dict:
    """Where the skill moves tokens: per part of the response (:data:`PARTS`), ``moved_<part>``
    (tokens with |Delta| >= :data:`MOVED`) and ``tokens_<part>``; ``most_moved``: the
    :data:`MOST_MOVED` largest |Delta| (``token``, ``before``: the sequence's text just before
    it, ``delta``, ``part``).  ``delta`` / ``mask``: ``[B, T]`` over each sequence's action
    tokens in order (``ActionBatch``'s layout)."""
    counts = {f"{kind}_{part}": 0 for part in PARTS for kind in ("moved", "tokens")}
    moved = []
    for row, seq in enumerate(sequences):
        positions = [p for p, m in enumerate(seq.action_mask) if m]
        pieces = [tokenizer.decode([seq.input_ids[p]]) for p in positions]
        gaps = delta[row][mask[row]].tolist()
        for p, piece, part, gap in zip(positions, pieces, response_parts(pieces), gaps, strict=True):
            counts[f"tokens_{part}"] += 1
            if abs(gap) >= MOVED:
                counts[f"moved_{part}"] += 1
                moved.append({"token": piece, "before": tokenizer.decode(seq.input_ids[max(0, p - 8):p]),
                              "delta": gap, "part": part})
    moved.sort(key=lambda m: -abs(m["delta"]))
    return {**{k: float(v) for k, v in counts.items()}, "most_moved": moved[:MOST_MOVED]}


def _donor_replay(ctx: Components, name: str, replay, given: list[str | None], without, sampling,
                  seed: int) -> dict:
    """The replays of ``replay`` with the donors' skills ``given`` (None: no donor), with the
    seeds of the no-skill replay ``without``; success with and without and the paired
    differences over the tasks that have a donor."""
    keep = [i for i, text in enumerate(given) if text is not None]
    played = collect(ctx.make_env, replay, ctx.builder, ctx.backend, sampling, given, seed=seed)[0] \
        if keep else []
    pairs = [float(played[i].episode.success) - float(without[i].episode.success) for i in keep]
    return {f"success_{name}": _success([played[i] for i in keep]),
            f"success_no_skill_{name}": _success([without[i] for i in keep]),
            f"paired_differences_{name}": pairs}
