"""ETRO's recovery suite (envs/recovery.py): pre-registered, plausible, recoverable wrong
actions on the expert's reference trajectory, and the first-action classes."""

from __future__ import annotations

import pytest

import envs
from envs.base import Turn, format_response
from envs.recovery import first_action_class, perturb, recovery_suite, reference_actions


@pytest.mark.parametrize("name, options, split", [
    ("household", {"level": "small"}, "eval_unseen"),
    ("shop", {}, "eval"),
])
def test_every_perturbation_is_a_recoverable_wrong_admissible_action(name, options, split):
    make = lambda: envs.make(name, **options)
    tasks = make().panel(split)[:12]
    suite = recovery_suite(make, tasks)
    assert len(suite) >= 8, f"only {len(suite)} of 12 tasks got a perturbation"
    env = make()
    for p in suite:
        reference = reference_actions(env, p.task)
        assert list(p.prefix) == reference[:len(p.prefix)] and p.expert == reference[len(p.prefix)]
        env.reset(p.task, replay=p.prefix)
        assert env.distance_to_goal() == p.distance_before
        assert p.wrong in env.admissible_actions() and p.wrong != p.expert
        result = env.step(format_response(p.wrong))
        assert result.info["valid"] and not env.done
        assert env.distance_to_goal() == p.distance > p.distance_before  # wrong, not fatal
        assert len(p.actions) + p.distance < env.max_turns  # still solvable in the turns left
    assert recovery_suite(make, tasks) == suite  # pre-registered: the same every time


def test_forced_responses_follow_the_action_format():
    text = lambda: envs.make("household", level="small")
    numbered = lambda: envs.make("household", level="small", action_format="numbered")
    tasks = text().panel("eval_unseen")[:6]
    suite = recovery_suite(text, tasks)
    assert recovery_suite(numbered, tasks) == suite  # the same perturbations either way
    env = numbered()
    for p in suite:
        responses = p.responses(env)
        assert all(r.split("<action>")[1].split("<")[0].isdigit() for r in responses)
        env.reset(p.task)
        steps = [env.step(r) for r in responses]  # the numbers replay the forced actions
        assert [s.info["action"] for s in steps] == list(p.actions)


def test_a_task_without_admissible_actions_has_no_perturbation():
    env = envs.make("searchqa")
    task = env.panel(env.splits[-1])[0]
    env.reset(task)
    assert env.admissible_actions() is None
    assert perturb(env, task) is None


def _turn(valid: bool, before, after) -> Turn:
    return Turn("obs", "resp", "a", valid, 0.0, "next", "k", before, after)


def test_first_action_classes():
    assert first_action_class(_turn(True, 3, 2)) == "recovers"
    assert first_action_class(_turn(True, 3, 3)) == "wrong_branch"
    assert first_action_class(_turn(True, 3, 4)) == "wrong_branch"
    assert first_action_class(_turn(False, 3, 3)) == "invalid"
