"""Layouts, task panels and episode worlds of the built-in ``household`` environment.

Everything here is deterministic: every random choice comes from a ``random.Random`` seeded
with a string ("household/panel/train", "household/world/<task id>"), and the only hash used
is SHA-256 of fixed strings, so panels and worlds are identical across processes and
``PYTHONHASHSEED`` values.

* A *layout* is a room: its numbered receptacles ("cabinet 3") and which of them open.
  There are ``LAYOUTS_PER_ROOM`` layouts per room type; the last ``HELDOUT_LAYOUTS`` of each
  room type are held out for ``eval_unseen``.
* A *combination* is (object type, receptacle type), e.g. ("mug", "coffeemachine"); for the
  look family the receptacle is "desklamp".  About a quarter of all combinations (chosen by
  SHA-256) are held out: ``eval_unseen`` uses only held-out layouts *and* held-out
  combinations, ``train`` and ``eval_seen`` never use either.
* A *world* is one task's initial state: the layout plus placed objects, closed
  receptacles and the desk lamp.  It is generated from the task id when the task is reset.
* A *level* sizes the rooms (MiniGrid / BabyAI style).  ``full`` is the paper-scale level
  (ALFWorld-sized rooms with up to ~25 receptacles, most containers closed, all six
  families).  ``small`` is the CPU level: rooms of at most ``SMALL_MAX_RECEPTACLES``
  receptacles, one of each type, fewer closed containers and distractors, and the four
  families ``SMALL_FAMILIES``; its layouts, panels and task ids (``household/<split>/sNNNN``)
  are its own, so its panels are fixed too.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache

from envs.base import Task
from envs.household.data import (
    FAMILIES,
    INSTRUCTIONS,
    LAMP_ROOMS,
    LAMP_SURFACES,
    OBJECTS,
    ROOM_OBJECTS,
    ROOMS,
    STATIONS,
    family_verb,
)

LAYOUTS_PER_ROOM = 12
HELDOUT_LAYOUTS = 2
SPLIT_SIZES: dict[str, int] = {"train": 2400, "eval_seen": 140, "eval_unseen": 134}
OPENABLE_TYPES: frozenset[str] = frozenset(
    rtype for room in ROOMS.values() for rtype, _, _, openable in room if openable
)
SMALL_MAX_RECEPTACLES = 6
SMALL_FAMILIES: tuple[str, ...] = (
    "pick_and_place", "pick_clean_then_place", "pick_heat_then_place", "pick_cool_then_place",
)
# Receptacle types every small room keeps, so that each family has its station and a place
# for the objects; the rest of a small room is drawn from the room template.
SMALL_CORE: dict[str, tuple[str, ...]] = {
    "kitchen": ("countertop", "sinkbasin", "microwave", "fridge"),
    "bathroom": ("countertop", "sinkbasin"),
    "bedroom": ("desk", "drawer"),
    "livingroom": ("coffeetable", "sofa"),
}


@dataclass(frozen=True)
class Level:
    """How big a level's rooms are and which families its panels use."""

    name: str
    families: tuple[str, ...]
    closed_prob: float  # chance that an openable receptacle starts closed
    distractors: tuple[int, ...]  # distractor counts per receptacle, drawn uniformly
    id_prefix: str  # task ids are household/<split>/<prefix><index>


LEVELS: dict[str, Level] = {
    "full": Level("full", FAMILIES, 0.85, (0, 0, 1, 1, 1, 2, 2, 3), ""),
    "small": Level("small", SMALL_FAMILIES, 0.3, (0, 1, 1, 2), "s"),
}


def level_spec(level: str) -> Level:
    if level not in LEVELS:
        raise ValueError(f"unknown household level {level!r}; valid: {', '.join(LEVELS)}")
    return LEVELS[level]


@dataclass(frozen=True)
class Layout:
    name: str  # "kitchen-03" (full level), "kitchen-s03" (small level)
    room: str
    receptacles: tuple[str, ...]  # ("cabinet 1", "cabinet 2", ..., "toaster 1")
    heldout: bool
    level: str = "full"

    @property
    def types(self) -> frozenset[str]:
        return frozenset(r.rsplit(" ", 1)[0] for r in self.receptacles)


@dataclass(frozen=True)
class World:
    """One task's initial state and goal; indices refer to ``receptacles`` / ``objects``.

    ``init_loc[i]`` is the receptacle index holding object i; ``lamp_at`` the receptacle
    index of the desk lamp (-1 when the room has none).  ``candidates`` are the objects of
    the goal type, ``targets`` the receptacles of the goal type, ``stations`` the
    receptacles usable for the family's clean/heat/cool step and ``flag`` the state bit the
    goal object needs (0 for families without processing).
    """

    task_id: str
    family: str
    obj_type: str
    target_type: str
    receptacles: tuple[str, ...]
    rtypes: tuple[str, ...]
    openable: tuple[bool, ...]
    objects: tuple[str, ...]
    otypes: tuple[str, ...]
    init_loc: tuple[int, ...]
    init_open: tuple[bool, ...]
    lamp_at: int
    candidates: tuple[int, ...]
    targets: tuple[int, ...]
    stations: tuple[int, ...]
    flag: int
    go_commands: tuple[str, ...]  # "go to <receptacle>" per receptacle index


@lru_cache(maxsize=4096)
def rtype(name: str) -> str:
    """The type of a numbered name: "cabinet 3" -> "cabinet"."""
    return name.rsplit(" ", 1)[0]


def combo_heldout(obj_type: str, target_type: str) -> bool:
    """Whether (object type, receptacle type) is held out for eval_unseen (about 1 in 4)."""
    return hashlib.sha256(f"{obj_type}|{target_type}".encode()).digest()[0] < 64


@cache
def layouts() -> dict[str, Layout]:
    """All layouts of every level by name, generated from fixed string seeds."""
    out: dict[str, Layout] = {}
    for room, template in ROOMS.items():
        for i in range(LAYOUTS_PER_ROOM):
            heldout = i >= LAYOUTS_PER_ROOM - HELDOUT_LAYOUTS
            rng = random.Random(f"household/layout/{room}/{i}")
            names = [
                f"{rtype_} {n}"
                for rtype_, lo, hi, _ in template
                for n in range(1, rng.randint(lo, hi) + 1)
            ]
            name = f"{room}-{i:02d}"
            out[name] = Layout(name, room, tuple(names), heldout)
            small = _small_receptacles(room, random.Random(f"household/small/layout/{room}/{i}"))
            out[f"{room}-s{i:02d}"] = Layout(f"{room}-s{i:02d}", room, small, heldout, "small")
    return out


def _small_receptacles(room: str, rng: random.Random) -> tuple[str, ...]:
    """A small room: the room's core types plus others from its template, one of each,
    at most ``SMALL_MAX_RECEPTACLES``, in the template's listing order."""
    types = [t for t, _, _, _ in ROOMS[room]]
    core = SMALL_CORE[room]
    extra = rng.sample([t for t in types if t not in core], SMALL_MAX_RECEPTACLES - len(core))
    return tuple(f"{t} 1" for t in types if t in core or t in extra)


@cache
def feasible_combos(layout_name: str, family: str) -> tuple[tuple[str, str], ...]:
    """(object type, target type) pairs that make a solvable ``family`` task in a layout.

    The object type must belong in the room and support the family, some receptacle other
    than the target type
    must be able to hold it at the start, the family's station (sinkbasin, microwave,
    fridge) or desk lamp must exist, and the target is never the station itself.
    """
    layout = layouts()[layout_name]
    types, verb = layout.types, family_verb(family)
    station = STATIONS.get(family, ("",))[0]
    if (station and station not in types) or (verb == "look" and layout.room not in LAMP_ROOMS):
        return ()
    combos = []
    for obj, (places, tags) in sorted(OBJECTS.items()):
        if obj not in ROOM_OBJECTS[layout.room]:
            continue
        if verb not in ("pick", "pick_two") and verb not in tags:
            continue
        homes = types.intersection(places)
        if verb == "look":
            if homes:
                combos.append((obj, "desklamp"))
            continue
        for target in sorted(homes - {station}):
            if homes - {target}:
                combos.append((obj, target))
    return tuple(combos)


@cache
def split_options(heldout: bool, family: str, level: str = "full") -> dict[str, tuple[tuple[str, str], ...]]:
    """Layout name -> its feasible combinations for ``family`` among the ``level``'s
    layouts, restricted to held-out layouts and combinations (``heldout``) or to the
    others; layouts without any are left out."""
    options = {}
    for lay in layouts().values():
        if lay.level != level:
            continue
        combos = tuple(c for c in feasible_combos(lay.name, family) if combo_heldout(*c) == heldout)
        if lay.heldout == heldout and combos:
            options[lay.name] = combos
    return options


@cache
def panel(split: str, level: str = "full") -> tuple[Task, ...]:
    """The fixed task list of ``split`` at ``level``; families cycle in the level's order."""
    spec_ = level_spec(level)
    heldout = split == "eval_unseen"
    seed = f"household/panel/{split}" if level == "full" else f"household/{level}/panel/{split}"
    rng = random.Random(seed)
    tasks = []
    for i in range(SPLIT_SIZES[split]):
        family = spec_.families[i % len(spec_.families)]
        options = split_options(heldout, family, level)
        layout = rng.choice(sorted(options))
        obj, target = rng.choice(options[layout])
        instruction = rng.choice(INSTRUCTIONS[family]).format(o=obj, r=target)
        task_id = f"household/{split}/{spec_.id_prefix}{i:04d}"
        spec = {"family": family, "object": obj, "target": target, "layout": layout}
        tasks.append(Task(task_id, "household", split, instruction, spec))
    return tuple(tasks)


def custom_task(
    task_id: str,
    family: str,
    obj_type: str,
    target_type: str,
    placement: Mapping[str, Sequence[str]],
    closed: Sequence[str] = (),
    lamp_at: str | None = None,
) -> Task:
    """A hand-built task (tests, demos): ``placement`` maps each receptacle name to the
    object names in it at the start ({"countertop 1": ["apple 1"], "fridge 1": []});
    ``closed`` lists the receptacles closed at the start."""
    if family not in FAMILIES:
        raise ValueError(f"unknown household family {family!r}; valid: {', '.join(FAMILIES)}")
    instruction = INSTRUCTIONS[family][0].format(o=obj_type, r=target_type)
    world = {"placement": {r: list(objs) for r, objs in placement.items()},
             "closed": list(closed), "lamp_at": lamp_at}
    spec = {"family": family, "object": obj_type, "target": target_type, "world": world}
    return Task(task_id, "household", task_id.split("/")[1] if "/" in task_id else "custom",
                instruction, spec)


def build_world(task: Task) -> World:
    """The initial world of ``task``: explicit for custom tasks, else generated from its id."""
    spec = task.spec
    for key in ("family", "object", "target"):
        if key not in spec:
            raise ValueError(f"task {task.id!r} spec lacks {key!r}; not a household task")
    if "world" in spec:
        return _assemble(task.id, spec["family"], spec["object"], spec["target"], spec["world"])
    return _generated_world(task.id, spec["family"], spec["object"], spec["target"], spec["layout"])


@lru_cache(maxsize=8192)
def _generated_world(task_id: str, family: str, obj: str, target: str, layout: str) -> World:
    return _assemble(task_id, family, obj, target, _generate(task_id, family, obj, target, layout))


def _generate(task_id: str, family: str, obj: str, target: str, layout_name: str) -> dict:
    """Place goal objects, distractors, closed receptacles and the lamp in the layout."""
    rng = random.Random(f"household/world/{task_id}")
    layout = layouts()[layout_name]
    level = LEVELS[layout.level]
    recs = layout.receptacles
    homes = [r for r in recs if rtype(r) in OBJECTS[obj][0] and rtype(r) != target]
    count = rng.randint(2, 3) if family == "pick_two_obj_and_place" else rng.randint(1, 3)
    placed = [(obj, rng.choice(homes)) for _ in range(count)]
    for r in recs:
        kinds = _distractor_kinds(layout.room, rtype(r), obj)
        for _ in range(rng.choice(level.distractors) if kinds else 0):
            placed.append((rng.choice(kinds), r))
    rng.shuffle(placed)
    numbers: dict[str, int] = {}
    placement: dict[str, list[str]] = {r: [] for r in recs}
    for kind, r in placed:
        numbers[kind] = numbers.get(kind, 0) + 1
        placement[r].append(f"{kind} {numbers[kind]}")
    closed = [r for r in recs if rtype(r) in OPENABLE_TYPES and rng.random() < level.closed_prob]
    surfaces = [r for r in recs if rtype(r) in LAMP_SURFACES]
    lamp_at = rng.choice(surfaces) if layout.room in LAMP_ROOMS and surfaces else None
    return {"placement": placement, "closed": closed, "lamp_at": lamp_at}


@cache
def _distractor_kinds(room: str, receptacle_type: str, goal_obj: str) -> tuple[str, ...]:
    """Object types that may lie in a receptacle type of the room, except the goal type."""
    return tuple(o for o, (places, _) in sorted(OBJECTS.items())
                 if receptacle_type in places and o in ROOM_OBJECTS[room] and o != goal_obj)


def _assemble(task_id: str, family: str, obj: str, target: str, world: Mapping) -> World:
    placement = world["placement"]
    recs = tuple(placement)
    objects = tuple(sorted((o for objs in placement.values() for o in objs), key=_name_order))
    where = {o: recs.index(r) for r, objs in placement.items() for o in objs}
    closed = set(world.get("closed", ()))
    bad = sorted(r for r in closed if r not in recs or rtype(r) not in OPENABLE_TYPES)
    if bad:
        raise ValueError(f"cannot close {bad}: only openable receptacles in the room close")
    station = STATIONS.get(family, ("", "", 0))
    lamp = world.get("lamp_at")
    return World(
        task_id=task_id, family=family, obj_type=obj, target_type=target,
        receptacles=recs,
        rtypes=tuple(rtype(r) for r in recs),
        openable=tuple(rtype(r) in OPENABLE_TYPES for r in recs),
        objects=objects,
        otypes=tuple(rtype(o) for o in objects),
        init_loc=tuple(where[o] for o in objects),
        init_open=tuple(rtype(r) in OPENABLE_TYPES and r not in closed for r in recs),
        lamp_at=recs.index(lamp) if lamp else -1,
        candidates=tuple(i for i, o in enumerate(objects) if rtype(o) == obj),
        targets=tuple(i for i, r in enumerate(recs) if rtype(r) == target),
        stations=tuple(i for i, r in enumerate(recs) if rtype(r) == station[0]),
        flag=station[2],
        go_commands=tuple(f"go to {r}" for r in recs),
    )


def _name_order(name: str) -> tuple[str, int]:
    kind, number = name.rsplit(" ", 1)
    return kind, int(number)
