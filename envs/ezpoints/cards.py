"""Cards, formulas, panels and the exact planner of the built-in ``ezpoints`` environment.

The rules follow RL4VLM's gym_cards EZPoints: two playing cards are dealt; the agent writes a
formula one token per turn, a card's value (``1`` .. ``10``; A counts 1 and J, Q, K count
10), ``+``, ``*`` or ``=``; ``=`` ends the episode, which succeeds when the formula uses
both cards exactly once and equals 12.  As in gym_cards, every deal has a solution (the
cards sum to 12 or multiply to 12).

Grammar (what is admissible): a card value where a number may stand (at the start or after
an operator) and a card of that value is still unused; ``+`` or ``*`` after a number while a
card is unused; ``=`` after a number.  So every formula reads "a", "a op", "a op b" and the
deciding choices are the operator and when to write ``=``.

Every random choice comes from ``random.Random`` seeded with a string
("ezpoints/panel/<split>"), so panels are identical across processes and hash seeds.
"""

from __future__ import annotations

import random
from collections import Counter
from functools import lru_cache

from envs.base import Task

TARGET = 12
UNREACHABLE = 99  # distance once the formula can no longer reach 12 (or ended wrong)
RANKS: tuple[str, ...] = ("A", "2", "3", "4", "5", "6", "7", "8", "9", "10", "J", "Q", "K")
SUITS: tuple[str, ...] = ("hearts", "diamonds", "clubs", "spades")
OPERATORS: tuple[str, ...] = ("+", "*")
EQUALS = "="
NUMBERS: tuple[str, ...] = tuple(str(v) for v in range(1, 11))
TOKENS: tuple[str, ...] = NUMBERS + OPERATORS + (EQUALS,)
SPLIT_SIZES: dict[str, int] = {"train": 1000, "eval": 200}

Formula = tuple[str, ...]


def value(rank: str) -> int:
    """A card's value: A 1, number cards their number, J Q K 10."""
    if rank not in RANKS:
        raise ValueError(f"unknown rank {rank!r}; valid: {', '.join(RANKS)}")
    return 1 if rank == "A" else 10 if rank in ("J", "Q", "K") else int(rank)


def card_name(card: tuple[str, str]) -> str:
    """``("Q", "hearts")`` -> ``"Q of hearts"``."""
    return f"{card[0]} of {card[1]}"


def evaluate(formula: Formula) -> int | None:
    """The value of a complete formula (numbers and ``+`` / ``*``, products first); None
    when it is empty or ends with an operator."""
    if not formula or formula[-1] in OPERATORS:
        return None
    total, product = 0, 1
    for token in formula:
        if token == "+":
            total, product = total + product, 1
        elif token != "*":
            product *= int(token)
    return total + product


def unused(values: tuple[int, ...], formula: Formula) -> Counter:
    """Card values not yet written in ``formula`` (with multiplicity)."""
    return Counter(values) - Counter(int(t) for t in formula if t in NUMBERS)


def admissible(values: tuple[int, ...], formula: Formula) -> list[str]:
    """The admissible tokens after ``formula`` (module doc), numbers in card order first."""
    left = unused(values, formula)
    if not formula or formula[-1] in OPERATORS:
        return list(dict.fromkeys(str(v) for v in values if left[v]))
    return [*OPERATORS] * (sum(left.values()) > 0) + [EQUALS]


def wins(values: tuple[int, ...], formula: Formula) -> bool:
    """Whether writing ``=`` after ``formula`` succeeds: both cards used, value 12."""
    return not unused(values, formula) and evaluate(formula) == TARGET


@lru_cache(maxsize=65536)
def plan(values: tuple[int, ...], formula: Formula) -> tuple[str, ...] | None:
    """The shortest token list that finishes ``formula`` with success (``=`` included),
    first in admissible order on ties; None when no completion equals 12."""
    best = None
    for token in admissible(values, formula):
        if token == EQUALS:
            rest = (EQUALS,) if wins(values, formula) else None
        else:
            tail = plan(values, formula + (token,))
            rest = None if tail is None else (token, *tail)
        if rest is not None and (best is None or len(rest) < len(best)):
            best = rest
    return best


def solvable_deals() -> list[tuple[tuple[str, str], tuple[str, str]]]:
    """Every ordered pair of two different cards whose values sum or multiply to 12."""
    deck = [(r, s) for r in RANKS for s in SUITS]
    return [(a, b) for a in deck for b in deck
            if a != b and plan((value(a[0]), value(b[0])), ()) is not None]


def instruction() -> str:
    return (f"write a formula that uses both cards exactly once and equals {TARGET}, "
            "one token per turn, then =.")


@lru_cache(maxsize=4)
def panel(split: str) -> tuple[Task, ...]:
    """The fixed deals of ``split`` (``SPLIT_SIZES``), drawn uniformly from
    :func:`solvable_deals` by ``random.Random(f"ezpoints/panel/{split}")``.  Train and eval
    share the distribution (as in gym_cards: the skill is reading cards and composing the
    formula, not unseen cards)."""
    if split not in SPLIT_SIZES:
        raise ValueError(f"unknown ezpoints split {split!r}; valid: {', '.join(SPLIT_SIZES)}")
    deals = solvable_deals()
    rng = random.Random(f"ezpoints/panel/{split}")
    return tuple(deal_task(f"ezpoints/{split}/{i:04d}", split, rng.choice(deals))
                 for i in range(SPLIT_SIZES[split]))


def custom_task(task_id: str, first: tuple[str, str], second: tuple[str, str]) -> Task:
    """A hand-built deal (tests, demos); it need not be solvable."""
    value(first[0]), value(second[0])  # validates the ranks
    split = task_id.split("/")[1] if task_id.count("/") >= 2 else "custom"
    return deal_task(task_id, split, (tuple(first), tuple(second)))


def deal_task(task_id: str, split: str, deal, rule: str | None = None) -> Task:
    """A task of ``deal``; ``rule``: its family under a deck rule (:mod:`envs.ezpoints.rules`)."""
    cards = [list(card) for card in deal]
    spec = {"cards": cards} if rule is None else {"cards": cards, "rule": rule}
    return Task(task_id, "ezpoints", split, instruction(), spec)
