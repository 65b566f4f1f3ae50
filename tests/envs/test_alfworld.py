"""The ``alfworld`` adapter: the real ALFWorld engine on PDDL problems generated from
``household`` tasks, and the faithfulness of ``household`` to it.

Documented differences between the engines (everything else must agree exactly):

* put spelling: the package grammar admits "move O to R" ("You move the O to the R."),
  household "put O in/on R" ("You put the O in/on the R.");
* ALFWorld admits "help" everywhere;
* affordances: household admits clean/heat/cool of any held object at the station and a put
  into any receptacle; ALFWorld only what its tables allow (``affordance_conflicts``);
* listings: ALFWorld lists instances of a class by descending number ("drawer 2, drawer 1"),
  household by ascending number;
* first observation: ALFWorld adds its banner and "Your task is to: ..." around the room.
"""

from __future__ import annotations

import random
import re

import pytest

from envs.adapters import AdapterUnavailable
from envs.adapters.alfworld import ALFWorldEnv, parse_command, put_spellings
from envs.adapters.alfworld_pddl import affordance_conflicts, entity_id, problem_text
from envs.base import Task, format_response
from envs.household.data import FAMILIES
from envs.household.env import HouseholdEnv
from envs.household.world import custom_task

pytest.importorskip("textworld", reason="alfworld adapter needs `pip install alfworld \"textworld[pddl]\"`")
pytest.importorskip("fast_downward", reason="alfworld adapter needs textworld[pddl] (fast-downward-textworld)")
pytest.importorskip("alfworld", reason="alfworld adapter needs `pip install alfworld`")

_LIST_RE = re.compile(r"(you see )(.*?)(\.$|\. )")
_MOVE_RE = re.compile(r"You move the (.+?) to the (.+?)\.")


# -- pure helpers ------------------------------------------------------------------------------
def test_parse_command_and_put_spellings():
    assert parse_command("<think>x</think><action> Go  to Cabinet 2. </action>") == "go to cabinet 2"
    assert parse_command("no tags") is None
    assert put_spellings("put apple 1 in/on fridge 1") == ("put apple 1 in/on fridge 1",
                                                          "move apple 1 to fridge 1")
    assert put_spellings("move mug 2 to desk 1") == ("put mug 2 in/on desk 1", "move mug 2 to desk 1")
    assert put_spellings("open drawer 1") == ("open drawer 1",)


def test_entity_ids_demangle_to_household_names():
    from alfworld.agents.utils.misc import Demangler
    from textworld.generator.game import EntityInfo

    names = ["cabinet 1", "cabinet 2", "cabinet 3", "sinkbasin 1", "bathtubbasin 1", "apple 2",
             "apple 1", "countertop 1"]
    ids = {entity_id(n).lower(): n for n in names}  # the PDDL parser lower-cases names
    assert entity_id("sinkbasin 1") == "Sink_bar_998_bar_SinkBasin"
    infos = {i: EntityInfo(i, "object") for i in ids}
    demangler = Demangler(game_infos=infos)
    assert {i: demangler.demangle_alfred_name(i) for i in ids} == ids


def test_problem_encodes_world_and_alfworld_affordances():
    task = custom_task("household/custom/0000", "pick_heat_then_place", "bowl", "countertop",
                       {"countertop 1": ["apple 1"], "cabinet 1": ["bowl 1"], "microwave 1": []},
                       closed=["cabinet 1"])
    text = problem_text(task)
    cab, bowl = entity_id("cabinet 1"), entity_id("bowl 1")
    assert f"(openable {cab})" in text and f"(opened {cab})" not in text
    assert f"(inReceptacle {bowl} {cab})" in text
    assert f"(heatable {entity_id('apple 1')})" in text and f"(heatable {bowl})" not in text
    assert "(canContain CounterTopType BowlType)" in text
    assert "(atLocation agent1 loc_bar_start)" in text and "(isHot ?o)" in text
    assert affordance_conflicts(task) == ["heat bowl"]
    placed = custom_task("household/custom/0001", "pick_and_place", "bread", "shelf",
                         {"countertop 1": ["bread 1"], "shelf 1": []})
    assert affordance_conflicts(placed) == ["put bread in shelf"]


def test_misnumbered_household_names_are_rejected():
    task = custom_task("household/custom/0002", "pick_and_place", "apple", "countertop",
                       {"countertop 1": [], "fridge 1": ["apple 2"]})
    with pytest.raises(ValueError, match=r"apple instances are numbered \[2\]"):
        problem_text(task)


def test_missing_data_and_dependency_errors_are_one_line(monkeypatch):
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    with pytest.raises(AdapterUnavailable, match="ALFWORLD_DATA is not set") as err:
        ALFWorldEnv(game_files="$ALFWORLD_DATA")
    assert "\n" not in str(err.value)
    from envs.adapters import alfworld as adapter

    adapter._engine.cache_clear()
    monkeypatch.setitem(__import__("sys").modules, "textworld", None)
    try:
        with pytest.raises(AdapterUnavailable, match=r"'alfworld \"textworld\[pddl\]\"' is missing"):
            ALFWorldEnv()
    finally:
        adapter._engine.cache_clear()


# -- both engines side by side -------------------------------------------------------------------
def _household_text(observation: str) -> str:
    """ALFWorld's text in household's conventions (documented differences only)."""
    text = _MOVE_RE.sub(r"You put the \1 in/on the \2.", observation)
    if text.startswith("-= Welcome"):
        text = text.split("\n\n")[1]
    return _LIST_RE.sub(lambda m: m[1] + _sorted_listing(m[2]) + m[3], text)


def _sorted_listing(items: str) -> str:
    names = [x.removeprefix("and ").removeprefix("a ") for x in items.split(", ")]
    if items == "nothing":
        return items
    if len(names) == 1:
        return "a " + names[0]
    names = sorted(names, key=lambda n: (n.rsplit(" ", 1)[0], int(n.rsplit(" ", 1)[1])))
    return ", ".join(f"a {n}" for n in names[:-1]) + f", and a {names[-1]}"


def _forbidden_by_alfworld(command: str, real: set[str]) -> bool:
    """A household-only command that ALFWorld's affordance tables rule out."""
    return command.split(" ", 1)[0] in ("put", "clean", "heat", "cool") and \
        not any(c in real for c in put_spellings(command))


def _assert_same_state(h: HouseholdEnv, a: ALFWorldEnv) -> None:
    real = set(a.admissible_actions()) - {"help"}
    mapped = {put_spellings(c)[0] for c in real}
    ours = {c for c in h.admissible_actions() if not _forbidden_by_alfworld(c, real)}
    assert mapped == ours, (sorted(mapped - ours), sorted(ours - mapped))


def _walk(h: HouseholdEnv, a: ALFWorldEnv, task, actions) -> bool:
    """Play ``actions`` (household spelling) in both engines, comparing every step."""
    assert _household_text(a.reset(task)) == h.reset(_household(task))
    _assert_same_state(h, a)
    won = False
    for action in actions:
        mine, real = h.step(format_response(action)), a.step(format_response(action))
        assert _household_text(real.observation) == mine.observation, action
        assert (real.reward, real.done, real.success) == (mine.reward, mine.done, mine.success)
        won = real.success
        if real.done:
            break
        _assert_same_state(h, a)
    return won


def _sample(split: str, per_family: int) -> list:
    tasks = ALFWorldEnv().panel(split)
    picked = []
    for family in FAMILIES:
        fits = [t for t in tasks if t.spec["family"] == family and not affordance_conflicts(t)]
        picked += fits[:per_family]
    return picked


@pytest.mark.slow
@pytest.mark.parametrize("split", ["train", "eval_unseen"])
def test_household_expert_wins_in_alfworld_and_engines_agree(split):
    """One task per family: four random shared commands, then household's optimal plan
    from there; both engines must agree at every step (module docstring)."""
    h, a = HouseholdEnv(max_turns=50, show_admissible=False), ALFWorldEnv(max_turns=50, show_admissible=False)
    for task in _sample(split, per_family=1):
        household = _household(task)
        h.reset(household)
        if split == "train":
            assert _walk(h, a, task, h.optimal_plan()), task.id
            h.reset(household)
        rng, detour = random.Random(task.id), []
        for _ in range(4):
            options = sorted(c for c in h.admissible_actions()
                             if c.startswith(("go to", "open", "close", "take")))
            detour.append(rng.choice(options))
            h.step(format_response(detour[-1]))
        assert _walk(h, a, task, detour + h.optimal_plan()), task.id


@pytest.mark.slow
def test_engine_planner_distance_matches_household():
    h, a = HouseholdEnv(show_admissible=False), ALFWorldEnv(planner=True, show_admissible=False)
    for task in _sample("train", per_family=1)[:2]:
        a.reset(task)
        h.reset(_household(task))
        assert a.distance_to_goal() == h.distance_to_goal() > 0
        assert a.step(format_response(a.expert_action())).info["distance"] == h.distance_to_goal() - 1


@pytest.mark.slow
def test_alfworld_forbids_what_household_allows():
    task = custom_task("household/custom/0003", "pick_and_place", "bowl", "countertop",
                       {"countertop 1": [], "cabinet 1": ["bowl 1"], "microwave 1": []})
    env = ALFWorldEnv(show_admissible=False, invalid_penalty=0.1)
    env.reset(Task("alfworld/custom/0003", "alfworld", "custom", task.instruction,
                   {**task.spec, "household_id": task.id}))
    for action in ("go to cabinet 1", "take bowl 1 from cabinet 1", "go to microwave 1"):
        assert env.step(format_response(action)).info["valid"]
    assert "heat bowl 1 with microwave 1" not in env.admissible_actions()
    result = env.step(format_response("heat bowl 1 with microwave 1"))
    assert (result.observation, result.reward, result.info["valid"]) == ("Nothing happens.", -0.1, False)
    heat = custom_task("household/custom/0004", "pick_heat_then_place", "bowl", "countertop",
                       {"countertop 1": [], "cabinet 1": ["bowl 1"], "microwave 1": []})
    with pytest.raises(ValueError, match="needs heat bowl"):
        env.reset(Task("alfworld/custom/0004", "alfworld", "custom", heat.instruction,
                       {**heat.spec, "household_id": heat.id}))
    assert all(not affordance_conflicts(_household(t)) for t in env.panel("eval_seen"))


def _household(task):
    return Task(task.spec["household_id"], "household", task.split, task.instruction,
                      {k: v for k, v in task.spec.items() if k not in ("household_id", "task_type")})


@pytest.mark.slow
def test_alfworld_observations_list_admissible_commands_unless_switched_off():
    from envs.base import ADMISSIBLE_HEADER, without_admissible

    task = ALFWorldEnv().panel("eval_seen")[0]
    env, plain = ALFWorldEnv(), ALFWorldEnv(show_admissible=False)
    first = env.reset(task)
    assert first.endswith("[" + ", ".join(f"'{a}'" for a in env.admissible_actions()) + "].")
    assert ADMISSIBLE_HEADER in first and without_admissible(first) == plain.reset(task)
    action = env.admissible_actions()[0]
    after, plain_after = env.step(format_response(action)), plain.step(format_response(action))
    assert without_admissible(after.observation) == plain_after.observation
