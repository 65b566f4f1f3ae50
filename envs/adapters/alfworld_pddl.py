"""PDDL problems in ALFWorld's own domain, generated from built-in ``household`` tasks.

ALFWorld's game files (``game.tw-pddl``) are JSON objects with the PDDL domain
(``alfred.pddl``), the text grammar (``alfred.twl2`` with "UNKNOWN GOAL" replaced by the
task text) and one PDDL problem per task; TextWorld's ``PddlEnv`` plays them.  The PyPI
package ``alfworld`` ships the domain and the grammar but no problems, so this module writes
the problem of a ``household`` task the way ALFWorld's generator writes a real one:

* entity ids follow ALFRED's mangling (``Cabinet_bar_...``, ``Sink_bar_..._bar_SinkBasin``)
  and are chosen so that ALFWorld's own ``Demangler`` names them exactly as ``household``
  does ("cabinet 3", "sinkbasin 1", "apple 2");
* every receptacle stands at its own location, the agent starts at a location with none;
* object affordances (``cleanable``, ``heatable``, ``coolable``, ``toggleable``) and the
  receptacle/object compatibility (``canContain``) come from ALFWorld's tables
  (``alfworld.gen.constants``), not from ``household``'s looser rules;
* the goal is ALFWorld's goal formula for the family (``alfworld.gen.goal_library``).

:func:`affordance_conflicts` lists where a ``household`` task needs something these tables
forbid (such a task cannot be won in the real engine).  Imports of ``alfworld`` happen inside
the functions, so this module loads without it.
"""

from __future__ import annotations

import importlib.util
import os
from functools import cache

from envs.base import Task
from envs.household.data import LAMP, STATIONS
from envs.household.world import World, build_world, rtype

# household family -> ALFWorld task type (alfworld.agents.environment.alfred_tw_env.TASK_TYPES)
TASK_TYPES: dict[str, str] = {
    "pick_and_place": "pick_and_place_simple",
    "look_at_obj_in_light": "look_at_obj_in_light",
    "pick_clean_then_place": "pick_clean_then_place_in_recep",
    "pick_heat_then_place": "pick_heat_then_place_in_recep",
    "pick_cool_then_place": "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place": "pick_two_obj_and_place",
}
# household process verb -> ALFWorld affordance table key and the PDDL predicate it gates
AFFORDANCES: dict[str, tuple[str, str]] = {
    "clean": ("Cleanable", "cleanable"),
    "heat": ("Heatable", "heatable"),
    "cool": ("Coolable", "coolable"),
}
START = "loc_bar_start"


@cache
def alfworld_data_dir() -> str:
    """The folder holding ``alfred.pddl`` and ``alfred.twl2`` inside the installed package
    (found without importing ``alfworld``, whose import creates ``~/.cache/alfworld``)."""
    spec = importlib.util.find_spec("alfworld")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("python package 'alfworld' is not installed")
    return os.path.join(next(iter(spec.submodule_search_locations)), "data")


@cache
def domain_text() -> str:
    with open(os.path.join(alfworld_data_dir(), "alfred.pddl")) as f:
        return f.read()


@cache
def grammar_text() -> str:
    with open(os.path.join(alfworld_data_dir(), "alfred.twl2")) as f:
        return f.read()


@cache
def _constants():
    from alfworld.gen import constants

    return constants


@cache
def alfred_name(kind: str) -> str:
    """ALFRED's class name of a household type: "countertop" -> "CounterTop"."""
    names = {n.lower(): n for n in _constants().OBJECTS}
    if kind not in names:
        raise ValueError(f"household type {kind!r} has no ALFRED class; known: {sorted(names)}")
    return names[kind]


def entity_id(name: str) -> str:
    """The mangled ALFRED id of a household entity that ALFWorld's ``Demangler`` turns back
    into ``name``.

    The Demangler names an id ``<Class>_bar_...`` "<class> <n>" where the instances of a
    class, sorted by id, get the numbers K, K-1, ..., 1 (K instances), and it appends
    "basin" to the class when the id contains "basin".  So instance n gets the suffix
    ``999 - n`` (higher numbers sort first) and basins carry ALFRED's ``_bar_SinkBasin``.
    """
    kind, number = name.rsplit(" ", 1)
    n = int(number)
    if not 1 <= n <= 998:
        raise ValueError(f"instance number of {name!r} must be in 1..998")
    if kind.endswith("basin"):
        return f"{alfred_name(kind[: -len('basin')])}_bar_{999 - n:03d}_bar_{alfred_name(kind)}"
    return f"{alfred_name(kind)}_bar_{999 - n:03d}"


def _check_numbering(names) -> None:
    """The Demangler numbers each class 1..K; household names must already do so."""
    by_kind: dict[str, list[int]] = {}
    for name in names:
        kind, number = name.rsplit(" ", 1)
        by_kind.setdefault(kind, []).append(int(number))
    for kind, numbers in by_kind.items():
        if sorted(numbers) != list(range(1, len(numbers) + 1)):
            raise ValueError(f"{kind} instances are numbered {sorted(numbers)}; ALFWorld's "
                             f"Demangler numbers them 1..{len(numbers)}, so rename them")


def affordance_conflicts(task: Task) -> list[str]:
    """What ``task`` needs that ALFWorld's tables forbid: "<verb> <object type>" when the
    family's processing is not an ALFWorld affordance of the object type, "put <object type>
    in <receptacle type>" when ALFWorld's receptacle cannot contain it.  Empty: winnable."""
    spec = task.spec
    obj, target, family = spec["object"], spec["target"], spec["family"]
    tables, conflicts = _constants(), []
    if family in STATIONS:
        verb = STATIONS[family][1]
        if alfred_name(obj) not in tables.VAL_ACTION_OBJECTS[AFFORDANCES[verb][0]]:
            conflicts.append(f"{verb} {obj}")
    if family != "look_at_obj_in_light":
        holds = tables.VAL_RECEPTACLE_OBJECTS.get(alfred_name(target), set())
        if alfred_name(obj) not in holds:
            conflicts.append(f"put {obj} in {target}")
    return conflicts


def problem_text(task: Task) -> str:
    """The PDDL problem of household ``task`` in ALFWorld's ``alfred`` domain."""
    w = build_world(task)
    _check_numbering(w.receptacles)
    _check_numbering(w.objects)
    objects = list(w.objects) + ([LAMP] if w.lamp_at >= 0 else [])
    rtypes = sorted(set(w.rtypes) | {"sinkbasin", "microwave", "fridge"})  # domain constants
    otypes = sorted({rtype(o) for o in objects} | {"knife", "butterknife"})
    lines = [f"(define (problem household_{_slug(task.id)})", "(:domain alfred)", "(:objects",
             "        agent1 - agent"]
    lines += [f"        {alfred_name(t)}Type - otype" for t in otypes]
    lines += [f"        {alfred_name(t)}Type - rtype" for t in rtypes]
    lines += [f"        {entity_id(r)} - receptacle" for r in w.receptacles]
    lines += [f"        {entity_id(o)} - object" for o in objects]
    lines += [f"        {loc} - location" for loc in [START] + _locations(w)]
    lines += [")", "(:init", f"        (atLocation agent1 {START})"]
    lines += [f"        {fact}" for fact in _receptacle_facts(w) + _object_facts(w, objects)]
    lines += [f"        {fact}" for fact in _can_contain(rtypes, otypes)]
    lines += [")", _goal(w), ")"]
    return "\n".join(lines) + "\n"


def game_data(task: Task, walkthrough: list[str] | None = None) -> dict:
    """A ``game.tw-pddl`` object for ``task``: ALFWorld's domain and grammar (task text
    filled in), the generated problem, ``solvable`` and the optional ``walkthrough``."""
    instruction = task.instruction.strip().rstrip(".")
    data = {
        "pddl_domain": domain_text(),
        "grammar": grammar_text().replace("UNKNOWN GOAL", instruction),
        "pddl_problem": problem_text(task),
        "solvable": not affordance_conflicts(task),
    }
    if walkthrough is not None:
        data["walkthrough"] = list(walkthrough)
    return data


# -- problem pieces ----------------------------------------------------------------------
def _slug(task_id: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in task_id)


def _locations(w: World) -> list[str]:
    return [f"loc_bar_{i}" for i in range(len(w.receptacles))]


def _receptacle_facts(w: World) -> list[str]:
    facts = []
    for i, r in enumerate(w.receptacles):
        rid = entity_id(r)
        facts += [f"(receptacleAtLocation {rid} loc_bar_{i})",
                  f"(receptacleType {rid} {alfred_name(w.rtypes[i])}Type)"]
        if w.openable[i]:
            facts.append(f"(openable {rid})")
            if w.init_open[i]:
                facts.append(f"(opened {rid})")
    return facts


def _object_facts(w: World, objects: list[str]) -> list[str]:
    tables, facts = _constants(), []
    for name in objects:
        oid, kind = entity_id(name), alfred_name(rtype(name))
        where = w.lamp_at if name == LAMP else w.init_loc[w.objects.index(name)]
        facts += [f"(objectType {oid} {kind}Type)",
                  f"(inReceptacle {oid} {entity_id(w.receptacles[where])})",
                  f"(objectAtLocation {oid} loc_bar_{where})"]
        if name == LAMP:
            facts.append(f"(toggleable {oid})")
            continue
        facts.append(f"(pickupable {oid})")
        facts += [f"({predicate} {oid})" for table, predicate in AFFORDANCES.values()
                  if kind in tables.VAL_ACTION_OBJECTS[table]]
    return facts


def _can_contain(rtypes: list[str], otypes: list[str]) -> list[str]:
    table = _constants().VAL_RECEPTACLE_OBJECTS
    return [f"(canContain {alfred_name(r)}Type {alfred_name(o)}Type)"
            for r in rtypes for o in otypes
            if alfred_name(o) in table.get(alfred_name(r), set())]


def _goal(w: World) -> str:
    """ALFWorld's goal formula of the task type (``alfworld.gen.goal_library``), filled in."""
    from alfworld.gen import goal_library

    template = goal_library.gdict[TASK_TYPES[w.family]]["pddl"]
    recep = "DeskLamp" if w.family == "look_at_obj_in_light" else alfred_name(w.target_type)
    text = template.format(obj=alfred_name(w.obj_type), recep=recep, toggle="DeskLamp", mrecep="")
    # The library's text closes the whole (define ...) form and writes '#' for '-'.
    return text.replace("#", "-").rstrip().removesuffix(")").rstrip()


__all__ = [
    "TASK_TYPES", "affordance_conflicts", "alfred_name", "domain_text", "entity_id",
    "game_data", "grammar_text", "problem_text",
]
