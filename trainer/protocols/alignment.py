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

Writes ``records.parquet`` (every turn), ``alignment.csv`` and ``regional_alignment.png/pdf``.
"""

from __future__ import annotations

import pandas as pd
import torch

from trainer.episodes.records import build_records
from trainer.stages.phases import PhaseTimer
from trainer.stages.rl import collect_batch

# The method whose scoring path this protocol uses: Positive and Negative contexts scored
# with the old-policy teacher once per batch (never an update).
SCORING_METHOD = "etro"


@torch.no_grad()
def alignment_records(ctx, steps: int, progress=None) -> pd.DataFrame:
    """Per-turn records (Delta_pos, Delta_neg, writer boundary, returns, anchors) of
    ``steps`` batches played by the frozen actor in ``ctx``."""
    frames = []
    for step in range(1, steps + 1):
        batch = collect_batch(ctx, step, PhaseTimer())
        frames.append(build_records(step, "train", batch.trajectories, batch.group_ids,
                                    batch.hindsights, batch.deltas, batch.old.turn_ids,
                                    batch.old.mask, ctx.cfg.algo.beta_opd))
        if progress is not None:
            progress.update(1)
    return pd.concat(frames, ignore_index=True)
