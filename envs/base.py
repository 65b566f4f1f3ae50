"""The multi-turn text environment interface.

Every environment (built-in or adapter) is a :class:`TextEnv`.  Episodes are text in, text
out: ``reset(task)`` returns the first observation, ``step(response_text)`` parses the
policy's response into an action, applies it and returns a :class:`StepResult`.  ``info``
carries privileged facts that the policy never sees but the oracle writer and the
diagnostics use:

* ``state_key``: a string that is equal for identical environment states of the same task
  (GiGPO anchor states);
* ``distance``: the optimal number of remaining steps to the goal (``None`` if unknown);
* ``plan``: the ground-truth remaining action plan (list of action strings);
* ``valid``: whether the response parsed into an admissible action;
* ``action``: the parsed action text (``""`` when unparseable);
* ``score``: the domain's graded score in [0, 1] (equals success for binary domains).

This module is pure Python: ``envs/`` never imports torch or the trainer.
"""

from __future__ import annotations

import abc
import difflib
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

ACTION_RE = re.compile(r"<action>(.*?)</action>", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class Task:
    """One task of one split, identified by a stable ``id`` ("household/eval_seen/0007").

    ``spec`` holds the environment's own description of the task (layout, goal, catalog
    item, question ...); it is excluded from hashing and equality so tasks compare by id.
    """

    id: str
    env: str
    split: str
    instruction: str
    spec: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)


@dataclass(frozen=True)
class StepResult:
    observation: str
    reward: float
    done: bool
    success: bool
    info: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class Turn:
    """One interaction turn u_t = (y_t, a_t, o_{t+1}) plus the privileged facts around it.

    ``observation`` is the observation the policy saw *before* acting; ``next_observation``
    is what the environment returned.  ``state_key``/``distance_before`` describe the state
    before the action, ``distance_after`` the state after it.
    """

    observation: str
    response: str
    action: str
    valid: bool
    reward: float
    next_observation: str
    state_key: str
    distance_before: int | None
    distance_after: int | None
    info: Mapping[str, Any] = field(default_factory=dict)
    # the image of ``observation`` (a PIL image) when the env renders images, else None
    image: Any = None


@dataclass
class Episode:
    """A finished (or truncated) trajectory of one task."""

    task: Task
    turns: list[Turn]
    success: bool
    score: float
    first_observation: str

    @property
    def actions(self) -> list[str]:
        return [t.action for t in self.turns]

    @property
    def total_reward(self) -> float:
        return sum(t.reward for t in self.turns)

    @property
    def distances(self) -> list[int | None]:
        """d_0 .. d_T: distance before turn 0, then after each turn."""
        if not self.turns:
            return []
        return [self.turns[0].distance_before] + [t.distance_after for t in self.turns]


@dataclass(frozen=True)
class Hindsight:
    """What a writer returns for one trajectory (DESIGN.md, Writers).

    ``error_turn`` is the zero-based index of the first unrecovered decisive error, or
    ``None`` (k = infinity: Positive guidance throughout).  ``valid`` is False when the
    writer's output was malformed (no usable Positive skill); the trainer then applies the
    documented fallback.  ``boundary_valid`` is False when only the boundary part (error turn,
    Negative skill) was malformed: the Positive skill is kept and ``error_turn`` is None
    (ETRO: no valid boundary keeps Positive guidance throughout; SEED uses the skill).
    """

    positive_skill: str
    negative_skill: str = ""
    error_turn: int | None = None
    valid: bool = True
    raw: str = ""
    boundary_valid: bool = True


def lesson_donor(family: str | None, task_id: str, families: Sequence[str | None],
                 ids: Sequence[str], same: bool, rng: random.Random) -> int | None:
    """The index (into ``families`` / ``ids``) of a donor whose hindsight a task of ``family``
    and ``task_id`` is given in place of its own: with ``same`` one of the same family on
    another task (the lesson must transfer, not the task's own answer), else one of another
    family (the shuffled control).  None when none qualifies or the task has no family."""
    if family is None:
        return None
    pool = [j for j, (f, t) in enumerate(zip(families, ids, strict=True))
            if f is not None and ((f == family and t != task_id) if same else f != family)]
    return rng.choice(pool) if pool else None


def lesson_donors(families: Sequence[str | None], ids: Sequence[str], same: bool,
                  seed: str) -> list[int | None]:
    """:func:`lesson_donor` of every item among the others, drawn by ``random.Random(seed)``
    (a rerun pairs the same items)."""
    rng = random.Random(seed)
    return [lesson_donor(f, t, families, ids, same, rng) for f, t in zip(families, ids, strict=True)]


def first_unrecovered_error(distances: Sequence[int | None], success: bool) -> int | None:
    """The first unrecovered decisive error turn of a finished trajectory, or ``None``.

    ``distances`` is d_0, ..., d_T where d_t is the optimal number of remaining steps to
    the goal before turn t (d_T after the last turn).  Turn t (zero-based) is a *decisive
    error* when it increased the distance, d_{t+1} > d_t.  It is *recovered* when some
    later state gets back to at least that distance, min_{s > t+1} d_s <= d_t.  The answer
    is the smallest t that is a decisive error and is not recovered; successful
    trajectories and trajectories whose failure involves no such turn (e.g. running out of
    turns while dithering) have none.  Unknown distances (``None``) never count as errors.
    """
    if success:
        return None
    d = list(distances)
    for t in range(len(d) - 1):
        before, after = d[t], d[t + 1]
        if before is None or after is None or after <= before:
            continue
        later = [x for x in d[t + 2 :] if x is not None]
        if not later or min(later) > before:
            return t
    return None


def error_turn(episode: Episode) -> int | None:
    """The true first unrecovered decisive error of ``episode`` (zero-based turn), or None:
    :func:`first_unrecovered_error` over its distance trace d_0 .. d_T."""
    return first_unrecovered_error(episode.distances, episode.success)

# How a policy writes its action: the action's text, or the number of a listed action.
ACTION_FORMATS = ("text", "numbered")
# How an env reads a written command that is not admissible as written: ``exact`` (an
# invalid step, the papers' rule) or ``nearest`` (the most similar admissible command with
# the same verb, when it is at least ACTION_MATCH_CUTOFF alike; see :func:`nearest_listed`).
ACTION_MATCHES = ("exact", "nearest")
ACTION_MATCH_CUTOFF = 0.8

# verl-agent's ALFWorld prompt (the one SEED, ETRO and GiGPO train with) ends every
# observation with this line; history and analyzer prompts keep only the part before it.
ADMISSIBLE_HEADER = "\nYour admissible actions of the current situation are: "


def with_admissible(observation: str, actions: Sequence[str], numbered: bool = False) -> str:
    """``observation`` followed by the admissible-actions line: ``['go to desk 1', ...].``,
    or with ``numbered`` ``[1: 'go to desk 1', 2: ...].`` (the numbered action format)."""
    listed = ", ".join(f"{i}: '{a}'" if numbered else f"'{a}'" for i, a in enumerate(actions, 1))
    return f"{observation}{ADMISSIBLE_HEADER}[{listed}]."


def pick_listed(text: str, actions: Sequence[str]) -> str | None:
    """The listed action that ``text`` picks by its 1-based number ("3"), or None when
    ``text`` is not a number of the list (the numbered action format)."""
    text = text.strip().rstrip(".")
    if not text.isdigit() or not 1 <= int(text) <= len(actions):
        return None
    return actions[int(text) - 1]


def nearest_listed(text: str, actions: Sequence[str],
                   cutoff: float = ACTION_MATCH_CUTOFF) -> str | None:
    """The listed action most like ``text`` (difflib's ratio of the two strings) among those
    with the same first word, when it is at least ``cutoff`` alike; ``text`` itself when it is
    listed; None otherwise.  Reads "take soapbar 2 from countertop 1" as "take soapbar 1 from
    countertop 1" when only that one is listed, never a "take" as a "go to"."""
    if text in actions:
        return text
    verb = text.split(" ", 1)[0]
    best, best_ratio = None, 0.0
    for action in actions:
        if action.split(" ", 1)[0] != verb:
            continue
        ratio = difflib.SequenceMatcher(None, text, action).ratio()
        if ratio >= cutoff and ratio > best_ratio:
            best, best_ratio = action, ratio
    return best


def without_admissible(observation: str) -> str:
    """``observation`` without its admissible-actions line (unchanged when it has none)."""
    return observation.split(ADMISSIBLE_HEADER, 1)[0]


def parse_tagged(text: str, pattern: re.Pattern = ACTION_RE) -> str | None:
    """The content of the last ``<action>...</action>`` span, stripped; None if absent."""
    found = pattern.findall(text)
    if not found:
        return None
    action = " ".join(found[-1].split())
    return action or None


def format_response(action: str, think: str = "") -> str:
    """The canonical response text for an action: ``<think>..</think><action>..</action>``."""
    return f"<think>{think}</think><action>{action}</action>"


class TextEnv(abc.ABC):
    """A multi-turn text environment.  Subclasses implement the abstract methods.

    Instances hold the state of one episode at a time; create one per parallel episode
    with :func:`envs.make`.  All randomness comes from ``random.Random`` objects seeded
    with strings, so panels and episodes are identical across processes and hash seeds.
    """

    name: str = "base"
    default_max_turns: int = 30
    splits: tuple[str, ...] = ("train",)
    # Sizes of the domain (``env.level``); the first is the default.
    levels: tuple[str, ...] = ("full",)
    # Whether observations come with an image (:meth:`image`); envs that render set it
    # from their ``images`` option.
    images: bool = False

    def __init__(self, max_turns: int = 0, invalid_penalty: float = 0.0):
        self.max_turns = max_turns or self.default_max_turns
        self.invalid_penalty = invalid_penalty
        self.task: Task | None = None
        self.turn = 0
        self.done = False

    # -- tasks -------------------------------------------------------------------------
    @abc.abstractmethod
    def panel(self, split: str) -> list[Task]:
        """The fixed, enumerated task list of ``split`` (never sampled at eval time)."""

    def check_task(self, task: Task) -> None:
        """Raise ValueError when ``task`` belongs to another env (reset's first check)."""
        if task.env != self.name:
            raise ValueError(f"task {task.id!r} belongs to env {task.env!r}, not {self.name!r}")

    @classmethod
    def check_options(cls, **options) -> None:
        """Raise a one-line ``ValueError`` when ``options`` (:func:`envs.make`'s keywords) do not
        go together; a config's resolution calls it before any env is built.  Default: none."""
        return None

    def family(self, task: Task) -> str | None:
        """The family of tasks that ``task`` shares a lesson with: a hindsight written on one
        task of a family holds on the others (EZPoints' deck rules), and one of another family
        does not (``hindsight diagnose skill --transfer``, the shuffled-skills control).  None:
        the env defines no families."""
        return None

    def check_split(self, split: str) -> None:
        if split not in self.splits:
            raise ValueError(
                f"unknown split {split!r} for env {self.name!r}; valid: {', '.join(self.splits)}"
            )

    # -- episode -----------------------------------------------------------------------
    @abc.abstractmethod
    def reset(self, task: Task, replay: Sequence[str] = ()) -> str:
        """Start ``task``; apply the actions in ``replay`` (recovery experiments); return
        the current observation text."""

    def replay_actions(self, observation: str, replay: Sequence[str]) -> str:
        """Apply the action texts of ``replay`` right after a reset whose observation is
        ``observation``; return the last observation.  Raises when the episode ends before
        the last action."""
        for i, action in enumerate(replay):
            if self.done:
                raise ValueError(f"replay of {self.task.id!r} ends the episode at action {i - 1}; "
                                 f"{len(replay) - i} actions left over")
            observation = self.step(self.response_for(action)).observation
        return observation

    def response_for(self, action: str, think: str = "") -> str:
        """The response a policy writes to take ``action`` (an action text) in the current
        state: :func:`format_response`; envs with another action format override it."""
        return format_response(action, think)

    @abc.abstractmethod
    def step(self, response_text: str) -> StepResult:
        """Parse ``response_text`` and apply it.  An unparseable or inadmissible action is
        an invalid step: reward ``-invalid_penalty``, state unchanged, episode continues."""

    def parse_action(self, response_text: str) -> str | None:
        return parse_tagged(response_text)

    def admissible_actions(self) -> list[str] | None:
        """The admissible actions in the current state, where the domain has them."""
        return None

    def image(self):
        """The current observation as an image (PIL) for envs that render one; None here."""
        return None

    # -- privileged facts --------------------------------------------------------------
    @abc.abstractmethod
    def state_key(self) -> str:
        """Key equal for identical states of the same task (GiGPO anchor states)."""

    @abc.abstractmethod
    def distance_to_goal(self) -> int | None:
        """Optimal number of remaining steps from the current state."""

    @abc.abstractmethod
    def expert_action(self, epsilon: float = 0.0, rng: random.Random | None = None) -> str:
        """The scripted expert's action for the current state; with probability
        ``epsilon`` a random or plausible-wrong action instead."""

    def demo_action(
        self, history: Sequence[Turn], epsilon: float = 0.0, rng: random.Random | None = None
    ) -> str:
        """The action of a demonstrator that uses only what the policy sees: the task, the
        observations and its own past actions in ``history`` (the turns played so far this
        episode).  Behaviour cloning on it teaches a policy something it can imitate.  With
        probability ``epsilon`` a random or plausible-wrong action instead, as in
        :meth:`expert_action`.  Defaults to :meth:`expert_action` for domains whose expert is
        already observation-consistent; domains whose expert uses hidden facts override it."""
        return self.expert_action(epsilon=epsilon, rng=rng)

    def skilled_demo_action(
        self, history: Sequence[Turn], skill: str, rng: random.Random | None = None
    ) -> str:
        """The action of the demonstrator with ``skill`` in its context: hindsight of this very
        task (the oracle's Positive skill of a clean episode of it), which the demonstrator acts
        on where the observation alone does not settle the action.  Behaviour cloning on both
        demonstrators teaches a policy that a skill in context carries information (SEED's and
        ETRO's teacher presupposes one that acts better when it reads hindsight).

        Default: :meth:`demo_action` without its ``epsilon`` mistakes, since the skill spells
        out the moves that solve the task (the text games, whose observation-consistent
        demonstrator errs only by chance).  A domain whose skill names hidden facts (where an
        object was) can override it to act on them."""
        return self.demo_action(history, epsilon=0.0, rng=rng)

    def demo_thought(self, task: Task, skill: str | None = None) -> str:
        """The demonstrator's reasoning text (inside ``<think>``) for ``task`` in the current
        state (read only from what the policy sees, and ``skill`` when the demonstrator has
        one in its context); behaviour cloning teaches the policy to write it before each
        action.  Default: none."""
        return ""

    # -- prompt pieces -----------------------------------------------------------------
    @abc.abstractmethod
    def system_prompt(self) -> str:
        """The actor's instructions: the domain, the response format, the action grammar."""

    def task_instruction(self, task: Task) -> str:
        return task.instruction

    def format_observation(self, observation: str) -> str:
        return observation

    @abc.abstractmethod
    def domain_description(self) -> str:
        """The analyzer prompt's description of this domain (for hindsight writers)."""

    @abc.abstractmethod
    def workflow(self, task: Task) -> list[str]:
        """Abstract, reusable steps that solve tasks like ``task`` (used by the oracle
        writer for the Positive skill; phrasing may vary, content must be correct)."""


def play_turn(env: TextEnv, observation: str, response: str, image=None) -> tuple[Turn, StepResult]:
    """Apply ``response`` in ``env`` (whose current observation is ``observation``; ``image``
    its image when the caller rendered it already) and record the turn with the privileged
    facts before and after it."""
    key, d_before = env.state_key(), env.distance_to_goal()
    if image is None and env.images:
        image = env.image()
    result = env.step(response)
    info = dict(result.info)
    turn = Turn(
        observation=observation,
        response=response,
        action=info.get("action", ""),
        valid=bool(info.get("valid", True)),
        reward=result.reward,
        next_observation=result.observation,
        state_key=key,
        distance_before=d_before,
        distance_after=env.distance_to_goal(),
        info=info,
        image=image,
    )
    return turn, result


def finish_episode(task: Task, turns: list[Turn], first_observation: str, last: StepResult | None) -> Episode:
    """An :class:`Episode` from its turns and the last step result (None: no turn played)."""
    success = bool(last.success) if last is not None else False
    score = float(last.info.get("score", float(success))) if last is not None else 0.0
    return Episode(task=task, turns=turns, success=success, score=score, first_observation=first_observation)


def run_episode(
    env: TextEnv,
    task: Task,
    act: Callable[[TextEnv, str, list[Turn]], str],
    replay: Sequence[str] = (),
) -> Episode:
    """Play one episode: ``act(env, observation, turns_so_far) -> response_text``."""
    observation = first = env.reset(task, replay=replay)
    turns: list[Turn] = []
    result: StepResult | None = None
    while result is None or not result.done:
        turn, result = play_turn(env, observation, act(env, observation, turns))
        turns.append(turn)
        observation = result.observation
    return finish_episode(task, turns, first, result)


def expert_policy(epsilon: float = 0.0, seed: str = "expert") -> Callable[[TextEnv, str, list[Turn]], str]:
    """An ``act`` callable for :func:`run_episode` that follows ``env.expert_action``."""
    rng = random.Random(seed)

    def act(env: TextEnv, observation: str, turns: list[Turn]) -> str:
        return env.response_for(env.expert_action(epsilon=epsilon, rng=rng))

    return act


def demo_policy(
    epsilon: float = 0.0, seed: str = "demo", skill: str | None = None
) -> Callable[[TextEnv, str, list[Turn]], str]:
    """An ``act`` callable for :func:`run_episode` that follows ``env.demo_action`` on the
    turns played so far (the observation-consistent demonstrator), with ``env.demo_thought``
    as its reasoning.  With ``skill`` (hindsight of the task it plays, in its context) it
    follows ``env.skilled_demo_action`` instead, which acts on what the skill says."""
    rng = random.Random(seed)

    def act(env: TextEnv, observation: str, turns: list[Turn]) -> str:
        action = (env.skilled_demo_action(turns, skill, rng=rng) if skill
                  else env.demo_action(turns, epsilon=epsilon, rng=rng))
        return env.response_for(action, think=env.demo_thought(env.task, skill))

    return act
