"""The skill-conditioned demonstrator (issue 28): with the task's hindsight skill in its
context it acts on it and makes none of its ``epsilon`` mistakes; without one it keeps them."""

from __future__ import annotations

import pytest

import envs
from envs.base import demo_policy, run_episode
from envs.oracle import Oracle

EPSILON = 1.0  # every action a random or plausible-wrong one, without a skill


def clean(episode) -> bool:
    """Solved in the fewest turns: every turn valid and one step closer to the goal."""
    return episode.success and all(
        t.valid and t.distance_after == t.distance_before - 1 for t in episode.turns)


def skill_of(env, task) -> str:
    return Oracle(lambda: env).write(run_episode(env, task, demo_policy(0.0))).positive_skill


@pytest.mark.parametrize("name", ["ezpoints", "sokoban"])
def test_with_a_skill_the_demonstrator_makes_none_of_its_mistakes(name):
    env = envs.make(name)
    tasks = env.panel("train")[:20]
    skilled = [run_episode(env, t, demo_policy(EPSILON, seed=f"s{i}", skill=skill_of(env, t)))
               for i, t in enumerate(tasks)]
    plain = [run_episode(env, t, demo_policy(EPSILON, seed=f"s{i}")) for i, t in enumerate(tasks)]
    assert all(clean(e) for e in skilled)
    assert sum(not clean(e) for e in plain) >= len(tasks) // 2


def test_a_skilled_demonstration_writes_the_same_responses_as_a_clean_one():
    """Same thoughts, same format: only the mistakes are gone (ezpoints, epsilon 1)."""
    env = envs.make("ezpoints")
    differ = 0
    for i, task in enumerate(env.panel("train")[:10]):
        skilled = run_episode(env, task, demo_policy(EPSILON, seed=str(i), skill=skill_of(env, task)))
        reference = run_episode(env, task, demo_policy(0.0, seed=str(i)))
        assert [t.response for t in skilled.turns] == [t.response for t in reference.turns]
        noisy = run_episode(env, task, demo_policy(EPSILON, seed=str(i)))
        differ += [t.response for t in noisy.turns] != [t.response for t in reference.turns]
    assert differ >= 5  # a random token is sometimes the right one


def test_an_empty_skill_is_no_skill():
    env = envs.make("ezpoints")
    task = env.panel("train")[3]
    none = run_episode(env, task, demo_policy(1.0, seed="x"))
    empty = run_episode(env, task, demo_policy(1.0, seed="x", skill=""))
    assert [t.response for t in none.turns] == [t.response for t in empty.turns]
