"""Levels, panels and the exact solver of the built-in ``sokoban`` environment.

A *map* is a tuple of equal-length strings in XSB notation with ``_`` for floor:

    ``#`` wall, ``_`` floor, ``.`` target, ``$`` box, ``*`` box on a target,
    ``@`` player, ``+`` player on a target.

Every random choice comes from a ``random.Random`` seeded with a string
("sokoban/<level>/<split>/<index>/<attempt>") and the only hash is SHA-256 of the map text, so
maps and panels are identical across processes and ``PYTHONHASHSEED`` values.

* *Generation* (generate and verify): walls around a ``size`` x ``size`` grid, a few inner
  walls (floor kept connected), then targets, boxes (never on a target) and the player on
  distinct floor cells; the map is kept only when the breadth-first :func:`solve` finds a
  solution of ``Level.min_steps`` to ``Level.max_steps`` moves, so every level is solvable by
  construction.  A panel never repeats a map.
* *Splits*: a map belongs to the ``eval`` pool when the first byte of the SHA-256 of its text
  is below ``EVAL_POOL_BYTE`` (about one map in six), otherwise to the ``train`` pool; a split
  only takes maps of its pool, so no eval level is ever a training level.
* *Solver*: :func:`solve` enumerates every state reachable from the start (player cell, box
  cells) and runs a backward breadth-first search from the solved states: the exact number of
  moves to the goal for every reachable state.  A state from which no solved state is
  reachable is a *dead end* (some box can no longer reach a target: pushed into a corner,
  along a wall without a target, or against another box); its distance is ``UNREACHABLE``,
  so that the push that made it is a decisive error that nothing recovers
  (:func:`envs.base.first_unrecovered_error`).
"""

from __future__ import annotations

import hashlib
import random
from collections import deque
from dataclasses import dataclass
from functools import lru_cache

from envs.base import Task

UNREACHABLE = 99  # distance of a dead end (as shop's wrong purchase): larger than any plan
MOVES: tuple[str, ...] = ("up", "down", "left", "right")
SPLIT_SIZES: dict[str, int] = {"train": 1000, "eval": 200}
EVAL_POOL_BYTE = 43  # SHA-256 first byte below this: the eval pool (43/256, about 1 in 6)
WALL, FLOOR, TARGET, BOX, BOX_ON_TARGET, PLAYER, PLAYER_ON_TARGET = "#_.$*@+"


@dataclass(frozen=True)
class Level:
    """How a level's maps are generated: grid ``size`` (walls included), number of
    ``boxes`` (and targets), inner walls drawn from ``inner_walls``, optimal solution length
    between ``min_steps`` and ``max_steps`` moves, the default turn budget ``max_turns`` and
    the task-id prefix (``sokoban/<split>/<prefix><index>``)."""

    name: str
    size: int
    boxes: int
    inner_walls: tuple[int, ...]
    min_steps: int
    max_steps: int
    max_turns: int
    id_prefix: str


LEVELS: dict[str, Level] = {
    "1box": Level("1box", 6, 1, (0, 1, 1, 2, 2, 3), 3, 10, 15, ""),
    "2box": Level("2box", 6, 2, (0, 0, 1, 1, 2), 4, 14, 20, "b"),
}


def level_spec(level: str) -> Level:
    if level not in LEVELS:
        raise ValueError(f"unknown sokoban level {level!r}; valid: {', '.join(LEVELS)}")
    return LEVELS[level]


# -- maps and states ---------------------------------------------------------------------
@dataclass(frozen=True)
class Board:
    """The static part of a map: its ``rows`` x ``cols`` size, wall and target cells (cell
    index = row * cols + column), and the start state."""

    rows: int
    cols: int
    walls: frozenset[int]
    targets: frozenset[int]
    start: tuple[int, tuple[int, ...]]  # (player cell, sorted box cells)

    @property
    def deltas(self) -> dict[str, int]:
        return {"up": -self.cols, "down": self.cols, "left": -1, "right": 1}


State = tuple[int, tuple[int, ...]]


def parse_map(rows: tuple[str, ...] | list[str]) -> Board:
    """A :class:`Board` from XSB rows; raises ValueError for a malformed map."""
    rows = tuple(rows)
    if not rows or len({len(r) for r in rows}) != 1:
        raise ValueError(f"sokoban map rows must be non-empty and of equal length: {rows!r}")
    cols = len(rows[0])
    walls, targets, boxes, players = set(), set(), [], []
    for r, row in enumerate(rows):
        for c, ch in enumerate(row):
            i = r * cols + c
            if ch not in "#_.$*@+":
                raise ValueError(f"sokoban map: unknown cell {ch!r} at row {r}, column {c}")
            if ch == WALL:
                walls.add(i)
            if ch in (TARGET, BOX_ON_TARGET, PLAYER_ON_TARGET):
                targets.add(i)
            if ch in (BOX, BOX_ON_TARGET):
                boxes.append(i)
            if ch in (PLAYER, PLAYER_ON_TARGET):
                players.append(i)
    if len(players) != 1 or not boxes or len(boxes) != len(targets):
        raise ValueError(f"sokoban map needs one player and as many boxes as targets: {rows!r}")
    edge = {i for i in range(len(rows) * cols)
            if i // cols in (0, len(rows) - 1) or i % cols in (0, cols - 1)}
    if not edge <= walls:
        raise ValueError(f"sokoban map must be enclosed by walls: {rows!r}")
    return Board(len(rows), cols, frozenset(walls), frozenset(targets),
                 (players[0], tuple(sorted(boxes))))


def render_rows(board: Board, state: State) -> tuple[str, ...]:
    """The XSB rows of ``state`` on ``board``."""
    player, boxes = state
    box_set = set(boxes)
    out = []
    for r in range(board.rows):
        row = []
        for c in range(board.cols):
            i = r * board.cols + c
            on_target = i in board.targets
            if i in board.walls:
                row.append(WALL)
            elif i in box_set:
                row.append(BOX_ON_TARGET if on_target else BOX)
            elif i == player:
                row.append(PLAYER_ON_TARGET if on_target else PLAYER)
            else:
                row.append(TARGET if on_target else FLOOR)
        out.append("".join(row))
    return tuple(out)


def move(board: Board, state: State, action: str) -> tuple[State, bool] | None:
    """(next state, whether a box was pushed) after ``action``, or None when the move is
    blocked (a wall ahead, or a box ahead with a wall or another box behind it)."""
    player, boxes = state
    d = board.deltas[action]
    ahead = player + d
    if ahead in board.walls:
        return None
    if ahead not in boxes:
        return (ahead, boxes), False
    beyond = ahead + d
    if beyond in board.walls or beyond in boxes:
        return None
    return (ahead, tuple(sorted(beyond if b == ahead else b for b in boxes))), True


def solved(board: Board, state: State) -> bool:
    return all(b in board.targets for b in state[1])


# -- the exact solver --------------------------------------------------------------------
@dataclass(frozen=True)
class Solution:
    """Exact distances of every state reachable from a map's start: ``distance[state]`` is
    the fewest moves to a solved state; states missing from it are dead ends.
    ``best[state]`` is the first optimal move (ties broken in ``MOVES`` order)."""

    board: Board
    distance: dict[State, int]
    best: dict[State, str]
    reachable: int

    def dist(self, state: State) -> int:
        return self.distance.get(state, UNREACHABLE)

    def plan(self, state: State) -> list[str]:
        """The optimal remaining moves from ``state`` ([] when solved or a dead end)."""
        out = []
        while state in self.best:
            action = self.best[state]
            out.append(action)
            state = move(self.board, state, action)[0]
        return out


@lru_cache(maxsize=8192)
def solve(rows: tuple[str, ...]) -> Solution:
    """Breadth-first search over every state reachable from the map's start, then backward
    from the solved states (module doc)."""
    board = parse_map(rows)
    edges: dict[State, list[tuple[str, State]]] = {}
    parents: dict[State, list[State]] = {}
    queue = deque([board.start])
    edges[board.start] = []
    while queue:
        state = queue.popleft()
        out = edges[state]
        for action in MOVES:
            nxt = move(board, state, action)
            if nxt is None:
                continue
            out.append((action, nxt[0]))
            parents.setdefault(nxt[0], []).append(state)
            if nxt[0] not in edges:
                edges[nxt[0]] = []
                queue.append(nxt[0])
    distance = {s: 0 for s in edges if solved(board, s)}
    queue = deque(distance)
    while queue:
        state = queue.popleft()
        for parent in parents.get(state, ()):
            if parent not in distance:
                distance[parent] = distance[state] + 1
                queue.append(parent)
    best = {}
    for state, out in edges.items():
        d = distance.get(state)
        if d:
            best[state] = next(a for a, nxt in out if distance.get(nxt) == d - 1)
    return Solution(board, distance, best, len(edges))


# -- generation and panels ---------------------------------------------------------------
def generate(rng: random.Random, level: Level) -> tuple[str, ...]:
    """One random map of ``level`` (not yet verified): walls around, a few inner walls
    that keep the floor connected, targets, boxes off the targets, the player."""
    n = level.size
    inner = [r * n + c for r in range(1, n - 1) for c in range(1, n - 1)]
    walls = set()
    for cell in rng.sample(inner, rng.choice(level.inner_walls)):
        if _connected([i for i in inner if i not in walls and i != cell], n):
            walls.add(cell)
    floor = [i for i in inner if i not in walls]
    chosen = rng.sample(floor, 2 * level.boxes + 1)
    targets, boxes, player = chosen[: level.boxes], chosen[level.boxes : -1], chosen[-1]
    grid = [[WALL] * n for _ in range(n)]
    for i in floor:
        grid[i // n][i % n] = FLOOR
    for i in targets:
        grid[i // n][i % n] = TARGET
    for i in boxes:
        grid[i // n][i % n] = BOX
    grid[player // n][player % n] = PLAYER
    return tuple("".join(row) for row in grid)


def _connected(cells: list[int], n: int) -> bool:
    if not cells:
        return False
    todo, seen = [cells[0]], {cells[0]}
    free = set(cells)
    while todo:
        i = todo.pop()
        for j in (i - n, i + n, i - 1, i + 1):
            if j in free and j not in seen:
                seen.add(j)
                todo.append(j)
    return len(seen) == len(free)


def pool(rows: tuple[str, ...]) -> str:
    """The split pool of a map: ``eval`` or ``train`` (module doc)."""
    digest = hashlib.sha256("\n".join(rows).encode()).digest()
    return "eval" if digest[0] < EVAL_POOL_BYTE else "train"


def live_cells(board: Board) -> frozenset[int]:
    """Cells from which a lone box can still be pushed onto some target (the others are
    dead squares: corners and wall stretches without a target), found by pulling a box
    backwards from every target."""
    live, todo = set(board.targets), list(board.targets)
    while todo:
        cell = todo.pop()
        for d in board.deltas.values():
            # A box at ``cell`` can come from ``cell - d`` by a push in direction d, with
            # the player standing at ``cell - 2d``.
            before, player = cell - d, cell - 2 * d
            if before in board.walls or player in board.walls or before in live:
                continue
            if 0 <= player < board.rows * board.cols:
                live.add(before)
                todo.append(before)
    return frozenset(live)


def start_distance(rows: tuple[str, ...], limit: int) -> int | None:
    """The fewest moves that solve the map, by forward breadth-first search that stops at
    ``limit`` moves (None: unsolvable, or not within ``limit``).  Boxes never enter dead
    squares on the way (no solution passes through one)."""
    board = parse_map(rows)
    live = live_cells(board)
    if not all(b in live for b in board.start[1]):
        return None
    frontier, seen = [board.start], {board.start}
    for depth in range(limit + 1):
        if any(solved(board, s) for s in frontier):
            return depth
        nxt = []
        for state in frontier:
            for action in MOVES:
                step = move(board, state, action)
                if step is None or step[0] in seen:
                    continue
                if step[1] and not all(b in live for b in step[0][1]):
                    continue
                seen.add(step[0])
                nxt.append(step[0])
        if not nxt:
            return None
        frontier = nxt
    return None


def acceptable(rows: tuple[str, ...], level: Level) -> bool:
    """Whether a generated map is solvable within the level's solution-length range."""
    d = start_distance(rows, level.max_steps)
    return d is not None and d >= level.min_steps


def instruction(boxes: int) -> str:
    return ("push the box onto the target." if boxes == 1
            else f"push all {boxes} boxes onto the targets.")


@lru_cache(maxsize=8)
def panel(split: str, level: str = "1box") -> tuple[Task, ...]:
    """The fixed task list of ``split`` at ``level`` (``SPLIT_SIZES``), built once per
    process: task i takes the first acceptable map, of the split's pool and new to the
    panel, drawn from ``random.Random(f"sokoban/{level}/{split}/{i}/{attempt}")``."""
    spec_ = level_spec(level)
    if split not in SPLIT_SIZES:
        raise ValueError(f"unknown sokoban split {split!r}; valid: {', '.join(SPLIT_SIZES)}")
    tasks, seen = [], set()
    for i in range(SPLIT_SIZES[split]):
        attempt = 0
        while True:
            rows = generate(random.Random(f"sokoban/{level}/{split}/{i}/{attempt}"), spec_)
            attempt += 1
            if rows not in seen and pool(rows) == split and acceptable(rows, spec_):
                break
        seen.add(rows)
        task_id = f"sokoban/{split}/{spec_.id_prefix}{i:04d}"
        tasks.append(Task(task_id, "sokoban", split, instruction(spec_.boxes),
                          {"level": level, "rows": rows}))
    return tuple(tasks)


def custom_task(task_id: str, rows: list[str] | tuple[str, ...]) -> Task:
    """A hand-built task (tests, demos) from XSB rows (``_`` floor); the map must be
    well-formed but need not be solvable."""
    rows = tuple(rows)
    board = parse_map(rows)
    split = task_id.split("/")[1] if task_id.count("/") >= 2 else "custom"
    return Task(task_id, "sokoban", split, instruction(len(board.start[1])),
                {"level": "custom", "rows": rows})
