"""State, transitions, observation texts and the exact optimal planner of ``household``.

The state of an episode is :class:`State` (agent location, held object, object locations,
open receptacles, object flags, desk lamp).  Commands follow ALFWorld's grammar and texts:

    go to R | open R | close R | take O from R | put O in/on R | clean O with R |
    heat O with R | cool O with R | use desklamp 1 | examine X | look | inventory

**Goal** per family: pick/clean/heat/cool: some object of the goal type lies in a
receptacle of the target type and (clean/heat/cool) carries the clean/hot/cool flag;
pick_two: two distinct goal-type objects lie in the same target receptacle; look: the agent
holds a goal-type object at the desk lamp's receptacle with the lamp switched on.

**Distance.**  ``distance(s)`` is the minimum number of admissible commands whose
application, one after another from state ``s``, reaches a goal state (0 in a goal state),
with privileged knowledge of where every object is and ignoring the turn budget; invalid
commands never change the state, so they never shorten it.  It equals
``len(optimal_plan(w, s))``: :func:`optimal_plan` enumerates the few decisions that matter
(which goal object(s) to fetch and in which order, which target receptacle) and, for each,
emits the only useful commands (go where needed, open a closed receptacle once, drop a held
non-goal object where the goal object lies, take, process at a station, put), keeping the
shortest.  ``tests/envs/test_household.py`` checks it against breadth-first search over every
reachable state of small worlds of each family.

**Demonstrator.**  :func:`demo_command` is the observation-consistent demonstrator (see its
docstring): it explores in a fixed order derived from visible facts until the needed
objects have been seen, then plans with the exact planner restricted to what was seen.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

from envs.household.data import FLAG_WORDS, LAMP, LAMP_SURFACES, OBJECTS, PROCESS_VERBS
from envs.household.world import World

_STATION_VERB = {station: verb for verb, (station, _, _) in PROCESS_VERBS.items()}


class State:
    """Mutable episode state.  ``at`` = -1 is the middle of the room; ``hold`` = -1 is an
    empty hand; ``loc[i]`` = -1 while object i is held; ``flags[i]`` is a bit set of
    CLEAN/HOT/COLD."""

    __slots__ = ("at", "flags", "hold", "lamp", "loc", "opened")

    def __init__(self, w: World):
        self.at, self.hold, self.lamp = -1, -1, False
        self.loc = list(w.init_loc)
        self.opened = list(w.init_open)
        self.flags = [0] * len(w.objects)

    def snapshot(self) -> tuple:
        return (self.at, self.hold, tuple(self.loc), tuple(self.opened), tuple(self.flags),
                self.lamp)

    def restore(self, snap: tuple) -> None:
        self.at, self.hold, loc, opened, flags, self.lamp = snap
        self.loc, self.opened, self.flags = list(loc), list(opened), list(flags)

    def key(self, task_id: str) -> str:
        """Canonical text of the full state (no hashing): equal iff the states are equal."""
        opened = "".join("1" if o else "0" for o in self.opened)
        flags = ",".join(map(str, self.flags)) if any(self.flags) else "-"
        return (f"{task_id}|at={self.at}|hold={self.hold}|loc={','.join(map(str, self.loc))}"
                f"|open={opened}|flags={flags}|lamp={int(self.lamp)}")


# -- goal ------------------------------------------------------------------------------
def goal_reached(w: World, s: State) -> bool:
    if w.family == "look_at_obj_in_light":
        return s.lamp and s.at == w.lamp_at and s.hold in w.candidates
    if w.family == "pick_two_obj_and_place":
        return any(sum(s.loc[o] == t for o in w.candidates) >= 2 for t in w.targets)
    return any(s.loc[o] in w.targets and s.flags[o] & w.flag == w.flag for o in w.candidates)


# -- commands --------------------------------------------------------------------------
def admissible(w: World, s: State) -> dict[str, tuple]:
    """Admissible command text -> operation tuple: every "go to" elsewhere, then what can be
    done here, then examine / inventory / look."""
    recs, objs, at, hold = w.receptacles, w.objects, s.at, s.hold
    ops: dict[str, tuple] = {cmd: ("go", r) for r, cmd in enumerate(w.go_commands) if r != at}
    if at >= 0:
        here = recs[at]
        if w.openable[at]:
            ops[f"{'close' if s.opened[at] else 'open'} {here}"] = (
                "close" if s.opened[at] else "open", at)
        if not w.openable[at] or s.opened[at]:
            if hold < 0:
                for o in _contents(w, s, at):
                    ops[f"take {objs[o]} from {here}"] = ("take", o, at)
            else:
                ops[f"put {objs[hold]} in/on {here}"] = ("put", hold, at)
        verb = _STATION_VERB.get(w.rtypes[at])
        if verb and hold >= 0:
            ops[f"{verb} {objs[hold]} with {here}"] = ("process", verb, hold, at)
        if w.lamp_at == at:
            ops[f"use {LAMP}"] = ("use", at)
        ops[f"examine {here}"] = ("examine", at)
    if hold >= 0:
        ops[f"examine {objs[hold]}"] = ("examine_obj", hold)
    ops["inventory"] = ("inventory",)
    ops["look"] = ("look",)
    return ops


def apply(w: World, s: State, op: tuple) -> str:
    """Apply an admissible operation to ``s`` in place; return the observation text."""
    kind, recs, objs = op[0], w.receptacles, w.objects
    if kind == "go":
        s.at = op[1]
        return f"You arrive at {recs[op[1]]}. {describe(w, s, op[1])}"
    if kind == "open":
        s.opened[op[1]] = True
        return f"You open the {recs[op[1]]}. {describe(w, s, op[1])}"
    if kind == "close":
        s.opened[op[1]] = False
        return f"You close the {recs[op[1]]}."
    if kind == "take":
        s.loc[op[1]], s.hold = -1, op[1]
        return f"You pick up the {objs[op[1]]} from the {recs[op[2]]}."
    if kind == "put":
        s.loc[op[1]], s.hold = op[2], -1
        return f"You put the {objs[op[1]]} in/on the {recs[op[2]]}."
    if kind == "process":
        _, flag_set, flag_clear = PROCESS_VERBS[op[1]]
        s.flags[op[2]] = (s.flags[op[2]] | flag_set) & ~flag_clear
        return f"You {op[1]} the {objs[op[2]]} using the {recs[op[3]]}."
    if kind == "use":
        s.lamp = not s.lamp
        return f"You turn {'on' if s.lamp else 'off'} the {LAMP}."
    if kind == "examine":
        return describe(w, s, op[1])
    if kind == "examine_obj":
        words = [word for bit, word in FLAG_WORDS.items() if s.flags[op[1]] & bit]
        name = objs[op[1]]
        return f"The {name} is {' and '.join(words)}." if words else f"There's nothing special about {name}."
    if kind == "inventory":
        return f"You are carrying: a {objs[s.hold]}." if s.hold >= 0 else "You are not carrying anything."
    if kind == "look":
        if s.at < 0:
            return room_overview(w)
        return f"You are facing the {recs[s.at]}. Next to it, you see nothing."
    raise ValueError(f"unknown household operation {op!r}")


def room_overview(w: World) -> str:
    return ("You are in the middle of a room. Looking quickly around you, you see "
            f"{listing(w.receptacles)}.")


def describe(w: World, s: State, r: int) -> str:
    name = w.receptacles[r]
    if w.openable[r] and not s.opened[r]:
        return f"The {name} is closed."
    items = [w.objects[o] for o in _contents(w, s, r)]
    if w.lamp_at == r:
        items = sorted(items + [LAMP])
    if w.openable[r]:
        return f"The {name} is open. In it, you see {listing(items)}."
    return f"On the {name}, you see {listing(items)}."


def listing(names) -> str:
    """ALFWorld's enumeration: "a apple 1, a mug 2, and a pan 1" ("nothing" if empty)."""
    items = [f"a {n}" for n in names]
    if not items:
        return "nothing"
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + ", and " + items[-1]


def _contents(w: World, s: State, r: int) -> list[int]:
    return [o for o, where in enumerate(s.loc) if where == r]


# -- optimal plan ----------------------------------------------------------------------
class _Plan:
    """Emits commands while tracking the parts of the state a plan changes."""

    __slots__ = ("actions", "at", "hold", "moved", "opened", "s", "w")

    def __init__(self, w: World, s: State):
        self.w, self.s, self.at, self.hold = w, s, s.at, s.hold
        self.moved: dict[int, int] = {}
        self.opened: set[int] = set()
        self.actions: list[str] = []

    def is_open(self, r: int) -> bool:
        return not self.w.openable[r] or self.s.opened[r] or r in self.opened

    def goto(self, r: int) -> None:
        if self.at != r:
            self.actions.append(self.w.go_commands[r])
            self.at = r

    def open_here(self) -> None:
        if not self.is_open(self.at):
            self.actions.append(f"open {self.w.receptacles[self.at]}")
            self.opened.add(self.at)

    def take(self, o: int) -> None:
        """Hold ``o``: go to it, open its receptacle, drop whatever is held there, take it."""
        if self.hold == o:
            return
        r = self.moved.get(o, self.s.loc[o])
        self.goto(r)
        self.open_here()
        if self.hold >= 0:
            self.put_here()
        self.actions.append(f"take {self.w.objects[o]} from {self.w.receptacles[r]}")
        self.hold, self.moved[o] = o, -1

    def put_here(self) -> None:
        self.open_here()
        self.actions.append(f"put {self.w.objects[self.hold]} in/on {self.w.receptacles[self.at]}")
        self.moved[self.hold], self.hold = self.at, -1

    def put_at(self, r: int) -> None:
        self.goto(r)
        self.put_here()

    def process(self, verb: str) -> None:
        if self.at not in self.w.stations:
            self.goto(self.w.stations[0])
        o = self.hold
        self.actions.append(f"{verb} {self.w.objects[o]} with {self.w.receptacles[self.at]}")

    def nearest(self, targets) -> int:
        """The target reachable with fewest commands: here beats elsewhere, open beats closed."""
        return min(targets, key=lambda t: (t != self.at) + (not self.is_open(t)))


def optimal_plan(w: World, s: State) -> list[str]:
    """A shortest command list from ``s`` to the goal ([] when the goal holds)."""
    if goal_reached(w, s):
        return []
    builders = {
        "look_at_obj_in_light": _plans_look,
        "pick_two_obj_and_place": _plans_two,
    }.get(w.family, _plans_place)
    best: list[str] | None = None
    for plan in builders(w, s):
        if best is None or len(plan) < len(best):
            best = plan
    if best is None:
        raise RuntimeError(f"{w.task_id}: no plan reaches the goal (no {w.obj_type} left?)")
    return best


def _plans_place(w: World, s: State):
    verb = {1: "clean", 2: "heat", 4: "cool"}.get(w.flag)
    for o in w.candidates:
        p = _Plan(w, s)
        p.take(o)
        if verb and s.flags[o] & w.flag == 0:
            p.process(verb)
        p.put_at(p.nearest(w.targets))
        yield p.actions


def _plans_look(w: World, s: State):
    for o in w.candidates:
        p = _Plan(w, s)
        p.take(o)
        p.goto(w.lamp_at)
        if not s.lamp:
            p.actions.append(f"use {LAMP}")
        yield p.actions


def _plans_two(w: World, s: State):
    count = {t: sum(s.loc[o] == t for o in w.candidates) for t in w.targets}
    for t, c in count.items():  # one goal object already in t: bring one more
        if c == 1:
            for o in w.candidates:
                if s.loc[o] != t:
                    p = _Plan(w, s)
                    p.take(o)
                    p.put_at(t)
                    yield p.actions
    empty = [t for t, c in count.items() if c == 0]
    for o1 in w.candidates:
        for o2 in w.candidates:
            if o1 != o2 and empty:
                p = _Plan(w, s)
                p.take(o1)
                t = p.nearest(empty)
                p.put_at(t)
                p.take(o2)
                p.put_at(t)
                yield p.actions


# -- observation-consistent demonstrator ------------------------------------------------
_LISTING_RE = re.compile(
    r"(?:On the ([a-z]+ \d+), you see|The ([a-z]+ \d+) is open\. In it, you see) ([^.]*)\.")


def seen_listings(text: str) -> list[tuple[str, list[str]]]:
    """(receptacle, item names) for every contents listing in an observation text, e.g.
    "You arrive at countertop 1. On the countertop 1, you see a apple 1, and a mug 2." ->
    [("countertop 1", ["apple 1", "mug 2"])] (the inverse of :func:`describe`)."""
    out = []
    for match in _LISTING_RE.finditer(text):
        items = [] if match[3] == "nothing" else re.split(r", (?:and )?", match[3])
        names = [item.removeprefix("a ") for item in items]
        out.append((match[1] or match[2], names))
    return out


@dataclasses.dataclass(frozen=True)
class Seen:
    """What the agent has observed so far in an episode (indices into the world's tuples):
    ``arrived`` receptacles it went to (so it saw whether they are open), ``explored``
    receptacles whose contents an observation listed, ``objects`` objects named in a listing,
    ``lamp`` whether a listing showed the desk lamp."""

    arrived: frozenset[int]
    explored: frozenset[int]
    objects: frozenset[int]
    lamp: bool


def read_history(w: World, steps: Iterable[tuple[str, bool, str]]) -> Seen:
    """:class:`Seen` from (action, valid, next observation) triples of the turns played."""
    rec_index = {name: i for i, name in enumerate(w.receptacles)}
    obj_index = {name: i for i, name in enumerate(w.objects)}
    arrived, explored, objects, lamp = set(), set(), set(), False
    for action, valid, observation in steps:
        if valid and action.startswith("go to ") and action[6:] in rec_index:
            arrived.add(rec_index[action[6:]])
        for receptacle, names in seen_listings(observation):
            explored.add(rec_index[receptacle])
            objects.update(obj_index[n] for n in names if n in obj_index)
            lamp = lamp or LAMP in names
    return Seen(frozenset(arrived), frozenset(explored), frozenset(objects), lamp)


def search_order(w: World, wanted: set[str]) -> list[int]:
    """The fixed order in which the demonstrator searches receptacles (a learnable rule over
    visible facts only: the task and the room listing): receptacles of a ``wanted`` type
    first (:func:`wanted_types`), among them surfaces before containers that open (a
    container costs an extra "open"), then the order of the room listing; the others last,
    in listing order."""
    return sorted(range(len(w.receptacles)),
                  key=lambda r: (w.rtypes[r] not in wanted, w.openable[r], r))


def wanted_types(w: World, want_object: bool, want_lamp: bool) -> set[str]:
    """Receptacle types worth searching: for the goal object, the types the catalog lists as
    places where that object type lies (``OBJECTS``) except the task's target type (goal
    objects never start there); for the desk lamp, the lamp surfaces (desk, sidetable,
    dresser)."""
    homes = set(OBJECTS[w.obj_type][0]) - {w.target_type} if want_object else set()
    return homes | (set(LAMP_SURFACES) if want_lamp else set())


def belief_state(w: World, s: State, seen: Seen) -> State:
    """``s`` with every openable receptacle the agent has not been to assumed closed (its
    open/closed status is not observable before arriving)."""
    b = State(w)
    b.restore(s.snapshot())
    b.opened = [s.opened[r] and (r in seen.arrived or not w.openable[r])
                for r in range(len(w.receptacles))]
    return b


def demo_command(w: World, s: State, seen: Seen) -> str | None:
    """The observation-consistent demonstrator's next command, or None when it has searched
    every receptacle without finding what the task needs.

    Decisions depend only on ``seen`` and on facts the agent's own actions and observations
    fix (where it is, what it holds, where it left objects it saw, whether receptacles it
    went to are open).  With ``k`` the goal objects seen (``need`` = 2 for pick_two, else 1):

    1. everything needed is seen (k >= need; for look also the desk lamp): the next command
       of the exact optimal plan from the belief state, using only the seen goal objects;
    2. some but not all is seen: make progress with what is known (look: take a seen goal
       object; pick_two: bring the first one to the target), then search on;
    3. otherwise search: open the receptacle here when it is closed, plausible and unsearched,
       else go to the first unsearched receptacle of :func:`search_order`, never revisiting.
    """
    known = tuple(o for o in w.candidates if o in seen.objects)
    look = w.family == "look_at_obj_in_light"
    need = 2 if w.family == "pick_two_obj_and_place" else 1
    belief = belief_state(w, s, seen)
    if len(known) >= need and (seen.lamp or not look):
        return _first(optimal_plan(dataclasses.replace(w, candidates=known), belief))
    if known:
        first = dataclasses.replace(w, candidates=known, family="pick_and_place")
        partial = _fetch_plan(w, belief, known) if look else optimal_plan(first, belief)
        if partial:
            return partial[0]
    wanted = wanted_types(w, len(known) < need, look and not seen.lamp)
    here = s.at
    unsearched_here = here >= 0 and here not in seen.explored
    if unsearched_here and not s.opened[here] and w.rtypes[here] in wanted:
        return f"open {w.receptacles[here]}"
    for r in search_order(w, wanted):
        if r not in seen.explored and r != here:
            return w.go_commands[r]
    return None


def _fetch_plan(w: World, s: State, objects: tuple[int, ...]) -> list[str]:
    """The shortest command list that ends holding one of ``objects`` ([] when held)."""
    best: list[str] | None = None
    for o in objects:
        if s.hold == o:
            return []
        p = _Plan(w, s)
        p.take(o)
        if best is None or len(p.actions) < len(best):
            best = p.actions
    return best or []


def _first(plan: list[str]) -> str | None:
    return plan[0] if plan else None
