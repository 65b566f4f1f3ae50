"""Multi-turn text environments: built-in ``household``, ``shop``, ``searchqa``,
``sokoban`` and ``ezpoints`` (whose observations also render as images) and adapters to the
real ALFWorld / WebShop / Search-R1 environments.

``envs.make(name, **options)`` builds one by name.  Modules are imported lazily so that an
adapter whose optional dependencies are missing fails only when it is asked for.
"""

from __future__ import annotations

import hashlib
import inspect
from difflib import get_close_matches

from envs.adapters.alfworld import ALFWorldEnv
from envs.adapters.searchr1 import SearchR1Env
from envs.adapters.webshop import WebShopEnv
from envs.base import Episode, Hindsight, StepResult, Task, TextEnv, Turn, demo_policy, run_episode
from envs.ezpoints.env import EZPointsEnv
from envs.household.env import HouseholdEnv
from envs.oracle import Oracle
from envs.searchqa.env import SearchQAEnv
from envs.shop.env import ShopEnv
from envs.sokoban.env import SokobanEnv

# name -> the environment's class, filled by :func:`register_env` (the built-ins below call it
# as a plugin does; the adapters import their engines only when made).
REGISTRY: dict[str, type[TextEnv]] = {}
# The envs with a scripted expert, and those whose privileged facts (expert, distances,
# workflow) are exact: the oracle writer's.
_EXPERT: set[str] = set()
_ORACLE: set[str] = set()


def register_env(name: str, cls: type[TextEnv], *, expert: bool = True, oracle: bool = False) -> type[TextEnv]:
    """Register the :class:`TextEnv` subclass ``cls`` as env ``name`` (``env.name`` in a config).

    ``expert``: its ``expert_action`` plays the task (the warm start's demonstrations, Stage
    1's annotated rollouts, a privileged context and a static library use it); ``oracle``:
    its ``distance_to_goal`` and ``workflow`` are exact too, so the oracle writer may read
    them.  A config that needs what an env lacks fails naming it.  A name that is taken (by a
    built-in or a plugin) raises; ``cls`` is returned unchanged."""
    if not (isinstance(cls, type) and issubclass(cls, TextEnv)):
        raise ValueError(f"env {name!r}: expected a TextEnv subclass, got {cls!r}")
    if name in REGISTRY:
        old = REGISTRY[name]
        raise ValueError(f"env {name!r} is already registered ({old.__module__}.{old.__qualname__}); "
                         f"choose another name")
    if oracle and not expert:
        raise ValueError(f"env {name!r}: an oracle reads the expert; oracle=True needs expert=True")
    REGISTRY[name] = cls
    for flag, names_with in ((expert, _EXPERT), (oracle, _ORACLE)):
        if flag:
            names_with.add(name)
    return cls


for _name, _cls in (("household", HouseholdEnv), ("shop", ShopEnv), ("searchqa", SearchQAEnv),
                    ("sokoban", SokobanEnv), ("ezpoints", EZPointsEnv)):
    register_env(_name, _cls, oracle=True)
for _name, _cls in (("alfworld", ALFWorldEnv), ("webshop", WebShopEnv), ("searchr1", SearchR1Env)):
    register_env(_name, _cls)

# The built-in pure-Python envs with privileged state (exact distances, experts).
BUILTIN = tuple(sorted(_ORACLE, key=list(REGISTRY).index))


def has_expert(name: str) -> bool:
    """Whether env ``name`` was registered with a scripted expert (``expert=True``)."""
    return name in _EXPERT


def has_oracle(name: str) -> bool:
    """Whether env ``name`` was registered with exact privileged facts (``oracle=True``)."""
    return name in _ORACLE


def names() -> list[str]:
    return sorted(REGISTRY)


def env_class(name: str) -> type[TextEnv]:
    if name not in REGISTRY:
        hint = get_close_matches(name, REGISTRY, n=1)
        extra = f" (did you mean {hint[0]!r}?)" if hint else ""
        raise ValueError(f"unknown env {name!r}{extra}; valid: {', '.join(names())}")
    return REGISTRY[name]


def has_option(name: str, option: str) -> bool:
    """Whether env ``name``'s constructor takes the keyword ``option``."""
    return option in inspect.signature(env_class(name).__init__).parameters


def has_admissible_switch(name: str) -> bool:
    """Whether env ``name`` takes ``show_admissible`` (it can list admissible commands)."""
    return has_option(name, "show_admissible")


def env_options(name: str, level: str = "", show_admissible: bool | None = None,
                action_format: str = "text", images: bool = False, action_match: str = "exact",
                progress_reward: float = 0.0, hidden_cards: int = 0, hands: int = 1, **options) -> dict:
    """Keyword options for :func:`make`: ``level``, ``show_admissible``, a non-text
    ``action_format``, ``images``, a non-exact ``action_match``, a non-zero
    ``progress_reward``, non-zero ``hidden_cards`` and ``hands`` other than 1 are passed only to the envs that have
    them (an empty level or None means the env's default)."""
    if level and len(env_class(name).levels) > 1:
        options["level"] = level
    if show_admissible is not None and has_admissible_switch(name):
        options["show_admissible"] = show_admissible
    if action_format != "text" and has_option(name, "action_format"):
        options["action_format"] = action_format
    if images and has_option(name, "images"):
        options["images"] = True
    if action_match != "exact" and has_option(name, "action_match"):
        options["action_match"] = action_match
    if progress_reward and has_option(name, "progress_reward"):
        options["progress_reward"] = progress_reward
    if hidden_cards and has_option(name, "hidden_cards"):
        options["hidden_cards"] = hidden_cards
    if hands != 1 and has_option(name, "hands"):
        options["hands"] = hands
    return options


def fingerprint(env: TextEnv, tasks_per_split: int = 12) -> str:
    """A short hash of what a policy trained on ``env`` learned from: its prompts, the first
    tasks of every split, the demonstrator's episodes on them (observations and actions) and
    the oracle's hindsight of those episodes (the writer examples of a warm start).  A saved
    warm start records it; a change of the environment's texts, panels, rules or oracle
    phrasing changes it."""
    oracle = Oracle(lambda: env)

    digest = hashlib.sha256()
    for text in (env.system_prompt(), env.domain_description()):
        digest.update(text.encode())
    for split in env.splits:
        for task in env.panel(split)[:tasks_per_split]:
            episode = run_episode(env, task, demo_policy(0.0, seed="fingerprint"))
            digest.update(f"{task.id}|{env.task_instruction(task)}|{episode.first_observation}".encode())
            for turn in episode.turns:
                digest.update(f"|{turn.response}|{turn.next_observation}|{turn.reward}".encode())
            digest.update(oracle.write(episode).raw.encode())
    return digest.hexdigest()[:16]


def make(name: str, **options) -> TextEnv:
    """Build environment ``name`` with its keyword ``options`` (max_turns, invalid_penalty, ...)."""
    return env_class(name)(**options)


__all__ = [
    "BUILTIN", "Episode", "Hindsight", "REGISTRY", "StepResult", "Task", "TextEnv", "Turn",
    "env_class", "env_options", "fingerprint", "has_admissible_switch", "has_expert", "has_oracle", "make", "names",
    "register_env", "run_episode",
]
