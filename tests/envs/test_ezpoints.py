"""The built-in ezpoints environment (gym_cards EZPoints): deals, formula rules, exact
distance, expert, ground-truth error turns, parser, images."""

from __future__ import annotations

import json
import random

import pytest

import envs
from envs.base import demo_policy, error_turn, expert_policy, format_response, run_episode
from envs.ezpoints import INVALID_OBSERVATION, EZPointsEnv, parse_token
from envs.ezpoints.cards import (
    SPLIT_SIZES,
    UNREACHABLE,
    admissible,
    custom_task,
    evaluate,
    plan,
    solvable_deals,
    value,
)
from envs.ezpoints.env import completions, skill_values
from envs.oracle import Oracle
from support.hash_seeds import outputs_under_hash_seeds
from support.paths import ROOT

TWO_SIX = custom_task("ezpoints/custom/0001", ("2", "hearts"), ("6", "spades"))  # 2 * 6
KING_TWO = custom_task("ezpoints/custom/0002", ("K", "clubs"), ("2", "diamonds"))  # 10 + 2


def act(env: EZPointsEnv, token: str):
    return env.step(format_response(token, think="test"))


def play(task, tokens: list[str]):
    script = iter(tokens)
    return run_episode(EZPointsEnv(), task, lambda e, o, turns: format_response(next(script, "7")))


# -- deals and panels ------------------------------------------------------------------
def test_values_and_solvable_deals_follow_gym_cards():
    assert [value(r) for r in ("A", "2", "9", "10", "J", "Q", "K")] == [1, 2, 9, 10, 10, 10, 10]
    deals = solvable_deals()
    sums = {tuple(sorted((value(a[0]), value(b[0])))) for a, b in deals}
    assert sums == {(2, 10), (3, 9), (4, 8), (5, 7), (6, 6), (2, 6), (3, 4)}
    assert all(a != b for a, b in deals) and len(deals) == 300
    with pytest.raises(ValueError, match="unknown rank"):
        value("1")


def test_panels_fixed_sizes_ids_and_every_deal_solvable():
    env = EZPointsEnv()
    for split, size in SPLIT_SIZES.items():
        tasks = env.panel(split)
        assert len(tasks) == size and tasks[7].id == f"ezpoints/{split}/0007"
        assert {t.split for t in tasks} == {split} and {t.env for t in tasks} == {"ezpoints"}
        for t in tasks:
            values = tuple(value(r) for r, _ in t.spec["cards"])
            assert plan(values, ()) is not None
        assert len({tuple(map(tuple, t.spec["cards"])) for t in tasks}) > size // 4
    assert env.panel("train")[:3] != env.panel("eval")[:3]
    with pytest.raises(ValueError, match="valid: train, eval"):
        env.panel("test")


_DIGEST = """
import hashlib, json
import envs
from envs.base import expert_policy, run_episode
env = envs.make("ezpoints")
blob = []
for split in env.splits:
    tasks = env.panel(split)
    blob.append([[t.id, t.instruction, t.spec["cards"]] for t in tasks])
    for t in tasks[:20]:
        ep = run_episode(env, t, expert_policy(0.4, seed="digest"))
        blob.append([ep.first_observation, ep.actions, [x.next_observation for x in ep.turns]])
print(hashlib.sha256(json.dumps(blob).encode()).hexdigest())
"""


def test_panels_and_episodes_identical_across_processes_and_hash_seeds():
    digests = outputs_under_hash_seeds(_DIGEST)
    assert len(digests[0]) == 64 and digests[0] == digests[1]


# -- rules and texts -------------------------------------------------------------------
def test_formula_grammar_and_evaluation():
    assert admissible((2, 6), ()) == ["2", "6"]
    assert admissible((6, 6), ("6",)) == ["+", "*", "="]
    assert admissible((6, 6), ("6", "+")) == ["6"]
    assert admissible((2, 6), ("2", "*", "6")) == ["="]
    assert evaluate(("2", "*", "6")) == 12 and evaluate(("10", "+", "2")) == 12
    assert evaluate(("3", "+", "2", "*", "4")) == 11  # products first
    assert evaluate(("3", "+")) is None and evaluate(()) is None
    assert plan((10, 2), ()) == ("10", "+", "2", "=") and plan((2, 6), ("2", "+")) is None


def test_observations_show_cards_formula_and_admissible_tokens():
    env = EZPointsEnv()
    first = env.reset(KING_TWO)
    assert first == ("The cards are dealt.\nCards: K of clubs, 2 of diamonds.\nFormula: (empty)\n"
                     "Your admissible actions of the current situation are: ['10', '2'].")
    r = act(env, "10")
    assert r.observation.startswith("You write 10.\nCards: K of clubs, 2 of diamonds.\nFormula: 10\n")
    assert (r.reward, r.done, r.info["valid"], r.info["formula"], r.info["value"]) == (0.0, False, True, "10", 10)
    act(env, "+"), act(env, "2")
    r = act(env, "=")
    assert r.observation == ("You write =. 10 + 2 = 12: correct!\nCards: K of clubs, 2 of diamonds.\n"
                             "Formula: 10 + 2 =")
    assert (r.reward, r.done, r.success, r.info["distance"], r.info["score"]) == (1.0, True, True, 0, 1.0)
    assert "admissible" not in EZPointsEnv(show_admissible=False).reset(KING_TWO)


def test_a_hidden_card_lies_face_down_until_the_episode_ends():
    """hidden_cards=1: the second card and its value are in no observation (the text, the
    admissible list, the image) before the episode ends; the end turns it over."""
    env = EZPointsEnv(hidden_cards=1)
    first = env.reset(KING_TWO)
    assert first == ("The cards are dealt.\nCards: K of clubs, ? (face down).\nFormula: (empty)\n"
                     "Your admissible actions of the current situation are: ['10', '?'].")
    assert "face down" in env.system_prompt() and "face down" not in EZPointsEnv().system_prompt()
    assert env.image().getpixel((225, 120)) == (40, 60, 150)  # the blue back of the second card
    act(env, "10")
    r = act(env, "+")
    assert r.observation.endswith("Formula: 10 +\nYour admissible actions of the current situation are: ['?'].")
    assert "2 of diamonds" not in r.observation and "'2'" not in r.observation
    assert act(env, "3").observation.startswith(INVALID_OBSERVATION)  # a wrong guess
    act(env, "2")
    r = act(env, "=")
    assert r.success and r.observation.endswith("Cards: K of clubs, 2 of diamonds.\nFormula: 10 + 2 =")
    assert env.image().getpixel((225, 120)) == (250, 250, 245)  # face up
    env.reset(KING_TWO)
    for _ in range(env.max_turns):  # running out of turns turns it over too
        r = act(env, "7")
    assert r.done and "2 of diamonds" in r.observation
    with pytest.raises(ValueError, match="env.hidden_cards: 2 is not valid; valid: 0, 1"):
        EZPointsEnv(hidden_cards=2)


def test_the_oracle_skill_names_the_card_that_lies_face_down():
    """What the hidden setting is for: the hindsight tells what the observation hides."""
    env = EZPointsEnv(hidden_cards=1)
    episode = run_episode(env, TWO_SIX, lambda e, o, turns: format_response(next(iter(["2"]))))
    assert not any("6 of spades" in t.observation for t in episode.turns)
    hindsight = Oracle(lambda: EZPointsEnv(hidden_cards=1)).write(episode)
    assert "Read both cards (2 and 6)" in hindsight.positive_skill


def test_the_demonstrator_guesses_a_face_down_card_and_the_skilled_one_reads_it():
    """With a face-down card the demonstrator sees only the visible card: its thought never
    names the hidden one, it guesses between the operators the visible card allows (2 * 6 or
    2 + 10), so it wins about two deals in three; with the oracle's skill, which names both
    cards, it plays them and wins every deal.  Face up, nothing changes."""
    env, oracle = EZPointsEnv(hidden_cards=1), Oracle(lambda: EZPointsEnv(hidden_cards=1))
    tasks = env.panel("eval")

    def task_skill(oracle, env, task):  # as trainer.stages.warm_start.task_skill: the demonstrator's episode
        return oracle.write(run_episode(env, task, demo_policy(0.0, seed=f"skill:{task.id}"))).positive_skill

    plain = [run_episode(env, t, demo_policy(0.0, seed=f"d{t.id}")) for t in tasks]
    skilled = [run_episode(env, t, demo_policy(0.0, seed=f"d{t.id}", skill=task_skill(oracle, env, t)))
               for t in tasks]
    assert 0.55 < sum(e.success for e in plain) / len(tasks) < 0.85
    assert all(e.success and len(e.turns) == 4 for e in skilled)
    ambiguous = [e for e in plain if value(e.task.spec["cards"][0][0]) in (2, 3, 4, 6)]
    assert {e.success for e in ambiguous} == {True, False}  # a guess, not the answer
    assert all(e.success for e in plain if e not in ambiguous)  # the visible card settles these
    for episode in plain:
        hidden = episode.task.spec["cards"][1][0]
        first = episode.task.spec["cards"][0][0]
        assert all(t.response.startswith(f"<think>{first} is {value(first)}, the other card is face down")
                   for t in episode.turns)
        assert f" {hidden} is " not in episode.turns[0].response
    env.reset(TWO_SIX)
    assert env.demo_thought(TWO_SIX) == "2 is 2, the other card is face down: 2 + 10 or 2 * 6 = 12."
    skill = task_skill(oracle, env, TWO_SIX)
    assert skill_values(skill) == (2, 6) and skill_values("no cards here") is None
    assert env.demo_thought(TWO_SIX, skill) == "2 is 2 and 6 is 6 as the hindsight says: 2 + 6 = 8, 2 * 6 = 12."
    # a wrong guess: after "2 +" the guesser writes 10, then other values, never 10 again
    forced = iter(["2", "+"])
    episode = run_episode(env, TWO_SIX, lambda e, o, turns: format_response(next(forced, None)
                                                                            or e.demo_action(turns)))
    actions = [t.action for t in episode.turns]
    assert actions[:3] == ["2", "+", "10"] and "10" not in actions[3:] and not episode.success
    face_up = EZPointsEnv()
    face_up.reset(TWO_SIX)
    assert face_up.demo_thought(TWO_SIX, skill) == "2 is 2 and 6 is 6: 2 * 6 = 12."
    assert face_up.demo_action([]) == face_up.expert_action() == "2"
    assert completions(2) == [("+", 10), ("*", 6)] and completions(7) == [("+", 5)]


def test_the_default_deals_every_card_face_up_as_before():
    """hidden_cards=0 is the env the SmolLM2 warm start was fingerprinted on (its default
    max_turns), and a face-down card is another env: a bundle trained face up does not load."""
    meta = json.loads((ROOT / "trainer/assets/warm_start/ezpoints-smollm2/warm_start.json").read_text())
    assert envs.fingerprint(EZPointsEnv(hidden_cards=0)) == meta["env_fingerprint"]
    assert envs.fingerprint(EZPointsEnv(hidden_cards=1)) != meta["env_fingerprint"]


def test_invalid_tokens_cost_the_penalty_and_change_nothing():
    env = EZPointsEnv(invalid_penalty=0.5, max_turns=8)
    env.reset(TWO_SIX)
    for response in (format_response("5"), format_response("+"), format_response("="),
                     "2", "<action>2 * 6</action>", "<action>twelve</action>"):
        r = env.step(response)
        assert (r.reward, r.info["valid"], r.done, r.info["formula"]) == (-0.5, False, False, "")
        assert r.observation.startswith(INVALID_OBSERVATION + "\n")
    assert not act(env, "2").done and act(env, "*").done  # the 8-turn budget is spent
    assert EZPointsEnv().max_turns == 6


def test_used_cards_cannot_be_written_twice_and_equals_ends_the_game():
    env = EZPointsEnv()
    env.reset(TWO_SIX)
    act(env, "2"), act(env, "*")
    assert env.admissible_actions() == ["6"] and not act(env, "2").info["valid"]
    r = act(env, "=")
    assert not r.info["valid"]
    env.reset(TWO_SIX)
    act(env, "6")
    r = act(env, "=")
    assert r.done and not r.success and r.reward == 0.0
    assert r.observation.startswith("You write =. 6 = 6, but not every card is used.")
    assert r.info["distance"] == UNREACHABLE
    env.reset(TWO_SIX)
    act(env, "2"), act(env, "+"), act(env, "6")
    r = act(env, "=")
    assert r.observation.startswith("You write =. 2 + 6 = 8, not 12.") and not r.success


def test_parse_token_canonical_forms():
    assert parse_token("<think>K is 10</think><action>10</action>") == "10"
    assert parse_token("<action> + </action>") == "+"
    assert parse_token("<action>times</action>") == "*"
    assert parse_token("<action>x</action>") == "*"
    assert parse_token("<action>Equals.</action>") == "="
    assert parse_token("<action>write 7</action>") == "7"
    assert parse_token("<action>3</action><action>4</action>") == "4"
    for bad in ("10", "<action></action>", "<action>11</action>", "<action>0</action>",
                "<action>K</action>", "<action>10 + 2</action>", "<action>-</action>"):
        assert parse_token(bad) is None, bad


def test_replay_and_state_keys():
    env = EZPointsEnv()
    env.reset(TWO_SIX, replay=["2", "*"])
    assert env.formula == ("2", "*") and env.turn == 2 and env.distance_to_goal() == 2
    key = env.state_key()
    env.reset(TWO_SIX, replay=["2", "*"])
    assert env.state_key() == key and key.startswith("ezpoints/custom/0001|")
    with pytest.raises(ValueError, match="ends the episode"):
        env.reset(TWO_SIX, replay=["2", "=", "6"])


# -- distance and ground-truth error turns ---------------------------------------------
def test_wrong_operator_and_early_equals_are_the_decisive_errors():
    episode = play(TWO_SIX, ["2", "+", "6", "="])
    assert episode.distances == [4, 3, UNREACHABLE, UNREACHABLE, UNREACHABLE]
    assert error_turn(episode) == 1 and not episode.success
    episode = play(TWO_SIX, ["9", "2", "="])
    assert episode.distances == [4, 4, 3, UNREACHABLE] and error_turn(episode) == 2
    episode = play(TWO_SIX, ["6", "*", "2", "="])
    assert episode.success and episode.distances == [4, 3, 2, 1, 0] and error_turn(episode) is None
    episode = play(TWO_SIX, ["2", "*", "7", "7", "7", "7"])  # ran out of turns, no decisive error
    assert not episode.success and error_turn(episode) is None
    env = EZPointsEnv()
    env.reset(TWO_SIX, replay=["2"])
    assert env.plausible_wrong_actions() == ["+", "="]


# -- expert and random policies ----------------------------------------------------------
@pytest.mark.parametrize("split", ["train", "eval"])
def test_expert_and_demonstrator_solve_every_panel_task(split):
    env = EZPointsEnv()
    for task in env.panel(split):
        episode = run_episode(env, task, expert_policy())
        assert episode.success and len(episode.turns) == 4, task.id
    thought = env.demo_thought(KING_TWO)
    assert thought == "K is 10 and 2 is 2: 10 + 2 = 12."


def test_random_policies_rarely_succeed():
    env = EZPointsEnv()
    rng = random.Random(0)
    tasks = env.panel("eval")
    uniform = sum(run_episode(env, t, lambda e, o, turns: format_response(rng.choice(e.actions))).success
                  for t in tasks)
    assert uniform / len(tasks) < 0.05
    admissible_only = sum(
        run_episode(env, t, lambda e, o, turns: format_response(rng.choice(e.admissible_actions()))).success
        for t in tasks)
    assert 0.1 < admissible_only / len(tasks) < 0.6


def test_oracle_writer_names_the_wrong_operator_and_the_right_one():
    episode = play(TWO_SIX, ["2", "+", "6", "="])
    hindsight = Oracle(lambda: envs.make("ezpoints")).write(episode)
    assert hindsight.valid and hindsight.error_turn == 1
    assert 'chose "+"' in hindsight.negative_skill or '"+"' in hindsight.negative_skill
    assert '"*"' in hindsight.negative_skill
    assert "multiply them if their product is 12" in hindsight.positive_skill
    assert len(envs.fingerprint(envs.make("ezpoints"), tasks_per_split=3)) == 16


# -- images ----------------------------------------------------------------------------
def test_images_have_the_table_size_and_ride_in_info_when_on():
    env = EZPointsEnv()
    env.reset(KING_TWO)
    image = env.image()
    assert image.size == (300, 300) and image.mode == "RGB"
    assert image.getpixel((2, 2)) == (53, 101, 77)  # the green table
    assert "image" not in act(env, "10").info
    env = EZPointsEnv(images=True, image_size=224)
    env.reset(KING_TWO)
    r = act(env, "10")
    assert r.info["image"].size == (224, 224)
    assert r.observation == EZPointsEnv().reset(KING_TWO, replay=["10"])  # text unchanged


def test_bench_reports_expert_and_random_success_per_panel():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_envs", ROOT / "scripts" / "bench_envs.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = bench.panel_success("ezpoints", max_tasks=40) + bench.panel_success("sokoban@2box", max_tasks=5)
    assert [(r["env"], r["split"], r["tasks"]) for r in rows] == [
        ("ezpoints", "train", 40), ("ezpoints", "eval", 40),
        ("sokoban@2box", "train", 5), ("sokoban@2box", "eval", 5)]
    assert all(r["expert"] == 1.0 and r["random"] is not None for r in rows)
    assert rows[0]["random"] < rows[0]["random_adm"]
