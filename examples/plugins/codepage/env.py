"""``codepage``: fix the one wrong line of a short function, a multi-turn text environment.

A task is a page of code: ``f(a, b)`` computes three or four values, one per line, and
returns the last; one line has the wrong operator, so ``f`` misses the value the task asks
for.  Each turn the agent writes one command: ``run tests`` (the test names the line that
computes the first wrong value), ``fix line N`` (toggles line N between its written and its
correct operator: it repairs a wrong line and breaks a right one) or ``submit`` (ends the
episode: reward 1 when every line is right).  A command that is not one of these, or a line
that does not exist, is an invalid step (state unchanged).

Privileged facts (``oracle=True``): the distance to the goal is the number of wrong lines
plus the submit (99 after a failed submit: the episode is lost), so fixing a right line or
submitting too early is the decisive error the oracle writer finds; the expert fixes the
wrong lines in order and submits.  The demonstrator reads only the page and the test output:
it runs the tests, fixes the line they name (a fix reruns them) and submits once they pass.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from trainer.plugins import StepResult, Task, TextEnv, parse_tagged

OPS = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y}
LOST = 99  # distance after a failed submit: nothing can reach the goal any more
PANELS = {"train": 120, "eval_unseen": 24}
_FIX = re.compile(r"fix line (\d+)")


def make_page(seed: str) -> dict:
    """A task's page: lines ``(var, left, op, right)``, the wrong line, the test input and
    the value ``f`` must return."""
    rng = random.Random(seed)
    names, lines = ["a", "b"], []
    for var in "cdeg"[: rng.choice((3, 4))]:
        lines.append((var, names[-1], rng.choice(tuple(OPS)), rng.choice(("a", "b", "2", "3"))))
        names.append(var)
    a, b = rng.randint(2, 6), rng.randint(2, 6)
    while True:
        k = rng.randrange(len(lines))
        var, left, op, right = lines[k]
        wrong = rng.choice([o for o in OPS if o != op])
        written = [*lines[:k], (var, left, wrong, right), *lines[k + 1:]]
        got, want = run(written, a, b), run(lines, a, b)
        if got[k] != want[k] and got[-1] != want[-1]:  # the test names the wrong line itself
            return {"right": lines, "written": written, "wrong": k, "a": a, "b": b,
                    "want": want[-1]}


def run(lines: Sequence[tuple], a: int, b: int) -> list[int]:
    """The value each line computes for ``f(a, b)``."""
    env, out = {"a": a, "b": b}, []
    for var, left, op, right in lines:
        env[var] = OPS[op](env[left], env[right] if right in env else int(right))
        out.append(env[var])
    return out


class CodePageEnv(TextEnv):
    name = "codepage"
    splits = tuple(PANELS)
    default_max_turns = 6

    def __init__(self, max_turns: int = 0, invalid_penalty: float = 0.0):
        super().__init__(max_turns=max_turns, invalid_penalty=invalid_penalty)
        self.ops: list[str] = []
        self.tested, self.lost = False, False

    # -- tasks -------------------------------------------------------------------------
    def panel(self, split: str) -> list[Task]:
        self.check_split(split)
        tasks = []
        for i in range(PANELS[split]):
            page = make_page(f"codepage/{split}/{i}")
            tasks.append(Task(f"codepage/{split}/{i:04d}", self.name, split,
                              f"Fix f so that f({page['a']}, {page['b']}) returns {page['want']}.", page))
        return tasks

    # -- episode -----------------------------------------------------------------------
    def reset(self, task: Task, replay: Sequence[str] = ()) -> str:
        self.check_task(task)
        self.task, self.turn, self.done = task, 0, False
        self.ops = [op for _, _, op, _ in task.spec["written"]]
        self.tested, self.lost = False, False
        return self.replay_actions(self._observe("Tests: not run yet."), replay)

    def step(self, response_text: str) -> StepResult:
        if self.task is None or self.done:
            raise RuntimeError("codepage: call reset(task) before step()")
        self.turn += 1
        action = self.parse_action(response_text) or ""
        valid, success, message = action in self.admissible_actions(), False, "Nothing happens."
        if valid and action == "run tests":
            self.tested, message = True, self._test_report()
        elif valid and action == "submit":
            success = not self._wrong_lines()
            self.lost, self.done = not success, True
            message = "Submitted: the tests pass." if success else "Submitted: the tests fail."
        elif valid:
            n = int(_FIX.fullmatch(action).group(1))
            self._toggle(n - 2)
            self.tested, message = True, f"You rewrote line {n}. {self._test_report()}"
        self.done = self.done or self.turn >= self.max_turns
        reward = 1.0 if success else (0.0 if valid else -self.invalid_penalty)
        info = {"state_key": self.state_key(), "distance": self.distance_to_goal(), "valid": valid,
                "action": action if valid else "", "score": float(success), "plan": self._plan()}
        return StepResult(self._observe(message), reward, self.done, success, info)

    def parse_action(self, response_text: str) -> str | None:
        action = parse_tagged(response_text)
        return " ".join(action.lower().rstrip(".").split()) if action else None

    def admissible_actions(self) -> list[str]:
        return ["run tests", *(f"fix line {i + 2}" for i in range(len(self.ops))), "submit"]

    # -- privileged facts --------------------------------------------------------------
    def state_key(self) -> str:
        return f"{self.task.id}|{''.join(self.ops)}|{int(self.tested)}|{int(self.lost)}"

    def distance_to_goal(self) -> int:
        if self.lost:
            return LOST
        return 0 if self.done and not self._wrong_lines() else len(self._wrong_lines()) + 1

    def expert_action(self, epsilon: float = 0.0, rng: random.Random | None = None) -> str:
        """Fix the first wrong line, else submit; with probability ``epsilon`` a mistake:
        fixing a right line or submitting too early."""
        rng = rng or random.Random(f"codepage/expert/{self.task.id}/{self.turn}")
        if epsilon > 0 and rng.random() < epsilon:
            right = [f"fix line {i + 2}" for i in range(len(self.ops)) if i not in self._wrong_lines()]
            return rng.choice([*right, "submit"])
        return self._plan()[0]

    def demo_action(self, history, epsilon: float = 0.0, rng: random.Random | None = None) -> str:
        """From what the page and the test output show: run the tests, fix the line they name,
        submit once they pass."""
        rng = rng or random.Random(f"codepage/demo/{self.task.id}/{self.turn}")
        if epsilon > 0 and rng.random() < epsilon:
            return self.expert_action(epsilon=1.0, rng=rng)
        if not self.tested:
            return "run tests"
        first = self._first_wrong()
        return "submit" if first is None else f"fix line {first + 2}"

    def demo_thought(self, task: Task, skill: str | None = None) -> str:
        """What the last test output says, in one line (read off the observation)."""
        if self.task is None or self.task.id != task.id or not self.tested:
            return "Not tested."
        first = self._first_wrong()
        return "Tests pass." if first is None else f"Tests name line {first + 2}."

    # -- prompt pieces -----------------------------------------------------------------
    def system_prompt(self) -> str:
        return ("You fix a short Python function. Each turn write your reasoning inside "
                "<think>...</think> and one command inside <action>...</action>. Commands: "
                "run tests; fix line N (rewrites line N with the other operator it needs: it "
                "repairs a wrong line and breaks a right one; the tests then run again); submit "
                f"(ends the task: solved when every line is right). You have {self.max_turns} turns.")

    def domain_description(self) -> str:
        return ("A page of code: f(a, b) computes one value per line and one line has the wrong "
                "operator. Commands: run tests (names the line that computes the first wrong "
                "value), fix line N, submit. Fixing a line that was right breaks it; submitting "
                "before the tests pass loses the task: either is the decisive mistake.")

    def workflow(self, task: Task) -> list[str]:
        return ["Run the tests: they name the line that computes the first wrong value.",
                "Fix that line and no other.", "Submit once the tests pass."]

    # -- internals ---------------------------------------------------------------------
    def _wrong_lines(self) -> list[int]:
        right = [op for _, _, op, _ in self.task.spec["right"]]
        return [i for i, (op, want) in enumerate(zip(self.ops, right)) if op != want]

    def _toggle(self, i: int) -> None:
        """Line ``i`` (0 = the first computing line) between right and wrong: a wrong line gets
        its right operator, a right one its written wrong operator (or the first other one)."""
        written, right = self.task.spec["written"][i][2], self.task.spec["right"][i][2]
        if self.ops[i] != right:
            self.ops[i] = right
        else:
            self.ops[i] = written if written != right else next(op for op in OPS if op != right)

    def _plan(self) -> list[str]:
        if self.done:
            return []
        return [*(f"fix line {i + 2}" for i in self._wrong_lines()), "submit"]

    def _lines(self) -> list[tuple]:
        return [(v, left, op, r) for (v, left, _, r), op in zip(self.task.spec["right"], self.ops)]

    def _first_wrong(self) -> int | None:
        """The first line (0 = the first computing line) whose value the test finds wrong."""
        spec = self.task.spec
        got, want = run(self._lines(), spec["a"], spec["b"]), run(spec["right"], spec["a"], spec["b"])
        return next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), None)

    def _test_report(self) -> str:
        spec = self.task.spec
        got, want = run(self._lines(), spec["a"], spec["b"]), run(spec["right"], spec["a"], spec["b"])
        first = self._first_wrong()
        if first is None:
            return f"Tests: f({spec['a']}, {spec['b']}) returned {got[-1]}: pass."
        return (f"Tests: f({spec['a']}, {spec['b']}) returned {got[-1]}, expected {want[-1]}; "
                f"line {first + 2} computes the first wrong value.")

    def _observe(self, message: str) -> str:
        page = ["1 def f(a, b):", *(f"{i + 2}     {v} = {left} {op} {r}" for i, (v, left, op, r)
                                    in enumerate(self._lines())), f"{len(self.ops) + 2}     return "
                f"{self._lines()[-1][0]}"]
        return "\n".join(page) + "\n" + message
