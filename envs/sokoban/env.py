"""The built-in ``sokoban`` environment: push boxes onto targets on a small grid.

A generated 6x6 map (walls around, a few inner walls; ``envs.sokoban.levels``) holds the
player, one box (level ``1box``, the default) or two (``2box``) and as many targets.  Each
turn the agent moves ``up``, ``down``, ``left`` or ``right``; walking into a box pushes it
one cell when the cell behind it is free.  Reward 1 when every box is on a target (the
episode ends); a move that is blocked (a wall ahead, or a box that cannot be pushed), an
unparseable response or an unknown word is an invalid step: reward ``-invalid_penalty``,
"Nothing happens.", state unchanged, the episode continues.

Observations are text: what the last move did, the map in XSB notation (``#`` wall, ``_``
floor, ``.`` target, ``$`` box, ``*`` box on a target, ``@`` the player, ``+`` the player on
a target), the positions of the player, boxes and targets in words and, with
``show_admissible`` (the default), the admissible moves.  The same state renders as an image
(:meth:`SokobanEnv.image`, Pillow); with ``images=True`` every step's ``info["image"]`` holds
it, so a vision-language policy can read the image while the text path stays unchanged.

Splits ``train`` (1000 maps) and ``eval`` (200, disjoint), fixed per level.  ``info``
carries ``state_key``, ``distance`` (exact fewest moves to the goal from a breadth-first
search over every reachable state; ``UNREACHABLE`` = 99 in a dead end, where some box can no
longer reach a target), ``plan``, ``valid``, ``action``, ``score``, ``dead_end``, ``pushed``
and ``boxes_on_target``.  The expert follows the optimal plan; everything it uses is on the
map, so it is also the demonstrator.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from envs.base import StepResult, Task, TextEnv, parse_tagged, with_admissible
from envs.sokoban.levels import (
    LEVELS,
    MOVES,
    UNREACHABLE,
    Board,
    Solution,
    State,
    level_spec,
    move,
    panel,
    render_rows,
    solve,
    solved,
)
from envs.sokoban.render import draw

INVALID_OBSERVATION = "Nothing happens."
_ALIASES = {"u": "up", "d": "down", "l": "left", "r": "right", "north": "up", "south": "down",
            "west": "left", "east": "right"}
_MOVE_RE = re.compile(r"(?:(?:move|push|go|walk|step)\s+)?([a-z]+)")


def parse_move(response_text: str) -> str | None:
    """The move in a response (``up``, ``down``, ``left``, ``right``), or None.

    Takes the last ``<action>...</action>`` span, lower-cases it, drops a trailing period
    and an optional leading verb ("move up", "push left"); the single letters u/d/l/r and
    the compass words are accepted too.  Anything else is None (an invalid step)."""
    action = parse_tagged(response_text)
    if action is None:
        return None
    match = _MOVE_RE.fullmatch(action.lower().rstrip(".!").strip())
    if not match:
        return None
    word = _ALIASES.get(match[1], match[1])
    return word if word in MOVES else None


class SokobanEnv(TextEnv):
    """Sokoban on generated 6x6 maps (module docstring).  One episode at a time."""

    name = "sokoban"
    default_max_turns = 15
    splits = ("train", "eval")
    levels = tuple(LEVELS)
    actions = MOVES

    def __init__(
        self,
        max_turns: int = 0,
        invalid_penalty: float = 0.0,
        level: str = "1box",
        show_admissible: bool = True,
        images: bool = False,
        tile: int = 16,
    ):
        """``level``: ``1box`` (default) or ``2box``; ``max_turns`` 0 = the level's budget
        (15 for one box, 20 for two); ``show_admissible``: observations end with the
        admissible moves; ``images``: every step's ``info["image"]`` is the rendered map
        (``tile`` pixels per cell, 96x96 at the defaults)."""
        spec = level_spec(level)
        super().__init__(max_turns=max_turns or spec.max_turns, invalid_penalty=invalid_penalty)
        self.level = level
        self.show_admissible = show_admissible
        self.images = images
        self.tile = tile
        self.solution: Solution | None = None
        self.state: State | None = None
        self.done = False
        self._rng = random.Random("sokoban/expert")

    @property
    def board(self) -> Board:
        return self._require().board

    # -- tasks -------------------------------------------------------------------------
    def panel(self, split: str) -> list[Task]:
        self.check_split(split)
        return list(panel(split, self.level))

    # -- episode -----------------------------------------------------------------------
    def reset(self, task: Task, replay: Sequence[str] = ()) -> str:
        self.check_task(task)
        if "rows" not in task.spec:
            raise ValueError(f"task {task.id!r} spec lacks 'rows'; not a sokoban task")
        self.solution = solve(tuple(task.spec["rows"]))
        self.task, self.turn, self.done = task, 0, False
        self.state = self.solution.board.start
        self._rng = random.Random(f"sokoban/expert/{task.id}")
        return self.replay_actions(self._observe("You stand in the room."), replay)

    def step(self, response_text: str) -> StepResult:
        if self.state is None or self.done:
            raise RuntimeError("sokoban: call reset(task) before step() (episode not running)")
        self.turn += 1
        action = self.parse_action(response_text)
        result = move(self.board, self.state, action) if action else None
        pushed = bool(result and result[1])
        if result is None:
            message, success, reward = INVALID_OBSERVATION, False, -self.invalid_penalty
        else:
            self.state = result[0]
            success = solved(self.board, self.state)
            reward = 1.0 if success else 0.0
            message = self._message(action, pushed, success)
        self.done = success or self.turn >= self.max_turns
        distance = self.distance_to_goal()
        info = {"state_key": self.state_key(), "distance": distance,
                "plan": self.optimal_plan(), "valid": result is not None,
                "action": action or "", "score": float(success),
                "dead_end": distance >= UNREACHABLE, "pushed": pushed,
                "boxes_on_target": sum(b in self.board.targets for b in self.state[1])}
        if self.images:
            info["image"] = self.image()
        return StepResult(self._observe(message), reward, self.done, success, info)

    def parse_action(self, response_text: str) -> str | None:
        return parse_move(response_text)

    def admissible_actions(self) -> list[str]:
        """The moves that change the state (not blocked), in up/down/left/right order."""
        state = self._require_state()
        return [a for a in MOVES if move(self.board, state, a) is not None]

    # -- privileged facts --------------------------------------------------------------
    def state_key(self) -> str:
        player, boxes = self._require_state()
        return f"{self.task.id}|p={player}|b={','.join(map(str, boxes))}"

    def distance_to_goal(self) -> int:
        """Exact fewest moves to the goal; ``UNREACHABLE`` (99) in a dead end."""
        return self._require().dist(self._require_state())

    def optimal_plan(self) -> list[str]:
        return self._require().plan(self._require_state())

    def is_dead_end(self) -> bool:
        """Whether no sequence of moves solves the level from here (a box can no longer
        reach a target)."""
        return self.distance_to_goal() >= UNREACHABLE

    def expert_action(self, epsilon: float = 0.0, rng: random.Random | None = None) -> str:
        """The first move of the optimal plan (ties in up/down/left/right order); with
        probability ``epsilon`` instead (half and half) a uniformly random admissible move
        or one of :meth:`plausible_wrong_actions`.  In a dead end (no plan) a random
        admissible move.  Without ``rng`` the env's own generator, reseeded per task."""
        rng = rng or self._rng
        plan = self.optimal_plan()
        admissible = self.admissible_actions()
        if plan and not (epsilon > 0 and rng.random() < epsilon):
            return plan[0]
        wrong = self.plausible_wrong_actions() if plan and rng.random() < 0.5 else []
        return rng.choice(wrong or admissible or list(MOVES))

    def plausible_wrong_actions(self) -> list[str]:
        """Admissible moves that are not optimal here, pushes first (the mistakes that can
        end in a dead end)."""
        state = self._require_state()
        d = self.distance_to_goal()
        wrong = []
        for a in self.admissible_actions():
            nxt, pushed = move(self.board, state, a)
            if self._require().dist(nxt) >= d:
                wrong.append((not pushed, a))
        return [a for _, a in sorted(wrong)]

    def demo_thought(self, task: Task, skill: str | None = None) -> str:
        """The next push of the optimal plan from the current state, read off the map: which
        box, which way, and the cell to push it from ("Push the box at row 4, column 3 up
        from row 5, column 3."), so that the move itself only has to head for that cell.  At
        the start of an episode of another task, when solved, or in a dead end (no plan):
        the goal in one line."""
        boxes = len(solve(tuple(task.spec["rows"])).board.start[1])
        what = "the box onto the target" if boxes == 1 else "every box onto a target"
        goal = f"Goal: push {what}; never push a box into a corner."
        if self.state is None or self.task is None or self.task.id != task.id:
            return goal
        push = self.next_push()
        if push is None:
            return goal
        box, direction, stand = push
        return f"Push the box at {_cell(self.board, box)} {direction} from {_cell(self.board, stand)}."

    def next_push(self) -> tuple[int, str, int] | None:
        """(box cell, direction, cell the player pushes from) of the first push on the
        optimal plan from the current state, or None (solved or a dead end)."""
        board, state = self.board, self._require_state()
        for action in self.optimal_plan():
            nxt, pushed = move(board, state, action)
            if pushed:
                return state[0] + board.deltas[action], action, state[0]
            state = nxt
        return None

    # -- prompt pieces -----------------------------------------------------------------
    def system_prompt(self) -> str:
        return (
            "You are playing Sokoban. The map is a grid: # wall, _ floor, . target, $ box, "
            "* box on a target, @ you, + you standing on a target; row 1 is the top row and "
            "column 1 the leftmost column. Each turn you move one cell up, down, left or right; "
            "walking into a box pushes it one cell if the cell behind it is free. Boxes cannot "
            "be pulled, so a box pushed into a corner or against a wall with no target along "
            "it can never reach a target. Solve the puzzle (every box on a target) in as few "
            "moves as you can.\n\n"
            "Respond with your reasoning inside <think>...</think> followed by exactly one "
            "move inside <action>...</action>, for example: <think>The box must go down; I "
            "stand above it.</think><action>down</action>\n\n"
            "Moves: up, down, left, right. A move into a wall or a box that cannot be pushed "
            f"does nothing (\"{INVALID_OBSERVATION}\") and still uses a turn; the puzzle ends "
            f"after {self.max_turns} turns."
        )

    def task_instruction(self, task: Task) -> str:
        return f"Your task is to: {task.instruction}"

    def domain_description(self) -> str:
        return (
            "Sokoban on a small grid (6x6 with the outer walls). The agent moves up, down, left "
            "or right; moving into a box pushes it one cell if the cell behind is free; boxes "
            "cannot be pulled. The reward is 1 when every box stands on a target. A push that "
            "leaves a box in a corner or against a wall without a target (or jammed against "
            "another box) makes the puzzle unsolvable: that push is the decisive mistake. "
            "Walking into walls wastes turns; the turn budget is limited."
        )

    def workflow(self, task: Task) -> list[str]:
        board = solve(tuple(task.spec["rows"])).board
        boxes = board.start[1]
        box = "box" if len(boxes) == 1 else "boxes"
        where = "; ".join(f"box at {_cell(board, b)}" for b in boxes) + "; " + "; ".join(
            f"target at {_cell(board, t)}" for t in sorted(board.targets))
        return [
            f"Locate yourself, the {box} and the targets on the map ({where}).",
            "Plan each box's path to a target along free cells, away from corners and from "
            "walls that have no target on them.",
            "Walk around to the cell on the far side of the box from where it must go, "
            "without pushing it on the way.",
            "Push the box one cell at a time; whenever it has to change direction, walk around "
            "it to the new pushing side first.",
            "Stop pushing once it is on the target; never push a box into a corner.",
        ]

    # -- rendering ---------------------------------------------------------------------
    def render_text(self) -> str:
        """The map and the positions in words (the text part of every observation)."""
        board, (player, boxes) = self.board, self._require_state()
        rows = "\n".join(render_rows(board, (player, boxes)))
        box_words = ", ".join(_cell(board, b) for b in boxes)
        target_words = ", ".join(_cell(board, t) for t in sorted(board.targets))
        noun = ("box", "target") if len(boxes) == 1 else ("boxes", "targets")
        return (f"{rows}\nYou are at {_cell(board, player)}; {noun[0]}: {box_words}; "
                f"{noun[1]}: {target_words}.")

    def image(self):
        """The current map as a PIL image (``tile`` pixels per cell)."""
        return draw(self.board, self._require_state(), self.tile)

    def _observe(self, message: str) -> str:
        text = f"{message}\n{self.render_text()}"
        return with_admissible(text, self.admissible_actions()) if self.show_admissible else text

    @staticmethod
    def _message(action: str, pushed: bool, success: bool) -> str:
        if not pushed:
            return f"You move {action}."
        return f"You push the box {action}." + (" Every box is on a target." if success else "")

    # -- internals ---------------------------------------------------------------------
    def _require(self) -> Solution:
        if self.solution is None:
            raise RuntimeError("sokoban: call reset(task) first")
        return self.solution

    def _require_state(self) -> State:
        self._require()
        return self.state


def _cell(board: Board, i: int) -> str:
    return f"row {i // board.cols + 1}, column {i % board.cols + 1}"


__all__ = ["INVALID_OBSERVATION", "SokobanEnv", "parse_move"]
