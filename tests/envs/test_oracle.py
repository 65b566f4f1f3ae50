"""The oracle writer: true error turns on constructed household trajectories, correct and
executable Negative skills, reproducible varied phrasing, any TextEnv."""

from __future__ import annotations

import json

import pytest

import envs
from envs.base import (
    Episode,
    StepResult,
    Task,
    TextEnv,
    error_turn,
    expert_policy,
    format_response,
    run_episode,
)
from envs.household.env import HouseholdEnv
from envs.household.world import custom_task
from envs.oracle import Oracle

# apple 1 lies on countertop 1; the goal is the dining table.  From the start the optimal
# plan is: go to countertop 1, take apple 1 from countertop 1, go to diningtable 1,
# put apple 1 in/on diningtable 1 (distance 4).
TASK = custom_task(
    "household/custom/0100", "pick_and_place", "apple", "diningtable",
    {"countertop 1": ["apple 1"], "cabinet 1": ["mug 1"], "diningtable 1": [], "drawer 1": []},
    closed=["cabinet 1", "drawer 1"],
)
GO, TAKE = "go to countertop 1", "take apple 1 from countertop 1"
TABLE, PUT = "go to diningtable 1", "put apple 1 in/on diningtable 1"
PUT_BACK, CABINET = "put apple 1 in/on countertop 1", "go to cabinet 1"

# name: (actions, distance trace by hand, success, true error turn by hand)
TRAJECTORIES = {
    "correct": ([GO, TAKE, TABLE, PUT], [4, 3, 2, 1, 0], True, None),
    "success_after_recovered_mistake": ([GO, CABINET, GO, TAKE, TABLE, PUT],
                                        [4, 3, 4, 3, 2, 1, 0], True, None),
    "recovered_mistake_then_stall": ([GO, CABINET, GO, TAKE, "look", "look"],
                                     [4, 3, 4, 3, 2, 2, 2], False, None),
    "unrecovered_mistake": ([GO, TAKE, PUT_BACK, CABINET, "look", "look"],
                            [4, 3, 2, 3, 4, 4, 4], False, 2),
    "mistake_after_recovered_one": ([GO, CABINET, GO, TAKE, PUT_BACK, "look"],
                                    [4, 3, 4, 3, 2, 3, 3], False, 4),
    "dithering": ([CABINET, "open cabinet 1", "close cabinet 1", "go to drawer 1", "look",
                   "inventory"], [4, 4, 4, 4, 4, 4, 4], False, None),
    "invalid_then_unrecovered": (["", GO, TAKE, "go to drawer 1", "open drawer 1",
                                  "put apple 1 in/on drawer 1"], [4, 4, 3, 2, 2, 2, 3], False, 5),
}


def play(actions: list[str], max_turns: int = 6) -> Episode:
    env = HouseholdEnv(max_turns=max_turns)
    script = iter(actions)
    return run_episode(env, TASK, lambda e, o, turns: format_response(next(script)))


def writer() -> Oracle:
    return Oracle(lambda: envs.make("household"))


@pytest.mark.parametrize("name", sorted(TRAJECTORIES))
def test_error_turn_on_constructed_trajectories(name):
    actions, distances, success, expected = TRAJECTORIES[name]
    episode = play(actions)
    assert episode.distances == distances
    assert episode.success is success
    assert error_turn(episode) == expected
    hindsight = writer().write(episode)
    assert hindsight.valid and hindsight.error_turn == expected
    assert bool(hindsight.negative_skill) == (expected is not None)


def test_negative_skill_names_the_decision_consequence_and_executable_alternative():
    episode = play(TRAJECTORIES["mistake_after_recovered_one"][0])
    hindsight = writer().write(episode)
    negative = hindsight.negative_skill
    assert hindsight.error_turn == 4
    assert f'"{PUT_BACK}"' in negative  # the decision at turn 4
    assert "2 -> 3 steps left" in negative  # its consequence
    assert "You put the apple 1 in/on the countertop 1." in negative
    assert f'"{TABLE}"' in negative  # the expert's action in that state
    env = HouseholdEnv()
    env.reset(TASK, replay=episode.actions[:4])
    assert TABLE in env.admissible_actions() and env.optimal_plan()[0] == TABLE


def test_positive_skill_holds_the_workflow_and_the_trajectory_evidence():
    env = HouseholdEnv()
    success = writer().write(play(TRAJECTORIES["success_after_recovered_mistake"][0]))
    for step in env.workflow(TASK):
        assert step in success.positive_skill
    assert f"{GO} -> {TAKE} -> {TABLE} -> {PUT}." in success.positive_skill  # detour left out
    assert "6 turns" in success.positive_skill and "4" in success.positive_skill
    failure = writer().write(play(TRAJECTORIES["unrecovered_mistake"][0]))
    # only the progress before the error boundary is offered as evidence
    assert f"{GO} -> {TAKE}." in failure.positive_skill
    assert PUT_BACK not in failure.positive_skill


def test_writing_is_reproducible_and_raw_is_the_json_of_the_fields():
    episode = play(TRAJECTORIES["unrecovered_mistake"][0])
    first, second = writer().write(episode), writer().write(episode)
    assert first == second
    assert json.loads(first.raw) == {"positive_skill": first.positive_skill,
                                     "negative_skill": first.negative_skill, "error_turn": 2}


def test_phrasing_varies_across_trajectories_while_content_stays_correct():
    env = HouseholdEnv(max_turns=15)
    oracle = writer()
    headers, negatives = set(), set()
    for i, task in enumerate(env.panel("eval_unseen")[:40]):
        episode = run_episode(env, task, expert_policy(0.6, seed=f"noisy{i}"))
        hindsight = oracle.write(episode)
        headers.add(hindsight.positive_skill.splitlines()[0].split(" ")[0])
        assert task.instruction in hindsight.positive_skill
        k = error_turn(episode)
        assert hindsight.error_turn == k
        if k is not None:
            negatives.add(hindsight.negative_skill.split(" ")[0])
            env.reset(task, replay=episode.actions[:k])
            assert f'"{env.optimal_plan()[0]}"' in hindsight.negative_skill
    assert len(headers) >= 3 and len(negatives) >= 2


class _NoDistanceEnv(TextEnv):
    """A minimal env without distances (like a QA env): answer "yes" to succeed."""

    name = "yesno"

    def panel(self, split):
        return [Task("yesno/train/0000", "yesno", "train", "say yes")]

    def reset(self, task, replay=()):
        self.task, self.turn = task, 0
        return "question?"

    def step(self, response_text):
        action = self.parse_action(response_text) or ""
        ok = action == "yes"
        return StepResult("done", float(ok), True, ok,
                          {"valid": bool(action), "action": action, "score": float(ok)})

    def state_key(self):
        return "q"

    def distance_to_goal(self):
        return None

    def expert_action(self, epsilon=0.0, rng=None):
        return "yes"

    def system_prompt(self):
        return "answer"

    def domain_description(self):
        return "questions"

    def workflow(self, task):
        return ["read the question", "answer yes"]


def test_works_on_any_text_env_through_the_base_interface():
    env = _NoDistanceEnv()
    oracle = Oracle(_NoDistanceEnv)
    failed = run_episode(env, env.panel("train")[0], lambda e, o, t: "<action>no</action>")
    hindsight = oracle.write(failed)
    assert hindsight.valid and hindsight.error_turn is None and hindsight.negative_skill == ""
    assert "answer yes" in hindsight.positive_skill and "say yes" in hindsight.positive_skill


def test_diverging_replay_is_reported_invalid_not_used():
    episode = play(TRAJECTORIES["unrecovered_mistake"][0])
    turns = list(episode.turns)
    turns[2] = type(turns[2])(**{**turns[2].__dict__, "state_key": "tampered"})
    tampered = Episode(episode.task, turns, False, 0.0, episode.first_observation)
    hindsight = writer().write(tampered)
    assert not hindsight.valid and hindsight.error_turn is None and hindsight.negative_skill == ""
