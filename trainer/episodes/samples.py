"""From trajectories to token sequences: prompts, context modes and skill splicing.

DESIGN.md, "Trajectory to training samples" and "Skill splicing".  One builder serves
rollouts and scoring, so the prompt a response was sampled from is, token for token, the
context it is scored in.  Sequences are concatenations of token-id pieces (chat messages,
then the sampled response ids unchanged); response text is never re-tokenised.

Chat format (ChatML, as the tokenizers of :mod:`trainer.models`)::

    <|im_start|>system\n{env.system_prompt()}<|im_end|>\n
    <|im_start|>user\n{task}{skill block}{history block}## Observation\n{obs}<|im_end|>\n
    <|im_start|>assistant\n{response token ids}

Context modes (``EnvConfig.context``):

* ``window`` (verl-agent / OPID): one sample per turn t.  The user message holds the task,
  the last N (observation, action) pairs as text (the observation without its admissible-
  commands line; the parsed action, or
  the raw response when it did not parse), and the current observation.
* ``full``: the episode is one chat: user(task + obs_0), assistant(y_0), user(obs_1),
  assistant(y_1), ...; one forward pass scores every turn.  Each past response appears as
  its sampled ids followed by ``<|im_end|>\n`` (or just ``\n`` when the policy itself
  sampled ``<|im_end|>``).

Skill splicing H(h, s) (SEED Eq. Teacher, ETRO z+/z-): the skill goes into the user message
that carries the task, under :data:`SKILL_HEADER`, in both modes.  When a prompt exceeds
``max_prompt_tokens`` the oldest (observation, action) pairs are dropped first; the task,
the skill and the current observation are never cut (:class:`PromptTooLong` if they alone
do not fit).  In ``full`` mode turn t keeps pairs k_t..t-1 for the smallest fitting k_t;
k_t never decreases with t, so turns sharing k_t share one sequence.  With a turn-0 prompt
the two modes give the same tokens.

Teacher contexts (``added_skill``): truncation is decided once, on the student's context
(its own ``skill``, e.g. Skill-GRPO's rollout skill, or none), and the teacher's skill is
spliced on top of exactly that history, so that Delta measures the skill and nothing else.
The teacher's prompt may therefore exceed ``max_prompt_tokens`` by the skill's length; the
skill has its own budget (``writer.max_skill_tokens``, cut by :func:`cut_skill` in
``trainer/rl.py``, counted in ``skill/cut_count``) and never raises :class:`PromptTooLong`.

Action mask: 1 on exactly the tokens the policy sampled (every response token, including
``<|im_end|>`` when the policy sampled it, since it has a behaviour log-prob); 0 on system,
task, skill, observations, template-appended end-of-turn tokens and padding.  ``turn_ids``
is the turn index on those tokens and -1 elsewhere.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from transformers import PreTrainedTokenizerBase

from envs.base import Episode, Task, Turn, without_admissible
from trainer.models.chat import IM_END, IM_START, encode, message_ids

SKILL_HEADER = "\n\n## Hindsight skill\n"


HISTORY_HEADER = "\n\n## Previous steps ({shown} most recent of {taken})\n"


OBSERVATION_HEADER = "\n\n## Observation\n"


CONTEXT_MODES = ("window", "full")


class PromptTooLong(ValueError):
    """The parts of a prompt that are never cut (system, task, skill, current observation)
    exceed ``max_prompt_tokens``."""


class PromptSource(Protocol):
    """What the builder needs from a :class:`envs.base.TextEnv`."""

    def system_prompt(self) -> str: ...
    def task_instruction(self, task: Task) -> str: ...
    def format_observation(self, observation: str) -> str: ...


@dataclass(frozen=True)
class Trajectory:
    """An :class:`Episode` plus the sampled response token ids of each turn.

    ``response_ids[t]`` are the ids the backend returned for ``episode.turns[t]`` (the
    tokens that get scored); ``logprobs[t]`` the log-probs the backend sampled them with
    (:attr:`trainer.backend.Generation.logprobs`; empty for a turn it did not sample, e.g.
    a demonstration or a forced start), or ``()`` for a trajectory without any.
    """

    episode: Episode
    response_ids: tuple[tuple[int, ...], ...]
    logprobs: tuple[tuple[float, ...], ...] = ()

    def __post_init__(self):
        ids = tuple(tuple(int(i) for i in r) for r in self.response_ids)
        object.__setattr__(self, "response_ids", ids)
        if len(ids) != len(self.episode.turns):
            raise ValueError(f"{len(ids)} response id lists for {len(self.episode.turns)} turns")
        lps = tuple(tuple(float(x) for x in r) for r in self.logprobs)
        object.__setattr__(self, "logprobs", lps)
        if lps and (len(lps) != len(ids) or any(r and len(r) != len(i) for r, i in zip(lps, ids))):
            raise ValueError("logprobs must give each sampled turn one log-prob per response id")

    @property
    def task(self) -> Task:
        return self.episode.task

    @property
    def turns(self) -> list[Turn]:
        return self.episode.turns


@dataclass(frozen=True)
class TokenSequence:
    """One model input: ``input_ids`` [L] with ``action_mask`` [L] (1 = scored sampled
    token) and ``turn_ids`` [L] (turn index on scored tokens, -1 elsewhere); ``traj`` is the
    row of the trajectory it belongs to; ``images`` those its image placeholders stand for."""

    input_ids: tuple[int, ...]
    action_mask: tuple[int, ...]
    turn_ids: tuple[int, ...]
    traj: int = 0
    # the images of the sequence's observations, in the order of their placeholders
    # (:mod:`trainer.vision`); empty for text
    images: tuple = ()

    def __len__(self) -> int:
        return len(self.input_ids)

    def action_tokens(self) -> list[tuple[int, int]]:
        """(turn, token id) of every scored token, in sequence order."""
        return [(t, i) for i, m, t in zip(self.input_ids, self.action_mask, self.turn_ids) if m]


def join_skills(*skills: str | None) -> str | None:
    """The non-empty ``skills`` joined by newlines (a rollout skill, then a teacher's); None
    when there is none."""
    parts = [s for s in skills if s]
    return "\n".join(parts) if parts else None


def cut_skill(
    tokenizer: PreTrainedTokenizerBase, text: str | None, max_tokens: int
) -> tuple[str | None, bool]:
    """``text`` cut to its first ``max_tokens`` tokens (a skill's own budget,
    ``writer.max_skill_tokens``) and whether it was cut; None stays None."""
    if not text:
        return text, False
    ids = encode(tokenizer, text)
    if len(ids) <= max_tokens:
        return text, False
    return tokenizer.decode(ids[:max_tokens]), True


def task_message(
    task_text: str, observation: str, skill: str | None = None, history: str = ""
) -> str:
    """The user message that carries the task: task, H(., skill), history, observation."""
    skill_block = f"{SKILL_HEADER}{skill.strip()}" if skill else ""
    return f"{task_text}{skill_block}{history}{OBSERVATION_HEADER}{observation}"


def history_block(turns: Sequence[Turn], taken: int) -> str:
    """The window context's text for (observation, action) pairs ``turns``."""
    if not turns:
        return ""
    lines = [
        f"Observation: {without_admissible(t.observation)}\nAction: {t.action or t.response.strip()}"
        for t in turns
    ]
    return HISTORY_HEADER.format(shown=len(turns), taken=taken) + "\n".join(lines)


@dataclass
class _FullChat:
    """The pieces of one ``full``-mode chat: observations o_0..o_t, the ids of each past
    (response, next observation) pair, and the task message per truncation start k."""

    task: Task
    skill: str | None
    observations: list[str]
    pairs: list[list[int]]
    images: list = field(default_factory=list)  # of each observation (None: no image)
    first_user: dict[int, list[int]] = field(default_factory=dict)
    # a teacher's skill on top of ``skill``: spliced into the prompts, never deciding k_t
    added: str | None = None
    spliced_user: dict[int, list[int]] = field(default_factory=dict)


class SampleBuilder:
    """Prompts for rollouts and token sequences for scoring, in one context mode.

    ``env`` supplies ``system_prompt``/``task_instruction``/``format_observation``.
    ``history_window`` is N of the window mode; ``max_prompt_tokens`` bounds every prompt.
    ``vision`` (a :class:`trainer.vision.VisionCodec`): observations that have an image show
    its placeholder before their text (the current one in ``window`` mode, every kept one in
    ``full`` mode; the window history stays text) and sequences carry the images.
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        env: PromptSource,
        context: str = "window",
        history_window: int = 2,
        max_prompt_tokens: int = 2048,
        vision=None,
    ):
        if context not in CONTEXT_MODES:
            raise ValueError(f"unknown context {context!r}; valid: {', '.join(CONTEXT_MODES)}")
        if history_window < 0 or max_prompt_tokens < 1:
            raise ValueError(
                "need history_window >= 0 and max_prompt_tokens >= 1, "
                f"got {history_window}, {max_prompt_tokens}"
            )
        self.tokenizer, self.env, self.context = tokenizer, env, context
        self.history_window, self.max_prompt_tokens = history_window, max_prompt_tokens
        self.vision = vision
        self._gen = encode(tokenizer, f"{IM_START}assistant\n")
        self._end = encode(tokenizer, f"{IM_END}\n")
        self._newline = encode(tokenizer, "\n")
        self._im_end_id = tokenizer.convert_tokens_to_ids(IM_END)
        self._system = message_ids(tokenizer, "system", env.system_prompt())

    # -- rollouts ------------------------------------------------------------------------
    def rollout_input(
        self,
        task: Task,
        turns: Sequence[Turn],
        response_ids: Sequence[Sequence[int]],
        observation: str,
        skill: str | None = None,
        image=None,
    ) -> tuple[list[int], tuple]:
        """Token ids of the prompt for the next turn, ending with ``<|im_start|>assistant\\n``,
        and the images its placeholders stand for, in order.

        ``turns``/``response_ids``: the turns played so far and their sampled ids;
        ``observation``: the current observation (``image``: its image, shown with a
        vision codec); ``skill``: spliced in when given (Skill-Prompt baseline, teacher
        contexts)."""
        if len(turns) != len(response_ids):
            raise ValueError(f"{len(response_ids)} response id lists for {len(turns)} turns")
        if self.context == "window":
            return (self._window_prompt(task, turns, observation, skill, image=image),
                    self._shown((image,)))
        chat = self._full_pieces(task, turns, response_ids, observation, skill, image)
        start = self._full_start(chat, len(turns))
        return self._full_prefix(chat, start, len(turns)), self._shown(chat.images[start:])

    def _shown(self, images: Sequence) -> tuple:
        """The images among ``images`` that the prompt shows (none without a codec)."""
        return tuple(i for i in images if i is not None) if self.vision is not None else ()

    def _observation(self, observation: str, image=None) -> str:
        """An observation's message text: its image's placeholder (with a codec), its text."""
        text = self.env.format_observation(observation)
        if self.vision is None or image is None:
            return text
        return f"{self.vision.placeholder(image)}\n{text}"

    # -- scoring -------------------------------------------------------------------------
    def build(
        self,
        traj: Trajectory,
        skill: str | None = None,
        index: int = 0,
        added_skill: str | None = None,
    ) -> list[TokenSequence]:
        """Scoring sequences of one trajectory (``index`` = its batch row): one per turn in
        ``window`` mode, one per truncation group (usually one) in ``full`` mode.

        ``skill`` is part of the scored context (decides the truncation); ``added_skill`` (a
        teacher's) is spliced after it into the prompts whose history ``skill`` alone decided."""
        if self.context == "window":
            return [
                self._window_sample(traj, t, skill, index, added_skill)
                for t in range(len(traj.turns))
            ]
        return self._full_samples(traj, skill, index, added_skill)

    def build_batch(
        self,
        trajectories: Sequence[Trajectory],
        skills: Sequence[str | None] | None = None,
        added_skills: Sequence[str | None] | None = None,
    ) -> list[TokenSequence]:
        """All sequences of a batch; trajectory b gets ``traj = b``; ``skills[b]`` (None = no
        skill, i.e. the student context) is spliced into every context of trajectory b, and
        ``added_skills[b]`` (a teacher's) on top of it without changing the history kept."""
        n = len(trajectories)
        skills = [None] * n if skills is None else list(skills)
        added = [None] * n if added_skills is None else list(added_skills)
        if len(skills) != n or len(added) != n:
            raise ValueError(
                f"{len(skills)} skills and {len(added)} added skills for {n} trajectories"
            )
        return [
            s
            for b, (tr, sk, ad) in enumerate(zip(trajectories, skills, added))
            for s in self.build(tr, sk, b, ad)
        ]

    # -- window mode ---------------------------------------------------------------------
    def _window_prompt(
        self,
        task: Task,
        turns: Sequence[Turn],
        observation: str,
        skill: str | None,
        added: str | None = None,
        image=None,
    ) -> list[int]:
        """The prompt with the most recent pairs that fit beside ``skill``; ``added`` is then
        spliced in with that same history."""
        task_text = self.env.task_instruction(task)
        current = self._observation(observation, image)

        def prompt_of(history: str, text: str | None) -> list[int]:
            user = message_ids(self.tokenizer, "user", task_message(task_text, current, text, history))
            return self._system + user + self._gen

        for shown in range(min(self.history_window, len(turns)), -1, -1):
            history = history_block(turns[len(turns) - shown :], len(turns))
            prompt = prompt_of(history, skill)
            if len(prompt) <= self.max_prompt_tokens:
                return prompt_of(history, join_skills(skill, added)) if added else prompt
        raise self._too_long(len(prompt))

    def _window_sample(
        self, traj: Trajectory, t: int, skill: str | None, index: int, added: str | None = None
    ) -> TokenSequence:
        image = traj.turns[t].image
        prompt = self._window_prompt(
            traj.task, traj.turns[:t], traj.turns[t].observation, skill, added, image
        )
        response = list(traj.response_ids[t])
        return TokenSequence(
            tuple(prompt + response),
            (0,) * len(prompt) + (1,) * len(response),
            (-1,) * len(prompt) + (t,) * len(response),
            index,
            self._shown((image,)),
        )

    # -- full mode -----------------------------------------------------------------------
    def _full_pieces(
        self,
        task: Task,
        turns: Sequence[Turn],
        response_ids: Sequence[Sequence[int]],
        observation: str,
        skill: str | None,
        image=None,
    ) -> _FullChat:
        """Observations o_0..o_t (o_t = ``observation``, ``image`` its image) and the ids of
        each past pair i: y_i + end-of-turn + user(o_{i+1}) + generation prompt."""
        observations = [t.observation for t in turns] + [observation]
        images = [t.image for t in turns] + [image]
        pairs = [
            list(r)
            + self._end_of(r)
            + message_ids(self.tokenizer, "user", self._observation(o, i))
            + self._gen
            for r, o, i in zip(response_ids, observations[1:], images[1:])
        ]
        return _FullChat(task, skill, observations, pairs, images)

    def _end_of(self, response: Sequence[int]) -> list[int]:
        return self._newline if response and response[-1] == self._im_end_id else self._end

    def _first_user(self, chat: _FullChat, k: int, spliced: bool = False) -> list[int]:
        """The task message when pairs before k are dropped: task, skill, o_k (memoised);
        ``spliced``: with the teacher's added skill after the skill."""
        if spliced and chat.added:
            memo, skill = chat.spliced_user, join_skills(chat.skill, chat.added)
        else:
            memo, skill = chat.first_user, chat.skill
        if k not in memo:
            obs = self._observation(chat.observations[k], chat.images[k])
            text = task_message(self.env.task_instruction(chat.task), obs, skill)
            memo[k] = message_ids(self.tokenizer, "user", text)
        return memo[k]

    def _full_prefix(self, chat: _FullChat, start: int, t: int) -> list[int]:
        """Prompt of turn t keeping pairs start..t-1 (with the added skill, if any)."""
        body = [i for pair in chat.pairs[start:t] for i in pair]
        return self._system + self._first_user(chat, start, spliced=True) + self._gen + body

    def _full_start(self, chat: _FullChat, t: int) -> int:
        """k_t: the fewest oldest pairs to drop so that turn t's prompt fits."""
        tail = sum(len(p) for p in chat.pairs[:t])
        for k in range(t + 1):
            length = len(self._system) + len(self._first_user(chat, k)) + len(self._gen) + tail
            if length <= self.max_prompt_tokens:
                return k
            tail -= len(chat.pairs[k]) if k < t else 0
        raise self._too_long(length)

    def _full_samples(
        self, traj: Trajectory, skill: str | None, index: int, added: str | None = None
    ) -> list[TokenSequence]:
        n = len(traj.turns)
        if n == 0:
            return []
        chat = self._full_pieces(
            traj.task, traj.turns[:-1], traj.response_ids[:-1], traj.turns[-1].observation, skill,
            traj.turns[-1].image,
        )
        chat.added = added  # k_t below is decided without it
        starts = [self._full_start(chat, t) for t in range(n)]
        groups = [t for t in range(n) if t == 0 or starts[t] != starts[t - 1]] + [n]
        return [
            self._full_sequence(traj, chat, starts[a], a, b, index)
            for a, b in itertools.pairwise(groups)
        ]

    def _full_sequence(
        self, traj: Trajectory, chat: _FullChat, start: int, first: int, last: int, index: int
    ) -> TokenSequence:
        """Turns first..last-1 scored in one chat that keeps pairs from ``start`` on."""
        ids = self._full_prefix(chat, start, first)
        mask, turn = [0] * len(ids), [-1] * len(ids)
        for t in range(first, last):
            response = list(traj.response_ids[t])
            ids, mask, turn = ids + response, mask + [1] * len(response), turn + [t] * len(response)
            if t + 1 < last:
                rest = chat.pairs[t][len(response) :]
                ids, mask, turn = ids + rest, mask + [0] * len(rest), turn + [-1] * len(rest)
        return TokenSequence(tuple(ids), tuple(mask), tuple(turn), index,
                             self._shown(chat.images[start:last]))

    def _too_long(self, length: int) -> PromptTooLong:
        return PromptTooLong(
            f"prompt of {length} tokens exceeds max_prompt_tokens={self.max_prompt_tokens} even with no "
            "history; the task, skill and current observation are never cut: raise model.max_prompt_tokens"
        )


def assert_same_actions(student: Sequence[TokenSequence], teacher: Sequence[TokenSequence]) -> None:
    """Teacher and student sequences must score the same sampled tokens (DESIGN.md: a teacher
    differs from its student only in the context).  Compares, per trajectory, the (turn,
    token) lists in turn order; raises ``AssertionError`` naming the first difference."""

    def per_traj(seqs):
        out: dict[int, list[tuple[int, int]]] = {}
        for s in seqs:
            out.setdefault(s.traj, []).extend(s.action_tokens())
        # sorted() is stable: tokens of one turn keep their order
        return {b: sorted(tokens, key=lambda x: x[0]) for b, tokens in out.items()}

    a, b = per_traj(student), per_traj(teacher)
    if a.keys() != b.keys():
        raise AssertionError(f"teacher/student trajectories differ: {sorted(a)} vs {sorted(b)}")
    for traj in a:
        if a[traj] != b[traj]:
            pos = next(
                (i for i, (x, y) in enumerate(zip(a[traj], b[traj])) if x != y),
                min(len(a[traj]), len(b[traj])),
            )
            raise AssertionError(
                f"trajectory {traj}: teacher and student action tokens differ at action token {pos} "
                f"({len(a[traj])} vs {len(b[traj])} tokens); the skill must change the context only"
            )
