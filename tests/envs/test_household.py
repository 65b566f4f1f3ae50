"""The built-in household environment: panels, texts, rules, exact distance, expert."""

from __future__ import annotations

import collections
import json
import random

import pytest

import envs
from envs.base import TextEnv, demo_policy, expert_policy, format_response, run_episode
from envs.household.data import FAMILIES
from envs.household.engine import seen_listings
from envs.household.env import INVALID_OBSERVATION, HouseholdEnv, parse_command
from envs.household.world import SPLIT_SIZES, combo_heldout, custom_task, layouts
from support.hash_seeds import outputs_under_hash_seeds


def act(env: HouseholdEnv, action: str):
    return env.step(format_response(action, think="test"))


def kitchen_task(family: str = "pick_cool_then_place", obj: str = "apple", target: str = "countertop"):
    return custom_task(
        "household/custom/0001", family, obj, target,
        {"countertop 1": ["mug 1"], "fridge 1": ["apple 1"], "microwave 1": [],
         "sinkbasin 1": ["apple 2"], "drawer 1": []},
        closed=["fridge 1", "microwave 1", "drawer 1"],
    )


# -- panels ----------------------------------------------------------------------------
def test_panels_have_fixed_sizes_stable_ids_and_all_families():
    env = envs.make("household")
    for split, size in SPLIT_SIZES.items():
        tasks = env.panel(split)
        assert len(tasks) == size
        assert [t.id for t in tasks[:2]] == [f"household/{split}/0000", f"household/{split}/0001"]
        assert tasks[7].id == f"household/{split}/0007"
        assert {t.env for t in tasks} == {"household"} and {t.split for t in tasks} == {split}
        families = collections.Counter(t.spec["family"] for t in tasks)
        assert set(families) == set(FAMILIES)
        assert max(families.values()) - min(families.values()) <= 1
    with pytest.raises(ValueError, match="valid: train, eval_seen, eval_unseen"):
        env.panel("test")


def test_eval_unseen_uses_only_held_out_layouts_and_combinations():
    env = envs.make("household")
    train, seen, unseen = (env.panel(s) for s in ("train", "eval_seen", "eval_unseen"))
    combo = lambda t: (t.spec["object"], t.spec["target"])
    assert not {t.spec["layout"] for t in unseen} & {t.spec["layout"] for t in train}
    assert not {combo(t) for t in unseen} & {combo(t) for t in train}
    assert all(layouts()[t.spec["layout"]].heldout for t in unseen)
    assert all(combo_heldout(*combo(t)) for t in unseen)
    for task in train + seen:
        assert not layouts()[task.spec["layout"]].heldout and not combo_heldout(*combo(task))
    # eval_seen draws from the train distribution: its layouts all occur in train
    assert {t.spec["layout"] for t in seen} <= {t.spec["layout"] for t in train}


_FINGERPRINT = """
import hashlib, json, envs
from envs.base import run_episode, expert_policy
env = envs.make("household")
h = hashlib.sha256()
for split in env.splits:
    for t in env.panel(split):
        h.update(json.dumps([t.id, t.instruction, t.spec], sort_keys=True).encode())
for t in env.panel("eval_unseen")[:12] + env.panel("train")[::400]:
    ep = run_episode(env, t, expert_policy(0.3, seed="fp"))
    for turn in ep.turns:
        h.update((turn.state_key + turn.action + turn.next_observation).encode())
print(h.hexdigest())
"""


def test_panels_and_episodes_identical_across_processes_and_hash_seeds():
    digests = outputs_under_hash_seeds(_FINGERPRINT)
    assert len(digests[0]) == 64 and digests[0] == digests[1]


# -- texts and rules -------------------------------------------------------------------
def test_observation_texts_follow_alfworld():
    env = HouseholdEnv(show_admissible=False)
    first = env.reset(kitchen_task())
    assert first == ("You are in the middle of a room. Looking quickly around you, you see a "
                     "countertop 1, a fridge 1, a microwave 1, a sinkbasin 1, and a drawer 1.")
    assert env.task_instruction(kitchen_task()) == "Your task is to: cool some apple and put it in countertop."
    expected = [
        ("go to fridge 1", "You arrive at fridge 1. The fridge 1 is closed."),
        ("open fridge 1", "You open the fridge 1. The fridge 1 is open. In it, you see a apple 1."),
        ("take apple 1 from fridge 1", "You pick up the apple 1 from the fridge 1."),
        ("inventory", "You are carrying: a apple 1."),
        ("examine apple 1", "There's nothing special about apple 1."),
        ("cool apple 1 with fridge 1", "You cool the apple 1 using the fridge 1."),
        ("examine apple 1", "The apple 1 is cool."),
        ("go to drawer 1", "You arrive at drawer 1. The drawer 1 is closed."),
        ("look", "You are facing the drawer 1. Next to it, you see nothing."),
        ("go to countertop 1", "You arrive at countertop 1. On the countertop 1, you see a mug 1."),
        ("put apple 1 in countertop 1", "You put the apple 1 in/on the countertop 1."),
    ]
    for action, observation in expected:
        result = act(env, action)
        assert result.observation == observation, action
        assert result.info["valid"]
    assert result.done and result.success and result.reward == 1.0 and result.info["score"] == 1.0
    assert result.info["distance"] == 0 and result.info["plan"] == []


def test_heat_clean_lamp_and_open_receptacle_texts():
    env = HouseholdEnv(show_admissible=False)
    env.reset(kitchen_task("pick_heat_then_place"))
    for a in ("go to sinkbasin 1", "take apple 2 from sinkbasin 1", "clean apple 2 with sinkbasin 1",
              "go to microwave 1"):
        act(env, a)
    assert act(env, "heat apple 2 with microwave 1").observation == "You heat the apple 2 using the microwave 1."
    assert act(env, "examine apple 2").observation == "The apple 2 is clean and hot."
    assert act(env, "open microwave 1").observation == (
        "You open the microwave 1. The microwave 1 is open. In it, you see nothing.")
    assert act(env, "close microwave 1").observation == "You close the microwave 1."
    look = custom_task("household/custom/0002", "look_at_obj_in_light", "book", "desklamp",
                       {"desk 1": [], "bed 1": ["book 1", "pillow 1"]}, lamp_at="desk 1")
    env.reset(look)
    assert act(env, "go to desk 1").observation == "You arrive at desk 1. On the desk 1, you see a desklamp 1."
    assert act(env, "use desklamp 1").observation == "You turn on the desklamp 1."
    assert act(env, "use desklamp 1").observation == "You turn off the desklamp 1."


def test_invalid_steps_cost_the_penalty_and_change_nothing():
    env = HouseholdEnv(invalid_penalty=0.25, show_admissible=False)
    env.reset(kitchen_task())
    act(env, "go to countertop 1")
    key, distance = env.state_key(), env.distance_to_goal()
    for response, action in [("I will go to the fridge", ""),
                             (format_response("take apple 1 from fridge 1"), "take apple 1 from fridge 1"),
                             (format_response("fly away"), "fly away")]:
        result = env.step(response)
        assert result.observation == INVALID_OBSERVATION
        assert result.reward == -0.25 and not result.done and not result.success
        assert result.info["valid"] is False and result.info["action"] == action
        assert env.state_key() == key and result.info["distance"] == distance
    assert env.turn == 4


def test_agent_holds_one_object_and_must_open_closed_receptacles():
    env = HouseholdEnv()
    env.reset(kitchen_task())
    act(env, "go to fridge 1")
    assert "take apple 1 from fridge 1" not in env.admissible_actions()  # closed
    act(env, "open fridge 1")
    act(env, "take apple 1 from fridge 1")
    act(env, "go to sinkbasin 1")
    assert "take apple 2 from sinkbasin 1" not in env.admissible_actions()
    assert not act(env, "take apple 2 from sinkbasin 1").info["valid"]
    assert {"put apple 1 in/on sinkbasin 1", "clean apple 1 with sinkbasin 1",
            "examine apple 1", "inventory", "look"} <= set(env.admissible_actions())


def test_parse_command_canonical_forms():
    assert parse_command("<think>x</think><action> Go to  Cabinet 3. </action>") == "go to cabinet 3"
    assert parse_command("<action>put mug 1 in cabinet 2</action>") == "put mug 1 in/on cabinet 2"
    assert parse_command("<action>put mug 1 on countertop 1</action>") == "put mug 1 in/on countertop 1"
    assert parse_command("<action>move mug 1 to sinkbasin 1</action>") == "put mug 1 in/on sinkbasin 1"
    assert parse_command("<action>look</action><action>inventory</action>") == "inventory"
    assert parse_command("go to cabinet 3") is None
    assert parse_command("<action>  </action>") is None


def test_episode_ends_at_max_turns_without_success():
    env = HouseholdEnv(max_turns=3)
    env.reset(kitchen_task())
    results = [act(env, "look") for _ in range(3)]
    assert [r.done for r in results] == [False, False, True]
    assert not results[-1].success and results[-1].reward == 0.0
    with pytest.raises(RuntimeError, match="reset"):
        act(env, "look")


def test_reset_checks_the_task_and_step_needs_reset():
    env = HouseholdEnv()
    with pytest.raises(RuntimeError, match="reset"):
        act(env, "look")
    foreign = envs.Task("shop/train/0001", "shop", "train", "buy a mug")
    with pytest.raises(ValueError, match="belongs to env 'shop'"):
        env.reset(foreign)


# -- privileged facts ------------------------------------------------------------------
def test_state_key_is_equal_exactly_for_identical_states():
    env = HouseholdEnv()
    env.reset(kitchen_task())
    start = env.state_key()
    assert "household/custom/0001" in start
    act(env, "go to drawer 1")
    act(env, "open drawer 1")
    opened = env.state_key()
    act(env, "close drawer 1")
    closed = env.state_key()
    assert opened != closed
    act(env, "go to countertop 1")
    direct = HouseholdEnv()
    direct.reset(kitchen_task())
    act(direct, "go to countertop 1")
    assert env.state_key() == direct.state_key() != start


def test_replay_reaches_the_mid_episode_state():
    env = HouseholdEnv()
    task = env.panel("eval_unseen")[7]
    episode = run_episode(env, task, expert_policy(0.4, seed="replay"))
    actions = episode.actions
    for k in range(len(actions)):
        observation = env.reset(task, replay=actions[:k])
        assert env.state_key() == episode.turns[k].state_key
        assert observation == episode.turns[k].observation
        assert env.turn == k
    if episode.success:
        with pytest.raises(ValueError, match="ends the episode"):
            env.reset(task, replay=actions + ["look"])


def test_info_distance_is_plan_length_and_the_plan_reaches_the_goal():
    env = HouseholdEnv()
    for task in env.panel("eval_seen")[:30]:
        env.reset(task)
        for _ in range(3):  # wander off the plan first
            act(env, env.expert_action(epsilon=1.0, rng=random.Random(task.id)))
        plan = env.optimal_plan()
        for i, action in enumerate(plan):
            result = act(env, action)
            assert result.info["distance"] == len(result.info["plan"]) == len(plan) - i - 1
        assert result.success or not plan


def _bfs_check(task) -> int:
    """Breadth-first search over every reachable state; assert distance_to_goal matches."""
    env = HouseholdEnv(max_turns=10**9)
    env.reset(task)
    start = env.snapshot()
    edges: dict[tuple, list[tuple]] = {}
    stack, seen = [start], {start}
    while stack:
        snap = stack.pop()
        env.restore(snap)
        edges[snap] = []
        if env.done:  # goal state
            continue
        for action in env.admissible_actions():
            env.restore(snap)
            act(env, action)
            nxt = env.snapshot()
            edges[snap].append(nxt)
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    reverse = collections.defaultdict(list)
    for u, vs in edges.items():
        for v in vs:
            reverse[v].append(u)
    dist = {u: 0 for u, vs in edges.items() if not vs}
    queue = collections.deque(dist)
    while queue:
        v = queue.popleft()
        for u in reverse[v]:
            if u not in dist:
                dist[u] = dist[v] + 1
                queue.append(u)
    for snap in edges:
        env.restore(snap)
        assert env.distance_to_goal() == dist[snap], (task.id, snap)
    return len(edges)


SMALL_WORLDS = {
    "pick_and_place": ("apple", "cabinet", {"countertop 1": ["apple 1", "mug 1"], "cabinet 1": [],
                       "cabinet 2": [], "drawer 1": ["apple 2"]}, ["cabinet 1", "drawer 1"], None),
    "look_at_obj_in_light": ("pen", "desklamp", {"desk 1": ["book 1"], "drawer 1": ["pen 1"],
                             "sidetable 1": ["pen 2", "book 2"]}, ["drawer 1"], "desk 1"),
    "pick_clean_then_place": ("apple", "diningtable", {"countertop 1": ["apple 1"],
                              "fridge 1": ["apple 2"], "sinkbasin 1": [], "diningtable 1": []},
                              ["fridge 1"], None),
    "pick_heat_then_place": ("potato", "diningtable", {"fridge 1": ["potato 1"], "microwave 1": [],
                             "countertop 1": ["potato 2"], "diningtable 1": []},
                             ["fridge 1", "microwave 1"], None),
    "pick_cool_then_place": ("tomato", "countertop", {"countertop 1": [], "fridge 1": ["tomato 1"],
                             "microwave 1": ["tomato 2"]}, ["fridge 1"], None),
    "pick_two_obj_and_place": ("mug", "cabinet", {"cabinet 1": [], "cabinet 2": [],
                               "countertop 1": ["mug 1", "mug 2"], "drawer 1": ["mug 3"]},
                               ["cabinet 1", "drawer 1"], None),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_distance_equals_bfs_shortest_path_in_every_reachable_state(family):
    obj, target, placement, closed, lamp = SMALL_WORLDS[family]
    task = custom_task(f"household/bfs/{family}", family, obj, target, placement, closed, lamp)
    assert _bfs_check(task) > 200


@pytest.mark.slow
def test_distance_equals_bfs_with_distractors_and_two_stations():
    task = custom_task("household/bfs/clean2", "pick_clean_then_place", "apple", "diningtable",
                       {"countertop 1": ["apple 1"], "diningtable 1": ["mug 1"],
                        "fridge 1": ["apple 2"], "sinkbasin 1": [], "sinkbasin 2": []},
                       closed=["fridge 1"])
    assert _bfs_check(task) > 10_000


# -- expert and baselines --------------------------------------------------------------
def _success_rate(env, tasks, act_fn) -> float:
    return sum(run_episode(env, t, act_fn).success for t in tasks) / len(tasks)


@pytest.mark.parametrize("max_turns", [30, 15])
def test_expert_solves_every_eval_panel_and_sampled_train_tasks(max_turns):
    env = HouseholdEnv(max_turns=max_turns)
    for split in ("eval_seen", "eval_unseen"):
        assert _success_rate(env, env.panel(split), expert_policy(0.0)) == 1.0
    assert _success_rate(env, env.panel("train")[::12], expert_policy(0.0)) == 1.0


@pytest.mark.slow
def test_expert_solves_the_whole_train_panel_and_recovers_from_noise():
    env = HouseholdEnv()
    assert _success_rate(env, env.panel("train"), expert_policy(0.0)) == 1.0
    assert _success_rate(env, env.panel("train")[::4], expert_policy(0.2)) >= 0.99


def test_random_admissible_policy_rarely_succeeds():
    env = HouseholdEnv()
    rng = random.Random("random-policy")
    policy = lambda e, o, turns: format_response(rng.choice(e.admissible_actions()))
    rate = _success_rate(env, env.panel("eval_unseen"), policy)
    assert rate <= 0.05  # measured 0.0 (expert: 1.0)


def test_expert_noise_gives_random_or_plausible_wrong_actions():
    env = HouseholdEnv()
    env.reset(kitchen_task())
    for a in ("go to fridge 1", "open fridge 1", "take apple 1 from fridge 1"):
        act(env, a)
    assert env.optimal_plan()[0] == "cool apple 1 with fridge 1"
    wrong = env.plausible_wrong_actions()
    assert "go to microwave 1" in wrong and "go to sinkbasin 1" in wrong  # heat/clean instead
    assert "cool apple 1 with fridge 1" not in wrong
    rng = random.Random(0)
    picks = [env.expert_action(epsilon=1.0, rng=rng) for _ in range(200)]
    assert set(picks) <= set(env.admissible_actions())
    assert picks.count("cool apple 1 with fridge 1") < 40
    assert sum(p in wrong for p in picks) > 80
    assert env.expert_action() == "cool apple 1 with fridge 1"


def test_wrong_object_is_offered_when_taking():
    env = HouseholdEnv()
    task = custom_task("household/custom/0003", "pick_and_place", "apple", "diningtable",
                       {"countertop 1": ["apple 1", "egg 1"], "diningtable 1": []})
    env.reset(task)
    act(env, "go to countertop 1")
    assert "take egg 1 from countertop 1" in env.plausible_wrong_actions()


# -- prompt pieces ---------------------------------------------------------------------
def test_prompt_pieces_and_family_workflows():
    env = HouseholdEnv()
    system = env.system_prompt()
    for piece in ("<think>", "<action>", "go to R", "put O in/on R", "heat O with R", "inventory"):
        assert piece in system
    assert "desklamp" in env.domain_description()
    tasks = {t.spec["family"]: t for t in env.panel("eval_seen")[:6]}
    for family, verb in [("pick_clean_then_place", "clean"), ("pick_heat_then_place", "heat"),
                         ("pick_cool_then_place", "cool"), ("look_at_obj_in_light", "desklamp"),
                         ("pick_two_obj_and_place", "second")]:
        steps = env.workflow(tasks[family])
        assert len(steps) >= 3 and any(verb in s for s in steps), family
        assert any(tasks[family].spec["object"] in s for s in steps)
    pick = env.workflow(tasks["pick_and_place"])
    assert pick[-1].startswith(f"Go to a {tasks['pick_and_place'].spec['target']}")
    assert json.dumps(env.workflow(kitchen_task()))  # custom tasks work too


# -- observation-consistent demonstrator -----------------------------------------------
def test_seen_listings_reads_the_contents_texts():
    assert seen_listings("You arrive at countertop 1. On the countertop 1, you see a apple 1, "
                         "a mug 2, and a pan 1.") == [("countertop 1", ["apple 1", "mug 2", "pan 1"])]
    assert seen_listings("You open the fridge 1. The fridge 1 is open. In it, you see a egg 3.") == [
        ("fridge 1", ["egg 3"])]
    assert seen_listings("You arrive at desk 1. On the desk 1, you see a book 1, and a desklamp 1.") == [
        ("desk 1", ["book 1", "desklamp 1"])]
    assert seen_listings("You arrive at drawer 2. The drawer 2 is open. In it, you see nothing.") == [
        ("drawer 2", [])]
    assert seen_listings("You arrive at cabinet 1. The cabinet 1 is closed.") == []
    assert seen_listings("You pick up the apple 1 from the countertop 1.") == []


def _two_kitchens(apple_at: str):
    """Identical kitchens except where the only apple hides; the search order is the
    surfaces countertop 1, sinkbasin 1, garbagecan 1, then the closed fridge 1, microwave 1
    (diningtable 1 is the target, never searched)."""
    placement = {"countertop 1": ["mug 1"], "fridge 1": ["egg 1"], "microwave 1": [],
                 "sinkbasin 1": ["cup 1"], "garbagecan 1": [], "diningtable 1": []}
    placement[apple_at] = placement[apple_at] + ["apple 1"]
    return custom_task("household/custom/0100", "pick_and_place", "apple", "diningtable",
                       placement, closed=["fridge 1", "microwave 1"])


def test_demo_decisions_depend_only_on_observations():
    env = HouseholdEnv()
    runs = {}
    for where in ("garbagecan 1", "microwave 1"):
        episode = run_episode(env, _two_kitchens(where), demo_policy())
        assert episode.success
        env.reset(_two_kitchens(where))
        runs[where] = (episode.actions, [t.next_observation for t in episode.turns], env.expert_action())
    (acts_a, obs_a, expert_a), (acts_b, obs_b, expert_b) = runs.values()
    assert expert_a != expert_b  # the privileged expert heads straight for the apple
    t = 0
    while obs_a[t] == obs_b[t]:  # same observations so far -> same next action
        assert acts_a[t + 1] == acts_b[t + 1]
        t += 1
    assert acts_a[:t + 1] == acts_b[:t + 1] == ["go to countertop 1", "go to sinkbasin 1",
                                                "go to garbagecan 1"]
    assert t == 2  # the garbagecan reveals the apple in one world only
    assert acts_a == ["go to countertop 1", "go to sinkbasin 1", "go to garbagecan 1",
                      "take apple 1 from garbagecan 1", "go to diningtable 1",
                      "put apple 1 in/on diningtable 1"]
    assert acts_b[3:] == ["go to fridge 1", "open fridge 1", "go to microwave 1", "open microwave 1",
                          "take apple 1 from microwave 1", "go to diningtable 1",
                          "put apple 1 in/on diningtable 1"]


def test_demo_searches_for_the_lamp_after_taking_the_object():
    task = custom_task("household/custom/0101", "look_at_obj_in_light", "book", "desklamp",
                       {"bed 1": [], "desk 1": ["pencil 1"], "drawer 1": ["book 1"],
                        "dresser 1": ["box 1"], "sidetable 1": []},
                       closed=["drawer 1"], lamp_at="sidetable 1")
    episode = run_episode(HouseholdEnv(), task, demo_policy())
    # surfaces before the closed drawer; the lamp is seen on the way; the book comes last
    assert episode.success and episode.actions == [
        "go to bed 1", "go to desk 1", "go to dresser 1", "go to sidetable 1", "go to drawer 1",
        "open drawer 1", "take book 1 from drawer 1", "go to sidetable 1", "use desklamp 1"]


def test_demo_brings_the_first_of_two_objects_to_the_target_then_searches_on():
    task = custom_task("household/custom/0102", "pick_two_obj_and_place", "apple", "fridge",
                       {"countertop 1": ["apple 1", "mug 1"], "fridge 1": [], "microwave 1": ["apple 2"],
                        "sinkbasin 1": [], "garbagecan 1": []},
                       closed=["fridge 1", "microwave 1"])
    episode = run_episode(HouseholdEnv(), task, demo_policy())
    assert episode.success and episode.actions == [
        "go to countertop 1", "take apple 1 from countertop 1", "go to fridge 1", "open fridge 1",
        "put apple 1 in/on fridge 1", "go to sinkbasin 1", "go to garbagecan 1", "go to microwave 1",
        "open microwave 1", "take apple 2 from microwave 1", "go to fridge 1",
        "put apple 2 in/on fridge 1"]


def test_demo_is_deterministic_and_noise_follows_the_seed():
    env = HouseholdEnv()
    tasks = env.panel("eval_unseen")[:12]
    play = lambda eps, seed: [run_episode(env, t, demo_policy(eps, seed)).actions for t in tasks]
    assert play(0.0, "a") == play(0.0, "b")
    assert play(0.3, "a") == play(0.3, "a") != play(0.3, "b")
    env.reset(tasks[0])
    assert TextEnv.demo_action(env, []) == env.expert_action()  # base default: the expert


def test_demo_solves_the_eval_panels_and_sampled_train_tasks():
    env = HouseholdEnv(max_turns=30)
    for split in ("eval_seen", "eval_unseen"):
        assert _success_rate(env, env.panel(split), demo_policy()) >= 0.95  # measured 1.0
    assert _success_rate(env, env.panel("train")[::12], demo_policy()) >= 0.95  # measured 1.0
    assert _success_rate(env, env.panel("train")[::24], demo_policy(0.2)) >= 0.95


@pytest.mark.slow
def test_demo_solves_the_whole_train_panel():
    env = HouseholdEnv()
    assert _success_rate(env, env.panel("train"), demo_policy()) >= 0.95  # measured 1.0
    assert _success_rate(env, env.panel("train")[::4], demo_policy(0.2)) >= 0.95  # measured 0.993


# -- admissible commands in the observation and the small (CPU) level ------------------
def test_observations_list_the_admissible_commands_unless_switched_off():
    from envs.base import ADMISSIBLE_HEADER, without_admissible

    env = HouseholdEnv()
    task = kitchen_task()
    first = env.reset(task)
    assert first.endswith(
        f"{ADMISSIBLE_HEADER}['go to countertop 1', 'go to fridge 1', 'go to microwave 1', "
        "'go to sinkbasin 1', 'go to drawer 1', 'inventory', 'look'].")
    result = act(env, "go to fridge 1")
    listed = result.observation.split(ADMISSIBLE_HEADER)[1]
    assert listed == "[" + ", ".join(f"'{a}'" for a in env.admissible_actions()) + "]."
    assert "'open fridge 1'" in listed and "'go to fridge 1'" not in listed
    plain = HouseholdEnv(show_admissible=False)
    assert plain.reset(task) == without_admissible(first)
    assert act(plain, "go to fridge 1").observation == without_admissible(result.observation)
    # the demonstrator reads only the observation text before the list: same plays either way
    a = run_episode(env, task, demo_policy(0.0, seed="d"))
    b = run_episode(plain, task, demo_policy(0.0, seed="d"))
    assert a.actions == b.actions and a.success and b.success


def test_small_level_has_small_rooms_its_own_fixed_panels_and_four_families():
    from envs.household.world import SMALL_FAMILIES, SMALL_MAX_RECEPTACLES

    env = envs.make("household", level="small")
    full = envs.make("household")
    for split, size in SPLIT_SIZES.items():
        tasks = env.panel(split)
        assert len(tasks) == size and tasks[3].id == f"household/{split}/s0003"
        assert {t.spec["family"] for t in tasks} == set(SMALL_FAMILIES)
        assert all(layouts()[t.spec["layout"]].level == "small" for t in tasks)
        assert not {t.id for t in tasks} & {t.id for t in full.panel(split)}
    sizes = [len(lay.receptacles) for lay in layouts().values() if lay.level == "small"]
    assert max(sizes) <= SMALL_MAX_RECEPTACLES
    unseen, train = env.panel("eval_unseen"), env.panel("train")
    assert all(layouts()[t.spec["layout"]].heldout for t in unseen)
    assert not {t.spec["layout"] for t in unseen} & {t.spec["layout"] for t in train}
    assert env.panel("eval_seen") == envs.make("household", level="small").panel("eval_seen")
    with pytest.raises(ValueError, match="unknown household level 'tiny'; valid: full, small"):
        envs.make("household", level="tiny")


@pytest.mark.parametrize("split", ["eval_seen", "eval_unseen"])
def test_small_level_expert_and_demonstrator_solve_every_panel_task(split):
    env = envs.make("household", level="small", max_turns=15)
    tasks = env.panel(split)
    expert = [run_episode(env, t, expert_policy(0.0)) for t in tasks]
    assert all(e.success for e in expert)
    demo = [run_episode(env, t, demo_policy(0.0)) for t in tasks]
    assert all(e.success for e in demo)
    assert max(len(e.turns) for e in demo) <= 12


def test_numbered_format_lists_numbers_and_a_number_picks_its_command():
    from envs.base import ADMISSIBLE_HEADER

    env = HouseholdEnv(action_format="numbered")
    task = kitchen_task()
    first = env.reset(task)
    assert first.endswith(
        f"{ADMISSIBLE_HEADER}[1: 'go to countertop 1', 2: 'go to fridge 1', 3: 'go to microwave 1', "
        "4: 'go to sinkbasin 1', 5: 'go to drawer 1', 6: 'inventory', 7: 'look'].")
    assert "write the number of your command" in env.system_prompt()
    assert "write the number" not in HouseholdEnv().system_prompt()
    result = env.step(format_response("2"))
    assert result.info["valid"] and result.info["action"] == "go to fridge 1"  # the command, not "2"
    listed = env.admissible_actions()
    assert env.response_for("open fridge 1", think="t") == format_response(
        str(listed.index("open fridge 1") + 1), think="t")
    # a text command, a number off the list or no number is an invalid step
    for response in ("open fridge 1", str(len(listed) + 1), "0", "-1", "two"):
        before = env.state_key()
        step = env.step(format_response(response))
        assert not step.info["valid"] and step.observation.startswith(INVALID_OBSERVATION)
        assert env.state_key() == before
    with pytest.raises(ValueError, match="needs show_admissible on"):
        HouseholdEnv(action_format="numbered", show_admissible=False)
    with pytest.raises(ValueError, match="action_format 'letters' is not one of text, numbered"):
        HouseholdEnv(action_format="letters")


def test_nearest_match_reads_a_misnamed_command_as_the_listed_one_with_its_verb():
    from envs.base import nearest_listed

    listed = ["go to countertop 1", "take soapbar 1 from countertop 1", "open drawer 1", "look"]
    assert nearest_listed("take soapbar 2 from countertop 1", listed) == "take soapbar 1 from countertop 1"
    assert nearest_listed("go to countertop 3", listed) == "go to countertop 1"
    assert nearest_listed("look", listed) == "look"
    # never across verbs, never below the cutoff
    assert nearest_listed("open countertop 1", listed) is None
    assert nearest_listed("take apple 1 from fridge 1", listed) is None
    assert nearest_listed("take soapbar 2 from countertop 1", listed, cutoff=0.99) is None


def test_nearest_action_match_plays_a_misnamed_command_and_says_so():
    exact, nearest = HouseholdEnv(), HouseholdEnv(action_match="nearest")
    task = kitchen_task()
    exact.reset(task)
    nearest.reset(task)
    wrong = format_response("go to fridge 2")  # the kitchen has only fridge 1
    step = exact.step(wrong)
    assert not step.info["valid"] and step.observation.startswith(INVALID_OBSERVATION)
    assert not step.info["matched"]
    step = nearest.step(wrong)
    assert step.info["valid"] and step.info["matched"] and step.info["action"] == "go to fridge 1"
    assert "fridge 1" in step.observation and not step.observation.startswith(INVALID_OBSERVATION)
    # a listed command is not "matched"; a command like none listed stays invalid
    assert not nearest.step(format_response("open fridge 1")).info["matched"]
    step = nearest.step(format_response("heat apple 1 with fridge 1"))
    assert not step.info["valid"] and not step.info["matched"]
    assert step.reward == -nearest.invalid_penalty
    with pytest.raises(ValueError, match="action_match 'fuzzy' is not one of exact, nearest"):
        HouseholdEnv(action_match="fuzzy")
    # the demonstrator's episodes are the same under either rule
    text = envs.make("household", level="small", max_turns=15)
    matched = envs.make("household", level="small", max_turns=15, action_match="nearest")
    for task in text.panel("eval_seen")[:10]:
        a = run_episode(text, task, expert_policy(0.0))
        b = run_episode(matched, task, expert_policy(0.0))
        assert a.actions == b.actions and a.success and b.success


def test_progress_reward_returns_the_outcome_plus_the_share_of_the_plan_covered():
    plain = envs.make("household", level="small", max_turns=15)
    shaped = envs.make("household", level="small", max_turns=15, progress_reward=0.5)
    for task in plain.panel("eval_seen")[:12]:
        a = run_episode(plain, task, demo_policy(0.3, seed="p"))
        b = run_episode(shaped, task, demo_policy(0.3, seed="p"))
        assert a.actions == b.actions and a.success == b.success
        d0 = a.turns[0].distance_before
        covered = (d0 - a.turns[-1].distance_after) / d0
        assert b.total_reward == pytest.approx(a.total_reward + 0.5 * covered)
        # step by step: only valid steps earn it, by their own change of distance
        for ta, tb in zip(a.turns, b.turns):
            gain = (ta.distance_before - ta.distance_after) / d0 if ta.valid else 0.0
            assert tb.reward == pytest.approx(ta.reward + 0.5 * gain)
    with pytest.raises(ValueError, match="progress_reward must be >= 0"):
        HouseholdEnv(progress_reward=-1.0)


def test_numbered_format_plays_the_same_episodes_as_text():
    text = envs.make("household", level="small", max_turns=15)
    numbered = envs.make("household", level="small", max_turns=15, action_format="numbered")
    for task in text.panel("eval_seen")[:20]:
        a = run_episode(text, task, demo_policy(0.05, seed="d"))
        b = run_episode(numbered, task, demo_policy(0.05, seed="d"))
        assert a.actions == b.actions and a.success == b.success
        assert [t.valid for t in a.turns] == [t.valid for t in b.turns]
        assert all(t.response.split("<action>")[1].split("<")[0].isdigit() for t in b.turns if t.valid)
        # replay takes action texts in either format
        mid = len(a.actions) // 2
        text.reset(task, replay=a.actions[:mid])
        numbered.reset(task, replay=a.actions[:mid])
        assert text.state_key() == numbered.state_key()
