"""Deck rules of the built-in ``ezpoints`` environment: a lesson that transfers across deals.

With the second card face down (``hidden_cards=1``) on gym_cards' deck, the oracle's hindsight
names that deal's hidden card, and the next deal's card is another: nothing a policy could
internalize (issue 44).  A deck rule (``env.level``) fixes how the face-down card relates to
the visible one across every deal of a split:

* ``sum``: the face-down card always makes 12 with the visible card by ``+``;
* ``product``: always by ``*``;
* ``suit``: by the visible card's colour, ``+`` under a red card (hearts, diamonds) and ``*``
  under a black one (clubs, spades): two families of tasks in one split.

Every rule deals a visible 2, 3, 4 or 6 (:data:`AMBIGUOUS`): the values that allow both
operators, so without the lesson a player who reads the visible card guesses between them
(wins half the deals), and with it wins every one.  A task's ``spec["rule"]`` names its family
(``sum`` or ``product``): the oracle's Positive skill states that family's lesson
(:func:`lesson`: "In this deck the face-down card always makes 12 with the visible card by +
...") and nothing else of the deal beyond its progress line, so the skill written on one deal
holds on every deal of its family, and a skill of the other family names the wrong operator.

Regions.  One deal is four tokens (the visible value, the operator, the hidden value, ``=``);
the decisive error is the operator at turn 1, after one prefix turn that every player writes
the same way (the visible value), so a frozen-actor alignment run sees at most one prefix turn
per failure and no step advantage on it (its eight samples agree).  ``env.hands`` (N > 1)
plays N deals of one family in a row (:func:`hands_panel`; the episode is won when every
formula makes 12 and lost at the first that does not), so a failure at the second or third
deal comes after whole deals played right: its prefix holds operator turns whose step
advantage varies, ETRO's three regions.
"""

from __future__ import annotations

import random
import re
from functools import lru_cache

from envs.base import Task
from envs.ezpoints.cards import RANKS, SPLIT_SIZES, SUITS, TARGET, deal_task, value

RULES: tuple[str, ...] = ("sum", "product", "suit")
LEVELS: tuple[str, ...] = ("full", *RULES)  # "full": gym_cards' deck, no rule (the default)
AMBIGUOUS: tuple[int, ...] = (2, 3, 4, 6)  # visible values that allow both + and *
RED: tuple[str, ...] = ("hearts", "diamonds")
_SUITS_OF = {"red": RED, "black": ("clubs", "spades")}  # colour -> its suits, as the lesson names them
OPERATOR = {"sum": "+", "product": "*"}  # family -> the operator its face-down card needs

_LESSON = re.compile(r"the face-down card always makes 12 with the visible card by ([+*])")


def check_level(level: str, hidden_cards: int, hands: int = 1) -> None:
    """One-line errors: an unknown level, a rule without a face-down card, hands in a row
    without a rule (gym_cards' deck has no lesson for the later hands)."""
    if level not in LEVELS:
        raise ValueError(f"env.level: {level!r} is not a level of ezpoints; valid: {', '.join(LEVELS)}")
    if level != "full" and hidden_cards != 1:
        raise ValueError(f"env.level: {level!r} is a rule of the face-down card; it needs "
                         f"env.hidden_cards: 1, got {hidden_cards}")
    if hands != 1 and level == "full":
        raise ValueError(f"env.hands: {hands} hands in a row need a deck rule (env.level: "
                         f"{', '.join(RULES)}); gym_cards' deck has no lesson that holds on the next")


def colour(visible: tuple[str, str]) -> str:
    """The colour of card ``visible`` ((rank, suit)): ``red`` or ``black``, the word the suit
    rule's lesson conditions on."""
    return "red" if visible[1] in RED else "black"


def family(rule: str, visible: tuple[str, str]) -> str:
    """The family (``sum`` or ``product``) of a deal whose visible card is ``visible`` under
    ``rule``: the rule's own, or under ``suit`` the visible card's colour's."""
    if rule == "suit":
        return "sum" if colour(visible) == "red" else "product"
    if rule not in OPERATOR:
        raise ValueError(f"env.level: {rule!r} is not a deck rule; valid: {', '.join(RULES)}")
    return rule


def rule_deals(rule: str) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """The deals ``rule`` holds, by visible card: every visible 2, 3, 4 or 6 of any suit, each
    with the face-down cards (another card) that make 12 with it by its family's operator."""
    deck = [(r, s) for r in RANKS for s in SUITS]
    deals = {}
    for visible in deck:
        first = value(visible[0])
        if first not in AMBIGUOUS:
            continue
        op = OPERATOR[family(rule, visible)]
        wanted = TARGET - first if op == "+" else TARGET // first
        deals[visible] = [hidden for hidden in deck if hidden != visible and value(hidden[0]) == wanted]
    return deals


@lru_cache(maxsize=16)
def rule_panel(split: str, rule: str) -> tuple[Task, ...]:
    """The fixed deals of ``split`` under ``rule`` (``SPLIT_SIZES``): a visible card drawn
    uniformly from :func:`rule_deals` (so the suit rule's two families are even), then its
    face-down card, by ``random.Random(f"ezpoints/panel/{rule}/{split}")``; task ids
    ``ezpoints/<split>/<rule>-0007``, each with its family in ``spec["rule"]``."""
    if split not in SPLIT_SIZES:
        raise ValueError(f"unknown ezpoints split {split!r}; valid: {', '.join(SPLIT_SIZES)}")
    deals, rng = rule_deals(rule), random.Random(f"ezpoints/panel/{rule}/{split}")
    visible = [rng.choice(list(deals)) for _ in range(SPLIT_SIZES[split])]
    picked = [(card, rng.choice(deals[card])) for card in visible]
    return tuple(deal_task(f"ezpoints/{split}/{rule}-{i:04d}", split, deal, family(rule, deal[0]))
                 for i, deal in enumerate(picked))


def lesson(rule: str, visible: tuple[str, str]) -> str:
    """The lesson of the family of a deal with ``visible`` showing under ``rule``, in words that
    hold on every deal of that family (no card of this deal)."""
    op = OPERATOR[family(rule, visible)]
    shown = colour(visible)
    when = f", with a {shown} card ({' or '.join(_SUITS_OF[shown])}) showing," if rule == "suit" else ""
    rest = "12 minus it" if op == "+" else "12 divided by it"
    return (f"In this deck{when} the face-down card always makes 12 with the visible card by {op}: "
            f"write the visible card's value, then {op}, then {rest}.")


def lesson_operator(skill: str | None) -> str | None:
    """The operator a hindsight's lesson names (:func:`lesson`'s words), or None."""
    match = _LESSON.search(skill or "")
    return match[1] if match else None


__all__ = ["AMBIGUOUS", "LEVELS", "OPERATOR", "RULES", "check_level", "colour", "family", "hands_panel", "lesson",
           "lesson_operator", "rule_deals", "rule_panel"]


def hands_panel(tasks: tuple[Task, ...], hands: int) -> tuple[Task, ...]:
    """Each task of ``tasks`` (one split, one rule) with the next ``hands - 1`` deals of its
    family in the split after it (cyclically) as later deals: ``spec["deals"]`` lists the
    card pairs in order, ``spec["cards"]`` stays the first deal's; ids gain ``/hands<N>``."""
    if hands == 1:
        return tasks
    by_family: dict[str | None, list[Task]] = {}
    place = []  # each task's index among its family's tasks
    for task in tasks:
        kin = by_family.setdefault(task.spec.get("rule"), [])
        place.append(len(kin))
        kin.append(task)
    out = []
    for task, i in zip(tasks, place, strict=True):
        kin = by_family[task.spec.get("rule")]
        deals = [kin[(i + j) % len(kin)].spec["cards"] for j in range(hands)]
        out.append(Task(f"{task.id}/hands{hands}", task.env, task.split, task.instruction,
                        {**task.spec, "deals": deals}))
    return tuple(out)
