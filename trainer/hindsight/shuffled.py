"""The shuffled-skills control: each trajectory's teacher reads another family's hindsight.

SEED's internalization test (issue 44) asks whether OPD moves the no-skill policy toward the
skilled one because the skill carries a lesson.  Its control keeps everything of the run (the
writer, the gate, the teacher context, the token budget) and breaks only the pairing: each
trajectory is given the hindsight a writer wrote on a trajectory of ANOTHER family of tasks
(:meth:`envs.base.TextEnv.family`: on EZPoints' deck rules, a skill whose lesson names the
other operator).  Where the env defines no families each task is its own family, so the skill
is another task's.  Donors come from the batch and from a bank of the last
:data:`BANK` valid hindsights of earlier batches (a batch of one family has no donor in
itself); a trajectory without a donor gets an invalid hindsight (no OPD for it, counted in
``writer/invalid_rate`` like any writer failure).  The donor's error turn is dropped (it
belongs to the donor's trajectory): a shuffled hindsight carries its Positive skill only.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence

from envs.base import Hindsight, TextEnv, lesson_donor
from trainer.episodes.samples import Trajectory

BANK = 64  # valid hindsights of earlier batches kept as donors


class ShuffledSkills:
    """Wraps a writer (``inner``); ``write`` gives trajectory i the Positive skill ``inner``
    wrote on a trajectory of another family (module docstring).  Other attributes (a self
    writer's ``frozen`` snapshot, ``restore``, its ``backend``) are the inner writer's."""

    def __init__(self, inner, env: TextEnv):
        self.inner, self.env = inner, env
        self.kind = inner.kind
        self.bank: deque[tuple[str, str, Hindsight]] = deque(maxlen=BANK)  # (family, task id, h)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def family(self, traj: Trajectory) -> str:
        task = traj.episode.task
        found = self.env.family(task)
        return task.id if found is None else found

    def write(self, trajectories: Sequence[Trajectory], seed: int | None = None) -> list[Hindsight]:
        own = self.inner.write(trajectories, seed=seed)
        batch = [(self.family(t), t.episode.task.id, h) for t, h in zip(trajectories, own, strict=True)]
        pool = list(self.bank) + [item for item in batch if item[2].valid]
        families, ids = [f for f, _, _ in pool], [i for _, i, _ in pool]
        rng = random.Random(f"shuffled-skills:{seed}")
        out = []
        for family, task_id, _ in batch:
            j = lesson_donor(family, task_id, families, ids, False, rng)
            donor = pool[j][2] if j is not None else None
            out.append(Hindsight(donor.positive_skill, raw=donor.raw) if donor is not None
                       else Hindsight(positive_skill="", valid=False))
        self.bank.extend(item for item in batch if item[2].valid)
        return out

    def on_update(self, step: int, policy) -> None:
        self.inner.on_update(step, policy)
