"""Hindsight writers: one interface, ``write(trajectories) -> list[Hindsight]``.

DESIGN.md, "Writers":

* ``self``: the policy's own frozen checkpoint writes the skill with the analyzer prompt
  (SEED's self-evolving analyzer).  ``refresh_every`` = 1 uses the policy as it was at
  rollout time (theta_old); k > 1 refreshes a frozen copy every k updates; 0 never does
  (the staleness ablations).
* ``frozen``: a snapshot fixed for the whole run writes with the same analyzer prompt, from
  the trajectory alone: the policy as it starts RL (after Stage 1) or a saved checkpoint
  (``writer.checkpoint``, with its own tokenizer).  The non-privileged writer that SEED and
  ETRO can share, so a comparison does not measure the writer's privilege.
* ``oracle``: privileged state of a built-in environment (:mod:`envs.oracle`): correct
  skills and the ground-truth first unrecovered decisive error.
* ``external``: an OpenAI-compatible chat endpoint (``vllm serve`` of a large model).
* ``static``: a fixed skill library, retrieved by task-instruction overlap (Skill-SD,
  Skill-GRPO, gated_static, SEED's static-library ablation).
* ``none``: methods without hindsight.

Malformed output is never used silently: it comes back with ``valid=False`` and is counted
(``writer/invalid_rate``); the trainer then gives that trajectory no skill OPD (a valid
output without a boundary, or whose boundary was malformed and dropped, counted in
``writer/boundary_invalid_rate``, keeps Positive guidance throughout, ETRO's k = infinity).
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from envs.base import Hindsight, Task, TextEnv, expert_policy, run_episode
from envs.oracle import Oracle
from trainer.config import WriterConfig
from trainer.episodes.samples import Trajectory
from trainer.hindsight.analyzer import ANALYZER, WriterPrompt, episode_images, writer_prompt
from trainer.models.chat import encode_chat
from trainer.models.constrained import Literal, Text, Turn
from trainer.models.generation import request_seed
from trainer.models.precision import frozen_copy
from trainer.run.checkpoint import load_module

INVALID = Hindsight(positive_skill="", valid=False)

# ANALYZER_FORMAT as a template for format-constrained decoding (``writer.constrained``)
ANALYZER_TEMPLATE = (
    Literal("<positive>"), Text("</positive>"), Literal("\n<error_turn>"), Turn("</error_turn>"),
    Literal("\n<negative>"), Text("</negative>"),
)


class Writer(Protocol):
    kind: str

    def write(self, trajectories: Sequence[Trajectory], seed: int | None = None) -> list[Hindsight]:
        """One hindsight per trajectory; ``seed``: the call's base seed (a sampling writer
        seeds trajectory i's request with ``request_seed(seed, i)``)."""

    def on_update(self, step: int, policy) -> None:
        """Called after RL update ``step`` with the live policy model."""


class NoWriter:
    kind = "none"

    def write(self, trajectories, seed=None):
        return [INVALID for _ in trajectories]

    def on_update(self, step, policy):
        pass


class OracleWriter:
    """Privileged writer of the built-in environments (envs/oracle.py)."""

    kind = "oracle"

    def __init__(self, make_env: Callable[[], TextEnv]):
        self._oracle = Oracle(make_env)

    def write(self, trajectories, seed=None):
        return [self._oracle.write(t.episode) for t in trajectories]

    def on_update(self, step, policy):
        pass


class SelfWriter:
    """The policy's own (frozen) checkpoint as analyzer (SEED Algorithm 1, line 11).

    ``backend_factory(model)`` gives the backend to write with: the policy's own (one engine
    a trial) when ``model`` is the policy, i.e. with ``refresh_every`` = 1; a frozen snapshot
    gets its own, which follows the snapshot's weights when a refresh loads new ones."""

    kind = "self"

    def __init__(self, policy, tokenizer, backend_factory, domain: str, cfg: WriterConfig, max_prompt_tokens: int,
                 vision=None):
        self.tokenizer, self.domain, self.cfg = tokenizer, domain, cfg
        self.max_prompt_tokens, self.vision = max_prompt_tokens, vision
        self.snapshot = policy if cfg.refresh_every == 1 else frozen_copy(policy)
        self.backend = backend_factory(self.snapshot)

    def write(self, trajectories, seed=None):
        prompt = writer_prompt(self.cfg.prompt)
        inputs = [writer_input(self.tokenizer, self.domain, t.episode, self.max_prompt_tokens, self.vision, prompt)
                  for t in trajectories]
        images = [i for _, i in inputs]
        outs = self.backend.generate(
            [p for p, _ in inputs], max_new_tokens=self.cfg.max_new_tokens, temperature=self.cfg.temperature,
            top_p=self.cfg.top_p, stop_strings=prompt.stop, images=images if any(images) else None,
            seeds=None if seed is None else [request_seed(seed, i) for i in range(len(inputs))],
            template=ANALYZER_TEMPLATE if self.cfg.constrained else None,
        )
        return [prompt.parse(o.text, len(t.turns)) for o, t in zip(outs, trajectories)]

    def frozen(self):
        """The frozen snapshot the writer generates with (stale / refresh_every > 1), or None
        when it writes with the live policy (refresh_every = 1)."""
        return None if self.cfg.refresh_every == 1 else self.snapshot

    def restore(self, state_path) -> None:
        """Load a saved frozen snapshot (resume); its backend follows the loaded weights."""
        load_module(self.snapshot, state_path)

    def on_update(self, step: int, policy) -> None:
        every = self.cfg.refresh_every
        if every > 1 and step % every == 0:
            self.snapshot.load_state_dict(policy.state_dict())


class FrozenWriter(SelfWriter):
    """A writer snapshot that never changes: ``policy`` frozen as it is now (the RL
    initialisation), or ``model`` with its own ``tokenizer`` (a checkpoint) when given."""

    kind = "frozen"

    def __init__(self, policy, tokenizer, backend_factory, domain: str, cfg: WriterConfig,
                 max_prompt_tokens: int, model=None, vision=None):
        self.tokenizer, self.domain, self.cfg = tokenizer, domain, cfg
        self.max_prompt_tokens, self.vision = max_prompt_tokens, vision
        self.snapshot = frozen_copy(policy) if model is None else model.eval().requires_grad_(False)
        self.backend = backend_factory(self.snapshot)

    def frozen(self):
        return self.snapshot

    def on_update(self, step: int, policy) -> None:
        pass


def writer_input(tokenizer, domain: str, episode, max_prompt_tokens: int, vision=None,
                 prompt: WriterPrompt = ANALYZER) -> tuple[list[int], tuple]:
    """The writer ``prompt``'s ids for ``episode`` within ``max_prompt_tokens`` and the images
    its placeholders stand for (``vision``: a codec; the first observation's and the last
    state's images, :func:`trainer.samples.episode_images`).  Observations are shortened
    first; a prompt that still does not fit loses its oldest tokens, and then its images, so
    that no placeholder is ever cut."""
    images = episode_images(episode) if vision is not None else ()
    marks = [vision.placeholder(i) for i in images]
    chars = 600
    while True:
        ids = encode_chat(tokenizer, prompt.prompt(domain, episode, chars, marks))
        if len(ids) <= max_prompt_tokens:
            return ids, images
        if chars <= 40:
            if images:  # a cut could split a placeholder run: drop the images instead
                return writer_input(tokenizer, domain, episode, max_prompt_tokens, None, prompt)
            return ids[-max_prompt_tokens:], ()
        chars //= 2


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]+", text.lower()))


class StaticWriter:
    """A fixed skill library: entries ``{"instruction", "skill"}``; each trajectory gets the
    skill of the entry whose instruction shares the most words with its task (Jaccard).
    Entries may name their task's ``family`` (:meth:`~envs.base.TextEnv.family`); with
    ``family`` (the env's) a task is matched among the entries of its own family when there
    are any (EZPoints' deals share one instruction, and another family's lesson is wrong).
    ``allow_empty``: a self-written library may have no valid entry; every trajectory then
    gets an invalid hindsight (counted in ``writer/invalid_rate``)."""

    kind = "static"

    def __init__(self, library: Sequence[dict], allow_empty: bool = False,
                 family: Callable[[Task], str | None] | None = None):
        if not library and not allow_empty:
            raise ValueError("static writer: the skill library is empty")
        self.library = [(_words(e["instruction"]), e["skill"], e.get("family")) for e in library]
        self.entries = [dict(e) for e in library]
        self.family = family
        self.metrics: dict[str, float] = {}

    def retrieve(self, task: Task) -> str:
        if not self.library:
            return ""
        words = _words(task.instruction)
        own = self.family(task) if self.family is not None else None
        entries = [e for e in self.library if own is not None and e[2] == own] or self.library
        best = max(entries, key=lambda e: len(words & e[0]) / max(1, len(words | e[0])))
        return best[1]

    def write(self, trajectories, seed=None):
        skills = [self.retrieve(t.task) for t in trajectories]
        return [Hindsight(positive_skill=s) if s else INVALID for s in skills]

    def on_update(self, step, policy):
        pass


def build_library(make_env: Callable[[], TextEnv], tasks: Sequence[Task]) -> list[dict]:
    """A static library from expert episodes of ``tasks`` annotated by the oracle writer
    (an offline library written once, before training, as in the papers' static baselines)."""
    oracle, env = Oracle(make_env), make_env()
    act = expert_policy(0.0, seed="library")
    return [
        {"instruction": t.instruction, "skill": oracle.write(run_episode(env, t, act)).positive_skill,
         **_family_of(env.family, t)}
        for t in tasks
    ]


def _family_of(family: Callable[[Task], str | None] | None, task: Task) -> dict:
    """``{"family": ...}`` of a library entry of ``task`` when it has one, else ``{}``."""
    found = family(task) if family is not None else None
    return {} if found is None else {"family": found}


def library_from(trajectories: Sequence[Trajectory], hindsights: Sequence[Hindsight],
                 family: Callable[[Task], str | None] | None = None) -> list[dict]:
    """Library entries of the trajectories whose hindsight is valid (one per task: the
    first valid one), with their task's ``family`` where it has one."""
    entries, seen = [], set()
    for traj, h in zip(trajectories, hindsights):
        if h.valid and h.positive_skill and traj.task.id not in seen:
            seen.add(traj.task.id)
            entries.append({"instruction": traj.task.instruction, "skill": h.positive_skill,
                            **_family_of(family, traj.task)})
    return entries


def load_library(path: str) -> list[dict]:
    with open(path) as f:
        entries = json.load(f)
    bad = [i for i, e in enumerate(entries) if not {"instruction", "skill"} <= set(e)]
    if bad:
        raise ValueError(f"skill library {path}: entries {bad[:5]} lack 'instruction' or 'skill'")
    return entries


class ExternalWriter:
    """An OpenAI-compatible ``/chat/completions`` endpoint; the analyzer prompt and format
    are the self writer's.  A call's trajectories are written concurrently, at most
    ``writer.concurrency`` requests in flight, each with its own ``seed`` when the call has
    one (vLLM's server and OpenAI's read it).  Transport errors are retried ``max_retries``
    times with backoff; then (and for malformed output) the trajectory gets an invalid
    Hindsight."""

    kind = "external"

    def __init__(self, domain: str, cfg: WriterConfig):
        if not cfg.endpoint:
            raise ValueError("writer.endpoint is empty: set the chat-completions base URL for the external writer")
        self.domain, self.cfg = domain, cfg

    def _request(self, messages: list[dict], seed: int | None = None) -> str:
        request = {"model": self.cfg.model, "messages": messages,
                   "temperature": self.cfg.temperature, "top_p": self.cfg.top_p,
                   "max_tokens": self.cfg.max_new_tokens}
        if self.cfg.top_k:
            request["top_k"] = self.cfg.top_k
        if seed is not None:
            request["seed"] = seed
        body = json.dumps(request).encode()
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.cfg.api_key_env, "")
        if key:
            headers["Authorization"] = f"Bearer {key}"
        url = self.cfg.endpoint.rstrip("/") + "/chat/completions"
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=self.cfg.timeout_s) as response:
            return json.load(response)["choices"][0]["message"]["content"]

    def write(self, trajectories, seed=None):
        seeds = [None if seed is None else request_seed(seed, i) for i in range(len(trajectories))]
        with ThreadPoolExecutor(max_workers=self.cfg.concurrency) as pool:
            return list(pool.map(self._write_one, trajectories, seeds))

    def _write_one(self, traj: Trajectory, seed: int | None) -> Hindsight:
        prompt, text = writer_prompt(self.cfg.prompt), None
        for attempt in range(self.cfg.max_retries + 1):
            try:
                text = self._request(prompt.prompt(self.domain, traj.episode, 600, ()), seed)
                break
            except (urllib.error.URLError, TimeoutError, KeyError, ValueError):
                time.sleep(min(2.0**attempt, 10.0) * 0.1)
        return INVALID if text is None else prompt.parse(text, len(traj.turns))

    def on_update(self, step, policy):
        pass


class PrivilegedContext:
    """OPSD's privileged teacher context: the expert's full plan for the task from its
    initial state ("Reference solution: ..."), cached per task."""

    def __init__(self, make_env: Callable[[], TextEnv]):
        self._env, self._cache = make_env(), {}
        self._act = expert_policy(0.0, seed="privileged")

    def __call__(self, task: Task) -> str:
        if task.id not in self._cache:
            episode = run_episode(self._env, task, self._act)
            self._cache[task.id] = "Reference solution: " + "; ".join(episode.actions)
        return self._cache[task.id]
