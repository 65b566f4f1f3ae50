"""The skill-conditioned demonstrator (issue 28): with the task's hindsight skill in its
context it acts on it and makes none of its ``epsilon`` mistakes; without one it keeps them.
In household the skill also names where the object lay, and the demonstrator goes there
instead of searching."""

from __future__ import annotations

import pytest

import envs
from envs.base import demo_policy, run_episode
from envs.household.world import custom_task
from envs.oracle import Oracle, skill_moves

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


# the mug lies in cabinet 2, the last place the observation-consistent demonstrator looks
HIDDEN = custom_task(
    "household/custom/0200", "pick_and_place", "mug", "diningtable",
    {"countertop 1": [], "cabinet 1": [], "cabinet 2": ["mug 1"], "diningtable 1": []},
    closed=["cabinet 1", "cabinet 2"],
)


def test_skill_moves_reads_the_progress_line_the_oracle_writes():
    env = envs.make("household")
    for task in env.panel("train")[:20]:
        episode = run_episode(env, task, demo_policy(0.0))
        moves = skill_moves(Oracle(lambda: env).write(episode).positive_skill)
        made = [t.action for t in episode.turns]
        assert moves and all(m in made for m in moves), (moves, made)
    assert skill_moves("Moves that made progress here: a -> b -> ....") == ["a", "b"]
    assert skill_moves("The useful moves in this episode were: go to desk 1.") == ["go to desk 1"]
    assert skill_moves("Steps that work:\n(1) Find it.") == []


def test_in_household_a_skill_takes_the_demonstrator_straight_to_the_object():
    """Without a skill the demonstrator searches the places a mug may be until it sees one;
    with the skill of a clean episode of the same task it goes where the skill says the mug
    was, so it solves the task in the fewest turns; an unreadable skill falls back to the
    mistake-free search."""
    env = envs.make("household")
    search = run_episode(env, HIDDEN, demo_policy(0.0))
    skill = Oracle(lambda: env).write(search).positive_skill
    assert "go to cabinet 2" in skill_moves(skill)
    skilled = run_episode(env, HIDDEN, demo_policy(EPSILON, seed="x", skill=skill))
    assert search.success and len(search.turns) > 4
    assert clean(skilled) and skilled.turns[0].action == "go to cabinet 2"
    unread = run_episode(env, HIDDEN, demo_policy(EPSILON, seed="x", skill="Find the mug."))
    assert [t.action for t in unread.turns] == [t.action for t in search.turns]


def test_household_skilled_demonstrations_are_shorter_on_the_panel():
    env = envs.make("household")
    tasks = env.panel("train")[:30]
    skilled = [run_episode(env, t, demo_policy(EPSILON, seed=str(i), skill=skill_of(env, t)))
               for i, t in enumerate(tasks)]
    searched = [run_episode(env, t, demo_policy(0.0)) for t in tasks]
    assert all(e.success and all(t.valid for t in e.turns) for e in skilled)  # epsilon 1, no mistake
    assert all(len(a.turns) <= len(b.turns) for a, b in zip(skilled, searched))
    assert sum(len(a.turns) < len(b.turns) for a, b in zip(skilled, searched)) >= 5
