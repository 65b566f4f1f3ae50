"""``webshop``: the real WebShop (Yao et al. 2022) text environment behind an HTTP server.

WebShop's own ``web_agent_site`` serves HTML pages; its text environment
(``WebAgentTextEnv``, ``observation_mode="text"``) runs in-process.  The common way to
reach it from another Python environment is AgentGym's ``agentenv-webshop`` server
(``webshop --host 0.0.0.0 --port 36001``), a thin FastAPI wrapper around that text
environment.  **Assumption:** ``url`` (or env var ``WEBSHOP_URL``) points at such a server,
which exposes

    POST /create                       -> env_idx (int)
    POST /reset  {"env_idx", "session_id"} -> [observation, null]
    POST /step   {"env_idx", "action"}     -> {"state", "reward", "done", "info"}
    GET  /available_actions?env_idx=N  -> {"has_search_bar": bool, "clickables": [str]}
    GET  /instruction_text?env_idx=N   -> str
    GET  /state?env_idx=N              -> {"url", "html", "instruction_text"}
    POST /close  {"env_idx"}           -> {"closed": bool}

Actions are WebShop's ``search[keywords]`` and ``click[value]``, wrapped in the
repository's ``<action>..</action>`` tags.  A click must name one of the current
clickables and a search needs the search bar; anything else is an invalid step handled
here (penalty, page unchanged) and never sent.  The reward of the final step is WebShop's
score in [0, 1]; success is score 1.  Tasks are WebShop sessions (goal indices after the
server's fixed shuffle): ``test`` = sessions 0-499 (the 500 evaluation goals used by ETRO
and verl-agent), ``train`` = sessions 500 .. 500 + n_train - 1 (default 2,400 as in ETRO).
An instruction is known only once its session is reset (``task.instruction`` holds a
placeholder; :meth:`WebShopEnv.task_instruction` returns the real text afterwards).

``state_key`` is the page URL (session, page, query, product, chosen options); ``distance``
and ``plan`` are ``None``.  The scripted expert is a heuristic (search the instruction,
open the first result, buy), not an oracle.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from envs.adapters import http_json, option_or_env
from envs.base import StepResult, Task, TextEnv

ADAPTER = "webshop"
ACTION_RE = re.compile(r"^(search|click)\[(.*)\]$", re.DOTALL)
PRODUCT_RE = re.compile(r"^b[0-9a-z]{9}$")  # WebShop product ids (ASINs), lowercased


def parse_webshop_action(action: str | None) -> tuple[str, str] | None:
    """``("search" | "click", argument)`` of ``search[..]`` / ``click[..]``; None otherwise."""
    match = ACTION_RE.match(action.strip()) if action else None
    if not match or not match.group(2).strip():
        return None
    return match.group(1), match.group(2).strip()


class WebShopEnv(TextEnv):
    """The WebShop text environment through an AgentGym-style server; see the module doc."""

    name = "webshop"
    default_max_turns = 15
    splits = ("train", "test")

    def __init__(self, url: str | None = None, max_turns: int = 0, invalid_penalty: float = 0.0,
                 n_train: int = 2400, timeout_s: float = 60.0):
        super().__init__(max_turns=max_turns, invalid_penalty=invalid_penalty)
        self.url = option_or_env(ADAPTER, url, "WEBSHOP_URL", "url", "http://127.0.0.1:36001").rstrip("/")
        self.n_train, self.timeout_s = n_train, timeout_s
        self.env_idx: int | None = None
        self.instruction = ""
        self.observation = ""
        self.available: dict = {"has_search_bar": False, "clickables": []}
        self.done = False
        self.score = 0.0

    # -- HTTP --------------------------------------------------------------------------
    def _get(self, path: str):
        return http_json(ADAPTER, f"{self.url}/{path}?env_idx={self.env_idx}", None, self.timeout_s)

    def _post(self, path: str, payload: dict):
        return http_json(ADAPTER, f"{self.url}/{path}", payload, self.timeout_s)

    def close(self) -> None:
        if self.env_idx is not None:
            self._post("close", {"env_idx": self.env_idx})
            self.env_idx = None

    # -- tasks -------------------------------------------------------------------------
    def panel(self, split: str) -> list[Task]:
        self.check_split(split)
        sessions = range(500) if split == "test" else range(500, 500 + self.n_train)
        return [Task(f"webshop/{split}/{s:05d}", self.name, split,
                     f"(WebShop session {s}; instruction given by the server at reset)",
                     spec={"session": s}) for s in sessions]

    def task_instruction(self, task: Task) -> str:
        return self.instruction if task == self.task and self.instruction else task.instruction

    # -- episode -----------------------------------------------------------------------
    def reset(self, task: Task, replay: Sequence[str] = ()) -> str:
        if self.env_idx is None:
            self.env_idx = int(self._post("create", {}))
        self.task, self.turn, self.done, self.score = task, 0, False, 0.0
        reply = self._post("reset", {"env_idx": self.env_idx, "session_id": task.spec["session"]})
        self.instruction = str(self._get("instruction_text"))
        self._update(reply[0] if isinstance(reply, list) else str(reply))
        for action in replay:
            self.step(self.response_for(action))
        return self.format_observation(self.observation)

    def _update(self, observation: str) -> None:
        self.observation = observation
        self.available = self._get("available_actions")

    def admissible_actions(self) -> list[str]:
        """``search[<keywords>]`` when the search bar is shown, then ``click[..]`` per clickable."""
        actions = ["search[<keywords>]"] if self.available.get("has_search_bar") else []
        clickables = self.available.get("clickables", [])
        return actions + [f"click[{c}]" for c in clickables if c != "search"]

    def format_observation(self, observation: str) -> str:
        return f"{observation}\nAdmissible actions: {', '.join(self.admissible_actions())}"

    def _admissible(self, parsed: tuple[str, str] | None) -> str | None:
        """The canonical action for ``parsed`` (a click names the clickable exactly as the
        server lists it, lower case) or None when it is not admissible here."""
        if parsed is None:
            return None
        kind, arg = parsed
        if kind == "search":
            return f"search[{arg}]" if self.available.get("has_search_bar") else None
        clickables = {c.lower(): c for c in self.available.get("clickables", []) if c != "search"}
        return f"click[{clickables[arg.lower()]}]" if arg.lower() in clickables else None

    def step(self, response_text: str) -> StepResult:
        if self.task is None or self.done:
            raise RuntimeError("step() called before reset() or after the episode ended")
        action = self._admissible(parse_webshop_action(self.parse_action(response_text)))
        self.turn += 1
        reward = -self.invalid_penalty
        if action:
            reply = self._post("step", {"env_idx": self.env_idx, "action": action})
            reward, self.done = float(reply["reward"]), bool(reply["done"])
            self.score = reward if self.done else 0.0
            self._update(str(reply["state"]))
        success = self.done and self.score >= 1.0
        self.done = self.done or self.turn >= self.max_turns
        info = {"state_key": self.state_key(), "distance": None, "plan": None,
                "valid": action is not None, "action": action or "", "score": self.score}
        observation = self.format_observation(self.observation)
        return StepResult(observation, reward, self.done, success, info)

    # -- privileged facts --------------------------------------------------------------
    def state_key(self) -> str:
        return str(self._get("state").get("url", ""))

    def distance_to_goal(self) -> int | None:
        return None

    def expert_action(self, epsilon: float = 0.0, rng: random.Random | None = None) -> str:
        """Heuristic: search the instruction, open the first product, click "buy now"
        (WebShop's rule baseline); with probability ``epsilon`` a random admissible click."""
        rng = rng or random.Random(f"{self.task.id}/expert/{self.turn}")
        clickables = [c for c in self.available.get("clickables", []) if c != "search"]
        if clickables and rng.random() < epsilon:
            return f"click[{rng.choice(clickables)}]"
        if self.available.get("has_search_bar"):
            return f"search[{self.instruction.lower()}]"
        if "buy now" in clickables:
            return "click[buy now]"
        products = [c for c in clickables if PRODUCT_RE.match(c.lower())]
        return f"click[{products[0]}]" if products else "click[back to search]"

    # -- prompt pieces -----------------------------------------------------------------
    def system_prompt(self) -> str:
        return (
            "You are shopping on WebShop. Follow the instruction to find and buy the product "
            "that matches every attribute, option and the price limit. Each turn, reason "
            "inside <think>..</think>, then give exactly one action inside <action>..</action>: "
            "search[keywords] when the search bar is available, or click[value] where value is "
            "one of the admissible clickables (products, options such as size or colour, "
            "'buy now', 'next >', '< prev', 'back to search', 'description', 'features')."
        )

    def domain_description(self) -> str:
        return (
            "WebShop: web shopping over about a million real Amazon products. The agent "
            "searches, opens products, selects options (size, colour, ...) and buys; the score "
            "rewards matching attributes, options, type and price. Decisive errors: a search "
            "that drops key attributes, opening a product of the wrong type, buying before "
            "selecting the required options, or buying over the price limit."
        )

    def workflow(self, task: Task) -> list[str]:
        return [
            "Search with the product type plus the instruction's most distinctive attributes.",
            "Open a result whose title matches the product type and attributes; check its price.",
            "Click every option the instruction requires (size, colour, count) on the item page.",
            "Click 'buy now' only when the product, every option and the price all match.",
        ]
