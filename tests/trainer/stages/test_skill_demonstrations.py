"""Skill-conditioned warm-start demonstrations (issue 28, item 1): a skill in a demonstration's
context is spliced where the teacher context puts it, the demonstrator follows it, and
evaluation never sees one."""

from __future__ import annotations

from pathlib import Path

import pytest

import trainer.stages.evaluate
import trainer.stages.warm_start
from envs.base import error_turn
from envs.oracle import Oracle
from trainer.config import apply_overrides
from trainer.episodes.samples import SKILL_HEADER
from trainer.run.components import build_components
from trainer.run.resolve import load_config, resolve
from trainer.stages.evaluate import evaluate_panels
from trainer.stages.sft import demo_trajectory
from trainer.stages.warm_start import demonstration, task_skill, warm_start

ROOT = Path(__file__).resolve().parents[3]
EZPOINTS = ROOT / "examples" / "ezpoints_small.yaml"
SMALL = {"model.device": "cpu", "stages.warm_start.cache": False, "stages.warm_start.checkpoint": "",
         "model.tiny.hidden_size": 32, "model.tiny.num_layers": 1, "model.tiny.num_heads": 2,
         "model.tiny.num_kv_heads": 1, "model.tiny.intermediate_size": 64,
         "model.tiny.vocab_size": 600, "stages.warm_start.episodes": 40,
         "stages.warm_start.expert_epsilon": 1.0, "stages.warm_start.skill_fraction": 0.5,
         "eval.max_tasks": 2, "eval.samples": 1}


@pytest.fixture(scope="module")
def ctx():
    return build_components(resolve(apply_overrides(load_config(EZPOINTS), SMALL)))


def mistakes(episode) -> int:
    return sum(not t.valid or t.distance_after >= t.distance_before for t in episode.turns)


def test_a_demonstration_with_a_skill_follows_it_and_one_without_keeps_its_mistakes(ctx):
    env, oracle = ctx.make_env(), Oracle(ctx.make_env)
    for i, task in enumerate(ctx.train_tasks[:20]):
        skilled, skill = demonstration(env, oracle, task, 1.0, str(i), with_skill=True)
        assert skill == task_skill(oracle, env, task) and skill.strip()
        assert skilled.success and mistakes(skilled) == 0
        plain, none = demonstration(env, oracle, task, 1.0, str(i), with_skill=False)
        assert none is None
    # the skill is the oracle's hindsight of a clean episode: its workflow and its moves
    assert "Moves that made progress" in skill or "useful moves" in skill
    noisy = [demonstration(env, oracle, t, 1.0, str(i), False)[0] for i, t in enumerate(ctx.train_tasks[:20])]
    assert sum(mistakes(e) > 0 for e in noisy) >= 10
    assert any(error_turn(e) is not None for e in noisy)


def test_the_spliced_skill_is_where_the_teacher_context_puts_it(ctx):
    """The warm start's sequence with a skill is, token for token, the teacher sequence the
    RL step scores for that skill (``added_skill`` on the student's context)."""
    env, oracle = ctx.make_env(), Oracle(ctx.make_env)
    episode, skill = demonstration(env, oracle, ctx.train_tasks[0], 0.1, "0", with_skill=True)
    traj = demo_trajectory(ctx, episode)
    warm = ctx.builder.build(traj, skill)
    teacher = ctx.builder.build(traj, None, added_skill=skill)
    assert [s.input_ids for s in warm] == [s.input_ids for s in teacher]
    assert [s.action_mask for s in warm] == [s.action_mask for s in teacher]
    student = ctx.builder.build(traj)
    assert [s.action_tokens() for s in warm] == [s.action_tokens() for s in student]
    text = ctx.tokenizer.decode(list(warm[0].input_ids))
    first_user = text.split("<|im_start|>user\n", 1)[1].split("<|im_end|>", 1)[0]
    assert SKILL_HEADER + skill.strip() in first_user  # in the task's user message
    assert first_user.index(SKILL_HEADER) < first_user.index("## Observation")
    assert text.count(SKILL_HEADER.strip()) == 1


def test_the_warm_start_splices_a_followed_skill_into_its_skill_fraction(ctx, monkeypatch):
    """About ``skill_fraction`` of the demonstrations carry a skill; every one of them is a
    clean demonstration (at epsilon 1 few without a skill are)."""
    seen = []
    real = trainer.stages.warm_start.demonstration

    def spy(*args, **kw):
        out = real(*args, **kw)
        seen.append(out)
        return out

    monkeypatch.setattr(trainer.stages.warm_start, "demonstration", spy)
    monkeypatch.setattr(trainer.stages.warm_start, "sft", lambda model, examples, **kw: {
        "sft/examples": float(len(examples)),
        "sft/skilled": float(sum(SKILL_HEADER.strip() in ctx.tokenizer.decode(list(e.input_ids))
                                 for e in examples))})
    metrics = warm_start(ctx)
    skilled = [e for e, s in seen if s]
    assert len(seen) == 40 and 10 <= len(skilled) <= 30
    assert metrics["warm/skilled"] == len(skilled)
    assert all(mistakes(e) == 0 for e in skilled)
    plain = [e for e, s in seen if not s]
    assert sum(mistakes(e) > 0 for e in plain) >= 2 * len(plain) // 3  # a random token may be right


@pytest.mark.parametrize("method", ["grpo", "seed", "etro"])
def test_evaluation_never_sees_a_skill(ctx, monkeypatch, method):
    calls = []
    real = trainer.stages.evaluate.collect

    def spy(make_env, tasks, builder, backend, sampling, skills=None, **kw):
        calls.append(skills)
        return real(make_env, tasks, builder, backend, sampling, skills, **kw)

    monkeypatch.setattr(trainer.stages.evaluate, "collect", spy)
    evaluated = build_components(resolve(apply_overrides(load_config(EZPOINTS),
                                                         {**SMALL, "algo.method": method})))
    evaluate_panels(evaluated, step=0)
    assert calls and all(s is None or not any(s) for s in calls)


def test_under_a_deck_rule_a_demonstration_reads_another_deals_lesson():
    """EZPoints' suit rule (issue 44): the skill a skilled demonstration reads is the oracle's
    hindsight of ANOTHER deal of the same family (it states that family's operator; its
    progress line names that deal's cards), so cloning teaches reading a lesson, not copying
    the deal's own cards; the demonstrator follows it and wins.  Without families: its own."""
    from envs.base import demo_policy, run_episode
    from envs.ezpoints import EZPointsEnv
    from envs.ezpoints.rules import OPERATOR, lesson_operator

    env = EZPointsEnv(hidden_cards=1, level="suit")
    oracle = Oracle(lambda: EZPointsEnv(hidden_cards=1, level="suit"))

    def own(oracle, env, task):
        return oracle.write(run_episode(env, task, demo_policy(0.0, seed=f"skill:{task.id}"))).positive_skill

    tasks = env.panel("train")[:20]
    others = 0
    for task in tasks:
        skill = task_skill(oracle, env, task)
        assert lesson_operator(skill) == OPERATOR[env.family(task)]
        others += skill != own(oracle, env, task)
        episode, given = demonstration(env, oracle, task, 0.0, f"demo:{task.id}", with_skill=True)
        assert given == skill and episode.success
    assert others >= 10  # another deal's progress line (the same cards now and then)
    face_up, task = EZPointsEnv(), EZPointsEnv().panel("train")[0]
    assert task_skill(Oracle(EZPointsEnv), face_up, task) == own(Oracle(EZPointsEnv), face_up, task)
