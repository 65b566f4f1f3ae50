"""Multi-turn text environments: built-in ``household``, ``shop``, ``searchqa`` and
adapters to the real ALFWorld / WebShop / Search-R1 environments.

``envs.make(name, **options)`` builds one by name.  Modules are imported lazily so that an
adapter whose optional dependencies are missing fails only when it is asked for.
"""

from __future__ import annotations

import importlib
import inspect
from difflib import get_close_matches

from envs.base import Episode, Hindsight, StepResult, Task, TextEnv, Turn, run_episode

# name -> "module:ClassName"; every entry is imported only when made.
REGISTRY: dict[str, str] = {
    "household": "envs.household.env:HouseholdEnv",
    "shop": "envs.shop.env:ShopEnv",
    "searchqa": "envs.searchqa.env:SearchQAEnv",
    "alfworld": "envs.adapters.alfworld:ALFWorldEnv",
    "webshop": "envs.adapters.webshop:WebShopEnv",
    "searchr1": "envs.adapters.searchr1:SearchR1Env",
}

BUILTIN = ("household", "shop", "searchqa")


def names() -> list[str]:
    return sorted(REGISTRY)


def env_class(name: str) -> type[TextEnv]:
    if name not in REGISTRY:
        hint = get_close_matches(name, REGISTRY, n=1)
        extra = f" (did you mean {hint[0]!r}?)" if hint else ""
        raise ValueError(f"unknown env {name!r}{extra}; valid: {', '.join(names())}")
    module, cls = REGISTRY[name].split(":")
    return getattr(importlib.import_module(module), cls)


def has_admissible_switch(name: str) -> bool:
    """Whether env ``name`` takes ``show_admissible`` (it can list admissible commands)."""
    return "show_admissible" in inspect.signature(env_class(name).__init__).parameters


def env_options(name: str, level: str = "", show_admissible: bool | None = None, **options) -> dict:
    """Keyword options for :func:`make`: ``level`` and ``show_admissible`` are passed only to
    the envs that have them (an empty level or None means the env's default)."""
    if level and len(env_class(name).levels) > 1:
        options["level"] = level
    if show_admissible is not None and has_admissible_switch(name):
        options["show_admissible"] = show_admissible
    return options


def make(name: str, **options) -> TextEnv:
    """Build environment ``name`` with its keyword ``options`` (max_turns, invalid_penalty, ...)."""
    return env_class(name)(**options)


__all__ = [
    "BUILTIN", "Episode", "Hindsight", "REGISTRY", "StepResult", "Task", "TextEnv", "Turn",
    "env_class", "env_options", "has_admissible_switch", "make", "names", "run_episode",
]
