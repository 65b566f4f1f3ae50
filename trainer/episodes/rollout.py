"""Batched rollouts: many episodes advanced in lockstep, one generation call per turn.

Every active episode's next prompt is built by the run's :class:`~trainer.samples.SampleBuilder`
(the same builder that later scores the turn), all prompts of a turn go to the backend in
one batched call, and each sampled response is applied with :func:`envs.base.play_turn`.
The backend may reuse each episode's encoded prefix from turn to turn
(:meth:`~trainer.backend.GenerationBackend.reuse_prefixes`).
The sampled token ids are kept with the turn: they are exactly what gets scored.  An env
that renders images (``env.images``) shows each observation's image to a builder with a
vision codec; the turn keeps it (:attr:`envs.base.Turn.image`) for scoring.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from envs.base import StepResult, Task, TextEnv, Turn, finish_episode, play_turn
from trainer.episodes.samples import SampleBuilder, Trajectory
from trainer.models.chat import encode
from trainer.models.generation import GenerationBackend, request_seed


@dataclass(frozen=True)
class Sampling:
    """Decoding settings of one rollout call (temperature 0 = greedy)."""

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0


@dataclass
class _Live:
    """One episode in flight."""

    env: TextEnv
    task: Task
    skill: str | None
    observation: str
    first_observation: str
    turns: list[Turn]
    response_ids: list[list[int]]
    logprobs: list[tuple[float, ...]]
    last: StepResult | None = None

    @property
    def done(self) -> bool:
        return self.last is not None and (self.last.done or len(self.turns) >= self.env.max_turns)


def collect(
    make_env: Callable[[], TextEnv],
    tasks: Sequence[Task],
    builder: SampleBuilder,
    backend: GenerationBackend,
    sampling: Sampling,
    skills: Sequence[str | None] | None = None,
    seed: int | None = None,
    forced: Sequence[Sequence[str]] | None = None,
    first: int = 0,
) -> tuple[list[Trajectory], int]:
    """Play one episode per entry of ``tasks`` (repeat a task N times for a GRPO group).

    ``skills[i]`` (None = none) is spliced into episode i's actor context (Skill-GRPO,
    Skill-Prompt).  ``seed`` makes sampling reproducible: episode i's request at turn r is
    seeded with :func:`~trainer.backend.request_seed` ``(seed, r, first + i)``, so the
    episodes of a group draw independent samples and an episode's do not depend on the
    others in the call (None = unseeded); ``first``: the index of ``tasks[0]`` in a longer
    list this call plays a block of (a data-parallel rank's share of an evaluation panel).
    ``forced[i]``: response texts played first in episode i, as if the policy had written
    them (their turns are part of the trajectory; the recovery protocol's perturbed start).
    Returns the trajectories in input order and the number of generated tokens.
    """
    skills = [None] * len(tasks) if skills is None else list(skills)
    forced = [()] * len(tasks) if forced is None else list(forced)
    if len(skills) != len(tasks) or len(forced) != len(tasks):
        raise ValueError(f"{len(skills)} skills and {len(forced)} forced starts for {len(tasks)} tasks")
    live = []
    for task, skill, responses in zip(tasks, skills, forced):
        env = make_env()
        obs = env.reset(task)
        ep = _Live(env, task, skill, obs, obs, [], [], [])
        for response in responses:
            if ep.done:
                raise ValueError(f"the forced start of {task.id!r} ends the episode early")
            turn, ep.last = play_turn(env, ep.observation, response)
            ep.turns.append(turn)
            ep.response_ids.append(encode(builder.tokenizer, response))
            ep.logprobs.append(())  # not sampled
            ep.observation = ep.last.observation
        live.append(ep)
    generated, turn_index = 0, 0
    with backend.reuse_prefixes():
        while active := [i for i, ep in enumerate(live) if not ep.done]:
            shown = [live[i].env.image() if live[i].env.images else None for i in active]
            inputs = [builder.rollout_input(live[i].task, live[i].turns, live[i].response_ids,
                                            live[i].observation, live[i].skill, image)
                      for i, image in zip(active, shown)]
            pictures = [images for _, images in inputs]
            outs = backend.generate(
                [prompt for prompt, _ in inputs], max_new_tokens=sampling.max_new_tokens,
                temperature=sampling.temperature, top_p=sampling.top_p,
                seeds=None if seed is None else [request_seed(seed, turn_index, first + i) for i in active],
                images=pictures if any(pictures) else None,
            )
            for i, out, image in zip(active, outs, shown):
                ep = live[i]
                turn, ep.last = play_turn(ep.env, ep.observation, out.text, image)
                ep.turns.append(turn)
                ep.response_ids.append(out.token_ids)
                ep.logprobs.append(out.logprobs)
                ep.observation = ep.last.observation
                generated += len(out.token_ids)
            turn_index += 1
    trajectories = [
        Trajectory(finish_episode(ep.task, ep.turns, ep.first_observation, ep.last),
                   tuple(map(tuple, ep.response_ids)), tuple(ep.logprobs))
        for ep in live
    ]
    return trajectories, generated
