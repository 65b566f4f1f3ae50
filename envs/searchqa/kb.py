"""The generated knowledge base behind ``searchqa``: fictional entities, facts, passages.

Five entity types (person, city, country, org, work) and fifteen *functional* relations
(each subject has at most one object, so every question has one answer):

    person:  born_in -> city, birth_year, occupation, educated_at -> org (university),
             spouse -> person
    city:    country -> country, mayor -> person
    country: capital -> city, language
    org:     founded_by -> person, headquarters -> city, founded_year
    work:    creator -> person, publisher -> org, release_year

Facts are rendered as wiki-like passages (title = entity name): a person has two passages
(birth/profession; studies/marriage/offices/works), every other entity one.  A passage
lists the facts it *states* (``Passage.facts``): the subject's own facts, plus facts it
mentions about others (a spouse's page states the marriage, a mayor's page the office, a
creator's page their works).

``corpus(0)`` is the *core* knowledge base (about 7,600 passages, the default training
corpus).  ``corpus(n)`` for larger ``n`` appends passages of extra people, organisations
and works (linked to core entities, so they are realistic distractors) until it holds
exactly ``n`` passages (20,000 for the benchmark).  The core is generated from its own
seeded stream, so it -- and every question panel built on it -- is identical in every
corpus size, process and ``PYTHONHASHSEED``.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass, field

from envs.searchqa.protocol import normalize_answer

SYLLABLES = [
    "ka", "lo", "mi", "ren", "dor", "sa", "vel", "tor", "bri", "an", "el", "is", "mar", "quen",
    "thal", "or", "ny", "ja", "fen", "ro", "zel", "wyn", "cor", "da", "li", "ve", "nor", "sil",
    "ta", "ber", "gal", "hu", "pe", "sto", "ram", "ul", "ix", "om", "tes", "bal", "kir", "mo",
    "na", "pri", "sen", "ard", "lu", "vor",
]
ADJECTIVES = [
    "silent", "golden", "hollow", "crimson", "distant", "broken", "quiet", "northern",
    "burning", "frozen", "hidden", "last", "wandering", "painted", "iron", "silver", "bitter",
    "gentle", "restless", "amber", "pale", "secret", "endless", "narrow", "scarlet", "velvet",
    "wild", "lonely", "ancient", "shining", "copper", "tender", "faded", "salt", "stone",
    "glass", "paper", "midnight", "summer", "winter", "autumn", "electric", "drowned",
    "falling", "sleeping", "crooked", "bright", "hungry", "quiet-hearted",
]
NOUNS = [
    "harbor", "river", "orchard", "lantern", "garden", "mirror", "tower", "meadow", "engine",
    "archive", "compass", "ledger", "cathedral", "valley", "island", "forest", "bridge",
    "kingdom", "lighthouse", "harvest", "season", "empire", "signal", "voyage", "chorus",
    "theorem", "atlas", "citadel", "cipher", "comet", "frontier", "parade", "reservoir",
    "sanctuary", "tapestry", "vineyard", "workshop", "alphabet", "carnival", "canyon",
    "glacier", "monsoon", "nocturne", "pilgrim", "quarry", "ribbon", "saddle", "tide", "tundra",
    "orbit", "furnace", "anthem", "ember", "delta", "gazette", "horizon",
]
TOPICS = [
    "coastal trade", "early radio", "glass making", "river engineering", "folk music",
    "urban planning", "medieval law", "seed banks", "railway history", "public libraries",
    "weather records", "street theatre", "clock repair", "maritime maps", "textile dyes",
    "mountain farming", "choral singing", "bridge design", "printing presses", "orchard disease",
    "salt production", "city archives", "lighthouse keeping", "migratory birds", "stone carving",
    "tea cultivation", "silent cinema", "copper mining",
]
FEATURES = [
    "its covered markets", "a long stone harbour", "its annual lantern festival", "a river port",
    "its old university quarter", "terraced vineyards", "a cable railway", "its botanical gardens",
    "a medieval citadel", "its glassworks",
]
OCCUPATIONS = [
    "chemist", "architect", "sculptor", "economist", "painter", "engineer", "diplomat",
    "botanist", "astronomer", "historian", "mathematician", "physician", "photographer",
]
CREATOR_OCCUPATION = {"novel": "novelist", "film": "film director", "album": "musician"}
PUBLISHER_KIND = {"novel": "publisher", "film": "studio", "album": "label"}
CREATE_VERB = {"novel": "written", "film": "directed", "album": "recorded"}
PUBLISH_VERB = {"novel": "published", "film": "produced", "album": "released"}
ORG_DESCRIPTION = {
    "university": "university", "publisher": "publishing house", "studio": "film studio",
    "label": "record label", "company": "company",
}
ORG_SUFFIXES = {
    "university": ("College", "Institute"), "publisher": ("Press", "Books", "House"),
    "studio": ("Pictures", "Studios", "Films"), "label": ("Records", "Music"),
    "company": ("Industries", "Labs", "Holdings", "Group"),
}


@dataclass(frozen=True)
class Relation:
    name: str
    subject: str  # entity type
    object: str | None  # entity type; None = a literal value


RELATIONS = {
    r.name: r
    for r in (
        Relation("born_in", "person", "city"), Relation("birth_year", "person", None),
        Relation("occupation", "person", None), Relation("educated_at", "person", "org"),
        Relation("spouse", "person", "person"), Relation("country", "city", "country"),
        Relation("mayor", "city", "person"), Relation("capital", "country", "city"),
        Relation("language", "country", None), Relation("founded_by", "org", "person"),
        Relation("headquarters", "org", "city"), Relation("founded_year", "org", None),
        Relation("creator", "work", "person"), Relation("publisher", "work", "org"),
        Relation("release_year", "work", None),
    )
}


@dataclass(frozen=True)
class Entity:
    name: str
    type: str  # person | city | country | org | work
    kind: str = ""  # work: novel/film/album; org: university/publisher/studio/label/company
    aliases: tuple[str, ...] = ()  # accepted answers besides the name


@dataclass(frozen=True)
class Passage:
    title: str
    text: str
    facts: tuple[tuple[str, str], ...]  # (subject, relation) pairs the passage states


@dataclass
class KnowledgeBase:
    entities: dict[str, Entity] = field(default_factory=dict)
    facts: dict[tuple[str, str], str] = field(default_factory=dict)  # (subject, rel) -> object
    passages: list[Passage] = field(default_factory=list)
    by_type: dict[str, list[str]] = field(default_factory=dict)
    n_core_passages: int = 0
    _normalized: set[str] = field(default_factory=set, repr=False)

    def add(self, entity: Entity) -> Entity:
        self.entities[entity.name] = entity
        self.by_type.setdefault(entity.type, []).append(entity.name)
        self._normalized.add(normalize_answer(entity.name))
        return entity

    def taken(self, name: str) -> bool:
        return normalize_answer(name) in self._normalized

    def answers(self, value: str) -> tuple[str, ...]:
        """Accepted answers for a fact's object: an entity's name and aliases, or the literal."""
        entity = self.entities.get(value)
        return (value, *entity.aliases) if entity else (value,)

    def documents(self) -> list[tuple[str, str]]:
        return [(p.title, p.text) for p in self.passages]


# -- names -------------------------------------------------------------------------------
def _word(rng: random.Random, syllables: int) -> str:
    return "".join(rng.choice(SYLLABLES) for _ in range(syllables)).capitalize()


def _unique(kb: KnowledgeBase, make) -> str:
    for _ in range(1000):
        name = make()
        if not kb.taken(name):
            return name
    raise RuntimeError("name space exhausted; enlarge SYLLABLES/ADJECTIVES/NOUNS")


def _person_name(kb: KnowledgeBase, rng: random.Random, first_names: list[str]) -> str:
    return _unique(kb, lambda: f"{rng.choice(first_names)} {_word(rng, rng.choice((2, 3)))}")


def _org_name(kb: KnowledgeBase, rng: random.Random, kind: str) -> str:
    if kind == "university" and rng.random() < 0.6:
        city = rng.choice(kb.by_type["city"])
        return _unique(kb, lambda: f"University of {city}" if not kb.taken(f"University of {city}")
                       else f"{_word(rng, 2)} {rng.choice(ORG_SUFFIXES[kind])}")
    return _unique(kb, lambda: f"{_word(rng, 2)} {rng.choice(ORG_SUFFIXES[kind])}")


def _work_title(kb: KnowledgeBase, rng: random.Random) -> str:
    def make() -> str:
        if rng.random() < 0.7:
            adjective, noun = rng.choice(ADJECTIVES).replace("-", " "), rng.choice(NOUNS)
            return f"{rng.choice(('The ', ''))}{adjective.title()} {noun.title()}"
        return f"{rng.choice(NOUNS).title()} of {rng.choice(kb.by_type['city'])}"

    return _unique(kb, make)


# -- entities and facts ------------------------------------------------------------------
CORE_SIZES = {"country": 30, "city_per_country": 10, "person": 2400, "org": 700, "work": 1800}
ORG_MIX = {"university": 0.17, "publisher": 0.21, "studio": 0.17, "label": 0.16, "company": 0.29}
WORK_MIX = {"novel": 0.39, "film": 0.33, "album": 0.28}
PERSON_MIX = {"novelist": 0.15, "film director": 0.12, "musician": 0.10}


def _places(kb: KnowledgeBase, rng: random.Random) -> None:
    languages = [f"{_word(rng, 2)}{rng.choice(('ic', 'ese', 'ian', 'i'))}" for _ in range(12)]
    for _ in range(CORE_SIZES["country"]):
        name = _unique(kb, lambda: _word(rng, 2) + rng.choice(("ia", "and", "ova", "ar", "ene")))
        form = rng.choice(("Republic", "Kingdom", "Federation", "Commonwealth"))
        kb.add(Entity(name, "country", aliases=(f"{form} of {name}",)))
        kb.facts[(name, "language")] = rng.choice(languages)
        cities = [kb.add(Entity(_unique(kb, lambda: _city_name(rng)), "city")).name
                  for _ in range(CORE_SIZES["city_per_country"])]
        for city in cities:
            kb.facts[(city, "country")] = name
        kb.facts[(name, "capital")] = rng.choice(cities)


def _city_name(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.5:
        return _word(rng, 2) + rng.choice(("by", "ford", "mouth", "holm", "grad", "ton"))
    if roll < 0.8:
        return _word(rng, 3)
    return f"{rng.choice(('Port', 'New', 'Old'))} {_word(rng, 2)}"


def mix_labels(total: int, mix: dict[str, float]) -> list[str]:
    """``total`` labels in the proportions of ``mix`` (largest-remainder rounding)."""
    counts = {k: int(total * w) for k, w in mix.items()}
    for k in sorted(mix, key=lambda k: total * mix[k] - counts[k], reverse=True):
        if sum(counts.values()) >= total:
            break
        counts[k] += 1
    return [k for k, n in counts.items() for _ in range(n)]


def _people(kb: KnowledgeBase, rng: random.Random, n: int, first_names: list[str]) -> list[str]:
    occupations = mix_labels(n, {**PERSON_MIX, "other": 1 - sum(PERSON_MIX.values())})
    universities = [o for o in kb.by_type.get("org", []) if kb.entities[o].kind == "university"]
    names = []
    for occupation in occupations:
        name = kb.add(Entity(_person_name(kb, rng, first_names), "person")).name
        if occupation == "other":
            occupation = rng.choice(OCCUPATIONS)
        kb.facts[(name, "occupation")] = occupation
        kb.facts[(name, "born_in")] = rng.choice(kb.by_type["city"])
        kb.facts[(name, "birth_year")] = str(rng.randint(1880, 1990))
        if universities:
            kb.facts[(name, "educated_at")] = rng.choice(universities)
        names.append(name)
    return names


def _orgs(kb: KnowledgeBase, rng: random.Random, n: int, founders: list[str]) -> None:
    for kind in mix_labels(n, ORG_MIX):
        name = _org_name(kb, rng, kind)
        kb.add(Entity(name, "org", kind, aliases=_org_aliases(kb, name)))
        founder = rng.choice(founders)
        kb.facts[(name, "founded_by")] = founder
        born = int(kb.facts[(founder, "birth_year")])
        kb.facts[(name, "founded_year")] = str(min(born + rng.randint(22, 50), 2020))
        home = name.removeprefix("University of ")
        if home not in kb.entities:
            home = rng.choice(kb.by_type["city"])
        kb.facts[(name, "headquarters")] = home


def _org_aliases(kb: KnowledgeBase, name: str) -> tuple[str, ...]:
    head = name.rsplit(" ", 1)[0]
    return () if name.startswith("University of ") or kb.taken(head) else (head,)


def _works(kb: KnowledgeBase, rng: random.Random, n: int, people: list[str]) -> None:
    creators = {kind: [p for p in people if kb.facts[(p, "occupation")] == occ]
                for kind, occ in CREATOR_OCCUPATION.items()}
    publishers = {kind: [o for o in kb.by_type["org"]
                         if kb.entities[o].kind == PUBLISHER_KIND[kind]]
                  for kind in CREATOR_OCCUPATION}
    for kind in mix_labels(n, WORK_MIX):
        title = _work_title(kb, rng)
        kb.add(Entity(title, "work", kind))
        creator = rng.choice(creators[kind])
        kb.facts[(title, "creator")] = creator
        kb.facts[(title, "publisher")] = rng.choice(publishers[kind])
        born = int(kb.facts[(creator, "birth_year")])
        kb.facts[(title, "release_year")] = str(min(born + rng.randint(22, 55), 2023))


def _marry_and_elect(kb: KnowledgeBase, rng: random.Random, people: list[str]) -> None:
    pool = list(people)
    rng.shuffle(pool)
    for a, b in zip(pool[0 : 700 : 2], pool[1 : 700 : 2]):
        kb.facts[(a, "spouse")], kb.facts[(b, "spouse")] = b, a
    for city, mayor in zip(kb.by_type["city"], pool[700:]):
        kb.facts[(city, "mayor")] = mayor


# -- passages ----------------------------------------------------------------------------
def _filler(rng: random.Random, first: str) -> str:
    topic, pick = rng.choice(TOPICS), rng.randrange(4)
    if pick == 0:
        return f"{first} is often cited in discussions of {topic}."
    if pick == 1:
        year, prize = rng.randint(1920, 2020), _word(rng, 2)
        return f"In {year}, {first} received the {prize} Prize for work on {topic}."
    if pick == 2:
        return f"{first} has lectured widely on {topic}."
    return f"Critics have compared {first}'s approach to {topic} with that of earlier generations."


def _work_filler(rng: random.Random, kind: str) -> str:
    topic, pick = rng.choice(TOPICS), rng.randrange(3)
    if pick == 0:
        return f"The {kind} is often cited in discussions of {topic}."
    if pick == 1:
        return f"In {rng.randint(1930, 2023)}, the {kind} received the {_word(rng, 2)} Prize."
    return f"Reviewers noted the {kind}'s interest in {topic}."


def _person_passages(kb: KnowledgeBase, rng: random.Random, name: str, works: list[str],
                     mayor_of: str | None) -> list[Passage]:
    def f(rel: str) -> str | None:
        return kb.facts.get((name, rel))

    first = name.split()[0]
    bio = (f"{name} (born {f('birth_year')}) is a {f('occupation')} by profession who was born "
           f"in {f('born_in')}. {_filler(rng, first)}")
    parts, facts = [], [(name, "born_in"), (name, "birth_year"), (name, "occupation")]
    passages = [Passage(name, bio, tuple(facts))]
    facts = []
    if f("educated_at"):
        parts.append(f"{name} studied at {f('educated_at')}.")
        facts.append((name, "educated_at"))
    if f("spouse"):
        parts.append(f"{first} is married to {f('spouse')}.")
        facts += [(name, "spouse"), (f("spouse"), "spouse")]
    if mayor_of:
        parts.append(f"{first} serves as the mayor of {mayor_of}.")
        facts.append((mayor_of, "mayor"))
    if works:
        parts.append(f"Notable works by {first} include {' and '.join(works[:3])}.")
        facts += [(w, "creator") for w in works[:3]]
    parts.append(_filler(rng, first))
    passages.append(Passage(name, " ".join(parts), tuple(facts)))
    return passages


def _other_passage(kb: KnowledgeBase, rng: random.Random, entity: Entity) -> Passage:
    name, f = entity.name, (lambda rel: kb.facts[(entity.name, rel)])
    if entity.type == "city":
        text = (f"{name} is a city located in {f('country')}. The mayor of {name} is {f('mayor')}. "
                f"The city is known for {rng.choice(FEATURES)}.")
        rels = ("country", "mayor")
    elif entity.type == "country":
        text = (f"{name}, officially the {entity.aliases[0]}, is a country whose capital is "
                f"{f('capital')}. The official language of {name} is {f('language')}. "
                f"{_filler(rng, name)}")
        rels = ("capital", "language")
    elif entity.type == "org":
        text = (f"{name} is a {ORG_DESCRIPTION[entity.kind]} founded in {f('founded_year')} by "
                f"{f('founded_by')}. Its headquarters are in {f('headquarters')}. "
                f"{_filler(rng, name)}")
        rels = ("founded_by", "founded_year", "headquarters")
    else:
        text = (f"{name} is a {f('release_year')} {entity.kind} {CREATE_VERB[entity.kind]} by "
                f"{f('creator')}. It was {PUBLISH_VERB[entity.kind]} by {f('publisher')}. "
                f"{_work_filler(rng, entity.kind)}")
        rels = ("creator", "release_year", "publisher")
    return Passage(name, text, tuple((name, r) for r in rels if (name, r) in kb.facts))


def _render(kb: KnowledgeBase, rng: random.Random, names: list[str]) -> None:
    works_by: dict[str, list[str]] = {}
    for work in names:
        if kb.entities[work].type == "work":
            works_by.setdefault(kb.facts[(work, "creator")], []).append(work)
    mayor_of = {kb.facts[(c, "mayor")]: c for c in kb.by_type["city"] if (c, "mayor") in kb.facts}
    for name in names:
        entity = kb.entities[name]
        if entity.type == "person":
            works, office = works_by.get(name, []), mayor_of.get(name)
            kb.passages += _person_passages(kb, rng, name, works, office)
        else:
            kb.passages.append(_other_passage(kb, rng, entity))


# -- corpora -----------------------------------------------------------------------------
def _core() -> KnowledgeBase:
    rng = random.Random("searchqa/kb/core")
    kb = KnowledgeBase()
    first_names = sorted({_word(rng, 2) for _ in range(400)})
    _places(kb, rng)
    people = _people(kb, rng, CORE_SIZES["person"], first_names)  # no universities yet
    _orgs(kb, rng, CORE_SIZES["org"], people)
    universities = [o for o in kb.by_type["org"] if kb.entities[o].kind == "university"]
    for person in people:
        kb.facts[(person, "educated_at")] = rng.choice(universities)
    _marry_and_elect(kb, rng, people)
    _works(kb, rng, CORE_SIZES["work"], people)
    _render(kb, random.Random("searchqa/kb/core/text"), list(kb.entities))
    kb.n_core_passages = len(kb.passages)
    return kb


def _extend(kb: KnowledgeBase, n_passages: int) -> None:
    """Append extra people (2 passages), orgs and works (1 each) until ``n_passages``."""
    rng = random.Random("searchqa/kb/extra")
    first_names = sorted({_word(rng, 2) for _ in range(400)})
    while len(kb.passages) < n_passages:
        people = _people(kb, rng, 60, first_names)
        before = set(kb.by_type["org"])
        _orgs(kb, rng, 25, people + kb.by_type["person"][:2400])
        _works(kb, rng, 60, people + kb.by_type["person"][:2400])
        new = people + [o for o in kb.by_type["org"] if o not in before]
        new += kb.by_type["work"][-60:]
        _render(kb, rng, new)
    del kb.passages[n_passages:]


@functools.lru_cache(maxsize=4)
def corpus(n_passages: int = 0) -> KnowledgeBase:
    """The knowledge base with ``n_passages`` passages (0 = the core corpus).

    ``n_passages`` must be 0 or at least the core size; the result is cached per size and
    must be treated as read-only.
    """
    kb = _core()
    if n_passages and n_passages < kb.n_core_passages:
        raise ValueError(
            f"n_passages={n_passages} is below the core corpus ({kb.n_core_passages} passages); "
            f"use 0 (core) or a value >= {kb.n_core_passages}"
        )
    if n_passages:
        _extend(kb, n_passages)
    return kb
