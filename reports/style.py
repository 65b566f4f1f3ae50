"""How a report shows methods: their order, their labels, their colours and markers.

One place for all three, so that a method reads and looks the same in every table and
figure of a report (rliable's plot_utils and seaborn give each method one colour across
figures; DESIGN: "a colour and marker per method that stays the same").

* **Labels** are the papers' row names. A registered method's label is the ``label`` of its
  :class:`trainer.algos.methods.MethodSpec`; :data:`REPORTED_LABELS` names the rows that are
  not methods of this tool. A layout may override a label for its own table
  (``Layout.labels``: "SEED (full)" in SEED's ablation).
* **Order** is :data:`METHOD_ORDER`: the rows of the paper tables in the order they first
  appear in ``reports.layouts.LAYOUTS`` (ETRO Table 1 first); other methods (a plugin's
  among them) come after, by label. Within a method its variants are ordered by their text,
  numbers compared as numbers ("β=1" < "β=5" < "β=20").
* **Colours and markers**: :func:`styles` gives each label of a figure, in table order, a
  tab20 colour and a marker of its own.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from trainer.algos.methods import METHODS, is_builtin

# Rows that are not methods of this tool: results the papers report for methods it does not
# run (merged into a table from a CSV, ``hindsight report --external``), including SDAR,
# removed from the method table (trainer.algos.methods.REMOVED_METHODS) and reported only.
REPORTED_LABELS = {"opid": "OPID", "icsd": "ICSD", "sdar": "SDAR"}

# The rows of the paper tables, in the order they first appear in reports.layouts.LAYOUTS
# (tests/reports/test_style.py keeps the two in step).
METHOD_ORDER = (
    "grpo", "grpo_opsd", "skill_sd", "rlsd", "seed", "etro",
    "seed_no_sft", "seed_no_self_evolving", "seed_static", "seed_stale", "seed_constrained",
    "seed_writer_replay",
    "etro_global_positive", "etro_global_negative", "etro_global_both", "etro_positive_only",
    "etro_negative_only",
    "etro_suffix_positive", "etro_suffix_negative", "etro_random_boundary", "etro_neg_prefix",
    "etro_neg_suffix",
)
_RANK = {m: i for i, m in enumerate(METHOD_ORDER)}
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")


def plugin_methods() -> tuple[str, ...]:
    """The methods plugins registered (:mod:`trainer.plugins`), in the order they came: the
    rows a layout with ``plugins`` adds after its own, and after every built-in."""
    return tuple(name for name in METHODS if not is_builtin(name))


def method_labels(overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """Name -> label for every registered method and every reported row, ``overrides``
    (a layout's own labels) winning."""
    return {**{name: spec.label for name, spec in METHODS.items()}, **REPORTED_LABELS,
            **(overrides or {})}


def method_label(name: str, overrides: Mapping[str, str] | None = None) -> str:
    """The label of a method or reported row; an unknown name is shown as it is."""
    if overrides and name in overrides:
        return overrides[name]
    spec = METHODS.get(name)
    return spec.label if spec is not None else REPORTED_LABELS.get(name, name)


def variant_label(method: str, variant: str, labels: Mapping[str, str] | None = None) -> str:
    """Display label of a variant: the method's paper name plus its param text;
    "SEED (β=1)", and "SEED (full), β=1" when the name has parentheses already.
    ``labels`` override the method's own label (a layout's)."""
    name = method_label(method, labels)
    rest = variant[len(method):].strip()
    if not rest:
        return name
    if "(" in name and rest.startswith("(") and rest.endswith(")"):
        return f"{name}, {rest[1:-1]}"
    return f"{name} {rest}"


def row_label(row: str) -> str:
    """Display label of a method or of a variant, from its text alone ("seed (β=1)" ->
    "SEED (β=1)", "grpo" -> "GRPO")."""
    text = str(row)
    method = text.split(" (")[0].split(" [")[0]
    return variant_label(method, text) if method != row else method_label(row)


def method_rank(method: str) -> int:
    """Table order: the position in METHOD_ORDER, other methods after."""
    return _RANK.get(method, len(METHOD_ORDER))


def natural_key(text: str) -> tuple:
    """Sort key comparing the numbers in ``text`` as numbers ("β=5" before "β=20")."""
    parts = re.split(r"(\d+(?:\.\d+)?(?:e[-+]?\d+)?)", str(text))
    return tuple((1, float(p), "") if i % 2 else (0, 0.0, p) for i, p in enumerate(parts))


def table_order(ranked: Iterable[tuple[int, str]]) -> list[str]:
    """Labels of (method rank, label) pairs in table order: by rank, then by the label with
    its numbers compared as numbers; each label once."""
    return [lab for _, lab in sorted(set(ranked), key=lambda r: (r[0], natural_key(r[1])))]


def styles(labels: Sequence[str]) -> dict[str, dict]:
    """A colour and marker per label, distinct for up to 20 labels (tab20 colours, each
    with its own marker), in the given (table) order, so a method looks the same in every
    figure that lists the same labels."""
    import matplotlib  # deferred: the tables, which import this module, draw nothing

    colors = matplotlib.colormaps["tab20"].colors
    ordered = list(dict.fromkeys(labels))
    return {label: {"color": colors[(2 * i) % 20 + (2 * i) // 20 % 2],
                    "marker": MARKERS[i % len(MARKERS)]}
            for i, label in enumerate(ordered)}
