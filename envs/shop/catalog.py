"""The generated product catalog, its BM25 search engine, goals and WebShop's reward.

Everything here is deterministic: the catalog and every goal come from ``random.Random``
objects seeded with strings, so they are identical across processes and PYTHONHASHSEED.

Reward (WebShop, Yao et al. 2022, Sec. 3.2 and ``web_agent_site/engine/goal.py``): buying
product Y with selected options Y_opt for a goal with attributes U_att, options U_opt and
price bound u_price scores

    r = r_type * (|U_att ∩ Y_att| + |U_opt ∩ Y_opt| + 1[y_price <= u_price])
               / (|U_att| + |U_opt| + 1)

and r_type compares the bought product's type with the goal's (``get_type_reward``):
query_match (same scraping query; here: same product type), category_match (at least two
levels of the " › " category path shared), and title_score = the fraction of the goal
name's nouns found among the bought name's nouns; r_type = 1, lowered to 0.5 when neither
query_match, category_match nor title_score > 0.2 holds, to 0.1 when title_score < 0.1 and
to 0 when title_score = 0.  WebShop matches attributes and options fuzzily against the
product text; the generated catalog has a closed vocabulary, so matching is exact set
membership on the product's attribute list and on the selected option values.
"""

from __future__ import annotations

import functools
import math
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from rank_bm25 import BM25Okapi

from envs.shop.types import (
    BRANDS,
    DESCRIPTION_LINES,
    NAMED_SIZES,
    OPTION_PHRASES,
    PRODUCT_TYPES,
    ProductType,
)

RESULTS_PER_PAGE = 10
MAX_RESULTS = 50  # WebShop's search engine returns the top 50 products (5 pages).
SEARCH_CACHE_SIZE = 100_000
TOKEN_RE = re.compile(r"[a-z0-9]+")


def tokenize(text: str) -> list[str]:
    """Lowercased alphanumeric tokens: the BM25 analyzer for documents and queries."""
    return TOKEN_RE.findall(text.lower())


def _levels(ptype: ProductType) -> set[str]:
    return {x.strip() for x in ptype.category.split("›")}


def type_reward(goal: ProductType, bought: ProductType) -> float:
    """WebShop's r_type between the goal's product type and the bought one (module doc);
    ``TYPE_REWARD`` tabulates it for the catalog's types."""
    query_match = goal.key == bought.key
    category_match = len(_levels(goal) & _levels(bought)) >= 2
    title_score = len(set(goal.nouns) & set(bought.nouns)) / len(goal.nouns) if goal.nouns else 0.2
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return r_type


@dataclass(frozen=True)
class Product:
    """One catalog product.  ``options`` is ((dimension, values), ...) in display order."""

    asin: str
    ptype: ProductType
    title: str
    price: float
    attributes: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]
    description: str
    features: tuple[str, ...]

    @functools.cached_property
    def value_dim(self) -> dict[str, str]:
        """Option value -> its dimension (values are unique within a product)."""
        return {v: dim for dim, values in self.options for v in values}

    def text(self) -> str:
        """The indexed document: title, description, features and option values."""
        values = " ".join(v for _, vs in self.options for v in vs)
        return " ".join([self.title, self.description, " ".join(self.features), values])


@dataclass(frozen=True)
class Goal:
    """A purchase goal (WebShop's goal dict): the target product's asin, its type key, the
    required attributes, the required options ((dimension, value), ...), the price bound and
    the expert's search query."""

    asin: str
    type_key: str
    attributes: tuple[str, ...]
    options: tuple[tuple[str, str], ...]
    price_upper: float
    query: str

    def to_spec(self) -> dict:
        return {
            "asin": self.asin,
            "type": self.type_key,
            "attributes": list(self.attributes),
            "options": [list(o) for o in self.options],
            "price_upper": self.price_upper,
            "query": self.query,
        }

    @classmethod
    def from_spec(cls, spec: Mapping) -> Goal:
        return cls(
            asin=spec["asin"],
            type_key=spec["type"],
            attributes=tuple(spec["attributes"]),
            options=tuple((d, v) for d, v in spec["options"]),
            price_upper=float(spec["price_upper"]),
            query=spec["query"],
        )

    @functools.cached_property
    def option_values(self) -> tuple[str, ...]:
        return tuple(v for _, v in self.options)


def purchase_score(goal: Goal, product: Product, selected: Sequence[str]) -> float:
    """WebShop's reward r (module doc) for buying ``product`` with option values ``selected``."""
    r_type = TYPE_REWARD[goal.type_key, product.ptype.key]
    n_att = len(set(goal.attributes) & set(product.attributes))
    n_opt = len(set(goal.option_values) & set(selected))
    price_ok = float(product.price <= goal.price_upper)
    return r_type * (n_att + n_opt + price_ok) / (len(goal.attributes) + len(goal.options) + 1)


TYPES_BY_KEY: dict[str, ProductType] = {t.key: t for t in PRODUCT_TYPES}
TYPE_REWARD: dict[tuple[str, str], float] = {
    (g.key, b.key): type_reward(g, b) for g in PRODUCT_TYPES for b in PRODUCT_TYPES
}
_TYPE_IDS = {t.key: k for k, t in enumerate(PRODUCT_TYPES)}
# [goal type, bought type]: whether buying that type can score 1.0.
_FULL_TYPE_REWARD = np.array(
    [[TYPE_REWARD[g.key, b.key] == 1.0 for b in PRODUCT_TYPES] for g in PRODUCT_TYPES]
)


class Catalog:
    """The products plus a BM25 index over them.

    Scoring uses rank_bm25's ``BM25Okapi`` statistics (idf, document lengths, k1, b), laid
    out once as an inverted index so that a query costs one vectorised add per query token
    instead of rank_bm25's Python loop over all documents; the scores are identical to
    ``BM25Okapi.get_scores``.  Results are cached per normalised query.
    """

    def __init__(self, products: Sequence[Product]):
        self.products = tuple(products)
        self.index_of = {p.asin: i for i, p in enumerate(self.products)}
        self.bm25 = BM25Okapi([tokenize(p.text()) for p in self.products])
        self._postings = self._build_postings()
        self._type_ids = np.array([_TYPE_IDS[p.ptype.key] for p in self.products])  # [n_products]
        self._prices = np.array([p.price for p in self.products])  # [n_products]
        self._attr_ids, self._has_attr = _membership([p.attributes for p in self.products])
        self._value_ids, self._has_value = _membership([tuple(p.value_dim) for p in self.products])
        self._cache: dict[tuple[str, ...], tuple[int, ...]] = {}
        self._goal_cache: dict[Goal, tuple[int, ...]] = {}

    def _build_postings(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        bm, postings = self.bm25, {}
        for doc, (freqs, length) in enumerate(zip(bm.doc_freqs, bm.doc_len)):
            norm = bm.k1 * (1 - bm.b + bm.b * length / bm.avgdl)
            for term, f in freqs.items():
                w = bm.idf.get(term, 0.0) * f * (bm.k1 + 1) / (f + norm)
                postings.setdefault(term, ([], []))[0].append(doc)
                postings[term][1].append(w)
        return {t: (np.array(d, dtype=np.int64), np.array(w)) for t, (d, w) in postings.items()}

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every product for ``query``: [n_products]."""
        out = np.zeros(len(self.products))
        for term in tokenize(query):
            if term in self._postings:
                docs, weights = self._postings[term]
                out[docs] += weights
        return out

    def search(self, query: str) -> tuple[int, ...]:
        """Product indices of the top ``MAX_RESULTS`` matches (score > 0), best first; ties
        keep catalog order."""
        key = tuple(tokenize(query))
        if key not in self._cache:
            if len(self._cache) >= SEARCH_CACHE_SIZE:  # policies invent endless queries
                self._cache.clear()
            s = self.scores(query)  # [n_products]
            hits = np.flatnonzero(s > 0)
            if len(hits) > MAX_RESULTS:
                hits = np.argpartition(-s, MAX_RESULTS)[:MAX_RESULTS]
                cut = s[hits].min()  # products tied with the weakest kept one compete by index
                hits = np.flatnonzero(s >= cut)
            order = hits[np.lexsort((hits, -s[hits]))][:MAX_RESULTS]
            self._cache[key] = tuple(int(i) for i in order)
        return self._cache[key]

    def goal_products(self, goal: Goal) -> tuple[int, ...]:
        """Indices of every product whose purchase can score 1.0 for ``goal``: type reward 1,
        all required attributes, every required option value on offer in distinct
        dimensions, price within the bound."""
        if goal not in self._goal_cache:
            self._goal_cache[goal] = self._find_goal_products(goal)
        return self._goal_cache[goal]

    def _find_goal_products(self, goal: Goal) -> tuple[int, ...]:
        values = goal.option_values
        mask = _FULL_TYPE_REWARD[_TYPE_IDS[goal.type_key]][self._type_ids]  # [n_products]
        mask &= self._prices <= goal.price_upper
        for column, vocab, wanted in (
            (self._has_attr, self._attr_ids, goal.attributes),
            (self._has_value, self._value_ids, values),
        ):
            if any(w not in vocab for w in wanted):
                return ()
            mask &= column[:, [vocab[w] for w in wanted]].all(axis=1)
        # Required values must sit in distinct dimensions to be selectable together.
        return tuple(
            int(i)
            for i in np.flatnonzero(mask)
            if len({self.products[i].value_dim[v] for v in values}) == len(values)
        )


def _membership(rows: Sequence[Sequence[str]]) -> tuple[dict[str, int], np.ndarray]:
    """Vocabulary ids and the boolean row x word membership matrix [n_rows, n_words]."""
    vocab: dict[str, int] = {}
    for row in rows:
        for word in row:
            vocab.setdefault(word, len(vocab))
    matrix = np.zeros((len(rows), len(vocab)), dtype=bool)
    for r, row in enumerate(rows):
        matrix[r, [vocab[w] for w in row]] = True
    return vocab, matrix


# -- generation --------------------------------------------------------------------------
def _asin(rng: random.Random) -> str:
    return "B0" + "".join(rng.choice("0123456789ABCDEFGHJKLMNPQRSTUVWXYZ") for _ in range(8))


def _cap(word: str) -> str:
    return word[:1].upper() + word[1:]


def _offered(pool: Sequence[str], rng: random.Random) -> tuple[str, ...]:
    """A random subset (at least 3 values, or all) of an option pool, in pool order."""
    chosen = set(rng.sample(pool, rng.randint(min(3, len(pool)), len(pool))))
    return tuple(v for v in pool if v in chosen)


def _product(ptype: ProductType, rng: random.Random, asin: str) -> Product:
    brand = rng.choice(BRANDS[ptype.category.split(" › ")[0]])
    attributes = tuple(rng.sample(ptype.attributes, rng.randint(3, 5)))
    in_title = attributes[: rng.randint(1, 2)]
    title = " ".join([brand, *(_cap(w) for w in f"{ptype.name} {' '.join(in_title)}".split())])
    options = tuple((dim, _offered(pool, rng)) for dim, pool in ptype.options)
    lo, hi = ptype.price
    price = round(rng.uniform(lo, hi)) - 0.01
    description = (
        f"This {ptype.name} from {brand} is {' and '.join(attributes[:2])}. "
        + rng.choice(DESCRIPTION_LINES)
    )
    return Product(
        asin,
        ptype,
        title,
        price,
        attributes,
        options,
        description,
        tuple(a.capitalize() for a in attributes),
    )


PER_TYPE = 100


def get_catalog(seed: str = "v1") -> Catalog:
    """The catalog: ``PER_TYPE`` products for each product type (3,200), generated from
    ``random.Random(f"shop/catalog/{seed}")``; built once per process and seed, shared by
    all env instances."""
    return _build_catalog(seed)


@functools.lru_cache(maxsize=4)
def _build_catalog(seed: str) -> Catalog:
    rng = random.Random(f"shop/catalog/{seed}")
    products, seen = [], set()
    for ptype in PRODUCT_TYPES:
        for _ in range(PER_TYPE):
            asin = _asin(rng)
            while asin in seen:
                asin = _asin(rng)
            seen.add(asin)
            products.append(_product(ptype, rng, asin))
    return Catalog(products)


def _option_phrase(dim: str, value: str) -> str:
    if dim == "size" and value not in NAMED_SIZES:
        return value
    return OPTION_PHRASES[dim].format(v=value)


def _attribute_phrase(attributes: Sequence[str], name: str) -> str:
    """ "cotton men's t-shirt with long sleeve"; prepositional attributes ("for dry hair",
    "with adapter") go last, as they are."""
    prep = [a for a in attributes if a.startswith(("for ", "with "))]
    plain = [a for a in attributes if a not in prep]
    text = " ".join([*plain[:1], name])
    if plain[1:]:
        text += " with " + " and ".join(plain[1:])
    return " ".join([text, *prep]) if prep else text


LEADS = ("i need", "i'm looking for", "i want to buy", "find me", "i would like")


def make_goal(catalog: Catalog, rng: random.Random) -> tuple[Goal, str]:
    """A goal for a random target product and its instruction text.

    The required attributes are 1-3 of the target's, the options one offered value per
    option dimension, the price bound the target's price times 1.1-2.0 rounded up to ten
    dollars.  The expert query is the attributes followed by the product name.
    """
    product = catalog.products[rng.randrange(len(catalog.products))]
    k = min(len(product.attributes), rng.choices((1, 2, 3), weights=(3, 4, 3))[0])
    attributes = tuple(rng.sample(product.attributes, k))
    options = tuple((dim, rng.choice(values)) for dim, values in product.options)
    price_upper = float(math.ceil(product.price * rng.choice((1.1, 1.3, 1.5, 2.0)) / 10) * 10)
    name = product.ptype.name
    goal = Goal(
        product.asin,
        product.ptype.key,
        attributes,
        options,
        price_upper,
        query=" ".join([*attributes, name]),
    )
    text = f"{rng.choice(LEADS)} {_attribute_phrase(attributes, name)}"
    text += "".join(", " + _option_phrase(d, v) for d, v in options)
    text += f", and price lower than {price_upper:.2f} dollars"
    return goal, text
