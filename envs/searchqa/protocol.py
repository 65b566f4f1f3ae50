"""Search-R1's interaction protocol, shared by the built-in ``searchqa`` env and the
``searchr1`` adapter (Jin et al. 2025, "Search-R1"; ETRO Appendix B.1).

A response holds ``<think>..</think>`` and then either ``<search>query</search>`` (the
environment answers ``<information>Doc 1(Title: "..") ..</information>`` with the top-k
passages) or ``<answer>..</answer>``, which ends the episode.  The *last* ``<search>`` /
``<answer>`` span of a response is the action (a response wrapped in the repository's
``<action>..</action>`` convention parses the same way).  Anything else is an invalid step:
penalty, Search-R1's "My previous action is invalid" message, the episode continues.

Exact match (Search-R1's ``qa_em``): lowercase, remove punctuation, remove the articles
a/an/the, collapse whitespace, then compare with each accepted answer.  Reward 1 on a match.
"""

from __future__ import annotations

import abc
import re
import string
from collections.abc import Sequence

from envs.base import StepResult, Task, TextEnv

TAG_RE = re.compile(r"<(search|answer)>(.*?)</\1>", re.DOTALL | re.IGNORECASE)
ARTICLES_RE = re.compile(r"\b(a|an|the)\b")
PUNCT_TABLE = str.maketrans("", "", string.punctuation)

INVALID_MESSAGE = (
    "My previous action is invalid. If I want to search, I should put the query between "
    "<search> and </search>. If I want to give the final answer, I should put the answer "
    "between <answer> and </answer>. Let's try again."
)

SYSTEM_PROMPT = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> "
    "first every time you get new information. After reasoning, if you find you lack some "
    "knowledge, you can call a search engine by <search> query </search> and it will return "
    "the top searched results between <information> and </information>. You can search as "
    "many times as your want. If you find no further external knowledge needed, you can "
    "directly provide the answer inside <answer> and </answer>, without detailed "
    "illustrations. For example, <answer> Beijing </answer>."
)

Doc = tuple[str, str, float]  # (title, text, score)


def normalize_answer(text: str) -> str:
    """Search-R1 / SQuAD normalisation: lower, strip punctuation, drop articles, squash spaces."""
    text = text.lower().translate(PUNCT_TABLE)
    return " ".join(ARTICLES_RE.sub(" ", text).split())


def exact_match(prediction: str, answers: Sequence[str]) -> bool:
    """True when ``prediction`` equals one of ``answers`` after :func:`normalize_answer`."""
    pred = normalize_answer(prediction)
    return any(pred == normalize_answer(a) for a in answers)


def parse_search_action(text: str) -> tuple[str, str] | None:
    """``("search" | "answer", content)`` of the last tagged span; None if there is none
    or its content is empty."""
    found = TAG_RE.findall(text)
    if not found:
        return None
    kind, content = found[-1]
    content = " ".join(content.split())
    return (kind.lower(), content) if content else None


def action_text(kind: str, content: str) -> str:
    """The canonical action string: ``<search>query</search>`` or ``<answer>text</answer>``."""
    if kind not in ("search", "answer"):
        raise ValueError(f"unknown action kind {kind!r}; valid: search, answer")
    return f"<{kind}>{content}</{kind}>"


def format_information(docs: Sequence[Doc]) -> str:
    """Search-R1's observation for retrieved ``docs``: ``Doc i(Title: "t") text`` lines."""
    lines = [f'Doc {i}(Title: "{title}") {text}' for i, (title, text, _) in enumerate(docs, 1)]
    body = "\n".join(lines) if lines else "No results found."
    return f"<information>{body}</information>"


class SearchProtocolEnv(TextEnv):
    """Episode logic of the Search-R1 protocol; subclasses supply retrieval and answers.

    Subclasses implement :meth:`retrieve`, :meth:`answers`, :meth:`on_reset` and
    :meth:`on_retrieved` (privileged bookkeeping) besides the TextEnv abstract methods.
    ``max_turns`` counts responses: the default 5 is Search-R1's ``max_turns=4`` retrieval
    rounds followed by its final answer rollout.
    """

    default_max_turns = 5

    def __init__(self, max_turns: int = 0, invalid_penalty: float = 0.0, topk: int = 3):
        super().__init__(max_turns=max_turns, invalid_penalty=invalid_penalty)
        if topk < 1:
            raise ValueError(f"topk must be >= 1, got {topk}")
        self.topk = topk
        self.done = False
        self.answered = False  # an <answer> ended the episode (right or wrong)
        self.success = False

    # -- subclass hooks ------------------------------------------------------------------
    @abc.abstractmethod
    def retrieve(self, query: str) -> list[Doc]:
        """The top ``self.topk`` passages for ``query``."""

    @abc.abstractmethod
    def answers(self, task: Task) -> Sequence[str]:
        """Accepted answers (aliases) of ``task``."""

    def on_reset(self, task: Task) -> None:
        """Clear per-episode privileged state."""

    def on_retrieved(self, query: str, docs: list[Doc]) -> None:
        """Record what a search retrieved (privileged bookkeeping)."""

    def plan(self) -> list[str] | None:
        """Remaining optimal actions (canonical strings), None when unknown."""
        return None

    # -- TextEnv -----------------------------------------------------------------------
    def parse_action(self, response_text: str) -> str | None:
        parsed = parse_search_action(response_text)
        return action_text(*parsed) if parsed else None

    def system_prompt(self) -> str:
        return SYSTEM_PROMPT

    def reset(self, task: Task, replay: Sequence[str] = ()) -> str:
        self.task, self.turn = task, 0
        self.done = self.answered = self.success = False
        self.on_reset(task)
        observation = f"Question: {task.instruction}"
        for action in replay:
            if self.done:
                raise ValueError(f"replay continues after the episode ended: {list(replay)!r}")
            observation = self.step(action).observation
        return observation

    def step(self, response_text: str) -> StepResult:
        if self.task is None or self.done:
            raise RuntimeError("step() called before reset() or after the episode ended")
        parsed = parse_search_action(response_text)
        self.turn += 1
        reward, observation = 0.0, ""
        if parsed is None:
            reward, observation = -self.invalid_penalty, INVALID_MESSAGE
        elif parsed[0] == "search":
            docs = self.retrieve(parsed[1])
            self.on_retrieved(parsed[1], docs)
            observation = format_information(docs)
        else:
            self.success = exact_match(parsed[1], self.answers(self.task))
            reward, self.done = float(self.success), True
            self.answered = True
        self.done = self.done or self.turn >= self.max_turns
        info = {
            "state_key": self.state_key(),
            "distance": self.distance_to_goal(),
            "plan": self.plan(),
            "valid": parsed is not None,
            "action": action_text(*parsed) if parsed else "",
            "score": float(self.success),
        }
        return StepResult(observation, reward, self.done, self.success, info)
