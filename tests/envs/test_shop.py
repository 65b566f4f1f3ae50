"""The built-in ``shop`` environment: reward, search, pages, distance, expert, determinism."""

from __future__ import annotations

import itertools
import json
import random

import numpy as np
import pytest

import envs
from envs.base import expert_policy, first_unrecovered_error, format_response, run_episode
from envs.shop.catalog import (
    MAX_RESULTS,
    TYPES_BY_KEY,
    Goal,
    Product,
    get_catalog,
    purchase_score,
    tokenize,
    type_reward,
)
from envs.shop.env import UNREACHABLE, ShopEnv, make_task, parse_command
from envs.shop.types import ProductType
from support.hash_seeds import outputs_under_hash_seeds


@pytest.fixture(scope="module")
def env() -> ShopEnv:
    return envs.make("shop")


@pytest.fixture(scope="module")
def panel(env) -> list:
    return env.panel("eval")


def act(env: ShopEnv, action: str):
    return env.step(format_response(action))


def expert_actions(env: ShopEnv, task) -> list[str]:
    return run_episode(env, task, expert_policy()).actions


def ptype(key, category, nouns) -> ProductType:
    return ProductType(key, key, category, tuple(nouns), (), (), (1, 2))


# -- reward ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("goal", "bought", "expected"),
    [
        (("a", "x › y › z", list("abcde")), ("a", "q › r › s", ["a"]), 1.0),  # title .2, same query
        (("a", "x › y › z", list("abcde")), ("b", "q › r › s", ["a"]), 0.5),  # title .2, no match
        (("a", "x › y › z", ["polo"]), ("a", "x › y › z", ["boot"]), 0.0),  # title 0 overrides all
        (
            ("a", "x › y › z", ["polo", "shirt"]),
            ("b", "x › y › w", ["dress", "shirt"]),
            1.0,
        ),  # category
        (
            ("a", "x › y › z", ["polo", "shirt"]),
            ("b", "q › r › s", ["dress", "shirt"]),
            1.0,
        ),  # title .5
        (
            ("a", "x › y › z", ["t-shirt"]),
            ("b", "x › y › z", ["polo", "shirt"]),
            0.0,
        ),  # no shared noun
        (
            ("a", "x › y › z", list("abcdefghijk")),
            ("b", "x › y › z", ["a"]),
            0.1,
        ),  # title 1/11 < 0.1
    ],
)
def test_type_reward_follows_webshop_rules(goal, bought, expected):
    assert type_reward(ptype(*goal), ptype(*bought)) == expected


def test_catalog_type_rewards_on_real_types():
    t = TYPES_BY_KEY
    assert type_reward(t["mens_polo"], t["mens_dress_shirt"]) == 1.0  # category + "shirt"
    assert type_reward(t["mens_tshirt"], t["mens_polo"]) == 0.0
    assert type_reward(t["shampoo"], t["hair_dryer"]) == 0.0  # category match, no shared noun


def _product(ptype_key="mens_tshirt", price=25.0, attributes=("cotton", "v-neck")) -> Product:
    options = (("size", ("small", "large")), ("color", ("black", "navy blue")))
    return Product("B0TEST0001", TYPES_BY_KEY[ptype_key], "t", price, attributes, options, "d", ())


GOAL = Goal(
    "B0TEST0001",
    "mens_tshirt",
    ("cotton", "tagless"),
    (("size", "large"), ("color", "navy blue")),
    30.0,
    "cotton tagless men's t-shirt",
)


@pytest.mark.parametrize(
    ("product", "selected", "expected"),
    [
        (_product(attributes=("cotton", "tagless")), ["large", "navy blue"], 1.0),
        (_product(), ["large"], 3 / 5),  # 1 attribute + 1 option + price
        (_product(), [], 2 / 5),
        (_product(price=31.0, attributes=("cotton", "tagless")), ["large", "navy blue"], 4 / 5),
        (_product(price=31.0, attributes=()), ["small", "black"], 0.0),
        (_product("mens_polo", attributes=("cotton", "tagless")), ["large", "navy blue"], 0.0),
    ],
)
def test_purchase_score_hand_cases(product, selected, expected):
    assert purchase_score(GOAL, product, selected) == pytest.approx(expected)


def test_buying_with_a_missing_option_scores_partially(env, panel):
    task = next(t for t in panel if len(t.spec["options"]) == 2)
    actions = expert_actions(env, task)
    skip = actions[-2]  # the last option click
    env.reset(task, replay=[a for a in actions[:-1] if a != skip])
    result = act(env, "click[buy now]")
    n = len(task.spec["attributes"]) + 2 + 1
    assert result.done and not result.success
    assert result.reward == pytest.approx((n - 1) / n) == result.info["score"]
    assert "Your score" in result.observation and result.info["distance"] == UNREACHABLE


# -- search ------------------------------------------------------------------------------
def test_bm25_scores_equal_rank_bm25_and_ranking_is_stable():
    catalog = get_catalog()
    for query in ["machine wash cotton men's t-shirt", "organic green tea jasmine", "zzz unknown"]:
        np.testing.assert_allclose(catalog.scores(query), catalog.bm25.get_scores(tokenize(query)))
    query = "slim fit shirt"
    scores, hits = catalog.scores(query), catalog.search(query)
    expected = sorted(np.flatnonzero(scores > 0), key=lambda i: (-scores[i], i))[:MAX_RESULTS]
    assert list(hits) == expected and len(hits) == MAX_RESULTS
    assert catalog.search("zzz unknown") == ()


def test_paging_through_results(env, panel):
    env.reset(panel[0])
    act(env, "search[slim fit shirt]")
    results = env.results(env.state)
    seen, keys = [], []
    for page in range(5):
        admissible = env.admissible_actions()
        assert ("click[< prev]" in admissible) == (page > 0)
        assert ("click[next >]" in admissible) == (page < 4)
        assert f"Page {page + 1} (Total results: 50)" in env.render(env.state)
        seen += list(env.page_items(env.state))
        keys.append(env.state_key())
        if page < 4:
            assert act(env, "click[next >]").info["valid"]
    assert seen == list(results)
    assert not act(env, "click[next >]").info["valid"]
    act(env, "click[< prev]")
    assert env.state_key() == keys[3]


# -- item pages and options --------------------------------------------------------------
def test_options_select_replace_and_reset(env, panel):
    task = next(t for t in panel if len(t.spec["options"]) == 2)
    actions = expert_actions(env, task)
    env.reset(task, replay=actions[:2])  # search, open the item
    product = env.catalog.products[env.state.item]
    dim, values = product.options[0]
    act(env, f"click[{values[0]}]")
    assert env.state.selected == ((dim, values[0]),)
    assert f"{values[0]} (selected)" in env.render(env.state)
    act(env, f"click[{values[1]}]")
    assert env.state.selected == ((dim, values[1]),)
    assert act(env, "click[features]").observation.startswith("Back to Search [SEP] < Prev")
    act(env, "click[< prev]")
    assert env.state.page == "item" and env.state.selected == ((dim, values[1]),)
    act(env, "click[< prev]")
    act(env, f"click[{product.asin.lower()}]")
    assert env.state.selected == ()


def test_admissible_actions_are_valid_and_others_are_not(env, panel):
    task = panel[3]
    actions = expert_actions(env, task)
    for k in range(len(actions)):
        env.reset(task, replay=actions[:k])
        state = env.state
        for action in env.admissible_actions():
            assert env.transition(state, *parse_command(action)) is not None, action
        assert env.transition(state, "click", "not a button") is None


def test_invalid_actions_keep_state_and_cost_the_penalty(panel):
    env = ShopEnv(invalid_penalty=0.25)
    env.reset(panel[0])
    key = env.state_key()
    for response in [
        "no tags",
        "<action>click[buy now]</action>",
        "<action>jump</action>",
        "<action>search[]</action>",
    ]:
        result = env.step(response)
        assert (result.reward, result.done, result.info["valid"]) == (-0.25, False, False)
        assert env.state_key() == key and result.observation.startswith("Invalid action")
    act(env, "search[cotton shirt]")
    assert not act(env, "search[again]").info["valid"]  # no search box on the results page
    assert not act(env, "click[b0notonpage]").info["valid"]
    assert env.turn == 7


def test_parse_command():
    assert parse_command("search[ Red  Shoes ]") == ("search", "red shoes")
    assert parse_command("CLICK[Buy Now]") == ("click", "buy now")
    assert parse_command("click[]") is None and parse_command("buy now") is None


def test_turn_limit_ends_with_score_zero(panel):
    env = ShopEnv(max_turns=3)
    env.reset(panel[0])
    results = [act(env, a) for a in ["search[cotton shirt]", "click[next >]", "click[< prev]"]]
    assert [r.done for r in results] == [False, False, True]
    assert results[-1].reward == 0.0 and not results[-1].success
    with pytest.raises(RuntimeError):
        act(env, "click[back to search]")


def test_replay_reaches_the_same_state(env, panel):
    task = panel[7]
    actions = expert_actions(env, task)
    env.reset(task)
    for a in actions[:3]:
        last = act(env, a)
    observation = env.reset(task, replay=actions[:3])
    assert observation == last.observation and env.turn == 3
    assert env.state_key() == last.info["state_key"]


# -- expert, random policy, distance -----------------------------------------------------
def test_expert_solves_the_eval_panel(env, panel):
    episodes = [run_episode(env, task, expert_policy()) for task in panel]
    assert np.mean([e.success for e in episodes]) >= 0.99
    assert all(e.score == 1.0 for e in episodes if e.success)


def test_uniform_random_policy_rarely_succeeds(env, panel):
    rng = random.Random("random-policy")

    def uniform(env, observation, turns):
        return format_response(rng.choice(env.admissible_actions()))

    episodes = [run_episode(env, task, uniform) for task in panel[:200]]
    assert np.mean([e.success for e in episodes]) <= 0.05


def test_distance_drops_by_one_along_the_expert_path(env, panel):
    for task in panel[:100]:
        episode = run_episode(env, task, expert_policy())
        d = episode.distances
        assert d[-1] == 0 and all(a - b == 1 for a, b in itertools.pairwise(d)), (task.id, d)
        assert episode.turns[0].info["plan"] == episode.actions[1:]


def test_wrong_clicks_increase_distance_and_prev_recovers(env, panel):
    task = panel[11]
    env.reset(task, replay=expert_actions(env, task)[:1])
    d = env.distance_to_goal()
    wrong = next(i for i in env.page_items(env.state) if i not in env.targets)
    assert act(env, f"click[{env.catalog.products[wrong].asin.lower()}]").info["distance"] == d + 1
    assert act(env, "click[< prev]").info["distance"] == d
    assert act(env, "click[back to search]").info["distance"] == d + 1


def test_expert_epsilon_deviates_plausibly(env, panel):
    task = panel[0]
    env.reset(task, replay=expert_actions(env, task)[:2])
    assert env.state.page == "item" and env.state.item in env.targets
    rng, d = random.Random(0), env.distance_to_goal()
    actions = {env.expert_action(epsilon=1.0, rng=rng) for _ in range(200)}
    wrong = env.plausible_wrong_actions()
    assert actions <= set(env.admissible_actions()) and set(wrong) & actions
    assert env.expert_action(epsilon=0.0) == env.plan()[0]
    for action in wrong:  # none of them makes progress: wrong option value or premature buy
        new = env.transition(env.state, *parse_command(action))
        assert new.page == "done" or len(env.plan(new)) >= d, action


# -- first unrecovered error on shop trajectories ----------------------------------------
def play(env, task, actions):
    env.reset(task)
    distances = [env.distance_to_goal()]
    for a in actions:
        result = act(env, a)
        distances.append(result.info["distance"])
    return distances, result.success


def test_first_unrecovered_error_on_constructed_trajectories(env, panel):
    task = panel[11]
    expert = expert_actions(env, task)
    env.reset(task, replay=expert[:1])
    wrong = next(i for i in env.page_items(env.state) if i not in env.targets)
    wrong_click = f"click[{env.catalog.products[wrong].asin.lower()}]"
    search = expert[0]
    assert expert[1].startswith("click[b0") and len(expert) > 3  # opens the target, has options
    cases = {
        "success": (expert, None),
        "recovered mistake then success": (
            [search, wrong_click, "click[< prev]", *expert[1:]],
            None,
        ),
        "wrong item bought": ([search, wrong_click, "click[buy now]"], 1),
        "recovered mistake, then wrong buy": (
            [search, wrong_click, "click[< prev]", wrong_click, "click[buy now]"],
            3,
        ),
        "premature buy on the target": ([*expert[:2], "click[buy now]"], 2),
        "dithering on sub-pages": (
            [*expert[:2]] + ["click[description]", "click[< prev]"] * 6,
            None,
        ),
    }
    for name, (actions, expected) in cases.items():
        distances, success = play(env, task, actions)
        assert first_unrecovered_error(distances, success) == expected, (name, distances)


# -- panels and determinism --------------------------------------------------------------
def test_panels_ids_and_splits(env, panel):
    assert len(panel) == 500 and panel[42].id == "shop/eval/0042"
    assert make_task("eval", 42) == panel[42] and make_task("train", 42).id == "shop/train/0042"
    assert make_task("train", 42).instruction != panel[42].instruction
    with pytest.raises(ValueError, match="valid: train, eval"):
        env.panel("test")


DIGEST = """
import hashlib, json
import envs
from envs.base import expert_policy, run_episode
from envs.shop.env import make_task
env = envs.make("shop")
tasks = [make_task("eval", i) for i in range(0, 500, 10)] + [make_task("train", i) for i in (0, 4999)]
blob = [(t.id, t.instruction, dict(t.spec)) for t in tasks]
blob += [run_episode(env, t, expert_policy(0.3)).actions for t in tasks[:20]]
blob += [[p.asin, p.title, p.price] for p in env.catalog.products[::97]]
print(hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest())
"""


def test_identical_across_processes_and_hash_seeds():
    digests = outputs_under_hash_seeds(DIGEST, seeds=("1", "2"), timeout=120)
    assert len(digests[0]) == 64 and digests[0] == digests[1]


# -- prompt pieces -----------------------------------------------------------------------
def test_prompt_pieces_name_the_grammar_and_the_task(env, panel):
    task = next(t for t in panel if len(t.spec["options"]) == 2)
    assert all(
        s in env.system_prompt() for s in ("search[query]", "click[text]", "<action>", "15 turns")
    )
    assert "buy now" in env.domain_description()
    steps = env.workflow(task)
    assert any(f"search[{task.spec['query']}]" in s for s in steps)
    assert any(all(v in s for _, v in task.spec["options"]) for s in steps)
    assert json.dumps(dict(task.spec))  # specs are plain JSON
