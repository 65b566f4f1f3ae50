"""The privileged ``oracle`` hindsight writer (DESIGN.md, Writers).

``Oracle(env_factory).write(episode) -> Hindsight`` writes what a strong external
writer would, from the trajectory plus privileged state:

* **Positive skill** (ETRO Sec 3: "summarizes reusable task-solving strategies"; SEED's
  success workflow): the environment's abstract workflow for the task family
  (``env.workflow(task)``) followed by what this trajectory shows: the moves that brought
  it closer to the goal, how long it took against the optimum, and wasted turns.
* **Error turn** k: the first unrecovered decisive error of the distance trace
  (:func:`envs.base.error_turn`; ETRO App. "Boundary selection and recovery"); None for
  successes and for failures without one (ETRO: Positive guidance throughout).
* **Negative skill** (failures with a boundary only): the decision at turn k, its
  consequence (distance before/after, the observation it produced) and an executable
  alternative: the expert's action in that very state, reached with
  ``env.reset(task, replay=actions[:k])``.

Only the :class:`~envs.base.TextEnv` interface is used, so any environment that implements
it (household, shop, searchqa, adapters) works.  Phrasing varies between trajectories but is
seeded by the task id and the actions, so the same trajectory always gets the same text.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable

from envs.base import Episode, Hindsight, TextEnv, Turn, error_turn, without_admissible

_POSITIVE_HEADERS = (
    "Reusable workflow for tasks like \"{goal}\":",
    "How to solve tasks like \"{goal}\":",
    "Steps that work for \"{goal}\" and similar tasks:",
    "Strategy for this kind of task (\"{goal}\"):",
)
_NUMBERING = ("{i}. {step}", "Step {i}: {step}", "({i}) {step}")
_SUCCESS_NOTES = (
    "This run succeeded in {turns} turns (the shortest solution takes {optimal}).",
    "The episode was solved in {turns} turns; {optimal} is the minimum.",
)
_PROGRESS_NOTES = (
    "Moves that made progress here: {moves}.",
    "The useful moves in this episode were: {moves}.",
)
_WASTE_NOTES = (
    ("{wasted} of the turns changed nothing useful (invalid, repeated or off-path commands); "
     "keep every command aimed at the next step of the workflow."),
    "Avoid wasted turns: {wasted} commands here were invalid or did not move toward the goal.",
)
_NEGATIVE = (
    ("At turn {k} the agent chose \"{action}\". Consequence: {consequence} In that situation "
     "do \"{alternative}\" instead."),
    ("Decisive mistake at turn {k}: \"{action}\". {consequence} The correct move there was "
     "\"{alternative}\"."),
    ("Avoid \"{action}\" in a situation like turn {k}: {consequence} Do \"{alternative}\" "
     "instead, then continue with the workflow."),
)
_MAX_MOVES = 8
_MAX_QUOTE = 160


class Oracle:
    """Writes correct Positive/Negative skills and the true error turn from privileged state.

    ``env_factory`` builds a fresh environment of the episodes' kind (e.g.
    ``lambda: envs.make("household")``); one instance is made lazily and reused to replay
    trajectory prefixes.
    """

    kind = "oracle"

    def __init__(self, env_factory: Callable[[], TextEnv]):
        self._env_factory = env_factory
        self._env: TextEnv | None = None

    @property
    def env(self) -> TextEnv:
        if self._env is None:
            self._env = self._env_factory()
        return self._env

    def write(self, episode: Episode) -> Hindsight:
        """The hindsight of one finished trajectory; ``valid`` is False only when the
        replayed prefix does not reproduce the recorded state (a nondeterministic env)."""
        rng = random.Random("oracle|" + episode.task.id + "|" + "\x1f".join(episode.actions))
        positive = self._positive(episode, rng)
        k = error_turn(episode)
        negative, valid = "", True
        if k is not None:
            negative = self._negative(episode, k, rng)
            valid = negative is not None
            negative = negative or ""
        raw = json.dumps({"positive_skill": positive, "negative_skill": negative,
                          "error_turn": k}, ensure_ascii=False)
        return Hindsight(positive, negative, k if valid else None, valid, raw)

    # -- Positive ----------------------------------------------------------------------
    def _positive(self, episode: Episode, rng: random.Random) -> str:
        task, turns = episode.task, episode.turns
        goal = task.instruction
        numbering = rng.choice(_NUMBERING)
        lines = [rng.choice(_POSITIVE_HEADERS).format(goal=goal)]
        lines += [numbering.format(i=i, step=s) for i, s in enumerate(self.env.workflow(task), 1)]
        optimal = turns[0].distance_before if turns else None
        if episode.success and optimal is not None:
            lines.append(rng.choice(_SUCCESS_NOTES).format(turns=len(turns), optimal=optimal))
        moves = _progress_moves(turns[: error_turn(episode)])
        if moves:
            shown = moves[:_MAX_MOVES] + (["..."] if len(moves) > _MAX_MOVES else [])
            lines.append(rng.choice(_PROGRESS_NOTES).format(moves=" -> ".join(shown)))
        wasted = len(turns) - len(_progress_moves(turns))
        if wasted > 0:
            lines.append(rng.choice(_WASTE_NOTES).format(wasted=wasted))
        return "\n".join(lines)

    # -- Negative ----------------------------------------------------------------------
    def _negative(self, episode: Episode, k: int, rng: random.Random) -> str | None:
        turn = episode.turns[k]
        alternative = self._expert_at(episode, k)
        if alternative is None:
            return None
        action = turn.action or "(a response without a valid command)"
        consequence = (f"This moved the agent further from the goal ({turn.distance_before} -> "
                       f"{turn.distance_after} steps left) and it never got back to "
                       f"{turn.distance_before}; the environment answered "
                       f"\"{_quote(without_admissible(turn.next_observation))}\".")
        return rng.choice(_NEGATIVE).format(k=k, action=action, consequence=consequence,
                                            alternative=alternative)

    def _expert_at(self, episode: Episode, k: int) -> str | None:
        """The expert's action in the state before turn k (None if replay diverges)."""
        env = self.env
        env.reset(episode.task, replay=episode.actions[:k])
        if env.state_key() != episode.turns[k].state_key:
            return None
        return env.expert_action(epsilon=0.0, rng=random.Random(0))


def skill_moves(skill: str) -> list[str]:
    """The moves a Positive skill written by :class:`Oracle` names as the episode's progress
    (its "Moves that made progress here: a -> b." line), in order, without a trailing "..."
    of a cut list; [] when it names none.  How a demonstrator reads the skill it acts on."""
    for line in skill.splitlines():
        for note in _PROGRESS_NOTES:
            head, tail = note.split("{moves}")
            if line.startswith(head) and line.endswith(tail):
                moves = line[len(head):len(line) - len(tail)].split(" -> ")
                return [m for m in moves if m and m != "..."]
    return []


def _progress_moves(turns: list[Turn]) -> list[str]:
    """The chain of progress: valid turns that reached a new lowest distance (all valid
    turns where distances are unknown).  Detours and their undoing are left out."""
    best, moves = None, []
    for t in turns:
        if not t.valid:
            continue
        if t.distance_before is None or t.distance_after is None:
            moves.append(t.action)
            continue
        best = t.distance_before if best is None else best
        if t.distance_after < best:
            best = t.distance_after
            moves.append(t.action)
    return moves


def _quote(text: str) -> str:
    text = " ".join(text.split()).replace('"', "'")
    return text if len(text) <= _MAX_QUOTE else text[: _MAX_QUOTE - 3] + "..."
