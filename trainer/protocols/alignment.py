"""ETRO's Fig. 1 protocol: regional alignment of the OPD gaps on a frozen actor.

``hindsight diagnose alignment CONFIG --actor DIR`` loads a trained actor (typically
GRPO-trained) and never updates it: for ``--steps`` batches of the config's training tasks
it plays GRPO groups, lets the chosen writer (``--writer``, default the ETRO family's own)
write Positive and Negative hindsight, scores both teacher contexts against the sampled
tokens (Delta_pos, Delta_neg per turn, the ETRO scoring path) and keeps the per-turn
records.  :func:`analysis.diagnostics.regional_alignment` then estimates GiGPO step
advantages from all turns and correlates them (Spearman, trajectory-cluster bootstrap
intervals) with each Delta in the prefix / error / suffix regions of failed trajectories
with a writer boundary; :func:`reports.figures.regional_alignment` draws the figure.

Writes ``records.parquet`` (every turn, with its response and its trajectory's skills; each
batch's are kept in ``batches/`` as it finishes, and a rerun into the same folder continues),
``alignment.csv``, ``regional_alignment.png/pdf``, ``delta_profile.csv`` and ``gate_over_beta.csv``.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import torch

from trainer.episodes.records import build_records
from trainer.stages.phases import PhaseTimer
from trainer.stages.rl import collect_batch

# The method whose scoring path this protocol uses: Positive and Negative contexts scored
# with the old-policy teacher once per batch (never an update).
SCORING_METHOD = "etro"


@torch.no_grad()
def alignment_records(ctx, steps: int, progress=None, saved: Path | None = None) -> pd.DataFrame:
    """Per-turn records (Delta_pos, Delta_neg, writer boundary, returns, anchors) of
    ``steps`` batches played by the frozen actor in ``ctx``.

    ``saved``: a folder that keeps each batch's records as it finishes (``batch_N.parquet``)
    and hands back those already there instead of playing them again, so a run that dies
    loses one batch at most.  Every batch is seeded by ``(seed, step)`` (its tasks, rollouts
    and writer), so a resumed run's records are those of an uninterrupted one."""
    frames = []
    for step in range(1, steps + 1):
        path = None if saved is None else saved / f"batch_{step}.parquet"
        if path is not None and path.exists():
            frames.append(pd.read_parquet(path))
        else:
            batch = collect_batch(ctx, step, PhaseTimer())
            records = build_records(step, "train", batch.trajectories, batch.group_ids,
                                    batch.hindsights, batch.deltas, batch.old.turn_ids,
                                    batch.old.mask, ctx.cfg.algo.beta_opd)
            frames.append(with_texts(records, batch.trajectories, batch.hindsights))
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                frames[-1].to_parquet(path.with_suffix(".tmp"), index=False)
                path.with_suffix(".tmp").replace(path)  # whole or absent, never half written
        if progress is not None:
            progress.update(1)
    return pd.concat(frames, ignore_index=True)


def with_texts(records: pd.DataFrame, trajectories, hindsights) -> pd.DataFrame:
    """``records`` (one row per turn, ``traj`` indexing ``trajectories``) with what a reader
    needs to see why a turn's gap is what it is: the turn's ``response`` (thought and action
    as sampled) and its trajectory's ``positive_skill`` and ``negative_skill`` (empty when the
    writer gave none). Diagnostic records only: training records stay small."""
    skills = [(h.positive_skill, h.negative_skill) if h is not None else ("", "") for h in hindsights]
    return records.assign(
        response=[trajectories[b].episode.turns[t].response for b, t in zip(records["traj"], records["turn"])],
        positive_skill=[skills[b][0] for b in records["traj"]],
        negative_skill=[skills[b][1] for b in records["traj"]])
