"""EZPoints' deck rules (env.level sum / product / suit, issue 44): the face-down card follows a
rule of the visible card across a split, the oracle's hindsight states it in words that hold
on another deal of the same family, and the demonstrators act on it."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from envs.base import demo_policy, error_turn, lesson_donor, lesson_donors, run_episode
from envs.ezpoints import EZPointsEnv
from envs.ezpoints.cards import SPLIT_SIZES, custom_task, value
from envs.ezpoints.env import completions
from envs.ezpoints.rules import AMBIGUOUS, RULES, lesson, lesson_operator, rule_deals
from envs.oracle import Oracle


def rule_env(level: str) -> EZPointsEnv:
    return EZPointsEnv(hidden_cards=1, level=level)


def play(env, tasks, skills=None):
    skills = skills or [None] * len(tasks)
    return [run_episode(env, t, demo_policy(0.0, seed=f"d{t.id}", skill=s)) for t, s in zip(tasks, skills)]


@pytest.mark.parametrize("level", RULES)
def test_every_deal_of_a_rule_follows_it_and_the_panels_are_fixed(level):
    env = rule_env(level)
    for split, size in SPLIT_SIZES.items():
        tasks = env.panel(split)
        assert len(tasks) == size and tasks[7].id == f"ezpoints/{split}/{level}-0007"
        assert [t.spec["cards"] for t in tasks] == [t.spec["cards"] for t in rule_env(level).panel(split)]
        for t in tasks:
            (r1, s1), (r2, _) = t.spec["cards"]
            first, hidden = value(r1), value(r2)
            assert first in AMBIGUOUS  # both operators possible from the visible card alone
            family = {"sum": "sum", "product": "product"}.get(level) or \
                ("sum" if s1 in ("hearts", "diamonds") else "product")
            assert env.family(t) == t.spec["rule"] == family
            assert (first + hidden if family == "sum" else first * hidden) == 12
    families = Counter(env.family(t) for t in env.panel("train"))
    if level == "suit":  # both families, about evenly
        assert 400 < families["sum"] < 600 and families["sum"] + families["product"] == 1000
    assert EZPointsEnv().family(EZPointsEnv().panel("eval")[0]) is None
    assert env.panel("eval")[0].spec["cards"] != EZPointsEnv(hidden_cards=1).panel("eval")[0].spec["cards"]
    assert all(hidden for hiddens in rule_deals(level).values() for hidden in hiddens)


def test_a_rule_needs_a_face_down_card_and_names_its_levels_in_one_line():
    with pytest.raises(ValueError, match=r"^env.level: 'sum' is a rule of the face-down card; it "
                                         r"needs env.hidden_cards: 1, got 0$"):
        EZPointsEnv(level="sum")
    with pytest.raises(ValueError, match=r"^env.level: 'odd' is not a level of ezpoints; valid: "
                                         r"full, sum, product, suit$"):
        EZPointsEnv(hidden_cards=1, level="odd")
    assert EZPointsEnv.levels == ("full", "sum", "product", "suit")
    assert "fixed rule" in rule_env("sum").system_prompt()
    assert "fixed rule" not in EZPointsEnv(hidden_cards=1).system_prompt()
    assert "fixed rule" in rule_env("suit").domain_description()


def test_the_oracle_states_the_lesson_of_the_family_not_the_deal():
    """The Positive skill's steps name the rule, never this deal's hidden card (only its
    progress line, the moves played, does); a failure's Negative names the wrong operator."""
    env = rule_env("suit")
    oracle = Oracle(lambda: rule_env("suit"))
    red = custom_task("ezpoints/custom/0001", ("4", "hearts"), ("8", "clubs"))
    black = custom_task("ezpoints/custom/0002", ("4", "spades"), ("3", "clubs"))
    assert lesson("suit", ("4", "hearts")) == (
        "In this deck, with a red card (hearts or diamonds) showing, the face-down card always makes "
        "12 with the visible card by +: write the visible card's value, then +, then 12 minus it.")
    assert lesson("product", ("4", "hearts")).startswith(
        "In this deck the face-down card always makes 12 with the visible card by *:")
    script = iter(["4", "*", "3", "="])  # the wrong operator for a red card
    failed = run_episode(env, red, lambda e, o, turns: e.response_for(next(script, "=")))
    hindsight = oracle.write(failed)
    steps = hindsight.positive_skill.split("Moves that")[0]
    assert lesson("suit", ("4", "hearts")) in steps and "8" not in steps
    assert lesson_operator(hindsight.positive_skill) == "+"
    assert error_turn(failed) == 1 and hindsight.error_turn == 1  # after one correct turn
    assert '"*"' in hindsight.negative_skill and '"+"' in hindsight.negative_skill
    assert lesson_operator(oracle.write(play(env, [black])[0]).positive_skill) == "*"
    assert lesson_operator("Read both cards (4 and 8)") is None


@pytest.mark.parametrize("level", RULES)
def test_a_skill_of_another_deal_of_the_same_rule_wins_and_another_rules_loses(level):
    """Without a skill the demonstrator guesses between the two operators (about half the
    deals; a failure's decisive error is the operator, turn 1, after a correct turn 0); with
    the oracle's skill of ANOTHER deal of the same family it wins every deal; with a skill of
    the other family (the shuffled control, suit rule) it wins none."""
    env, oracle = rule_env(level), Oracle(lambda: rule_env(level))
    tasks = env.panel("eval")[:80]
    plain = play(env, tasks)
    assert 0.3 < sum(e.success for e in plain) / len(plain) < 0.7
    assert {error_turn(e) for e in plain if not e.success} == {1}
    assert all(e.turns[0].action == str(value(e.task.spec["cards"][0][0])) for e in plain)
    skills = [oracle.write(e).positive_skill for e in plain]
    families, ids = [env.family(t) for t in tasks], [t.id for t in tasks]
    same = lesson_donors(families, ids, same=True, seed="test")
    assert all(j is not None and ids[j] != ids[i] and families[j] == families[i] for i, j in enumerate(same))
    transfer = play(env, tasks, [skills[j] for j in same])
    assert all(e.success and len(e.turns) == 4 for e in transfer)
    other = lesson_donors(families, ids, same=False, seed="test")
    if level != "suit":  # one family: no other rule's skill in the split
        assert set(other) == {None}
        return
    assert all(families[j] != families[i] for i, j in enumerate(other))
    assert not any(e.success for e in play(env, tasks, [skills[j] for j in other]))


def test_the_demonstrator_thinks_with_the_lesson_it_reads_in_the_sentence_it_guesses_in():
    """With the lesson or without, one sentence: only the operator differs (the decisive token
    the skill moves is one that the no-skill policy's own samples pass through)."""
    env = rule_env("sum")
    task = env.panel("train")[0]
    env.reset(task)
    first = value(task.spec["cards"][0][0])
    skill = lesson("sum", tuple(task.spec["cards"][0]))
    said = "{} is {} and the face-down card makes 12 with it by {}: {} {} {} = 12."
    card, ops = task.spec["cards"][0][0], dict(completions(first))
    assert env.demo_thought(task, skill) == said.format(card, first, "+", first, "+", ops["+"])
    assert "face down:" in env.demo_thought(task)  # nothing committed yet: the two completions
    guesses = Counter()
    for i in range(40):  # the guesser commits to an operator at its first turn and thinks it
        episode = run_episode(env, task, demo_policy(0.0, seed=f"c{i}"))
        op = episode.turns[1].info["action"]
        guesses[op] += 1
        assert {t.response.split("</think>")[0] for t in episode.turns} == \
            {"<think>" + said.format(card, first, op, first, op, ops[op])}
    assert set(guesses) == {"+", "*"}
    suit = rule_env("suit")  # under the suit rule the sentence names the colour the lesson reads
    assert {suit.family(t) for t in suit.panel("train")[:8]} == {"sum", "product"}
    for task in suit.panel("train")[:8]:
        visible = tuple(task.spec["cards"][0])
        thought = suit.demo_thought(task, lesson("suit", visible))
        word = "red" if suit.family(task) == "sum" else "black"
        assert thought.startswith(f"{visible[0]} is {value(visible[0])} and {word}, so the face-down card makes 12")
        assert thought.split(" by ")[1][0] == ("+" if word == "red" else "*")
    full = EZPointsEnv(hidden_cards=1)  # gym_cards' deck: the guesser's thought is unchanged
    full_task = full.panel("train")[0]
    episode = run_episode(full, full_task, demo_policy(0.0, seed="c0"))
    assert all("face down:" in t.response for t in episode.turns)


def test_lesson_donors_pair_within_or_across_families_and_never_the_task_itself():
    families, ids = ["a", "a", "b", None, "a"], ["t0", "t0", "t1", "t2", "t3"]
    same = lesson_donors(families, ids, same=True, seed="s")
    assert same[0] == same[1] == 4 and same[2] is None and same[3] is None and same[4] in (0, 1)
    other = lesson_donors(families, ids, same=False, seed="s")
    assert other[:2] == [2, 2] and other[2] in (0, 1, 4) and other[3] is None
    assert lesson_donors(families, ids, True, "s") == same  # seeded
    assert lesson_donor(None, "t9", families, ids, True, random.Random(0)) is None


# -- hands in a row (env.hands): a failure after whole deals played right ---------------------

def scripted(tokens):
    """An ``act`` that writes ``tokens`` in order."""
    return lambda env, obs, turns: f"<action>{tokens[len(turns)]}</action>"


def test_hands_deal_the_next_deals_of_the_same_family_and_win_only_all_together():
    env = EZPointsEnv(hidden_cards=1, level="suit", hands=3)
    tasks, single = env.panel("train"), rule_env("suit").panel("train")
    assert len(tasks) == len(single) and env.max_turns == 18
    assert tasks[7].id == f"{single[7].id}/hands3" and tasks[7].spec["cards"] == single[7].spec["cards"]
    for t in tasks[:100]:
        deals = t.spec["deals"]
        assert len(deals) == 3 and deals[0] == t.spec["cards"] and len({str(d) for d in deals}) > 1
        assert {env.family(custom_like(t, d)) for d in deals} == {t.spec["rule"]}
    task = tasks[0]
    plan = env.reset(task) and env.optimal_plan()
    assert len(plan) == 12 and env.distance_to_goal() == 12 and "Hand 1 of 3." in env.render_text()
    episode = run_episode(env, task, scripted(plan))
    assert episode.success and [t.reward for t in episode.turns] == [0.0] * 11 + [1.0]
    assert episode.distances == list(range(12, -1, -1))  # every hand counts down the distance
    assert len({t.info["state_key"] for t in episode.turns}) == 12  # the hand is in the state


def custom_like(task, cards):
    """A one-deal task of ``cards`` in ``task``'s family (what :meth:`family` reads)."""
    return type(task)(task.id, task.env, task.split, task.instruction, {"cards": cards, "rule": task.spec["rule"]})


def test_a_wrong_operator_in_the_second_hand_is_the_error_after_a_prefix_of_one_whole_hand():
    env = EZPointsEnv(hidden_cards=1, level="sum", hands=3)
    task = env.panel("eval")[3]
    env.reset(task)
    plan = env.optimal_plan()
    tokens = plan[:5] + ["*" if plan[5] == "+" else "+"] + plan[6:]  # hand 2's operator wrong
    episode = run_episode(env, task, scripted(tokens))
    assert not episode.success and episode.turns[-1].reward == 0.0 and len(episode.turns) == 8
    assert error_turn(episode) == 5 and episode.distances[:6] == [12, 11, 10, 9, 8, 7]
    assert "wrong one ends the game" in env.system_prompt()
    assert "Hand 2 of 3 is dealt." in episode.turns[4].observation  # what turn 4 saw
    hindsight = Oracle(lambda: EZPointsEnv(hidden_cards=1, level="sum", hands=3)).write(episode)
    assert hindsight.error_turn == 5 and lesson_operator(hindsight.positive_skill) == "+"
    assert EZPointsEnv(hidden_cards=1, level="sum").reset(env.panel("eval")[3]) is not None  # a one-hand env plays it


def test_hands_need_a_deck_rule_and_stay_within_five():
    with pytest.raises(ValueError, match=r"^env.hands: 3 hands in a row need a deck rule \(env.level: sum, "
                                         r"product, suit\); gym_cards' deck has no lesson that holds on the next$"):
        EZPointsEnv(hidden_cards=1, hands=3)
    with pytest.raises(ValueError, match=r"^env.hands: 6 is not valid; valid: 1 to 5$"):
        EZPointsEnv(hidden_cards=1, level="sum", hands=6)
    assert EZPointsEnv(hidden_cards=1, level="sum").panel("eval")[0].id == "ezpoints/eval/sum-0000"


def test_the_guessers_failures_give_each_of_etros_regions_thirty_turns_in_128_episodes():
    """What ``env.hands`` is for: the demonstrator without the lesson (it guesses the operator)
    fails after whole hands played right, so its prefix holds operator turns; one hand's does not."""
    def regions(hands):
        env = EZPointsEnv(hidden_cards=1, level="suit", hands=hands)
        counts, prefix_ops = Counter(), 0
        for task in env.panel("train")[:128]:
            episode = run_episode(env, task, demo_policy(0.0, seed=f"g{task.id}"))
            k = error_turn(episode)
            if episode.success or k is None:
                continue
            for i, turn in enumerate(episode.turns):
                counts["prefix" if i < k else "error" if i == k else "suffix"] += 1
                prefix_ops += i < k and turn.info["action"] in ("+", "*")
        return counts, prefix_ops
    one, one_ops = regions(1)
    three, three_ops = regions(3)
    assert one_ops == 0 and three_ops >= 30
    assert min(three["prefix"], three["error"], three["suffix"]) >= 30, three
    assert three["prefix"] > 2 * one["prefix"]
