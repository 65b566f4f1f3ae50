"""The built-in sokoban environment: panels, rules, exact distance, dead ends, expert,
ground-truth error turns, parser, images."""

from __future__ import annotations

import random

import pytest

import envs
from envs.base import error_turn, expert_policy, format_response, run_episode
from envs.oracle import Oracle
from envs.sokoban import INVALID_OBSERVATION, SokobanEnv, parse_move
from envs.sokoban.levels import (
    LEVELS,
    SPLIT_SIZES,
    UNREACHABLE,
    custom_task,
    parse_map,
    pool,
    solve,
    start_distance,
)
from support.hash_seeds import outputs_under_hash_seeds

# The box (row 3, column 2) must go down to the target (row 5, column 2); the player stands
# below it, so "up" pushes it into the top-left corner: a dead end.
CORNER = ("######", "#____#", "#$___#", "#@___#", "#.___#", "######")


def act(env: SokobanEnv, action: str):
    return env.step(format_response(action, think="test"))


def play(actions: list[str], rows=CORNER):
    env = SokobanEnv()
    task = custom_task("sokoban/custom/0001", rows)
    script = iter(actions)
    return run_episode(env, task, lambda e, o, turns: format_response(next(script, "left")))


# -- panels ----------------------------------------------------------------------------
@pytest.mark.parametrize("level", list(LEVELS))
def test_panels_fixed_sizes_ids_disjoint_and_solvable_within_range(level):
    env = SokobanEnv(level=level)
    spec = LEVELS[level]
    maps = {}
    for split, size in SPLIT_SIZES.items():
        tasks = env.panel(split)
        assert len(tasks) == size
        assert tasks[7].id == f"sokoban/{split}/{spec.id_prefix}0007"
        assert {t.env for t in tasks} == {"sokoban"} and {t.split for t in tasks} == {split}
        rows = [t.spec["rows"] for t in tasks]
        assert len(set(rows)) == size  # no map twice
        assert all(pool(r) == split for r in rows)
        assert all(len(r) == spec.size and len(parse_map(r).start[1]) == spec.boxes for r in rows)
        maps[split] = set(rows)
    assert not maps["train"] & maps["eval"]
    for task in env.panel("eval"):
        d = solve(task.spec["rows"]).dist(parse_map(task.spec["rows"]).start)
        assert spec.min_steps <= d <= spec.max_steps
    with pytest.raises(ValueError, match="valid: train, eval"):
        env.panel("test")
    with pytest.raises(ValueError, match="valid: 1box, 2box"):
        SokobanEnv(level="3box")


_DIGEST = """
import hashlib, json
import envs
from envs.base import expert_policy, run_episode
blob = []
for level in ("1box", "2box"):
    env = envs.make("sokoban", level=level)
    for split in env.splits:
        tasks = env.panel(split)
        blob.append([[t.id, t.instruction, list(t.spec["rows"])] for t in tasks])
        for t in tasks[:5]:
            ep = run_episode(env, t, expert_policy(0.3, seed="digest"))
            blob.append([ep.first_observation, ep.actions, [x.next_observation for x in ep.turns]])
print(hashlib.sha256(json.dumps(blob).encode()).hexdigest())
"""


def test_panels_and_episodes_identical_across_processes_and_hash_seeds():
    digests = outputs_under_hash_seeds(_DIGEST)
    assert len(digests[0]) == 64 and digests[0] == digests[1]


# -- rules and texts -------------------------------------------------------------------
def test_observation_shows_the_map_positions_and_admissible_moves():
    env = SokobanEnv()
    first = env.reset(custom_task("sokoban/custom/0001", CORNER))
    assert first.startswith("You stand in the room.\n######\n#____#\n#$___#\n#@___#\n#.___#\n")
    assert "You are at row 4, column 2; box: row 3, column 2; target: row 5, column 2." in first
    assert first.endswith("['up', 'down', 'right'].")
    result = act(env, "right")
    assert result.observation.startswith("You move right.\n") and result.info["valid"]
    assert "#$___#\n#_@__#" in result.observation and not result.info["pushed"]
    # the box must go down two cells: the next push starts from the cell above it
    assert env.demo_thought(env.task) == "Push the box at row 3, column 2 down from row 2, column 2."
    assert "+" in SokobanEnv(show_admissible=False).reset(
        custom_task("sokoban/custom/0002", ("#####", "#+$_#", "#####"))
    )


def test_demo_thought_names_the_next_push_or_the_goal_when_there_is_none():
    env = SokobanEnv()
    corridor = custom_task("sokoban/custom/0010", ("######", "#@$_.#", "######"))
    goal = "Goal: push the box onto the target; never push a box into a corner."
    assert env.demo_thought(corridor) == goal  # before the episode starts
    env.reset(corridor)
    assert env.demo_thought(corridor) == "Push the box at row 2, column 3 right from row 2, column 2."
    act(env, "right")
    assert env.demo_thought(corridor) == "Push the box at row 2, column 4 right from row 2, column 3."
    env.reset(custom_task("sokoban/custom/0011", CORNER))
    act(env, "up")  # pushes the box into the top-left corner: a dead end, no push left
    assert env.is_dead_end() and env.demo_thought(env.task) == goal


def test_every_demo_thought_is_the_push_the_expert_then_makes():
    """Following the optimal plan on eval maps, every push happens from the cell, on the
    box and in the direction that the thought before it named."""
    env = SokobanEnv()
    pushes = 0

    def cell(i: int) -> str:
        return f"row {i // env.board.cols + 1}, column {i % env.board.cols + 1}"

    for task in env.panel("eval")[:40]:
        env.reset(task)
        result = None
        while not env.done:
            thought, action, player = env.demo_thought(task), env.expert_action(), env.state[0]
            result = act(env, action)
            if result.info["pushed"]:
                box = player + env.board.deltas[action]
                assert thought == f"Push the box at {cell(box)} {action} from {cell(player)}.", task.id
                pushes += 1
        assert result.success
    assert pushes >= 40


def test_pushes_move_boxes_and_solving_ends_with_reward_one():
    env = SokobanEnv()
    env.reset(custom_task("sokoban/custom/0003", ("######", "#@$_.#", "######")))
    assert env.distance_to_goal() == 2 and env.optimal_plan() == ["right", "right"]
    r = act(env, "right")
    assert r.observation.startswith("You push the box right.") and r.info["pushed"]
    assert (r.reward, r.done, r.success) == (0.0, False, False)
    r = act(env, "right")
    assert r.observation.startswith("You push the box right. Every box is on a target.")
    assert (r.reward, r.done, r.success, r.info["distance"], r.info["score"]) == (
        1.0,
        True,
        True,
        0,
        1.0,
    )
    assert "#__@*#" in r.observation
    with pytest.raises(RuntimeError, match="episode not running"):
        act(env, "left")


def test_blocked_moves_and_unparseable_responses_are_invalid_and_change_nothing():
    env = SokobanEnv(invalid_penalty=0.25)
    env.reset(custom_task("sokoban/custom/0004", ("######", "#@$$.#", "#.___#", "######")))
    key = env.state_key()
    for response in (
        format_response("left"),
        format_response("right"),
        "right",
        "<action>fly</action>",
    ):
        r = env.step(response)
        assert (r.reward, r.info["valid"], r.done) == (-0.25, False, False)
        assert r.observation.startswith(INVALID_OBSERVATION + "\n") and env.state_key() == key
    assert env.admissible_actions() == ["down"]


def test_episode_ends_at_max_turns_and_levels_set_the_budget():
    assert SokobanEnv().max_turns == 15 and SokobanEnv(level="2box").max_turns == 20
    assert SokobanEnv(max_turns=4).max_turns == 4
    episode = play([], rows=CORNER)  # "left" into the wall forever
    assert (
        len(episode.turns) == 15 and not episode.success and episode.turns[-1].reward == 0.0
    )  # binary outcome by default


def test_parse_move_canonical_forms():
    assert parse_move("<think>x</think><action>up</action>") == "up"
    assert parse_move("<action> Move Left. </action>") == "left"
    assert parse_move("<action>push RIGHT</action>") == "right"
    assert parse_move("<action>d</action>") == "down"
    assert parse_move("<action>north</action>") == "up"
    assert parse_move("<action>up</action> then <action>down</action>") == "down"
    for bad in (
        "up",
        "<action></action>",
        "<action>jump</action>",
        "<action>up down</action>",
        "<action>move</action>",
        "<action>upward</action>",
    ):
        assert parse_move(bad) is None, bad


def test_replay_and_state_keys():
    env = SokobanEnv()
    task = env.panel("eval")[0]
    env.reset(task)
    plan = env.optimal_plan()
    env.reset(task, replay=plan[:2])
    assert env.turn == 2 and env.distance_to_goal() == len(plan) - 2
    key = env.state_key()
    env.reset(task, replay=plan[:2])
    assert env.state_key() == key and key.startswith(task.id + "|")
    with pytest.raises(ValueError, match="ends the episode"):
        env.reset(task, replay=plan + ["up"])
    with pytest.raises(ValueError, match="belongs to env 'household'"):
        env.reset(envs.make("household").panel("train")[0])


# -- distance, dead ends, ground-truth error turns -------------------------------------
def test_distance_matches_a_forward_search_and_the_plan_reaches_the_goal():
    env = SokobanEnv()
    for task in env.panel("eval")[:60]:
        env.reset(task)
        assert env.distance_to_goal() == start_distance(task.spec["rows"], 50)
        plan = env.optimal_plan()
        for i, action in enumerate(plan):
            r = act(env, action)
            assert r.info["distance"] == len(plan) - i - 1 and r.info["plan"] == plan[i + 1 :]
        assert r.success


def test_a_push_into_a_corner_is_a_dead_end_and_the_decisive_error():
    env = SokobanEnv()
    env.reset(custom_task("sokoban/custom/0001", CORNER))
    assert env.distance_to_goal() == 6 and not env.is_dead_end()
    assert env.plausible_wrong_actions()[0] == "up"  # the push comes first
    r = act(env, "up")
    assert r.info["pushed"] and r.info["dead_end"] and r.info["distance"] == UNREACHABLE
    assert r.info["plan"] == [] and env.is_dead_end()
    # an invalid step, then the corner push, then wandering: the push is turn 1
    episode = play(["left", "up", "right", "down"])
    assert episode.distances[:3] == [6, 6, UNREACHABLE] and error_turn(episode) == 1
    # a detour that is walked back is recovered; the later corner push is the error
    episode = play(["right", "left", "up"])
    assert episode.distances[:4] == [6, 5, 6, UNREACHABLE]
    assert error_turn(episode) == 1  # "left" undid progress and was never recovered
    episode = play(["right", "up", "up", "left", "down", "down"])
    assert episode.success and error_turn(episode) is None


def test_a_push_along_a_wall_without_a_target_is_a_dead_end():
    rows = ("######", "#____#", "#_$@_#", "#____#", "#___.#", "######")
    env = SokobanEnv()
    env.reset(custom_task("sokoban/custom/0005", rows))
    assert not env.is_dead_end()
    r = act(env, "left")  # the box reaches the left wall, whose column has no target
    assert r.info["dead_end"] and error_turn(play(["left", "down", "down"], rows)) == 0


# -- expert and random policies ----------------------------------------------------------
@pytest.mark.parametrize("level, split", [("1box", "train"), ("1box", "eval"), ("2box", "eval")])
def test_expert_solves_every_panel_task(level, split):
    env = SokobanEnv(level=level)
    for task in env.panel(split):
        episode = run_episode(env, task, expert_policy())
        assert episode.success, task.id
        assert len(episode.turns) == episode.distances[0]


@pytest.mark.slow
def test_expert_solves_the_two_box_train_panel():
    env = SokobanEnv(level="2box")
    assert all(run_episode(env, t, expert_policy()).success for t in env.panel("train"))


def test_random_policy_rarely_succeeds_and_noisy_expert_recovers_sometimes():
    env = SokobanEnv()
    rng = random.Random(0)
    tasks = env.panel("eval")
    random_wins = sum(
        run_episode(env, t, lambda e, o, turns: format_response(rng.choice(e.actions))).success
        for t in tasks
    )
    assert random_wins / len(tasks) < 0.15
    noisy = [run_episode(env, t, expert_policy(0.5, seed="noise")) for t in tasks]
    rate = sum(e.success for e in noisy) / len(noisy)
    assert 0.1 < rate < 0.95
    dead = [e for e in noisy if max(e.distances) == UNREACHABLE]
    assert dead and all(error_turn(e) is not None for e in dead)


def test_oracle_writer_names_the_corner_push_and_the_expert_alternative():
    episode = play(["left", "up", "right", "down"])
    hindsight = Oracle(lambda: envs.make("sokoban")).write(episode)
    assert hindsight.valid and hindsight.error_turn == 1
    assert '"up"' in hindsight.negative_skill and '"right"' in hindsight.negative_skill
    assert "Push the box one cell at a time" in hindsight.positive_skill
    assert len(envs.fingerprint(envs.make("sokoban"), tasks_per_split=3)) == 16


# -- images ----------------------------------------------------------------------------
def test_images_have_the_map_size_and_ride_in_info_when_on():
    env = SokobanEnv()
    task = custom_task("sokoban/custom/0001", CORNER)
    env.reset(task)
    image = env.image()
    assert image.size == (96, 96) and image.mode == "RGB"
    assert image.getpixel((0, 0)) == (64, 64, 64)  # a wall tile
    assert "image" not in act(env, "right").info  # text mode: no image work per step
    env = SokobanEnv(images=True, tile=10)
    env.reset(task)
    r = act(env, "right")
    assert r.info["image"].size == (60, 60)
    with_image = r.observation
    env = SokobanEnv()
    env.reset(task)
    assert act(env, "right").observation == with_image  # the text path is unchanged


def test_custom_maps_are_validated():
    with pytest.raises(ValueError, match="enclosed by walls"):
        custom_task("sokoban/custom/0009", ("____", "#@$.", "####"))
    with pytest.raises(ValueError, match="as many boxes as targets"):
        custom_task("sokoban/custom/0009", ("#####", "#@$_#", "#####"))
    with pytest.raises(ValueError, match="unknown cell"):
        custom_task("sokoban/custom/0009", ("#####", "#@$x#", "#####"))
