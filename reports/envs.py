"""The registry of environments as reports see them: display names, eval splits, columns.

Layouts never name an env or a split: they name *roles* (``success``, ``score``,
``datasets``, ``avg``) and this registry says, per env name (the run's ``env`` tag, i.e.
``env.name``), how the papers print the env, which ``eval/<split>/...`` metrics feed each
role and which paper columns (:data:`KIND_ROLES`) the env has:

* ``household`` (built-in, ALFWorld-like) -> "Household"; with ``env.level`` = ``small``
  "Household-S" (a level is part of the env config and gets its own columns);
* ``alfworld`` (adapter) -> "ALFWorld", split ``eval_out_of_distribution`` (the SEED /
  ETRO unseen panel), falling back to the offline panels' ``eval_unseen``;
* ``shop`` (built-in, WebShop-like) -> "Shop"; ``webshop`` (adapter) -> "WebShop", split
  ``test``; both give a score and a success column;
* ``searchqa`` (built-in) and ``searchr1`` (adapter) -> one column per QA dataset (each
  dataset is an eval split) and their macro average;
* ``sokoban`` -> "Sokoban" (level ``1box`` is its default and unnamed, ``2box`` ->
  "Sokoban-2box") and ``ezpoints`` -> "EZPoints", split ``eval``;
* :data:`ACROSS_ENVS` -> "Avg.": not an env but a layout's column of per-seed averages over
  the envs of a table (SEED's multimodal table, "Sokoban / EZPoints / Avg.").

An env name not in the registry still gets a success column (its first ``eval/<split>/
success`` metric), labelled with its name, so that a new adapter is never silently dropped.
This module reads run frames only (no envs/ import): the env packages may move freely.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import pandas as pd

SEARCHQA_DATASETS = (("nq", "NQ"), ("triviaqa", "TriviaQA"), ("popqa", "PopQA"),
                     ("hotpotqa", "HotpotQA"), ("2wiki", "2Wiki"), ("musique", "Musique"),
                     ("bamboogle", "Bamboogle"))
# kind -> the roles (paper columns) an env of that kind has, in column order.
KIND_ROLES = {"household": ("success",), "shop": ("score", "success"),
              "searchqa": ("datasets", "avg"), "generic": ("success",)}
ROLE_LABELS = {"success": "Succ.", "score": "Score", "avg": "Avg."}
LEVEL_PARAM = "env.level"
_FULL_LEVELS = ("", "full", "default", "none", "nan")


@dataclass(frozen=True)
class EnvInfo:
    """How reports treat one env name.

    ``kind`` picks the columns (KIND_ROLES); ``eval_splits`` lists the splits that stand for
    the env's held-out panel in preference order (the first with data is used);
    ``datasets`` are (split, column label) pairs of a QA env; ``levels`` maps an
    ``env.level`` value to the suffix of the display name (``small`` -> "-S");
    ``default_level``: the env's default level, which, like full size, is not named.
    """

    name: str
    display: str
    kind: str
    eval_splits: tuple[str, ...] = ()
    datasets: tuple[tuple[str, str], ...] = ()
    levels: Mapping[str, str] = field(default_factory=dict)
    default_level: str = ""

    def label(self, level: object = None) -> str:
        """Display name with the level suffix ("Household-S"); full size has none."""
        text = "" if level is None or (isinstance(level, float) and math.isnan(level)) \
            else str(level)
        if text.lower() in _FULL_LEVELS or text == self.default_level:
            return self.display
        return f"{self.display}-{self.levels.get(text, text)}"


ENVS: dict[str, EnvInfo] = {info.name: info for info in (
    EnvInfo("household", "Household", "household", ("eval_unseen", "eval_seen"),
            levels={"small": "S"}),
    EnvInfo("alfworld", "ALFWorld", "household",
            ("eval_out_of_distribution", "eval_unseen", "eval_in_distribution", "eval_seen")),
    EnvInfo("shop", "Shop", "shop", ("eval",)),
    EnvInfo("webshop", "WebShop", "shop", ("test", "eval")),
    EnvInfo("searchqa", "Search QA", "searchqa", datasets=SEARCHQA_DATASETS),
    EnvInfo("searchr1", "Search-R1 QA", "searchqa", datasets=SEARCHQA_DATASETS),
    EnvInfo("sokoban", "Sokoban", "generic", ("eval",), default_level="1box"),
    EnvInfo("ezpoints", "EZPoints", "generic", ("eval",)),
    EnvInfo("average", "Avg.", "generic"),
)}
# The pseudo env of a layout's cross-env average column (registered last: it sorts last).
ACROSS_ENVS = "average"
ENV_ORDER = tuple(ENVS)


def env_info(name: str) -> EnvInfo:
    """The registry entry of ``name``; an unknown name gets a generic success-only entry."""
    return ENVS.get(str(name)) or EnvInfo(str(name), str(name), "generic")


def env_key(name: str, level: object = None) -> str:
    """Identifier of an (env, level) panel in metric keys: ``household``, ``household-S``."""
    info = env_info(name)
    label = info.label(level)
    return info.name if label == info.display else f"{info.name}-{label[len(info.display) + 1:]}"


def eval_split(info: EnvInfo, columns: pd.Index | list[str], metric: str = "success") -> str | None:
    """The split whose ``eval/<split>/<metric>`` stands for ``info``'s held-out panel:
    the first of ``eval_splits`` present in ``columns``; for an unregistered env the first
    non-train split present; None when none is logged."""
    present = {c.split("/")[1] for c in columns
               if c.startswith("eval/") and c.count("/") == 2 and c.endswith(f"/{metric}")}
    for split in info.eval_splits:
        if split in present:
            return split
    if info.kind == "generic":
        rest = sorted(s for s in present if s != "train")
        return rest[0] if rest else None
    return None


def env_sort_key(name: str) -> tuple[int, str]:
    """Registry order first, unknown envs after, by name."""
    return (ENV_ORDER.index(name) if name in ENVS else len(ENV_ORDER), str(name))


# ---------------------------------------------------------------- task families

# ALFWorld's six task families as SEED's per-family table prints them, in that order; the
# key is the substring that names the family in an ALFWorld game path / task type.
FAMILIES = (("pick_two_obj", "Pick2"), ("look_at_obj", "Look"), ("clean_then", "Clean"),
            ("heat_then", "Heat"), ("cool_then", "Cool"), ("pick_and_place", "Pick"))
FAMILY_ORDER = ("Pick", "Look", "Clean", "Heat", "Cool", "Pick2")
# The household panels (and ALFWorld's offline panels built from them) cycle through the
# families in this order by task index (envs/household/world.py ``panel``); the small level
# (ids ``household/<split>/sNNNN``) cycles through its four families.
PANEL_CYCLE = ("Pick", "Look", "Clean", "Heat", "Cool", "Pick2")
SMALL_PANEL_CYCLE = ("Pick", "Clean", "Heat", "Cool")
HOUSEHOLD_KINDS = ("household",)


def task_family(env: str, task_id: str) -> str | None:
    """The ALFWorld family of a household-kind task from its id: the task type in an
    ALFWorld game path, else the index of a panel task (``household/<split>/<index>``,
    ``alfworld/<split>/<index>``); None for other envs or ids."""
    if env_info(env).kind not in HOUSEHOLD_KINDS:
        return None
    text = str(task_id)
    for key, name in FAMILIES:
        if key in text:
            return name
    tail = text.rpartition("/")[2]
    if tail.startswith("s") and tail[1:].isdigit():
        return SMALL_PANEL_CYCLE[int(tail[1:]) % len(SMALL_PANEL_CYCLE)]
    return PANEL_CYCLE[int(tail) % len(PANEL_CYCLE)] if tail.isdigit() else None
