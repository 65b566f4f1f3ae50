"""envs.base: the error-boundary rule, response parsing, episodes, registry errors."""

from __future__ import annotations

import itertools
import random

import pytest

import envs
from envs.base import (
    Episode,
    StepResult,
    Task,
    TextEnv,
    Turn,
    error_turn,
    expert_policy,
    first_unrecovered_error,
    format_response,
    parse_tagged,
    run_episode,
)


class LineEnv(TextEnv):
    """Walk from 0 to ``goal`` on a line with "left"/"right"; distance = goal - position."""

    name = "line"
    default_max_turns = 6

    def __init__(self, goal: int = 3, **options):
        super().__init__(**options)
        self.goal, self.pos = goal, 0

    def panel(self, split):
        self.check_split(split)
        return [Task(f"line/{split}/{i:04d}", "line", split, "reach the goal") for i in range(3)]

    def reset(self, task, replay=()):
        self.task, self.turn, self.pos = task, 0, 0
        for action in replay:
            self.step(format_response(action))
        return f"at {self.pos}"

    def step(self, response_text):
        self.turn += 1
        action = self.parse_action(response_text)
        valid = action in ("left", "right")
        if valid:
            self.pos = max(0, self.pos + (1 if action == "right" else -1))
        success = self.pos == self.goal
        reward = (1.0 if success else 0.0) if valid else -self.invalid_penalty
        info = {"state_key": str(self.pos), "distance": self.goal - self.pos, "plan": [],
                "valid": valid, "action": action or "", "score": float(success)}
        return StepResult(f"at {self.pos}", reward, success or self.turn >= self.max_turns,
                          success, info)

    def state_key(self):
        return str(self.pos)

    def distance_to_goal(self):
        return self.goal - self.pos

    def expert_action(self, epsilon=0.0, rng=None):
        rng = rng or random.Random(0)
        return "left" if epsilon and rng.random() < epsilon else "right"

    def system_prompt(self):
        return "walk"

    def domain_description(self):
        return "a line"

    def workflow(self, task):
        return ["go right until the goal"]


# -- first unrecovered decisive error --------------------------------------------------
@pytest.mark.parametrize(
    "distances, success, expected",
    [
        ([4, 3, 2, 1, 0], True, None),            # success: never an error
        ([4, 3, 2, 2, 2], False, None),           # stalled without any increase
        ([4, 4, 4, 4], False, None),              # dithering
        ([4, 3, 4, 3, 2, 2], False, None),        # mistake at turn 1 recovered (back to 3)
        ([4, 3, 4, 5, 5], False, 1),              # mistake at 1 never undone
        ([4, 3, 4, 3, 2, 3, 3], False, 4),        # recovered at 1, unrecovered at 4
        ([4, 5, 6, 5, 4, 5], False, 4),           # 0 and 1 recovered (back to 4 and 5); 4 not
        ([4, 3, 2, 3], False, 2),                 # error on the very last turn
        ([3, None, 4, 4], False, None),           # unknown distances never count
        ([2, 3, None, 2], False, None),           # recovered across an unknown distance
        ([], False, None),
    ],
)
def test_first_unrecovered_error_on_hand_traces(distances, success, expected):
    assert first_unrecovered_error(distances, success) == expected


def _episode(distances: list[int], success: bool) -> Episode:
    task = Task("line/train/0000", "line", "train", "reach the goal")
    turns = [Turn("o", "r", "a", True, 0.0, "o", str(i), d0, d1, {})
             for i, (d0, d1) in enumerate(itertools.pairwise(distances))]
    return Episode(task, turns, success, float(success), "o")


def test_error_turn_reads_the_episode_distance_trace():
    episode = _episode([4, 3, 4, 3, 2, 3, 3], False)
    assert episode.distances == [4, 3, 4, 3, 2, 3, 3]
    assert error_turn(episode) == 4
    assert error_turn(_episode([4, 3, 4, 3, 2, 3, 3], True)) is None
    assert error_turn(_episode([], False)) is None


# -- responses -------------------------------------------------------------------------
def test_parse_tagged_takes_the_last_action_and_normalises_space():
    assert parse_tagged("<think>a</think><action> go  to\ncabinet 1 </action>") == "go to cabinet 1"
    assert parse_tagged("<ACTION>look</ACTION> then <action>inventory</action>") == "inventory"
    assert parse_tagged("no tags") is None
    assert parse_tagged("<action>   </action>") is None
    assert format_response("look", think="t") == "<think>t</think><action>look</action>"
    assert parse_tagged(format_response("take apple 1 from fridge 1")) == "take apple 1 from fridge 1"


# -- episodes --------------------------------------------------------------------------
def test_run_episode_records_turns_with_distances_and_outcome():
    env = LineEnv(goal=3)
    task = env.panel("train")[0]
    episode = run_episode(env, task, expert_policy(0.0))
    assert episode.actions == ["right", "right", "right"]
    assert episode.distances == [3, 2, 1, 0]
    assert episode.success and episode.score == 1.0 and episode.total_reward == 1.0
    assert [t.state_key for t in episode.turns] == ["0", "1", "2"]
    assert episode.first_observation == "at 0" and episode.turns[-1].next_observation == "at 3"


def test_run_episode_counts_invalid_steps_and_truncates_at_max_turns():
    env = LineEnv(goal=3, max_turns=4, invalid_penalty=0.5)
    responses = iter(["<action>right</action>", "jump", "<action>fly</action>", "<action>left</action>"])
    episode = run_episode(env, env.panel("train")[1], lambda e, o, turns: next(responses))
    assert [t.valid for t in episode.turns] == [True, False, False, True]
    assert [t.action for t in episode.turns] == ["right", "", "fly", "left"]
    assert episode.total_reward == -1.0 and not episode.success
    assert episode.distances == [3, 2, 2, 2, 3]
    assert error_turn(episode) == 3


def test_replay_prefix_then_expert_with_noise_is_reproducible():
    env = LineEnv(goal=4, max_turns=12)
    task = env.panel("train")[2]
    first = run_episode(env, task, expert_policy(0.5, seed="s"))
    second = run_episode(env, task, expert_policy(0.5, seed="s"))
    assert first.actions == second.actions and "left" in first.actions
    replayed = run_episode(env, task, expert_policy(0.0), replay=["right", "right"])
    assert replayed.distances[0] == 2 and replayed.actions == ["right", "right"]


# -- tasks and registry ----------------------------------------------------------------
def test_tasks_compare_by_id_only():
    a = Task("x/train/0001", "x", "train", "do it", {"k": 1})
    b = Task("x/train/0001", "x", "train", "do it", {"k": 2})
    assert a == b and hash(a) == hash(b) and "spec" not in repr(a)


def test_registry_and_split_errors_name_the_valid_values():
    assert envs.BUILTIN == ("household", "shop", "searchqa", "sokoban", "ezpoints")
    assert set(envs.BUILTIN) <= set(envs.names())
    with pytest.raises(ValueError, match=r"did you mean 'household'\?.*valid: alfworld"):
        envs.make("houshold")
    assert isinstance(envs.make("household", max_turns=15), TextEnv)
    assert envs.make("household", max_turns=15).max_turns == 15
    assert envs.make("household").max_turns == 30
    with pytest.raises(ValueError, match="unknown split 'dev' for env 'line'; valid: train"):
        LineEnv().panel("dev")
