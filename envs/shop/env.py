"""The built-in ``shop`` environment: a WebShop-like store over a generated catalog.

Pages and clickables follow WebShop (Yao et al. 2022):

* ``search`` (start): a search box, ``search[query]``;
* ``results``: BM25 top 50 for the query, 10 per page: ``back to search``, ``< prev`` (after
  page 1), ``next >`` (before the last page), and each product id (``click[b0abc12345]``);
* ``item``: ``back to search``, ``< prev`` (to the results page it came from), the option
  values of each dimension (clicking one selects it for its dimension), ``description``,
  ``features``, ``buy now``;
* ``description`` / ``features`` sub-pages: ``back to search``, ``< prev`` (to the item,
  selections kept).  Opening an item from the results starts with nothing selected.

Observations use WebShop's ``text`` mode: the visible page fields joined with " [SEP] ".
Only the search page repeats the instruction (as WebShop's start page does); the prompt
carries it on every turn through :meth:`ShopEnv.task_instruction`.  Actions are lowercased
and whitespace-normalised (WebShop lowercases clicks); an unparseable action, a search away
from the search page or a click on anything not clickable is an invalid step.

``buy now`` ends the episode with WebShop's score as the reward (see
:mod:`envs.shop.catalog`); success means score 1.0.  Running out of turns scores 0.

Distance (``info["distance"]``, the length of ``info["plan"]``): the fewest steps to a
full-score purchase, where a purchase is full-score for any product in the goal's target
set G (:meth:`Catalog.goal_products`, which always holds the instruction's own product), and
new searches use the expert's query q* (privileged knowledge: the attributes and product
name).  Writing page(g) for the zero-based results page of g and m(g) for the number of
required option values not yet selected on g:

* search page: 1 (search q*) + page(g*) (``next >`` clicks) + 1 (open g*) + m(g*) + 1 (buy),
  g* the best-ranked product of G in the results of q* (panels keep only tasks where one
  exists);
* results (query q, page p): min( min over g in G ∩ results(q) of |page(g) - p| + 1 + m(g) +
  1,  1 (back to search) + d(search) );
* item x (opened from results (q, p)): min( m(x) + 1 if x in G,  1 + d(results q, p),
  1 + d(search) );
* description / features of x: min( 1 + d(item x),  1 + d(search) );
* after ``buy now``: 0 on success, else ``UNREACHABLE`` (99), so that a wrong purchase
  registers as an unrecovered decisive error.

Ties prefer the option listed first.  The expert follows this plan, so along the expert's
path the distance drops by exactly 1 per step; opening a product outside G from a results
page raises it by 1 (``< prev`` has to undo it).
"""

from __future__ import annotations

import functools
import itertools
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from envs.base import StepResult, Task, TextEnv
from envs.shop.catalog import (
    PRODUCT_TYPES,
    RESULTS_PER_PAGE,
    TYPES_BY_KEY,
    Catalog,
    Goal,
    get_catalog,
    make_goal,
    purchase_score,
)

UNREACHABLE = 99
TRAIN_SIZE = 6000
EVAL_SIZE = 500
PANEL_SIZES = {"train": TRAIN_SIZE, "eval": EVAL_SIZE}
SEARCH, RESULTS, ITEM, DONE = "search", "results", "item", "done"
SUB_PAGES = ("description", "features")
BACK, PREV, NEXT, BUY = "back to search", "< prev", "next >", "buy now"
COMMAND_RE = re.compile(r"^(search|click)\[(.*)\]$", re.IGNORECASE | re.DOTALL)


def parse_command(action: str) -> tuple[str, str] | None:
    """``"search[Red Shoes]"`` -> ``("search", "red shoes")``; ``None`` if it is not a
    ``search[...]`` / ``click[...]`` command with a non-empty argument."""
    match = COMMAND_RE.match(action.strip())
    if not match:
        return None
    argument = " ".join(match.group(2).lower().split())
    return (match.group(1).lower(), argument) if argument else None


@dataclass(frozen=True)
class ShopState:
    """One page of one episode.  ``query``/``page_no`` (zero-based) locate the results page
    (kept on item pages for ``< prev``); ``item`` is the open product's catalog index;
    ``selected`` holds the (dimension, value) selections, sorted by dimension."""

    page: str = SEARCH
    query: str = ""
    page_no: int = 0
    item: int = -1
    selected: tuple[tuple[str, str], ...] = ()


def make_task(split: str, index: int, catalog_seed: str = "v1") -> Task:
    """Task ``index`` of ``split``, independent of every other task: goals are drawn from
    ``random.Random(f"shop/{split}/{index}/{attempt}")`` for attempt = 0, 1, ... until the
    expert's query finds a target product (attempt 0 almost always does)."""
    catalog = get_catalog(catalog_seed)
    for attempt in itertools.count():
        goal, text = make_goal(catalog, random.Random(f"shop/{split}/{index}/{attempt}"))
        if set(catalog.goal_products(goal)) & set(catalog.search(goal.query)):
            return Task(f"shop/{split}/{index:04d}", "shop", split, text, goal.to_spec())
    raise AssertionError("unreachable")


@functools.lru_cache(maxsize=8)
def build_panel(split: str, catalog_seed: str = "v1") -> tuple[Task, ...]:
    """The fixed task list of ``split`` (``PANEL_SIZES``), built once per process."""
    return tuple(make_task(split, i, catalog_seed) for i in range(PANEL_SIZES[split]))


class ShopEnv(TextEnv):
    """WebShop-like shopping (module doc).  ``max_turns`` defaults to 15 (ETRO, SEED)."""

    name = "shop"
    default_max_turns = 15
    splits = ("train", "eval")

    def __init__(self, max_turns: int = 0, invalid_penalty: float = 0.0, catalog_seed: str = "v1"):
        super().__init__(max_turns=max_turns, invalid_penalty=invalid_penalty)
        self.catalog_seed = catalog_seed
        self.catalog: Catalog = get_catalog(catalog_seed)
        self.state = ShopState()
        self.score = 0.0
        self.done = False
        self._rng = random.Random("shop/expert")

    # -- tasks -------------------------------------------------------------------------
    def panel(self, split: str) -> list[Task]:
        self.check_split(split)
        return list(build_panel(split, self.catalog_seed))

    # -- episode -----------------------------------------------------------------------
    def reset(self, task: Task, replay: Sequence[str] = ()) -> str:
        self.task, self.goal = task, Goal.from_spec(task.spec)
        self.targets = frozenset(self.catalog.goal_products(self.goal))
        if not self.targets & set(self.catalog.search(self.goal.query)):
            raise ValueError(
                f"task {task.id!r}: the expert query {self.goal.query!r} finds no target"
            )
        self.state, self.turn, self.score, self.done = ShopState(), 0, 0.0, False
        self._plans: dict[ShopState, tuple[str, ...]] = {}
        observation = self.render(self.state)
        for action in replay:
            observation = self._advance(action).observation
        return observation

    def step(self, response_text: str) -> StepResult:
        if self.task is None or self.done:
            raise RuntimeError("step() called before reset() or after the episode ended")
        return self._advance(self.parse_action(response_text) or "")

    def _advance(self, action: str) -> StepResult:
        command = parse_command(action)
        new = self.transition(self.state, *command) if command else None
        self.turn += 1
        if new is None:
            reward = -self.invalid_penalty
            page = self.render(self.state)
            observation = (
                f"Invalid action: {action or '(none)'} is not available here. [SEP] {page}"
            )
        else:
            self.state = new
            if new.page == DONE:
                self.score = self._purchase_score(new)
            reward = self.score if new.page == DONE else 0.0
            observation = self.render(new)
        self.done = self.state.page == DONE or self.turn >= self.max_turns
        canonical = f"{command[0]}[{command[1]}]" if command else ""
        info = {
            "state_key": self.state_key(),
            "distance": self.distance_to_goal(),
            "plan": list(self.plan()),
            "valid": new is not None,
            "action": canonical,
            "score": self.score,
        }
        return StepResult(observation, reward, self.done, self.score >= 1.0, info)

    def _purchase_score(self, state: ShopState) -> float:
        product = self.catalog.products[state.item]
        return purchase_score(self.goal, product, [v for _, v in state.selected])

    # -- pages -------------------------------------------------------------------------
    def results(self, state: ShopState) -> tuple[int, ...]:
        return self.catalog.search(state.query)

    def page_items(self, state: ShopState) -> tuple[int, ...]:
        start = state.page_no * RESULTS_PER_PAGE
        return self.results(state)[start : start + RESULTS_PER_PAGE]

    def clickables(self, state: ShopState) -> list[str]:
        """The clickable texts of ``state``'s page, lowercased, in page order."""
        if state.page == RESULTS:
            n_pages = -(-len(self.results(state)) // RESULTS_PER_PAGE)
            nav = [PREV] * (state.page_no > 0) + [NEXT] * (state.page_no + 1 < n_pages)
            return [
                BACK,
                *nav,
                *(self.catalog.products[i].asin.lower() for i in self.page_items(state)),
            ]
        if state.page == ITEM:
            product = self.catalog.products[state.item]
            return [
                BACK,
                PREV,
                *(v for _, values in product.options for v in values),
                *SUB_PAGES,
                BUY,
            ]
        if state.page in SUB_PAGES:
            return [BACK, PREV]
        return []

    def transition(self, state: ShopState, verb: str, arg: str) -> ShopState | None:
        """The state after ``verb[arg]``, or ``None`` when the action is not available."""
        if verb == "search":
            return ShopState(RESULTS, query=arg) if state.page == SEARCH else None
        if arg not in self.clickables(state):
            return None
        if arg == BACK:
            return ShopState()
        if state.page == RESULTS:
            if arg in (NEXT, PREV):
                return replace(state, page_no=state.page_no + (1 if arg == NEXT else -1))
            return replace(state, page=ITEM, item=self.catalog.index_of[arg.upper()])
        if state.page in SUB_PAGES:
            return replace(state, page=ITEM)
        if arg == PREV:
            return replace(state, page=RESULTS, item=-1, selected=())
        if arg in SUB_PAGES:
            return replace(state, page=arg)
        if arg == BUY:
            return replace(state, page=DONE)
        dim = self.catalog.products[state.item].value_dim[arg]
        return replace(state, selected=tuple(sorted({**dict(state.selected), dim: arg}.items())))

    def render(self, state: ShopState) -> str:
        """The page as WebShop's text observation: fields joined by " [SEP] "."""
        if state.page == SEARCH:
            return f"WebShop [SEP] Instruction: [SEP] {self.task.instruction} [SEP] Search"
        if state.page == DONE:
            score = f"{self.score:.2f}"
            return (
                f"Thank you for shopping with us! [SEP] Your score (min 0.0, max 1.0) [SEP] {score}"
            )
        if state.page == RESULTS:
            return self._render_results(state)
        product = self.catalog.products[state.item]
        if state.page == "description":
            return f"Back to Search [SEP] < Prev [SEP] {product.description}"
        if state.page == "features":
            return " [SEP] ".join(["Back to Search", "< Prev", *product.features])
        chosen = {v for _, v in state.selected}
        options = [
            f
            for dim, values in product.options
            for f in (dim, *(v + " (selected)" * (v in chosen) for v in values))
        ]
        return " [SEP] ".join(
            [
                "Back to Search",
                "< Prev",
                *options,
                product.title,
                f"Price: ${product.price:.2f}",
                "Rating: N.A.",
                "Description",
                "Features",
                "Buy Now",
            ]
        )

    def _render_results(self, state: ShopState) -> str:
        fields = [
            "Back to Search",
            f"Page {state.page_no + 1} (Total results: {len(self.results(state))})",
        ]
        nav = self.clickables(state)
        fields += ["< Prev"] * (PREV in nav) + ["Next >"] * (NEXT in nav)
        for i in self.page_items(state):
            p = self.catalog.products[i]
            fields += [p.asin, p.title, f"${p.price:.2f}"]
        return " [SEP] ".join(fields)

    def admissible_actions(self) -> list[str]:
        """``click[...]`` for every clickable; on the search page, where any query is
        admissible, one representative search: the instruction itself as the query."""
        if self.done:
            return []
        search = [f"search[{self.task.instruction}]"] if self.state.page == SEARCH else []
        return search + [f"click[{c}]" for c in self.clickables(self.state)]

    # -- privileged facts --------------------------------------------------------------
    def state_key(self) -> str:
        s = self.state
        asin = self.catalog.products[s.item].asin if s.item >= 0 else "-"
        options = ",".join(v for _, v in s.selected)
        return f"{s.page}|q={s.query}|p={s.page_no}|item={asin}|opt={options}"

    def distance_to_goal(self) -> int:
        if self.state.page == DONE:
            return 0 if self.score >= 1.0 else UNREACHABLE
        return len(self.plan())

    def plan(self, state: ShopState | None = None) -> tuple[str, ...]:
        """The optimal remaining actions from ``state`` (default: the current one); see the
        module doc for the recursion."""
        state = self.state if state is None else state
        if state not in self._plans:
            self._plans[state] = self._compute_plan(state)
        return self._plans[state]

    def _compute_plan(self, state: ShopState) -> tuple[str, ...]:
        if state.page == DONE:
            return ()
        restart = (f"click[{BACK}]", *self.plan(ShopState())) if state.page != SEARCH else None
        if state.page == SEARCH:
            query = " ".join(self.goal.query.lower().split())
            return (f"search[{query}]", *self._open_plan(ShopState(RESULTS, query=query)))
        if state.page == RESULTS:
            candidates = [self._open_plan(state), restart]
        elif state.page == ITEM:
            back = (
                f"click[{PREV}]",
                *self.plan(replace(state, page=RESULTS, item=-1, selected=())),
            )
            candidates = [self._buy_plan(state), back, restart]
        else:
            candidates = [(f"click[{PREV}]", *self.plan(replace(state, page=ITEM))), restart]
        return min((c for c in candidates if c is not None), key=len)

    def _open_plan(self, state: ShopState) -> tuple[str, ...] | None:
        """Page to the nearest target in ``state``'s results, open it, select, buy."""
        ranked = [
            (abs(r // RESULTS_PER_PAGE - state.page_no), r, i)
            for r, i in enumerate(self.results(state))
            if i in self.targets
        ]
        if not ranked:
            return None
        turns, rank, item = min(ranked)
        move = f"click[{NEXT if rank // RESULTS_PER_PAGE > state.page_no else PREV}]"
        opened = replace(state, page=ITEM, page_no=rank // RESULTS_PER_PAGE, item=item, selected=())
        return (
            (move,) * turns
            + (f"click[{self.catalog.products[item].asin.lower()}]",)
            + self._buy_plan(opened)
        )

    def _buy_plan(self, state: ShopState) -> tuple[str, ...] | None:
        if state.item not in self.targets:
            return None
        chosen = {v for _, v in state.selected}
        return tuple(f"click[{v}]" for v in self.goal.option_values if v not in chosen) + (
            f"click[{BUY}]",
        )

    # -- expert ------------------------------------------------------------------------
    def expert_action(self, epsilon: float = 0.0, rng: random.Random | None = None) -> str:
        """The first action of :meth:`plan`; with probability ``epsilon`` instead a
        plausible-wrong action (half the time, when the page has one) or a uniformly random
        admissible one."""
        if self.done:
            raise RuntimeError("expert_action() called after the episode ended")
        rng = rng or self._rng
        if epsilon > 0 and rng.random() < epsilon:
            wrong = self.plausible_wrong_actions()
            return rng.choice(wrong if wrong and rng.random() < 0.5 else self.admissible_actions())
        return self.plan()[0]

    def plausible_wrong_actions(self) -> list[str]:
        """Mistakes a shopper plausibly makes here: searching for a sibling product type,
        opening a non-target result, picking a wrong value of a required option, buying an
        item outside the target set or before its options are set."""
        s, goal = self.state, self.goal
        if s.page == SEARCH:
            ptype = TYPES_BY_KEY[goal.type_key]
            top = ptype.category.split(" › ")[0]
            siblings = [
                t.name for t in PRODUCT_TYPES if t.category.startswith(top) and t.key != ptype.key
            ]
            return [f"search[{' '.join([*goal.attributes, name])}]" for name in siblings]
        if s.page == RESULTS:
            return [
                f"click[{self.catalog.products[i].asin.lower()}]"
                for i in self.page_items(s)
                if i not in self.targets
            ]
        if s.page != ITEM:
            return []
        if s.item not in self.targets:
            return [f"click[{BUY}]"]
        product, chosen = self.catalog.products[s.item], {v for _, v in s.selected}
        wrong = [
            f"click[{v}]"
            for dim, goal_value in goal.options
            for v in dict(product.options)[product.value_dim[goal_value]]
            if v != goal_value
        ]
        return wrong + [f"click[{BUY}]"] * (not set(goal.option_values) <= chosen)

    # -- prompt pieces -----------------------------------------------------------------
    def system_prompt(self) -> str:
        return (
            "You are a shopping agent in a WebShop-style online store. Each turn you see the "
            "current web page as text, its fields separated by [SEP]. Find and buy the product "
            "that matches the instruction: its type, every required attribute, the required "
            "options (such as size and color) and the price limit.\n"
            "Reply with your reasoning inside <think>...</think> followed by exactly one action "
            "inside <action>...</action>.\n"
            "Actions:\n"
            "- search[query]: type a query into the search box (search page only);\n"
            "- click[text]: click a clickable on the page: a product id such as b0abc12345 in "
            "the results, next > or < prev to turn pages, back to search, an option value such "
            "as large or navy blue, description, features, or buy now.\n"
            "Anything else is an invalid action: it is penalised and changes nothing. Clicking "
            "buy now ends the episode and scores the purchase; after "
            f"{self.max_turns} turns the episode ends with no purchase."
        )

    def domain_description(self) -> str:
        return (
            "WebShop-style online shopping. The agent reads an instruction naming a product type, "
            "required attributes, required options and a price limit; it searches a catalog "
            "(BM25 over titles, descriptions and features; 10 results per page, 50 at most), "
            "opens items, selects option values (one per dimension such as size, color, flavor) "
            "and clicks buy now. The purchase scores type_match * (matched attributes + "
            "matched options + price within limit) / (required attributes + required options + 1); "
            "only a perfect score counts as success. Typical errors: a vague or wrong query, "
            "opening an item of another product type or one lacking a required attribute, "
            "leaving an option unselected or picking the wrong value, buying above the price "
            "limit, and paging or reading sub-pages without progress."
        )

    def workflow(self, task: Task) -> list[str]:
        goal = Goal.from_spec(task.spec)
        name = TYPES_BY_KEY[goal.type_key].name
        steps = [
            f"Search with the required attributes followed by the product type, e.g. search[{goal.query}].",
            (
                f"In the results, open an item whose title names the product type ({name}) and whose "
                f"price is below the limit ({goal.price_upper:.2f} dollars); if none on the page fits, "
                "click next > for more results."
            ),
        ]
        if goal.options:
            dims = " and ".join(d for d, _ in goal.options)
            values = ", ".join(v for _, v in goal.options)
            steps.append(
                f"On the item page, click the required {dims} ({values}); an unselected option scores nothing."
            )
        steps += [
            "If the item lacks a required attribute or an option value, click < prev and open another result.",
            "Click buy now only when type, attributes, options and price all match: buying ends the episode.",
        ]
        return steps
