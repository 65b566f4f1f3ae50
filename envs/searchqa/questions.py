"""Fixed question panels of ``searchqa`` over the core knowledge base.

Each panel mimics one of Search-R1's seven evaluation sets (ETRO Table 1) with the same
kind of reasoning, over fictional facts (see :mod:`envs.searchqa.kb`):

| split      | size | questions                                                          |
|------------|------|--------------------------------------------------------------------|
| nq         | 300  | single-hop, NQ style (lower case, no question mark)                |
| triviaqa   | 300  | single-hop, trivia style (the subject is described: "the novel 'X'")|
| popqa      | 300  | single-hop, PopQA relation templates ("What is X's occupation?")   |
| hotpotqa   | 300  | 2-hop bridge 60%, comparison 25%, same-publisher yes/no 15%        |
| 2wiki      | 300  | 2-hop compositional 40%, comparison 30%, 4-hop same-country yes/no 30% |
| musique    | 300  | composed chains: 2 hops 40%, 3 hops 35%, 4 hops 25%                |
| bamboogle  | 125  | 2-hop compositional questions starting from a work                 |
| train      | 4000 | a mixture of all of the above                                      |

A question's ``facts`` are its supporting facts ``(subject, relation, object)`` in solving
order; a *k-hop* question has k of them.  No question (kind + facts) appears in two splits.
Everything is drawn from ``random.Random`` streams seeded with strings, so panels are the
same in every process and under every ``PYTHONHASHSEED``.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from dataclasses import dataclass

from envs.searchqa.kb import (
    ORG_DESCRIPTION,
    PUBLISH_VERB,
    RELATIONS,
    KnowledgeBase,
    corpus,
    mix_labels,
)

Fact = tuple[str, str, str]  # (subject, relation, object)


@dataclass(frozen=True)
class Question:
    text: str
    answers: tuple[str, ...]
    kind: str  # single | chain | comparison | same_publisher | same_country
    facts: tuple[Fact, ...]

    @property
    def key(self) -> tuple:
        return (self.kind, self.facts)


# noun phrases "the <relation> of {s}" used to compose multi-hop questions
NOUN_PHRASE: dict[str, str | dict[str, str]] = {
    "born_in": "the birthplace of {s}",
    "educated_at": "the university attended by {s}",
    "spouse": "the spouse of {s}",
    "country": "the country where {s} is located",
    "mayor": "the mayor of {s}",
    "capital": "the capital of {s}",
    "founded_by": "the founder of {s}",
    "headquarters": "the city where {s} is headquartered",
    "creator": {"novel": "the author of {s}", "film": "the director of {s}",
                "album": "the musician who recorded {s}"},
    "publisher": {"novel": "the publisher of {s}", "film": "the studio that produced {s}",
                  "album": "the label that released {s}"},
}
QUESTION: dict[str, str | dict[str, str]] = {
    "born_in": "Where was {s} born?",
    "birth_year": "In what year was {s} born?",
    "occupation": "What is the profession of {s}?",
    "educated_at": "Which university did {s} attend?",
    "spouse": "Who is {s} married to?",
    "country": "In which country is {s} located?",
    "mayor": "Who is the mayor of {s}?",
    "capital": "What is the capital of {s}?",
    "language": "What is the official language of {s}?",
    "founded_by": "Who founded {s}?",
    "headquarters": "Where is {s} headquartered?",
    "founded_year": "In what year was {s} founded?",
    "creator": {"novel": "Who wrote {s}?", "film": "Who directed {s}?",
                "album": "Who recorded {s}?"},
    "publisher": {"novel": "Who published {s}?", "film": "Which studio produced {s}?",
                  "album": "Which label released {s}?"},
    "release_year": "In what year was {s} released?",
}
POPQA = {  # PopQA's relation templates where one exists
    "occupation": "What is {s}'s occupation?",
    "born_in": "In what city was {s} born?",
    "country": "In what country is {s}?",
    "capital": "What is the capital of {s}?",
    "creator": {"novel": "Who is the author of {s}?", "film": "Who was the director of {s}?",
                "album": "Who was the performer of {s}?"},
    "publisher": {"novel": "Who was the publisher of {s}?", "film": "Who was the producer of {s}?",
                  "album": "What is the record label of {s}?"},
}


def _phrase(table: dict, relation: str, kind: str, subject: str) -> str:
    entry = table[relation]
    return (entry[kind] if isinstance(entry, dict) else entry).format(s=subject)


def _describe(kb: KnowledgeBase, name: str) -> str:
    """Trivia-style description of an entity: "the chemist X", "the novel 'Y'"."""
    entity = kb.entities[name]
    if entity.type == "person":
        return f"the {kb.facts[(name, 'occupation')]} {name}"
    if entity.type == "org":
        return f"the {ORG_DESCRIPTION[entity.kind]} {name}"
    if entity.type == "work":
        return f"the {entity.kind} '{name}'"
    return f"the {entity.type} of {name}" if entity.type == "city" else f"the country {name}"


def _relations_of(kb: KnowledgeBase, name: str, entity_only: bool) -> list[str]:
    etype = kb.entities[name].type
    return [r for r, spec in RELATIONS.items()
            if spec.subject == etype and (name, r) in kb.facts
            and not (entity_only and spec.object is None)]


def _single(kb: KnowledgeBase, rng: random.Random, style: str) -> Question | None:
    etype = rng.choice(("person", "person", "city", "country", "org", "work", "work"))
    subject = rng.choice(kb.by_type[etype])
    relation = rng.choice(_relations_of(kb, subject, entity_only=False))
    obj, kind = kb.facts[(subject, relation)], kb.entities[subject].kind
    if style == "popqa" and relation in POPQA:
        text = _phrase(POPQA, relation, kind, subject)
    elif style == "trivia" and relation != "occupation":
        text = _phrase(QUESTION, relation, kind, _describe(kb, subject))
    else:
        text = _phrase(QUESTION, relation, kind, subject)
    if style == "nq":
        text = text.rstrip("?").lower()
    return Question(text, kb.answers(obj), "single", ((subject, relation, obj),))


def _chain(kb: KnowledgeBase, rng: random.Random, hops: int, start: str = "") -> Question | None:
    etype = start or rng.choice(
        ("person", "person", "city", "country", "org", "org", "work", "work"))
    subject = rng.choice(kb.by_type[etype])
    facts: list[Fact] = []
    seen = {subject}
    for hop in range(hops):
        options = [r for r in _relations_of(kb, subject, entity_only=hop < hops - 1)
                   if kb.facts[(subject, r)] not in seen]
        if not options:
            return None
        relation = rng.choice(options)
        obj = kb.facts[(subject, relation)]
        facts.append((subject, relation, obj))
        seen.add(obj)
        subject = obj
    phrase = facts[0][0]
    for subj, relation, _ in facts[:-1]:
        phrase = _phrase(NOUN_PHRASE, relation, kb.entities[subj].kind, phrase)
    subj, relation, obj = facts[-1]
    text = _phrase(QUESTION, relation, kb.entities[subj].kind, phrase)
    return Question(text, kb.answers(obj), "chain", tuple(facts))


COMPARISON = {
    "person": ("birth_year", "Who was born first, {a} or {b}?"),
    "org": ("founded_year", "Which was founded earlier, {a} or {b}?"),
    "work": ("release_year", "Which {kind} was released first, {a} or {b}?"),
}


def _comparison(kb: KnowledgeBase, rng: random.Random, index: _Index) -> Question | None:
    etype = rng.choice(tuple(COMPARISON))
    relation, template = COMPARISON[etype]
    a = rng.choice(kb.by_type[etype])
    kind = kb.entities[a].kind
    b = rng.choice(index.by_type_kind[(etype, kind)])
    ya, yb = int(kb.facts[(a, relation)]), int(kb.facts[(b, relation)])
    if a == b or ya == yb:
        return None
    text = template.format(a=a, b=b, kind=kind)
    facts = ((a, relation, str(ya)), (b, relation, str(yb)))
    return Question(text, kb.answers(a if ya < yb else b), "comparison", facts)


def _draw(rng: random.Random, pool: list[str], accept: Callable[[str], bool]) -> str | None:
    """A uniform draw from ``pool`` among the items ``accept`` allows (rejection sampling)."""
    for _ in range(50):
        item = rng.choice(pool)
        if accept(item):
            return item
    return None


def _same_publisher(kb: KnowledgeBase, rng: random.Random, index: _Index) -> Question | None:
    a = rng.choice(kb.by_type["work"])
    pa, kind = kb.facts[(a, "publisher")], kb.entities[a].kind
    same = rng.random() < 0.5
    pool = index.works_by_publisher[pa] if same else index.by_type_kind[("work", kind)]
    b = _draw(rng, pool, lambda w: w != a and (kb.facts[(w, "publisher")] == pa) == same)
    if b is None:
        return None
    noun = {"novel": "publisher", "film": "studio", "album": "label"}[kind]
    text = f"Were the {kind}s {a} and {b} {PUBLISH_VERB[kind]} by the same {noun}?"
    facts = ((a, "publisher", pa), (b, "publisher", kb.facts[(b, "publisher")]))
    return Question(text, ("yes" if same else "no",), "same_publisher", facts)


def _same_country(kb: KnowledgeBase, rng: random.Random, index: _Index) -> Question | None:
    a = rng.choice(kb.by_type["person"])
    ca = kb.facts[(a, "born_in")]
    ka = kb.facts[(ca, "country")]
    same = rng.random() < 0.5
    pool = index.people_by_country[ka] if same else kb.by_type["person"]
    b = _draw(rng, pool, lambda p: kb.facts[(p, "born_in")] != ca
              and (kb.facts[(kb.facts[(p, "born_in")], "country")] == ka) == same)
    if b is None:
        return None
    cb = kb.facts[(b, "born_in")]
    facts = ((a, "born_in", ca), (ca, "country", ka), (b, "born_in", cb),
             (cb, "country", kb.facts[(cb, "country")]))
    text = f"Were {a} and {b} born in the same country?"
    return Question(text, ("yes" if same else "no",), "same_country", facts)


class _Index:
    def __init__(self, kb: KnowledgeBase):
        self.works_by_publisher: dict[str, list[str]] = {}
        self.by_type_kind: dict[tuple[str, str], list[str]] = {}
        self.people_by_country: dict[str, list[str]] = {}
        for w in kb.by_type["work"]:
            self.works_by_publisher.setdefault(kb.facts[(w, "publisher")], []).append(w)
        for name, entity in kb.entities.items():
            self.by_type_kind.setdefault((entity.type, entity.kind), []).append(name)
        for p in kb.by_type["person"]:
            country = kb.facts[(kb.facts[(p, "born_in")], "country")]
            self.people_by_country.setdefault(country, []).append(p)


# split -> (size, [(weight, generator, kwargs)])
PANELS: dict[str, tuple[int, list[tuple[float, str, dict]]]] = {
    "nq": (300, [(1.0, "single", {"style": "nq"})]),
    "triviaqa": (300, [(1.0, "single", {"style": "trivia"})]),
    "popqa": (300, [(1.0, "single", {"style": "popqa"})]),
    "hotpotqa": (300, [(0.6, "chain", {"hops": 2}), (0.25, "comparison", {}),
                       (0.15, "same_publisher", {})]),
    "2wiki": (300, [(0.4, "chain", {"hops": 2}), (0.3, "comparison", {}),
                    (0.3, "same_country", {})]),
    "musique": (300, [(0.4, "chain", {"hops": 2}), (0.35, "chain", {"hops": 3}),
                      (0.25, "chain", {"hops": 4})]),
    "bamboogle": (125, [(1.0, "chain", {"hops": 2, "start": "work"})]),
    "train": (4000, [(0.15, "single", {"style": "nq"}), (0.15, "single", {"style": "trivia"}),
                     (0.15, "single", {"style": "popqa"}), (0.25, "chain", {"hops": 2}),
                     (0.1, "chain", {"hops": 3}), (0.05, "chain", {"hops": 4}),
                     (0.08, "comparison", {}), (0.04, "same_publisher", {}),
                     (0.03, "same_country", {})]),
}
EVAL_SPLITS = ("nq", "triviaqa", "popqa", "hotpotqa", "2wiki", "musique", "bamboogle")
SPLITS = ("train", *EVAL_SPLITS)


def _generators(kb: KnowledgeBase) -> dict[str, Callable[..., Question | None]]:
    index = _Index(kb)
    return {
        "single": _single, "chain": _chain,
        "comparison": lambda kb_, rng: _comparison(kb_, rng, index),
        "same_publisher": lambda kb_, rng: _same_publisher(kb_, rng, index),
        "same_country": lambda kb_, rng: _same_country(kb_, rng, index),
    }


@functools.lru_cache(maxsize=1)
def panels() -> dict[str, tuple[Question, ...]]:
    """Every split's questions (eval panels first, then train; no question repeats)."""
    kb = corpus(0)
    generators, used, out = _generators(kb), set(), {}
    for split in (*EVAL_SPLITS, "train"):
        size, spec = PANELS[split]
        rng = random.Random(f"searchqa/questions/{split}")
        labels = mix_labels(size, {str(i): w for i, (w, _, _) in enumerate(spec)})
        questions = []
        for label in labels:
            _, name, kwargs = spec[int(label)]
            for _ in range(1000):
                q = generators[name](kb, rng, **kwargs)
                if q is not None and q.key not in used:
                    break
            else:
                raise RuntimeError(f"could not draw a fresh {name} question for split {split!r}")
            used.add(q.key)
            questions.append(q)
        rng.shuffle(questions)
        out[split] = tuple(questions)
    return out
