"""``searchqa``: a Search-R1-like search-augmented QA environment over a generated
encyclopedia of fictional entities (ETRO Sec. 4 "Search QA"; Search-R1, Jin et al. 2025).

* Knowledge base and passages: :mod:`envs.searchqa.kb` (core corpus of ~7,600 passages by
  default; ``n_passages=20000`` gives the benchmark-sized corpus with distractors).
* Question panels ``nq``, ``triviaqa``, ``popqa`` (single-hop), ``hotpotqa``, ``2wiki``,
  ``musique``, ``bamboogle`` (2-4 hops, compositional and comparison) and ``train``:
  :mod:`envs.searchqa.questions`.
* Protocol, exact match and rewards: :mod:`envs.searchqa.protocol`.  Retrieval: BM25
  (:class:`envs.retrieval.BM25Retriever`), top 3 passages.

Privileged facts (``info``), for a question with supporting facts f_1..f_n (its hops, each
stated by a canonical passage of its subject; a fact counts as *retrieved* once any passage
stating it has appeared in a search result):

* ``distance`` = (number of supporting facts not yet retrieved) + 1 for the answer while the
  episode is live; 0 after a correct answer; n + 2 after a wrong answer (terminal failure,
  worse than every live state, so a wrong answer is always a decisive error).  It equals
  ``len(plan)`` in live states.
* ``plan``: the expert's remaining actions: a ``<search>`` per unretrieved fact in solving
  order, then the ``<answer>``.
* ``state_key``: ``"t<turn>|<retrieved facts, sorted>"`` (+ ``|answered:right/wrong``).
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Sequence

from envs.base import Task
from envs.retrieval import BM25Retriever
from envs.searchqa.kb import CREATE_VERB, OCCUPATIONS, PUBLISH_VERB, RELATIONS, corpus
from envs.searchqa.protocol import Doc, SearchProtocolEnv, action_text
from envs.searchqa.questions import SPLITS, panels

QUERY = {  # the expert's query for fact (s, relation): names s and the relation's keyword
    "born_in": "{s} born", "birth_year": "{s} born", "occupation": "{s} profession",
    "educated_at": "{s} studied", "spouse": "{s} married", "country": "{s} city located",
    "mayor": "{s} mayor", "capital": "{s} capital", "language": "{s} official language",
    "founded_by": "{s} founded by", "founded_year": "{s} founded",
    "headquarters": "{s} headquarters", "creator": "{s} {create} by",
    "publisher": "{s} {publish} by", "release_year": "{s} {kind}",
}


@functools.lru_cache(maxsize=2)
def retriever(n_passages: int = 0) -> BM25Retriever:
    """The BM25 index over ``corpus(n_passages)`` (built once per process and size)."""
    return BM25Retriever(corpus(n_passages).documents())


def fact_query(subject: str, relation: str, kind: str = "") -> str:
    """The expert's search query for the fact ``(subject, relation)``; ``kind`` is the
    subject's kind (novel/film/album for works)."""
    return QUERY[relation].format(
        s=subject, kind=kind, create=CREATE_VERB.get(kind, ""), publish=PUBLISH_VERB.get(kind, "")
    )


class SearchQAEnv(SearchProtocolEnv):
    """Search-R1-style QA over the built-in corpus; see the module docstring.

    Options: ``max_turns`` (default 5 = 4 retrieval rounds + the answer), ``invalid_penalty``,
    ``topk`` (passages per search, 3), ``n_passages`` (0 = core corpus; 20000 = benchmark).
    """

    name = "searchqa"
    splits = SPLITS

    def __init__(self, max_turns: int = 0, invalid_penalty: float = 0.0, topk: int = 3,
                 n_passages: int = 0):
        super().__init__(max_turns=max_turns, invalid_penalty=invalid_penalty, topk=topk)
        self.n_passages = n_passages
        self.kb = corpus(n_passages)
        self.retriever = retriever(n_passages)
        self.facts: list[tuple[str, str, str]] = []
        self.retrieved: set[tuple[str, str]] = set()
        self._passage_facts = [set(p.facts) for p in self.kb.passages]

    # -- tasks -------------------------------------------------------------------------
    def panel(self, split: str) -> list[Task]:
        self.check_split(split)
        return [
            Task(f"searchqa/{split}/{i:04d}", self.name, split, q.text,
                 spec={"answers": list(q.answers), "kind": q.kind,
                       "facts": [list(f) for f in q.facts]})
            for i, q in enumerate(panels()[split])
        ]

    def answers(self, task: Task) -> Sequence[str]:
        return task.spec["answers"]

    # -- retrieval and privileged bookkeeping ----------------------------------------------
    def on_reset(self, task: Task) -> None:
        self.facts = [tuple(f) for f in task.spec["facts"]]
        self.retrieved = set()

    def retrieve(self, query: str) -> list[Doc]:
        hits = self.retriever.search_ids(query, self.topk)
        needed = {(s, r) for s, r, _ in self.facts}
        for idx, _ in hits:
            self.retrieved |= self._passage_facts[idx] & needed
        return [(self.kb.passages[i].title, self.kb.passages[i].text, score) for i, score in hits]

    def _missing(self) -> list[tuple[str, str]]:
        return [(s, r) for s, r, _ in self.facts if (s, r) not in self.retrieved]

    def state_key(self) -> str:
        facts = ";".join(sorted(f"{s}.{r}" for s, r in self.retrieved))
        end = f"|answered:{'right' if self.success else 'wrong'}" if self.answered else ""
        return f"t{self.turn}|{facts}{end}"

    def distance_to_goal(self) -> int | None:
        if self.answered:
            return 0 if self.success else len(self.facts) + 2
        return len(self._missing()) + 1

    def plan(self) -> list[str]:
        if self.answered:
            return []
        searches = [action_text("search", self._query(s, r)) for s, r in self._missing()]
        return searches + [action_text("answer", self.task.spec["answers"][0])]

    # -- expert ------------------------------------------------------------------------
    def _query(self, subject: str, relation: str) -> str:
        return fact_query(subject, relation, self.kb.entities[subject].kind)

    def expert_action(self, epsilon: float = 0.0, rng: random.Random | None = None) -> str:
        """The next step of :meth:`plan`; with probability ``epsilon`` a plausible-wrong
        query (another relation of the same subject, or the same relation of a look-alike
        entity) or a wrong answer (another value of the answer's type)."""
        if self.task is None or self.done:
            raise RuntimeError("expert_action() called before reset() or after the episode ended")
        rng = rng or random.Random(f"{self.task.id}/expert/{self.turn}")
        step = self.plan()[0]
        if rng.random() >= epsilon:
            return step
        missing = self._missing()
        if missing:
            return action_text("search", self._wrong_query(*missing[0], rng))
        return action_text("answer", self._wrong_answer(rng))

    def _wrong_query(self, subject: str, relation: str, rng: random.Random) -> str:
        others = [r for r, spec in RELATIONS.items() if spec.subject == RELATIONS[relation].subject
                  and r != relation and (subject, r) in self.kb.facts
                  and self._query(subject, r) != self._query(subject, relation)]
        if others and rng.random() < 0.5:
            return self._query(subject, rng.choice(others))
        entity = self.kb.entities[subject]
        lookalikes = [n for n in self.kb.by_type[entity.type]
                      if n != subject and self.kb.entities[n].kind == entity.kind
                      and (n, relation) in self.kb.facts]
        return self._query(rng.choice(lookalikes), relation)

    def _wrong_answer(self, rng: random.Random) -> str:
        answers = self.task.spec["answers"]
        kind = self.task.spec["kind"]
        if answers[0] in ("yes", "no"):
            return "no" if answers[0] == "yes" else "yes"
        if kind == "comparison":  # the other candidate
            return next(s for s, _, _ in self.facts if s != answers[0])
        _, relation, obj = self.facts[-1]
        if obj in self.kb.entities:
            pool = self.kb.by_type[self.kb.entities[obj].type]
            return rng.choice([n for n in pool if n != obj])
        if obj.isdigit():
            return str(int(obj) + rng.choice((-1, 1)) * rng.randint(1, 30))
        values = {v for (_, r), v in self.kb.facts.items() if r == relation}
        pool = sorted(values | set(OCCUPATIONS) if relation == "occupation" else values)
        return rng.choice([v for v in pool if v != obj])

    # -- prompt pieces -----------------------------------------------------------------
    def domain_description(self) -> str:
        return (
            "Search QA (Search-R1 protocol) over a fictional encyclopedia of people, cities, "
            "countries, organisations and works. The agent answers single-hop and multi-hop "
            "factual questions: each <search>query</search> returns the top 3 passages inside "
            "<information>, and <answer>text</answer> ends the episode; the answer is scored "
            "by exact match. There are at most 4 retrieval rounds plus the answer. Decisive "
            "errors: answering before every hop is resolved, answering with a bridge entity "
            "instead of the final one, copying the wrong entity or year from a passage; "
            "vague queries that do not name the entity waste turns."
        )

    def workflow(self, task: Task) -> list[str]:
        kind, hops = task.spec["kind"], len(task.spec["facts"])
        if kind == "single":
            return [
                "Identify the entity the question is about and the attribute it asks for.",
                ("Search with a short query naming the entity and the attribute "
                 "(e.g. 'NAME born', 'NAME founded by')."),
                "Read the passage titled with that entity and take the attribute from it.",
                "Answer with the exact name or value only, inside <answer></answer>.",
            ]
        if kind == "chain":
            return [
                (f"Decompose the question into {hops} lookups, innermost first: the entity "
                 "named in the question is the start."),
                ("Search the start entity with the first relation; read its passage to find "
                 "the bridge entity."),
                ("For each next relation, search the bridge entity's exact name plus the "
                 "relation keyword; never answer with a bridge entity."),
                "After the last lookup, answer with the final entity's exact name or value.",
            ]
        if kind == "comparison":
            return [
                ("Search each of the two entities with the compared attribute (year of birth, "
                 "founding or release), one search per entity."),
                "Compare the two years found in the passages.",
                "Answer with the earlier entity's name exactly as written in the question.",
            ]
        attribute = ("publisher/studio/label" if kind == "same_publisher"
                     else "birthplace and its country")
        return [
            f"Look up the {attribute} of the first entity, one search per hop.",
            f"Look up the {attribute} of the second entity the same way.",
            "Compare the two final values and answer yes or no.",
        ]


def search_throughput(n_passages: int = 20_000, n_queries: int = 2_000) -> dict[str, float]:
    """Measure BM25 searches per second on one core over ``corpus(n_passages)``.

    Queries are the expert's queries for the supporting facts of the ``train`` questions
    (cycled).  Building the index is reported separately and not part of the rate.
    """
    start = time.perf_counter()
    index = retriever(n_passages)
    build_s = time.perf_counter() - start
    kb = corpus(0)
    facts = [(s, r) for q in panels()["train"] for s, r, _ in q.facts]
    queries = [fact_query(s, r, kb.entities[s].kind) for s, r in facts[:n_queries]]
    queries = (queries * (n_queries // len(queries) + 1))[:n_queries]
    start = time.perf_counter()
    for query in queries:
        index.search_ids(query, 3)
    elapsed = time.perf_counter() - start
    return {"passages": float(len(index)), "queries": float(n_queries),
            "searches_per_s": n_queries / elapsed, "index_build_s": build_s}
