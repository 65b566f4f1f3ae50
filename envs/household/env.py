"""The built-in ``household`` environment: ALFWorld-like rooms, tasks and texts.

Procedurally generated rooms (kitchens, living rooms, bedrooms, bathrooms) hold numbered
receptacles ("cabinet 3", some closed at the start) and numbered objects ("apple 1").  The
six ALFWorld task families are covered (``envs.household.data.FAMILIES``) with ALFWorld's
command grammar and observation texts; the agent carries one object at a time.  Reward 1 on
completion; an unparseable or inadmissible response is an invalid step (reward
``-invalid_penalty``, "Nothing happens.", state unchanged, episode continues).

Splits: ``train`` (2400 tasks), ``eval_seen`` (140, train layouts and combinations),
``eval_unseen`` (134, held-out layouts and held-out object/receptacle combinations); see
``envs/household/world.py``.  ``info`` carries ``state_key``, ``distance`` (exact optimal
remaining steps, ``envs/household/engine.py``), ``plan``, ``valid``, ``action``, ``score``.
``expert_action`` uses where objects hide; ``demo_action`` is the observation-consistent
demonstrator for behaviour cloning (it searches before it knows).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import NamedTuple

from envs.base import (
    ACTION_FORMATS,
    ACTION_MATCHES,
    StepResult,
    Task,
    TextEnv,
    Turn,
    format_response,
    nearest_listed,
    parse_tagged,
    pick_listed,
    with_admissible,
    without_admissible,
)
from envs.household.data import CONFUSABLE, FAMILIES, OBJECTS, STATIONS, family_verb
from envs.household.engine import (
    State,
    admissible,
    apply,
    demo_command,
    goal_reached,
    optimal_plan,
    read_history,
    room_overview,
)
from envs.household.world import LEVELS, World, build_world, level_spec, panel
from envs.oracle import skill_moves

INVALID_OBSERVATION = "Nothing happens."
_PUT_RE = re.compile(r"(?:put|move) (.+?) (?:in/on|into|onto|in|on|to) (.+)")


def parse_command(response_text: str) -> str | None:
    """The command in a response, in canonical form, or None when there is none.

    Takes the last ``<action>...</action>`` span, lower-cases it, collapses whitespace and
    drops a trailing period; "put O in R", "put O on R" and "move O to R" all become
    ALFWorld's "put O in/on R".
    """
    action = parse_tagged(response_text)
    if action is None:
        return None
    text = action.lower().rstrip(".!").strip()
    match = _PUT_RE.fullmatch(text)
    return f"put {match[1]} in/on {match[2]}" if match else text or None


class _Facts(NamedTuple):
    key: str
    ops: dict[str, tuple]
    actions: list[str]
    plan: tuple[str, ...]


class HouseholdEnv(TextEnv):
    """ALFWorld-like household tasks (module docstring).  One episode at a time."""

    name = "household"
    default_max_turns = 30
    splits = ("train", "eval_seen", "eval_unseen")
    levels = tuple(LEVELS)

    def __init__(
        self,
        max_turns: int = 0,
        invalid_penalty: float = 0.0,
        level: str = "full",
        show_admissible: bool = True,
        action_format: str = "text",
        action_match: str = "exact",
        progress_reward: float = 0.0,
    ):
        """``level``: ``full`` (paper scale) or ``small`` (CPU level, see
        ``envs.household.world``); ``show_admissible``: every observation ends with the
        admissible commands of the current state, as verl-agent's ALFWorld prompt does;
        ``action_format``: ``text`` (the policy writes the command) or ``numbered`` (the
        admissible list is numbered and the policy writes the number of its command);
        ``action_match``: ``exact`` (a command not admissible as written is an invalid step)
        or ``nearest`` (it is read as the most similar admissible command with the same verb,
        :func:`envs.base.nearest_listed`, when there is one); ``progress_reward``: c >= 0
        adds c * (d_before - d_after) / d_0 to every valid step's reward, d the oracle's
        distance to the goal and d_0 the episode's first, so an episode's return is its
        outcome plus c times the share of the optimal plan it covered (potential-based
        shaping; 0, the default, is the papers' outcome reward)."""
        super().__init__(max_turns=max_turns, invalid_penalty=invalid_penalty)
        level_spec(level)
        if action_format not in ACTION_FORMATS:
            raise ValueError(f"household: action_format {action_format!r} is not one of "
                             f"{', '.join(ACTION_FORMATS)}")
        if action_match not in ACTION_MATCHES:
            raise ValueError(f"household: action_match {action_match!r} is not one of "
                             f"{', '.join(ACTION_MATCHES)}")
        if action_format == "numbered" and not show_admissible:
            raise ValueError("household: action_format 'numbered' picks from the admissible "
                             "list, so it needs show_admissible on")
        if progress_reward < 0:
            raise ValueError(f"household: progress_reward must be >= 0, got {progress_reward}")
        self.progress_reward = progress_reward
        self._start_distance = 1  # the oracle's distance at reset (progress_reward's d_0)
        self.level = level
        self.show_admissible = show_admissible
        self.numbered = action_format == "numbered"
        self.nearest = action_match == "nearest"
        self.world: World | None = None
        self.state: State | None = None
        self.done = False
        self._facts_cache: dict[tuple, _Facts] = {}
        self._current: _Facts | None = None  # facts of the current state, None when stale
        self._rng = random.Random("household/expert")

    # -- tasks -------------------------------------------------------------------------
    def panel(self, split: str) -> list[Task]:
        self.check_split(split)
        return list(panel(split, self.level))

    # -- episode -----------------------------------------------------------------------
    def reset(self, task: Task, replay: Sequence[str] = ()) -> str:
        self.check_task(task)
        if self.task is None or self.task.id != task.id or self.task.spec != task.spec:
            self.world = build_world(task)
            self._facts_cache = {}
        self.task, self.turn, self.done = task, 0, False
        self.state, self._current = State(self.world), None
        self._rng = random.Random(f"household/expert/{task.id}")
        self._start_distance = max(1, len(self._facts().plan))
        return self.replay_actions(self._observe(room_overview(self.world)), replay)

    def step(self, response_text: str) -> StepResult:
        if self.state is None or self.done:
            raise RuntimeError("household: call reset(task) before step() (episode not running)")
        self.turn += 1
        before = self._facts()
        written = action = self.parse_action(response_text)
        if action and self.nearest:
            action = nearest_listed(action, before.actions) or action
        op = before.ops.get(action) if action else None
        if op is None:
            observation, success, reward = INVALID_OBSERVATION, False, -self.invalid_penalty
        else:
            observation = apply(self.world, self.state, op)
            self._current = None
            success = goal_reached(self.world, self.state)
            reward = 1.0 if success else 0.0
        self.done = success or self.turn >= self.max_turns
        facts = self._facts()
        if op is not None and self.progress_reward:
            reward += self.progress_reward * (len(before.plan) - len(facts.plan)) / self._start_distance
        observation = self._observe(observation)
        info = {"state_key": facts.key, "distance": len(facts.plan), "plan": list(facts.plan),
                "valid": op is not None, "action": action or "", "score": float(success),
                "matched": op is not None and action != written}
        return StepResult(observation, reward, self.done, success, info)

    def parse_action(self, response_text: str) -> str | None:
        if self.numbered:
            picked = parse_tagged(response_text)
            return pick_listed(picked, self._facts().actions) if picked else None
        return parse_command(response_text)

    def response_for(self, action: str, think: str = "") -> str:
        """In the numbered format a listed command is written as its number; an unlisted
        one (a demonstrator's plausible mistake) stays text, which is invalid there too."""
        listed = self._facts().actions if self.numbered else ()
        if action in listed:
            action = str(listed.index(action) + 1)
        return format_response(action, think)

    def admissible_actions(self) -> list[str]:
        return list(self._facts().actions)

    def snapshot(self) -> tuple:
        """The full world state (for search and tests); see :meth:`restore`."""
        return self._require().snapshot()

    def restore(self, snapshot: tuple) -> None:
        """Put the running episode into a state from :meth:`snapshot`; keeps the turn count."""
        self._require().restore(snapshot)
        self._current = None
        self.done = goal_reached(self.world, self.state) or self.turn >= self.max_turns

    # -- privileged facts --------------------------------------------------------------
    def state_key(self) -> str:
        return self._facts().key

    def distance_to_goal(self) -> int:
        """Exact optimal number of remaining commands (``envs.household.engine``)."""
        return len(self._facts().plan)

    def optimal_plan(self) -> list[str]:
        return list(self._facts().plan)

    def expert_action(self, epsilon: float = 0.0, rng: random.Random | None = None) -> str:
        """The next command of the optimal plan; with probability ``epsilon`` instead (half
        and half) a uniformly random admissible command or a plausible-wrong one (a similar
        or confusable receptacle, another object, the wrong station).  Without ``rng`` the
        env's own generator is used, reseeded from the task id at every reset."""
        facts = self._facts()

        def clean() -> str:
            return facts.plan[0] if facts.plan else "look"

        return self._noisy(clean, epsilon, rng or self._rng)

    def demo_action(
        self, history: Sequence[Turn], epsilon: float = 0.0, rng: random.Random | None = None
    ) -> str:
        """The observation-consistent demonstrator (``envs.household.engine.demo_command``):
        it searches receptacles in a fixed order learnable from the task and the room
        listing (plausible places for the object, surfaces before containers, listing order;
        opening closed ones on arrival, never revisiting) until the goal object(s) and, for
        look, the desk lamp have appeared in an observation, then follows the optimal plan
        restricted to what it has seen.  ``history`` is the turns played so far this episode.
        Noise as in :meth:`expert_action`, around the demonstrator's own command.  Falls back
        to the expert's command only when every receptacle was searched in vain (a guard:
        objects are only moved by the agent, which names them, so it is never reached)."""
        self._require()
        seen = read_history(
            self.world, ((t.action, t.valid, without_admissible(t.next_observation)) for t in history))

        def clean() -> str:
            return demo_command(self.world, self.state, seen) or self.expert_action()

        return self._noisy(clean, epsilon, rng or self._rng)

    def skilled_demo_action(
        self, history: Sequence[Turn], skill: str, rng: random.Random | None = None
    ) -> str:
        """The demonstrator acting on the skill's hindsight: the progress moves it names
        (:func:`envs.oracle.skill_moves`: where the object lay, which receptacle and station
        the clean episode used), the next one after those already made this episode, when it
        is admissible now; otherwise, and once the named moves are made, the
        observation-consistent demonstrator without mistakes.  So a skilled demonstration goes
        straight to the object where one without a skill searches for it."""
        moves = skill_moves(skill)
        done = 0
        for turn in history:
            if done < len(moves) and turn.valid and turn.action == moves[done]:
                done += 1
        if done < len(moves) and moves[done] in self.admissible_actions():
            return moves[done]
        return self.demo_action(history, epsilon=0.0, rng=rng)

    def demo_thought(self, task: Task, skill: str | None = None) -> str:
        """The goal in one canonical line, whatever the instruction's wording ("put a hot
        egg in garbagecan." -> "Goal: heat the egg, then put it in/on the garbagecan."): the
        demonstrator restates it before every command, so a small policy finds the object,
        the process and the target a few tokens before the command that names them."""
        spec = task.spec
        obj, target, verb = spec["object"], spec["target"], family_verb(spec["family"])
        if verb == "look":
            return f"Goal: look at the {obj} under the desklamp."
        if verb == "pick_two":
            return f"Goal: put two {obj} in/on the {target}."
        if verb in ("clean", "heat", "cool"):
            return f"Goal: {verb} the {obj}, then put it in/on the {target}."
        return f"Goal: put the {obj} in/on the {target}."

    def _noisy(self, choose, epsilon: float, rng: random.Random) -> str:
        """``choose()``; with probability ``epsilon`` (half and half) a random admissible
        command or one of :meth:`plausible_wrong_actions` around ``choose()`` instead."""
        if epsilon > 0 and rng.random() < epsilon:
            wrong = self.plausible_wrong_actions(choose()) if rng.random() < 0.5 else []
            return rng.choice(wrong or self._facts().actions)
        return choose()

    def plausible_wrong_actions(self, action: str | None = None) -> list[str]:
        """Admissible commands that look like ``action`` (default: the plan's next step) but
        are not it."""
        facts, w, s = self._facts(), self.world, self.state
        action = action if action is not None else (facts.plan[0] if facts.plan else None)
        op = facts.ops.get(action) if action else None
        if op is None or op[0] in ("look", "inventory", "examine_obj"):  # no receptacle
            return []
        kind, r = op[0], op[-1]
        wrong = [f"go to {w.receptacles[x]}" for x in _similar(w, r)]
        if kind == "take":
            wrong += [f"take {w.objects[o]} from {w.receptacles[r]}" for o, at in enumerate(s.loc)
                      if at == r and w.otypes[o] != w.otypes[op[1]]]
        return [a for a in wrong if a in facts.ops and a != action]

    # -- prompt pieces -----------------------------------------------------------------
    def _action_rule(self) -> str:
        if self.numbered:
            return ("command inside <action>...</action>. Every observation ends with the "
                    "admissible commands, numbered; write the number of your command, for "
                    "example: <think>Apples are often on the countertop.</think><action>3"
                    "</action>\n\n")
        return ("command inside <action>...</action>, for example: <think>Apples are often on "
                "the countertop.</think><action>go to countertop 1</action>\n\n")

    def system_prompt(self) -> str:
        return (
            "You are an agent in a household. Each turn you read what happened after your "
            "last command, then issue the next command; finish the task in as few commands "
            "as you can.\n\n"
            "Respond with your reasoning inside <think>...</think> followed by exactly one "
            + self._action_rule() +
            "Commands (R is a receptacle such as \"cabinet 3\", O an object such as "
            "\"apple 1\"):\n"
            "- go to R\n- open R\n- close R\n"
            "- take O from R (you carry at most one object)\n- put O in/on R\n"
            "- clean O with R (R is a sinkbasin)\n- heat O with R (R is a microwave)\n"
            "- cool O with R (R is a fridge)\n- use R (R is a desklamp)\n"
            "- examine R, examine O\n- look\n- inventory\n"
            "Closed receptacles must be opened before you can see, take or put things inside. "
            "A command that is not possible now does nothing (\"Nothing happens.\") and still "
            "uses a turn."
        )

    def task_instruction(self, task: Task) -> str:
        return f"Your task is to: {task.instruction}"

    def domain_description(self) -> str:
        return (
            "An ALFWorld-style household. The agent moves between numbered receptacles "
            "(countertops, cabinets, drawers, shelves, fridge, microwave, sinkbasin, desks, "
            "sidetables, ...), opens closed ones to see inside, carries one object at a time, "
            "can clean an object at a sinkbasin, heat it in a microwave, cool it in a fridge, "
            "and switch on a desklamp. Tasks: put an object in a receptacle, possibly after "
            "cleaning, heating or cooling it; put two objects of one kind in the same "
            "receptacle; look at an object under the desklamp. The reward is 1 when the goal "
            "holds; the turn budget is limited, so detours, repeated visits and invalid "
            "commands cost."
        )

    def workflow(self, task: Task) -> list[str]:
        """Reusable steps for the task's family; the places to search are the room's
        receptacle types where the object usually lies (public knowledge, not its location)."""
        spec = task.spec
        family, obj, target = spec["family"], spec["object"], spec["target"]
        if family not in FAMILIES:
            raise ValueError(f"unknown household family {family!r}; valid: {', '.join(FAMILIES)}")
        world = self.world if self.task is not None and self.task.id == task.id else build_world(task)
        places = sorted(set(world.rtypes) & set(OBJECTS[obj][0]) - {target})
        find = (f"Find a {obj}: visit the places where a {obj} usually is "
                f"({', '.join(places)}), open closed ones, and move on when it is not there.")
        put = f"Go to a {target}, open it if it is closed, and put the {obj} in/on it."
        if family == "look_at_obj_in_light":
            return [find, f"Take the {obj} (your hands must be empty).",
                    "Go to the receptacle where the desklamp is (a desk, sidetable or dresser).",
                    f"Use the desklamp while holding the {obj}."]
        if family == "pick_two_obj_and_place":
            return [find, f"Take it, go to a {target} (open it if closed) and put it there.",
                    f"Find a second {obj} (it may be where the first one was) and take it.",
                    f"Put the second {obj} in/on the same {target}."]
        steps = [find, f"Take the {obj} (your hands must be empty)."]
        if family in STATIONS:
            station, verb, _ = STATIONS[family]
            steps.append(f"Go to the {station} and {verb} the {obj} with it.")
        return steps + [put]

    # -- internals ---------------------------------------------------------------------
    def _observe(self, text: str) -> str:
        """The observation the policy sees: ``text``, then the admissible commands when on."""
        if not self.show_admissible:
            return text
        return with_admissible(text, self._facts().actions, numbered=self.numbered)

    def _require(self) -> State:
        if self.state is None:
            raise RuntimeError("household: call reset(task) first")
        return self.state

    def _facts(self) -> _Facts:
        """Key, admissible commands and optimal plan of the current state (cached per state)."""
        if self._current is not None:
            return self._current
        snap = self._require().snapshot()
        facts = self._facts_cache.get(snap)
        if facts is None:
            ops = admissible(self.world, self.state)
            plan = tuple(optimal_plan(self.world, self.state))
            facts = _Facts(self.state.key(self.task.id), ops, list(ops), plan)
            self._facts_cache[snap] = facts
        self._current = facts
        return facts


def _similar(w: World, r: int) -> list[int]:
    """Receptacles an agent may take for ``r``: same type, other number, or a confusable type
    (the microwave for the fridge, a drawer for a cabinet, ...)."""
    kind = w.rtypes[r]
    near = {kind, *CONFUSABLE.get(kind, ())}
    return [x for x, t in enumerate(w.rtypes) if x != r and t in near]


__all__ = ["INVALID_OBSERVATION", "HouseholdEnv", "parse_command"]
