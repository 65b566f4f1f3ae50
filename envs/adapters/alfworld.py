"""The real ALFWorld text engine (TextWorld ``PddlEnv`` + ALFWorld's demangler) as a TextEnv.

Two sources of games, chosen by ``game_files``:

* ``None`` (default, offline): the ``household`` panels (splits ``train``, ``eval_seen``,
  ``eval_unseen``), each task written as a PDDL problem in ALFWorld's own ``alfred`` domain
  and grammar by :mod:`envs.adapters.alfworld_pddl`.  Task ids are ``alfworld/<household
  split>/<index>`` and ``spec`` is the household spec plus ``household_id``.
* a folder holding ALFWorld's downloaded data, usually ``"$ALFWORLD_DATA"`` (the variable
  ALFWorld's own tools use; ``alfworld-download`` fills it on a machine with internet).
  Splits ``train``, ``eval_in_distribution``, ``eval_out_of_distribution`` read
  ``json_2.1.1/{train,valid_seen,valid_unseen}/**/game.tw-pddl``, skipping what ALFWorld's
  ``AlfredTWEnv`` skips (movable/sliced tasks and games not marked solvable).

Observations are the engine's texts unchanged: the first one is ALFWorld's intro
("-= Welcome to TextWorld, ALFRED! =-", the room, "Your task is to: ...").  A response is
parsed like ``household`` (last ``<action>`` span, lower case, whitespace collapsed,
trailing period dropped); "put O in/on R" and "move O to R" are synonyms and become the
spelling the game's grammar admits (package grammar: "move O to R"; the json_2.1.1 game
files: "put O in/on R").  An inadmissible command is an invalid step (reward
``-invalid_penalty``, "Nothing happens.", state unchanged).

Privileged facts: ``state_key`` hashes the engine's PDDL facts (without the bookkeeping
``checked`` facts).  With ``planner=True`` the engine replans after every step with Fast
Downward (``policy_commands``, ALFWorld's "planner" expert): ``plan`` is that plan and
``distance`` its length, and :meth:`expert_action` follows it.  Replanning costs from 0.1 s
to over 10 s a step, so by default (``planner=False``) plan and distance are ``None`` and
there is no expert.  Generated panels leave out household tasks that ALFWorld's affordance
tables make unwinnable (as ``AlfredTWEnv`` skips unsolvable games; the Fast Downward
translator cannot even load them), keeping the household index in the task id.

Dependencies: ``pip install alfworld "textworld[pddl]"`` (see the report of issue 3 for
the build flags); all imports happen when an env is built, and a missing one raises
:class:`envs.adapters.AdapterUnavailable` with one line.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import random
import re
from collections.abc import Sequence
from functools import cache

from envs.adapters import AdapterUnavailable, require_module
from envs.adapters.alfworld_pddl import TASK_TYPES, affordance_conflicts, game_data
from envs.base import StepResult, Task, TextEnv, parse_tagged, with_admissible
from envs.household.env import HouseholdEnv

INVALID_OBSERVATION = "Nothing happens."
DATA_ENV_VAR = "ALFWORLD_DATA"
FILE_SPLITS: dict[str, str] = {
    "train": "train",
    "eval_in_distribution": "valid_seen",
    "eval_out_of_distribution": "valid_unseen",
}
_PUT_RE = re.compile(r"(?:put|move) (.+?) (?:in/on|into|onto|in|on|to) (.+)")
_TASK_RE = re.compile(r"Your task is to: (.*?)\.?(?:\"|\\n|$)")
_IGNORED_FACTS = ("checked",)


def parse_command(response_text: str) -> str | None:
    """The command in a response, lower-cased, whitespace collapsed, trailing period
    dropped; None when the response has no ``<action>`` span."""
    action = parse_tagged(response_text)
    if action is None:
        return None
    return action.lower().rstrip(".!").strip() or None


def put_spellings(command: str) -> tuple[str, ...]:
    """The spellings of a put command in ALFWorld's grammars ("put O in/on R" in the
    json_2.1.1 game files, "move O to R" in the package's ``alfred.twl2``); ``(command,)``
    for any other command."""
    match = _PUT_RE.fullmatch(command)
    if not match:
        return (command,)
    return (f"put {match[1]} in/on {match[2]}", f"move {match[1]} to {match[2]}")


@cache
def _engine():
    """(textworld, PddlEnv, AlfredDemangler), or AdapterUnavailable naming what is missing."""
    hint = 'alfworld "textworld[pddl]"'
    textworld = require_module("alfworld", "textworld", hint)
    require_module("alfworld", "fast_downward", "fast-downward-textworld")
    pddl = require_module("alfworld", "textworld.envs.pddl", hint)
    tw_env = require_module("alfworld", "alfworld.agents.environment.alfred_tw_env", hint)
    return textworld, pddl.PddlEnv, tw_env.AlfredDemangler


class ALFWorldEnv(TextEnv):
    """ALFWorld's TextWorld engine on generated or downloaded games (module docstring)."""

    name = "alfworld"
    default_max_turns = 50  # ALFWorld's evaluation budget

    def __init__(self, game_files: str | None = None, planner: bool = False,
                 max_turns: int = 0, invalid_penalty: float = 0.0, show_admissible: bool = True):
        """``show_admissible``: every observation ends with the engine's admissible
        commands, as in verl-agent's ALFWorld prompt."""
        super().__init__(max_turns=max_turns, invalid_penalty=invalid_penalty)
        self.show_admissible = show_admissible
        textworld, pddl_env, demangler = _engine()
        self.root = None if game_files is None else _data_root(game_files)
        self.splits = tuple(FILE_SPLITS) if self.root else ("train", "eval_seen", "eval_unseen")
        self.planner = planner
        infos = textworld.EnvInfos(admissible_commands=True, won=True, facts=True,
                                   policy_commands=planner)
        self.engine = demangler(pddl_env(infos))
        self.game_state = None
        self.done = False
        self._loaded: str | None = None
        self._rng = random.Random("alfworld/expert")

    # -- tasks -------------------------------------------------------------------------
    def panel(self, split: str) -> list[Task]:
        self.check_split(split)
        if self.root is None:
            return list(_generated_panel(split))
        return list(_file_panel(self.root, split))

    # -- episode -----------------------------------------------------------------------
    def reset(self, task: Task, replay: Sequence[str] = ()) -> str:
        self.check_task(task)
        if self._loaded != task.id:
            self.engine.load(_game_source(task))
            self._loaded = task.id
        self.task, self.turn, self.done = task, 0, False
        self.game_state = self.engine.reset()
        self._rng = random.Random(f"alfworld/expert/{task.id}")
        observation = self._observe(self.game_state.feedback)
        for i, action in enumerate(replay):
            if self.done:
                raise ValueError(f"replay of {task.id!r} ends the episode at action {i - 1}; "
                                 f"{len(replay) - i} actions left over")
            observation = self._apply(action).observation
        return observation

    def step(self, response_text: str) -> StepResult:
        return self._apply(self.parse_action(response_text))

    def parse_action(self, response_text: str) -> str | None:
        """The admissible spelling of the response's command, or its text when none."""
        command = parse_command(response_text)
        if command is None or self.game_state is None:
            return command
        admissible = set(self.game_state.admissible_commands)
        return next((c for c in put_spellings(command) if c in admissible), command)

    def admissible_actions(self) -> list[str]:
        return list(self._require().admissible_commands)

    # -- privileged facts --------------------------------------------------------------
    def state_key(self) -> str:
        """Task id plus a SHA-256 of the sorted PDDL facts (``checked`` facts left out)."""
        facts = sorted(str(f) for f in self._require().facts if f.name not in _IGNORED_FACTS)
        return f"{self.task.id}|{hashlib.sha256(chr(10).join(facts).encode()).hexdigest()[:20]}"

    def distance_to_goal(self) -> int | None:
        plan = self.optimal_plan()
        return None if plan is None else len(plan)

    def optimal_plan(self) -> list[str] | None:
        """The engine planner's commands to the goal ([] when won; None without
        ``planner=True`` or when the planner finds none)."""
        state = self._require()
        if not self.planner:
            return None
        if state.won:
            return []
        return list(state.policy_commands) or None

    def expert_action(self, epsilon: float = 0.0, rng: random.Random | None = None) -> str:
        """The next command of the engine's plan (ALFWorld's ``planner`` expert); with
        probability ``epsilon`` a uniformly random admissible command instead."""
        if not self.planner:
            raise RuntimeError("alfworld: expert_action needs the engine planner; "
                               "build the env with planner=True")
        rng = rng or self._rng
        if epsilon > 0 and rng.random() < epsilon:
            return rng.choice(self.admissible_actions())
        plan = self.optimal_plan()
        return plan[0] if plan else "look"

    # -- prompt pieces -----------------------------------------------------------------
    def system_prompt(self) -> str:
        return (
            "You are an agent in a household (ALFWorld). Each turn you read what happened "
            "after your last command, then issue the next command; finish the task in as "
            "few commands as you can.\n\n"
            "Respond with your reasoning inside <think>...</think> followed by exactly one "
            "command inside <action>...</action>, for example: <think>Apples are often on "
            "the countertop.</think><action>go to countertop 1</action>\n\n"
            "Commands (R is a receptacle such as \"cabinet 3\", O an object such as "
            "\"apple 1\"):\n"
            "- go to R\n- open R\n- close R\n"
            "- take O from R (you carry at most one object)\n- move O to R\n"
            "- clean O with R (R is a sinkbasin)\n- heat O with R (R is a microwave)\n"
            "- cool O with R (R is a fridge)\n- use O (O is a desklamp)\n"
            "- examine R, examine O\n- look\n- inventory\n- help\n"
            "Closed receptacles must be opened before you can see, take or put things inside. "
            "A command that is not possible now does nothing (\"Nothing happens.\") and still "
            "uses a turn."
        )

    def task_instruction(self, task: Task) -> str:
        return f"Your task is to: {task.instruction}"

    def domain_description(self) -> str:
        return (
            "ALFWorld: text versions of ALFRED household scenes. The agent moves between "
            "numbered receptacles, opens closed ones to see inside, carries one object at a "
            "time, can clean an object at a sinkbasin, heat it with a microwave, cool it with "
            "a fridge and switch on a desklamp. Tasks: put an object in a receptacle, possibly "
            "after cleaning, heating or cooling it; put two objects of one kind in a "
            "receptacle; look at an object under the desklamp. The reward is 1 when the goal "
            "holds; the turn budget is limited."
        )

    def workflow(self, task: Task) -> list[str]:
        """Reusable steps of the task's type (ALFWorld's six task types)."""
        kind = task.spec.get("task_type", "")
        find = "Find the object: visit the receptacles where it usually is, opening closed ones."
        steps = {
            "pick_and_place_simple": [find, "Take it, go to the target receptacle and move it there."],
            "look_at_obj_in_light": [find, "Take it, go to the desklamp and use the desklamp."],
            "pick_clean_then_place_in_recep": [find, "Take it and clean it with a sinkbasin.",
                                               "Move it to the target receptacle."],
            "pick_heat_then_place_in_recep": [find, "Take it and heat it with a microwave.",
                                              "Move it to the target receptacle."],
            "pick_cool_then_place_in_recep": [find, "Take it and cool it with a fridge.",
                                              "Move it to the target receptacle."],
            "pick_two_obj_and_place": [find, "Take it and move it to the target receptacle.",
                                       "Find a second one and move it to the same receptacle."],
        }
        if kind not in steps:
            raise ValueError(f"unknown ALFWorld task type {kind!r}; valid: {', '.join(steps)}")
        return steps[kind]

    # -- internals ---------------------------------------------------------------------
    def _observe(self, text: str) -> str:
        if not self.show_admissible:
            return text
        return with_admissible(text, self.game_state.admissible_commands)

    def _require(self):
        if self.game_state is None:
            raise RuntimeError("alfworld: call reset(task) first")
        return self.game_state

    def _apply(self, action: str | None) -> StepResult:
        if self.game_state is None or self.done:
            raise RuntimeError("alfworld: call reset(task) before step() (episode not running)")
        self.turn += 1
        valid = action is not None and action in self.game_state.admissible_commands
        if valid:
            self.game_state, _, _ = self.engine.step(action)
            observation = self.game_state.feedback
        else:
            observation = INVALID_OBSERVATION
        success = bool(self.game_state.won)
        reward = (1.0 if success else 0.0) if valid else -self.invalid_penalty
        self.done = success or self.turn >= self.max_turns
        plan = self.optimal_plan()
        observation = self._observe(observation)
        info = {"state_key": self.state_key(), "distance": None if plan is None else len(plan),
                "plan": plan, "valid": valid, "action": action or "", "score": float(success)}
        return StepResult(observation, reward, self.done, success, info)


# -- game sources --------------------------------------------------------------------------
def _data_root(game_files: str) -> str:
    """The ALFWorld data folder named by ``game_files`` ("$ALFWORLD_DATA" expands)."""
    root = os.path.expanduser(os.path.expandvars(game_files))
    if not root or "$" in root:
        raise AdapterUnavailable(
            f"alfworld: {DATA_ENV_VAR} is not set; run `alfworld-download` where there is "
            f"internet and set {DATA_ENV_VAR}=<that folder> (or pass game_files=<folder>)")
    if not os.path.isdir(os.path.join(root, "json_2.1.1")):
        raise AdapterUnavailable(
            f"alfworld: no ALFWorld data in {root!r} (json_2.1.1/ missing); run "
            f"`alfworld-download` and point {DATA_ENV_VAR} or game_files at its folder")
    return root


@cache
def _generated_panel(split: str) -> tuple[Task, ...]:
    tasks = []
    for t in HouseholdEnv().panel(split):
        if affordance_conflicts(t):
            continue
        spec = {**t.spec, "household_id": t.id, "task_type": TASK_TYPES[t.spec["family"]]}
        tasks.append(Task("alfworld/" + t.id.split("/", 1)[1], "alfworld", split, t.instruction, spec))
    return tuple(tasks)


@cache
def _file_panel(root: str, split: str) -> tuple[Task, ...]:
    """ALFWorld's solvable game files of a split, sorted by path (AlfredTWEnv's filter)."""
    folder = os.path.join(root, "json_2.1.1", FILE_SPLITS[split])
    tasks = []
    for path in sorted(glob.glob(os.path.join(folder, "**", "game.tw-pddl"), recursive=True)):
        rel = os.path.relpath(os.path.dirname(path), folder)
        if "movable" in rel or "Sliced" in rel:
            continue
        with open(path) as f:
            data = json.load(f)
        if not data.get("solvable", False):
            continue
        found = _TASK_RE.search(data["grammar"])
        instruction = found[1] if found else ""
        spec = {"game_file": path, "task_type": rel.split("-", 1)[0]}
        tasks.append(Task(f"alfworld/{split}/{rel}", "alfworld", split, instruction, spec))
    if not tasks:
        raise AdapterUnavailable(f"alfworld: no solvable game.tw-pddl under {folder!r}; "
                                 f"run `alfworld-download` (it fills {DATA_ENV_VAR})")
    return tuple(tasks)


def _game_source(task: Task):
    """A game file path, or the generated game object of a household-derived task."""
    if "game_file" in task.spec:
        return task.spec["game_file"]
    household = Task(task.spec["household_id"], "household", task.split, task.instruction,
                      {k: v for k, v in task.spec.items() if k not in ("household_id", "task_type")})
    conflicts = affordance_conflicts(household)
    if conflicts:
        raise ValueError(f"task {task.id!r} cannot be won in ALFWorld: it needs "
                         f"{', '.join(conflicts)}, which ALFWorld's affordance tables forbid")
    return game_data(household)


__all__ = [
    "DATA_ENV_VAR",
    "FILE_SPLITS",
    "INVALID_OBSERVATION",
    "ALFWorldEnv",
    "parse_command",
    "put_spellings",
]
