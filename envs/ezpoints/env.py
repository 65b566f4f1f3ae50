"""The built-in ``ezpoints`` environment: build a formula equal to 12 from two cards.

RL4VLM's gym_cards EZPoints as a text environment (rules in ``envs.ezpoints.cards``): two
cards are dealt; each turn the agent writes one token, a card's value (``1`` .. ``10``; A
counts 1, J/Q/K count 10), ``+``, ``*`` or ``=``.  ``=`` ends the episode: reward 1 when the
formula uses both cards once and equals 12, else 0.  A token that is not admissible (a
number the cards do not hold or already used, an operator where a number must stand, ``=``
after an operator) or an unparseable response is an invalid step: reward
``-invalid_penalty``, "Nothing happens.", the formula unchanged, the episode continues.

Observations are text: what the last token did, the two cards by name ("Q of hearts"), the
formula so far and, with ``show_admissible`` (the default), the admissible tokens.  With
``hidden_cards=1`` the second card lies face down ("?") until the episode ends: the text, the
image and the admissible list (where the hidden card's value shows as "?") do not tell it, so
only a hindsight that names it (the oracle's workflow names both cards) can.  The same
state renders as an image (:meth:`EZPointsEnv.image`: the two cards and the formula, as
gym_cards shows them); with ``images=True`` every step's ``info["image"]`` holds it.

Splits ``train`` (1000 deals) and ``eval`` (200).  ``info`` carries ``state_key``,
``distance`` (the fewest tokens to a winning ``=``; ``UNREACHABLE`` = 99 once no completion
equals 12, e.g. after the wrong operator, or after an ``=`` that lost), ``plan``, ``valid``,
``action``, ``score``, ``formula`` and ``value`` (of the formula so far).  The expert writes
the first card, the operator that works, the second card, then ``=``.  With the cards face up
it uses only what the policy sees, so it is also the demonstrator.  With ``hidden_cards`` the
expert knows the face-down card; the demonstrator does not: it writes the visible card, guesses
an operator the visible card allows (2, 3, 4 and 6 allow both: 55% of the deals) and writes the
value that would make 12, and its thought says the card is face down.  With a skill that names
both cards (the oracle's does: "Read both cards (4 and 8)") it plays the cards the skill names.

Levels (``env.level``, :mod:`envs.ezpoints.rules`): ``full`` is gym_cards' deck (the default);
``sum``, ``product`` and ``suit`` are deck rules under which the face-down card follows a fixed
rule of the visible card across every deal, so the oracle's hindsight states a lesson that
transfers to the next deal ("the face-down card always makes 12 with the visible card by +").
They need ``hidden_cards=1``.  ``hands`` (N > 1) deals N hands in a row, each dealt once the
last made 12; the episode is won when the last one does and lost at the first that does not
(:func:`~envs.ezpoints.rules.hands_panel`; the turn budget and the distance count every hand).
Under a rule the skilled demonstrator follows the operator the skill's lesson names
(:func:`~envs.ezpoints.rules.lesson_operator`) on the visible card, and the unskilled one
guesses between the two operators every rule's visible card allows.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Sequence

from envs.base import StepResult, Task, TextEnv, Turn, parse_tagged, with_admissible
from envs.ezpoints.cards import (
    EQUALS,
    NUMBERS,
    RANKS,
    TARGET,
    TOKENS,
    UNREACHABLE,
    Formula,
    admissible,
    card_name,
    evaluate,
    panel,
    plan,
    unused,
    value,
    wins,
)
from envs.ezpoints.render import draw
from envs.ezpoints.rules import (
    LEVELS,
    check_level,
    colour,
    hands_panel,
    lesson,
    lesson_operator,
    rule_panel,
)

INVALID_OBSERVATION = "Nothing happens."
_WORDS = {"plus": "+", "add": "+", "times": "*", "x": "*", "\u00d7": "*", "multiply": "*",
          "equals": "=", "equal": "=", "==": "="}
_TOKEN_RE = re.compile(r"(?:(?:write|type|press|enter)\s+)?(\S+)")


def parse_token(response_text: str) -> str | None:
    """The token in a response (``1`` .. ``10``, ``+``, ``*``, ``=``), or None.

    Takes the last ``<action>...</action>`` span, lower-cases it, drops a trailing period
    and an optional leading verb ("write 10"); "plus", "times", "x" and "equals" are read as
    ``+``, ``*``, ``=``.  Anything else (several tokens, other numbers, card names) is
    None: an invalid step."""
    action = parse_tagged(response_text)
    if action is None:
        return None
    text = action.lower().strip()
    text = text[:-1] if len(text) > 1 and text.endswith(".") else text
    match = _TOKEN_RE.fullmatch(text)
    if not match:
        return None
    token = _WORDS.get(match[1], match[1])
    return token if token in TOKENS else None


class EZPointsEnv(TextEnv):
    """gym_cards EZPoints as text (module docstring).  One episode at a time."""

    name = "ezpoints"
    default_max_turns = 6
    splits = ("train", "eval")
    actions = TOKENS
    levels = LEVELS

    def __init__(
        self,
        max_turns: int = 0,
        invalid_penalty: float = 0.0,
        show_admissible: bool = True,
        images: bool = False,
        image_size: int = 300,
        hidden_cards: int = 0,
        level: str = "full",
        hands: int = 1,
    ):
        """``max_turns`` 0 = 6 (four tokens solve a deal); ``show_admissible``:
        observations end with the admissible tokens; ``images``: every step's
        ``info["image"]`` is the rendered table (``image_size`` square pixels);
        ``hidden_cards``: how many of the last cards lie face down until the episode ends
        (0 or 1); ``level``: the deck, ``full`` or a deck rule; ``hands``: deals in a row, 1 to
        5 (module docstring; ``max_turns`` 0 = 6 a hand)."""
        if hidden_cards not in (0, 1):
            raise ValueError(f"env.hidden_cards: {hidden_cards!r} is not valid; valid: 0, 1")
        if hands not in range(1, 6):
            raise ValueError(f"env.hands: {hands!r} is not valid; valid: 1 to 5")
        self.check_options(level=level, hidden_cards=hidden_cards, hands=hands)
        self.level, self.hands = level, hands
        super().__init__(max_turns=max_turns or self.default_max_turns * hands, invalid_penalty=invalid_penalty)
        self.hidden_cards = hidden_cards
        self.show_admissible = show_admissible
        self.images = images
        self.image_size = image_size
        self.cards: tuple[tuple[str, str], ...] = ()
        self.values: tuple[int, ...] = ()
        self.formula: Formula = ()
        self.deals: tuple = ()  # every hand's cards (the current one: self.hand)
        self.hand = 0
        self._committed: str | None = None  # the guesser's operator under a rule (its thought's)
        self.ended = False  # "=" written on the last hand, or on a lost one
        self.success = False
        self.done = False
        self._rng = random.Random("ezpoints/expert")

    # -- tasks -------------------------------------------------------------------------
    def panel(self, split: str) -> list[Task]:
        self.check_split(split)
        return list(hands_panel(panel(split) if self.level == "full" else rule_panel(split, self.level), self.hands))

    @classmethod
    def check_options(cls, level: str = "full", hidden_cards: int = 0, hands: int = 1, **options) -> None:
        """A deck rule needs the face-down card, hands in a row a deck rule
        (:func:`~envs.ezpoints.rules.check_level`)."""
        check_level(level, hidden_cards, hands)

    def family(self, task: Task) -> str | None:
        """Under a deck rule the task's family (``sum`` or ``product``): the deals whose
        hindsight states the same lesson; None on gym_cards' deck."""
        return task.spec.get("rule")

    # -- episode -----------------------------------------------------------------------
    def reset(self, task: Task, replay: Sequence[str] = ()) -> str:
        self.check_task(task)
        if "cards" not in task.spec:
            raise ValueError(f"task {task.id!r} spec lacks 'cards'; not an ezpoints task")
        self.task, self.turn, self.done = task, 0, False
        self.deals = tuple(task.spec.get("deals") or (task.spec["cards"],))
        self.ended, self.success = False, False
        self._deal(0)
        self._rng = random.Random(f"ezpoints/expert/{task.id}")
        return self.replay_actions(self._observe("The cards are dealt."), replay)

    def _deal(self, hand: int) -> None:
        self.hand, self.formula, self._committed = hand, (), None
        self.cards = tuple((str(r), str(s)) for r, s in self.deals[hand])
        self.values = tuple(value(r) for r, _ in self.cards)

    def step(self, response_text: str) -> StepResult:
        if not self.cards or self.done:
            raise RuntimeError("ezpoints: call reset(task) before step() (episode not running)")
        self.turn += 1
        token = self.parse_action(response_text)
        valid = token is not None and token in self.admissible_actions()
        reward = 0.0
        if not valid:
            message, reward = INVALID_OBSERVATION, -self.invalid_penalty
        elif token == EQUALS:
            won, message = wins(self.values, self.formula), self._verdict()
            if won and self.hand + 1 < len(self.deals):  # the next hand is dealt
                self._deal(self.hand + 1)
                message += f" Hand {self.hand + 1} of {len(self.deals)} is dealt."
            else:
                self.ended, self.success = True, won
                reward = 1.0 if won else 0.0
        else:
            self.formula += (token,)
            message = f"You write {token}."
        self.done = self.ended or self.turn >= self.max_turns
        info = {"state_key": self.state_key(), "distance": self.distance_to_goal(),
                "plan": self.optimal_plan(), "valid": valid, "action": token or "",
                "score": float(self.success), "formula": " ".join(self.formula),
                "value": evaluate(self.formula)}
        if self.images:
            info["image"] = self.image()
        return StepResult(self._observe(message), reward, self.done, self.success, info)

    def parse_action(self, response_text: str) -> str | None:
        return parse_token(response_text)

    def admissible_actions(self) -> list[str]:
        self._require()
        return [] if self.ended else admissible(self.values, self.formula)

    # -- privileged facts --------------------------------------------------------------
    def state_key(self) -> str:
        self._require()
        return f"{self.task.id}|h={self.hand}|f={','.join(self.formula)}|end={int(self.ended)}"

    def distance_to_goal(self) -> int:
        """The fewest tokens to a winning ``=`` (0 once won); ``UNREACHABLE`` (99) when no
        completion equals 12 or ``=`` ended the episode without success."""
        if self.ended:
            return 0 if self.success else UNREACHABLE
        rest = plan(self.values, self.formula)
        return UNREACHABLE if rest is None else len(rest) + 4 * (len(self.deals) - 1 - self.hand)

    def optimal_plan(self) -> list[str]:
        """The current hand's remaining tokens, then every later hand's four."""
        self._require()
        if self.ended or (rest := plan(self.values, self.formula)) is None:
            return []
        later = [plan(tuple(value(r) for r, _ in deal), ()) or () for deal in self.deals[self.hand + 1:]]
        return [*rest, *(t for hand in later for t in hand)]

    def expert_action(self, epsilon: float = 0.0, rng: random.Random | None = None) -> str:
        """The next token of the optimal plan; with probability ``epsilon`` instead (half
        and half) a uniformly random admissible token or one of
        :meth:`plausible_wrong_actions`.  With no plan (a lost formula) a random admissible
        token.  Without ``rng`` the env's own generator, reseeded per task."""
        rng = rng or self._rng
        steps = self.optimal_plan()
        if steps and not (epsilon > 0 and rng.random() < epsilon):
            return steps[0]
        wrong = self.plausible_wrong_actions() if steps and rng.random() < 0.5 else []
        return rng.choice(wrong or self.admissible_actions() or [EQUALS])

    def demo_action(self, history: Sequence[Turn], epsilon: float = 0.0,
                    rng: random.Random | None = None) -> str:
        """The expert with the cards face up; with a face-down card the guesser of the module
        docstring, which reads only the visible card and its own invalid tokens in ``history``
        (with probability ``epsilon`` a random token the table shows as admissible)."""
        if not self.hidden_cards:
            return self.expert_action(epsilon=epsilon, rng=rng)
        rng = rng or self._rng
        if epsilon > 0 and rng.random() < epsilon:
            return rng.choice([t for t in self._shown_admissible() if t != "?"] or [EQUALS])
        return self._guess(history, rng)

    def skilled_demo_action(self, history: Sequence[Turn], skill: str,
                            rng: random.Random | None = None) -> str:
        """With a face-down card: the plan for the two cards ``skill`` names (:func:`skill_values`;
        the skill, right or wrong, is followed), the guesser when it names none."""
        if not self.hidden_cards:
            return super().skilled_demo_action(history, skill, rng=rng)
        if (op := lesson_operator(skill)) is not None:
            return self._follow(op, history, rng or self._rng)
        named = skill_values(skill)
        steps = plan(named, self.formula) if named else None
        return steps[0] if steps else self._guess(history, rng or self._rng)

    def _guess(self, history: Sequence[Turn], rng: random.Random) -> str:
        """The observation-consistent guesser's next token (module docstring)."""
        first = self._visible_value()
        if not self.formula:  # under a rule it commits to an operator first: its thought names it
            self._committed = rng.choice([op for op, _ in completions(first)]) if self.level != "full" else None
            return str(first)
        if len(self.formula) == 1:
            return self._committed or rng.choice([op for op, _ in completions(first)] or [EQUALS])
        if len(self.formula) == 2:
            tried = {t.action for t in history if not t.valid}
            wanted = [str(x) for op, x in completions(first) if op == self.formula[1]]
            if wanted and wanted[0] not in tried:
                return wanted[0]
            return rng.choice([t for t in NUMBERS if t not in tried] or [EQUALS])
        return EQUALS

    def _follow(self, op: str, history: Sequence[Turn], rng: random.Random) -> str:
        """The skilled demonstrator under a deck rule: the visible value, the lesson's ``op``,
        the value that makes 12 with it by ``op``, ``=``; the guesser once the formula leaves
        that script or its value proved invalid (a lesson of another family)."""
        first = self._visible_value()
        wanted = dict(completions(first)).get(op)
        script = (str(first), op, str(wanted), EQUALS) if wanted else ()
        n, tried = len(self.formula), {t.action for t in history if not t.valid}
        if script and self.formula == script[:n] and script[n] not in tried:
            return script[n]
        return self._guess(history, rng)

    def _visible_value(self) -> int:
        return next(v for v, hidden in zip(self.values, self._hidden()) if not hidden)

    def plausible_wrong_actions(self) -> list[str]:
        """Admissible tokens after which 12 is out of reach: the other operator, ``=``
        before the formula is complete."""
        wrong = []
        for token in self.admissible_actions():
            if token == EQUALS:
                if not wins(self.values, self.formula):
                    wrong.append(token)
            elif plan(self.values, self.formula + (token,)) is None:
                wrong.append(token)
        return wrong

    def demo_thought(self, task: Task, skill: str | None = None) -> str:
        """What the cards are worth and the formula they make ("Q is 10 and 2 is 2: 10 + 2
        = 12."), read from the cards alone.  With a face-down card: from the visible card and
        the cards ``skill`` names, with both operators' results ("4 is 4 and 3 is 3 as the
        hindsight says: 4 + 3 = 7, 4 * 3 = 12."; cloned on the formula alone, SmolLM2 copied
        the cards from the skill but wrote "9 * 3 = 27" as often as not), or, with no skill
        naming them, the completions the visible card allows ("4 is 4, the other card is face
        down: 4 + 8 or 4 * 3 = 12.").  Under a deck rule one sentence with the lesson's operator
        or the one the guesser committed to ("4 is 4 and the face-down card makes 12 with it by
        +: 4 + 8 = 12."), so that the skill changes one token of the thought, the decisive one:
        when the skilled thought was another sentence ("... as the hindsight says"), SmolLM2's
        own no-skill samples never reached the token where the lesson decides, and distilling
        the skilled context onto them pushed down its reasoning's first comma by 9-13 nats
        instead (docs/results/learnable_lesson.md).  Under the suit rule the sentence names the
        visible card's colour before the operator ("4 is 4 and red, so the face-down card ..."):
        the word the lesson conditions on, written a few tokens before the token it decides, so
        that distilling the lesson can tie the operator to it (without it in the thought, OPD
        moved the operator on every deal alike and never by the suit).  Kept short: a response
        must fit the SmolLM2 example's ``rollout.max_new_tokens`` (64; these are at most 57
        SmolLM2 tokens), or behaviour cloning teaches a response the rollouts cut before its
        action."""
        on_table = self.cards and self.task is not None and self.task.id == task.id
        cards = list(self.cards) if on_table else [(str(r), s) for r, s in task.spec["cards"]]
        ranks = [r for r, _ in cards]
        op = lesson_operator(skill) if self.hidden_cards else None
        op = op or (self._committed if self.level != "full" and on_table else None)
        if op is not None and (wanted := dict(completions(value(ranks[0]))).get(op)):
            first = value(ranks[0])  # one sentence with the lesson or without: only the operator differs
            shown = f" and {colour(cards[0])}, so" if self.level == "suit" else " and"
            return (f"{ranks[0]} is {first}{shown} the face-down card makes {TARGET} with it by {op}: "
                    f"{first} {op} {wanted} = {TARGET}.")
        named = skill_values(skill) if self.hidden_cards else None
        if self.hidden_cards and not named:
            first = value(ranks[0])
            options = " or ".join(f"{first} {op} {x}" for op, x in completions(first))
            return f"{ranks[0]} is {first}, the other card is face down: {options} = {TARGET}."
        cards = list(zip(ranks, named or [value(r) for r in ranks]))
        worth = " and ".join(f"{r} is {v}" for r, v in cards)
        if named:  # both results, so that the operator is the one that reads 12, not a sum done silently
            a, b = named
            return f"{worth} as the hindsight says: {a} + {b} = {a + b}, {a} * {b} = {a * b}."
        solution = plan(tuple(v for _, v in cards), ()) or ()
        return f"{worth}: {' '.join(solution[:-1])} = {TARGET}." if solution else f"{worth}."

    # -- prompt pieces -----------------------------------------------------------------
    def system_prompt(self) -> str:
        return (
            "You are playing EZPoints. Two playing cards are dealt; write a formula that uses "
            f"each card's value exactly once and equals {TARGET}. A counts 1, number cards count "
            "their number, J, Q and K count 10. You write the formula one token per turn: a "
            "card's value (1 to 10), + or *, and finally = to submit it. Submitting ends the "
            "game: you win if the formula uses both cards and equals "
            f"{TARGET}.\n\n"
            "Respond with your reasoning inside <think>...</think> followed by exactly one "
            "token inside <action>...</action>, for example: <think>K is 10 and 2 is 2, so 10 "
            "+ 2 = 12.</think><action>10</action>\n\n"
            "A token that cannot stand here (a value no unused card has, an operator where a "
            f"number must stand, = after an operator) does nothing (\"{INVALID_OBSERVATION}\") "
            f"and still uses a turn; the game ends after {self.max_turns} turns."
        ) + (" The second card is dealt face down (shown as ?) and turned over when the game "
             "ends." if self.hidden_cards else "") + (
            f" You play {self.hands} hands in a row: a correct = deals the next hand, a wrong one "
            "ends the game, and you win when every hand makes 12." if self.hands > 1 else "") + (
            " In this deck the face-down card follows a fixed rule of the visible card that holds "
            "for every deal." if self.level != "full" else "")

    def task_instruction(self, task: Task) -> str:
        return f"Your task is to: {task.instruction}"

    def domain_description(self) -> str:
        return (
            "EZPoints (RL4VLM gym_cards): two playing cards, J/Q/K worth 10 and A worth 1; the "
            "agent writes a formula one token per turn (a card value, + or *, then =) that must "
            f"use both cards once and equal {TARGET}. Every deal has a solution: the two values "
            f"sum to {TARGET} or multiply to {TARGET}. Choosing the wrong operator, or writing "
            "= before both cards are used, makes the goal unreachable: that token is the "
            "decisive mistake. Misreading a face card's value and writing tokens that cannot "
            "stand there waste turns."
        ) + (" In this deck the face-down card makes 12 with the visible card by a fixed rule that "
             "holds for every deal (by + or by *; under the suit rule by the visible card's "
             "colour): a hindsight that states the rule tells the next deal's operator."
             if self.level != "full" else "")

    def workflow(self, task: Task) -> list[str]:
        """The oracle's Positive steps; under a deck rule the family's lesson instead of the
        deal's two cards, so that they hold on every deal of the family."""
        cards = [str(r) for r, _ in task.spec["cards"]]
        if self.level != "full":
            return [
                "Read the visible card's value: A is 1, number cards their number, J, Q and K are 10.",
                lesson(self.level, tuple(task.spec["cards"][0])),
                "Write = only once both cards are in the formula.",
            ]
        return [
            f"Read both cards ({' and '.join(cards)}) and their values: A is 1, number cards "
            "their number, J, Q and K are 10.",
            f"Check which operator makes {TARGET}: add the two values if they sum to {TARGET}, "
            f"multiply them if their product is {TARGET}.",
            "Write the first card's value, then the operator, then the second card's value, "
            "one token per turn.",
            "Write = only once both cards are in the formula.",
        ]

    # -- rendering ---------------------------------------------------------------------
    def render_text(self) -> str:
        """The cards and the formula so far (the text part of every observation)."""
        self._require()
        cards = ", ".join("? (face down)" if hidden else card_name(c)
                          for c, hidden in zip(self.cards, self._hidden()))
        formula = " ".join(self.formula + ((EQUALS,) if self.ended else ())) or "(empty)"
        hand = f"Hand {self.hand + 1} of {len(self.deals)}. " if len(self.deals) > 1 else ""
        return f"{hand}Cards: {cards}.\nFormula: {formula}"

    def image(self):
        """The table as a PIL image: the two cards and the formula (``image_size``)."""
        self._require()
        shown = self.formula + ((EQUALS,) if self.ended else ())
        cards = tuple(("?", "") if hidden else c for c, hidden in zip(self.cards, self._hidden()))
        return draw(cards, shown, self.image_size)

    def _observe(self, message: str) -> str:
        text = f"{message}\n{self.render_text()}"
        if not self.show_admissible or self.ended:
            return text
        return with_admissible(text, self._shown_admissible())

    def _hidden(self) -> list[bool]:
        """Which cards lie face down now: the last ``hidden_cards`` until the episode ends."""
        n = 0 if self.done else self.hidden_cards
        return [i >= len(self.cards) - n for i in range(len(self.cards))]

    def _shown_admissible(self) -> list[str]:
        """The admissible tokens as the table shows them: a number only a face-down card
        holds is listed as "?" (its value would give the card away)."""
        visible = Counter(v for v, hidden in zip(self.values, self._hidden()) if not hidden)
        left = visible - Counter(int(t) for t in self.formula if t.isdigit())
        shown = [t if not t.isdigit() or left[int(t)] else "?" for t in self.admissible_actions()]
        return list(dict.fromkeys(shown))

    def _verdict(self) -> str:
        shown = " ".join(self.formula)
        result = evaluate(self.formula)
        if wins(self.values, self.formula):
            return f"You write =. {shown} = {result}: correct!"
        if unused(self.values, self.formula):
            return f"You write =. {shown} = {result}, but not every card is used."
        return f"You write =. {shown} = {result}, not {TARGET}."

    def _require(self) -> None:
        if not self.cards:
            raise RuntimeError("ezpoints: call reset(task) first")


_NAMED_CARDS = re.compile(r"cards \((\S+) and (\S+)\)")


def skill_values(skill: str | None) -> tuple[int, int] | None:
    """The two card values a hindsight names in the workflow's words ("Read both cards (4 and
    8)", :meth:`EZPointsEnv.workflow`), or None when it names none."""
    match = _NAMED_CARDS.search(skill or "")
    if not match or not all(rank in RANKS for rank in match.groups()):
        return None
    return value(match[1]), value(match[2])


def completions(first: int) -> list[tuple[str, int]]:
    """The (operator, card value) pairs that make 12 with ``first``: 4 -> [("+", 8), ("*", 3)]."""
    pairs = [("+", TARGET - first), ("*", TARGET // first if TARGET % first == 0 else 0)]
    return [(op, x) for op, x in pairs if 1 <= x <= 10]


__all__ = ["INVALID_OBSERVATION", "EZPointsEnv", "completions", "parse_token", "skill_values"]
