"""``searchr1``: Search-R1 questions answered against a running Search-R1 retrieval server.

Same protocol, observation format and exact-match reward as the built-in ``searchqa``
(both use :class:`envs.searchqa.protocol.SearchProtocolEnv`); only the questions and the
retriever are external:

* ``data`` (or env var ``SEARCHR1_DATA``): a JSONL or Parquet file in Search-R1's format
  (``question`` plus ``golden_answers``, or ``reward_model.ground_truth.target`` as in its
  processed ``train.parquet``/``test.parquet``), or several as ``"train=/d/train.parquet,
  test=/d/test.parquet"``.  An unnamed file's split is its stem (``test.parquet`` ->
  ``test``).  When rows carry ``data_source`` (Search-R1's merged test file does), every
  source is also a split of its own (``nq``, ``hotpotqa``, ...).  As in Search-R1's data
  processing, a question without a trailing ``?`` gets one.
* ``url`` (or env var ``SEARCHR1_URL``): the server's ``/retrieve`` endpoint, e.g.
  ``http://127.0.0.1:8000/retrieve``, spoken to with ``{"queries": [q], "topk": k,
  "return_scores": true}`` (see :mod:`envs.retrieval`).

Privileged facts a real server cannot give are ``None``: ``distance`` and ``plan``.
``state_key`` is the turn plus the sorted titles retrieved so far.  The scripted expert
knows only the gold answer: it searches the question once, then answers the first golden
answer (demonstrations for warm starts; not evidence-grounded).
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Sequence
from pathlib import Path

from envs.adapters import AdapterUnavailable, http_json, option_or_env, require_module
from envs.base import Task
from envs.retrieval import from_contents
from envs.searchqa.protocol import Doc, SearchProtocolEnv, action_text

ADAPTER = "searchr1"


def _read_rows(path: Path) -> list[dict]:
    if not path.is_file():
        raise AdapterUnavailable(
            f"{ADAPTER}: data file {str(path)!r} does not exist; pass data=PATH"
        )
    if path.suffix == ".parquet":
        pq = require_module(ADAPTER, "pyarrow.parquet", "pyarrow")
        return pq.read_table(path).to_pylist()
    with path.open() as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _question(row: dict, where: str) -> tuple[str, list[str]]:
    question = str(row.get("question", "")).strip()
    answers = row.get("golden_answers")
    if answers is None:
        answers = ((row.get("reward_model") or {}).get("ground_truth") or {}).get("target")
    if isinstance(answers, str):
        answers = [answers]
    if not question or not answers:
        raise ValueError(
            f"{where}: a Search-R1 row needs 'question' and 'golden_answers' "
            f"(or reward_model.ground_truth.target); got keys {sorted(row)}"
        )
    return (question if question.endswith("?") else question + "?"), [str(a) for a in answers]


@functools.lru_cache(maxsize=4)
def load_splits(data: str) -> dict[str, tuple[tuple[str, tuple[str, ...]], ...]]:
    """``{split: ((question, answers), ...)}`` from a ``data`` spec (see module doc)."""
    splits: dict[str, list] = {}
    for part in filter(None, (p.strip() for p in data.split(","))):
        name, _, path = part.rpartition("=")
        path_obj = Path(path).expanduser()
        name = name or path_obj.stem
        for i, row in enumerate(_read_rows(path_obj)):
            question, answers = _question(row, f"{path}:{i + 1}")
            item = (question, tuple(answers))
            splits.setdefault(name, []).append(item)
            source = row.get("data_source")
            if source and source != name:
                splits.setdefault(str(source), []).append(item)
    return {name: tuple(items) for name, items in splits.items()}


def post_retrieve(url: str, queries: Sequence[str], topk: int, timeout_s: float) -> list[list[Doc]]:
    """POST ``queries`` to a Search-R1 ``/retrieve`` endpoint; [(title, text, score)] per query."""
    payload = {"queries": list(queries), "topk": topk, "return_scores": True}
    reply = http_json(ADAPTER, url, payload, timeout_s)
    try:
        return [[(*from_contents(item["document"]["contents"]), float(item.get("score", 0.0)))
                 for item in docs] for docs in reply["result"]]
    except (KeyError, TypeError) as exc:
        raise RuntimeError(
            f"{ADAPTER}: {url} did not answer in Search-R1's format ({exc!r})"
        ) from None


class SearchR1Env(SearchProtocolEnv):
    """Search-R1 questions + a Search-R1 retrieval server; see the module docstring."""

    name = "searchr1"

    def __init__(self, data: str | None = None, url: str | None = None, max_turns: int = 0,
                 invalid_penalty: float = 0.0, topk: int = 3, timeout_s: float = 30.0):
        super().__init__(max_turns=max_turns, invalid_penalty=invalid_penalty, topk=topk)
        self.url = option_or_env(ADAPTER, url, "SEARCHR1_URL", "url", "http://127.0.0.1:8000/retrieve")
        data = option_or_env(ADAPTER, data, "SEARCHR1_DATA", "data", "/data/nq_search/test.parquet")
        self.data = load_splits(data)
        self.splits = tuple(self.data)
        self.timeout_s = timeout_s
        self.titles: set[str] = set()

    def panel(self, split: str) -> list[Task]:
        self.check_split(split)
        return [Task(f"{self.name}/{split}/{i:05d}", self.name, split, question,
                     spec={"answers": list(answers)})
                for i, (question, answers) in enumerate(self.data[split])]

    def answers(self, task: Task) -> Sequence[str]:
        return task.spec["answers"]

    def on_reset(self, task: Task) -> None:
        self.titles = set()

    def retrieve(self, query: str) -> list[Doc]:
        docs = post_retrieve(self.url, [query], self.topk, self.timeout_s)[0]
        self.titles |= {title for title, _, _ in docs}
        return docs

    def state_key(self) -> str:
        return f"t{self.turn}|" + ";".join(sorted(self.titles))

    def distance_to_goal(self) -> int | None:
        return None

    def expert_action(self, epsilon: float = 0.0, rng: random.Random | None = None) -> str:
        """Search the question on the first turn, then answer the first golden answer; with
        probability ``epsilon`` answer a retrieved title instead (plausible but unverified)."""
        rng = rng or random.Random(f"{self.task.id}/expert/{self.turn}")
        if self.turn == 0:
            return action_text("search", self.task.instruction)
        wrong = sorted(self.titles - set(self.task.spec["answers"]))
        if wrong and rng.random() < epsilon:
            return action_text("answer", rng.choice(wrong))
        return action_text("answer", self.task.spec["answers"][0])

    def domain_description(self) -> str:
        return (
            "Search-augmented open-domain QA (Search-R1 protocol) over Wikipedia: the agent "
            "issues <search>query</search> calls that return the top passages inside "
            "<information>, then gives a short <answer>; exact match after normalisation "
            "decides success. Decisive errors: answering before the evidence is found, "
            "answering an intermediate (bridge) entity, or copying the wrong span."
        )

    def workflow(self, task: Task) -> list[str]:
        return [
            ("Split the question into the facts it needs; a multi-hop question needs one "
             "search per hop."),
            "Search each fact with a short query naming the entity and the relation.",
            "Take the needed entity or value from the retrieved passages; search again if absent.",
            ("Answer with the shortest exact span (a name, date or number) inside "
             "<answer></answer>."),
        ]
