"""ETRO's controlled recovery suite (App. C.2, Table 6), on any environment with admissible
actions and a distance to the goal.

For each held-out task a *pre-registered, plausible, recoverable wrong action* is placed on
the expert's reference trajectory: at a turn t (drawn from the task id, never from a
policy) an admissible action other than the expert's that moves the state away from the
goal (distance after > distance before) while the task stays solvable within the turns
left.  Every actor then continues from that same perturbed state.

The first continuation action is classified from the distance trace, in place of the
paper's blinded evaluator: it *recovers* when it brings the distance below the perturbed
state's, is *invalid* when the environment rejects it, and otherwise (valid, no closer to
the goal) it is a **wrong-branch continuation**.  No torch here.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from envs.base import Task, TextEnv, Turn


@dataclass(frozen=True)
class Perturbation:
    """A task's perturbed start: the expert's actions ``prefix``, then the ``wrong`` one.

    ``distance`` is the distance to the goal after ``wrong`` (before it: ``distance_before``);
    ``expert`` is the expert's action in the state where ``wrong`` was taken."""

    task: Task
    prefix: tuple[str, ...]
    wrong: str
    distance_before: int
    distance: int
    expert: str

    @property
    def actions(self) -> tuple[str, ...]:
        """Every action played before the actor takes over."""
        return (*self.prefix, self.wrong)

    def responses(self, env: TextEnv) -> list[str]:
        """The forced turns as response texts, in the demonstrator's format (with its
        thought), so the actor reads a history like the ones it was trained on.  Plays them
        in ``env`` (a numbered action's number depends on the state it is taken in)."""
        responses = []
        env.reset(self.task)
        for action in self.actions:
            responses.append(env.response_for(action, think=env.demo_thought(self.task)))
            env.step(responses[-1])
        return responses


def reference_actions(env: TextEnv, task: Task) -> list[str]:
    """The expert's actions on ``task`` from its start to the end of the episode."""
    env.reset(task)
    actions = []
    while not env.done and len(actions) < env.max_turns:
        action = env.expert_action()
        actions.append(action)
        env.step(env.response_for(action))
    return actions


def perturb(env: TextEnv, task: Task, seed: str = "recovery") -> Perturbation | None:
    """The task's pre-registered perturbation, or None when no turn of the reference has a
    recoverable wrong action (or the env has no admissible list / distance)."""
    reference = reference_actions(env, task)
    if env.distance_to_goal() != 0:  # the expert did not finish: no reference
        return None
    rng = random.Random(f"{seed}:{task.id}")
    turns = list(range(1, len(reference) - 1))  # one correct move first; never the last move
    rng.shuffle(turns)
    for t in turns:
        env.reset(task, replay=reference[:t])
        before, admissible = env.distance_to_goal(), env.admissible_actions()
        if before is None or not admissible:
            return None
        candidates = [a for a in admissible if a != reference[t]]
        rng.shuffle(candidates)
        for action in candidates:
            env.reset(task, replay=reference[:t])
            env.step(env.response_for(action))
            after = env.distance_to_goal()
            turns_left = env.max_turns - (t + 1)
            if not env.done and after is not None and before < after <= turns_left - 1:
                return Perturbation(task, tuple(reference[:t]), action, before, after, reference[t])
    return None


def recovery_suite(make_env: Callable[[], TextEnv], tasks: Sequence[Task],
                   seed: str = "recovery") -> list[Perturbation]:
    """One perturbation per task that has one, in task order."""
    env = make_env()
    return [p for p in (perturb(env, task, seed) for task in tasks) if p is not None]


def first_action_class(turn: Turn) -> str:
    """``recovers`` / ``invalid`` / ``wrong_branch`` for the actor's first continuation."""
    if not turn.valid:
        return "invalid"
    if turn.distance_before is not None and turn.distance_after is not None \
            and turn.distance_after < turn.distance_before:
        return "recovers"
    return "wrong_branch"
