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

from pathlib import Path

import pandas as pd
import torch

# The method whose scoring path this protocol uses: Positive and Negative contexts scored
# with the old-policy teacher once per batch (never an update).
SCORING_METHOD = "etro"


@torch.no_grad()
def alignment_records(ctx, steps: int, progress=None) -> pd.DataFrame:
    """Per-turn records (Delta_pos, Delta_neg, writer boundary, returns, anchors) of
    ``steps`` batches played by the frozen actor in ``ctx``."""
    from trainer.records import build_records
    from trainer.rl import PhaseTimer, collect_batch

    frames = []
    for step in range(1, steps + 1):
        batch = collect_batch(ctx, step, PhaseTimer())
        frames.append(build_records(step, "train", batch.trajectories, batch.group_ids,
                                    batch.hindsights, batch.deltas, batch.old.turn_ids,
                                    batch.old.mask, ctx.cfg.algo.beta_opd))
        if progress is not None:
            progress.update(1)
    return pd.concat(frames, ignore_index=True)


def diagnose_command(args) -> int:
    """Diagnostics on a frozen actor: ``alignment`` is ETRO's Fig. 1 (regional alignment)."""
    from tqdm.auto import tqdm

    from analysis.diagnostics import Skipped, regional_alignment
    from reports.figures import regional_alignment as draw
    from trainer.config import load_config, require_model_folder, resolve
    from trainer.context import build_context, start_rl

    folder = require_model_folder(args.actor, "--actor")
    overrides = [*args.overrides, f"algo.method={SCORING_METHOD}", "algo.kl_coef=0",
                 "stages.warm_start.enabled=false", "stages.skill_sft.enabled=false"]
    if args.writer:
        overrides.append(f"writer.kind={args.writer}")
    cfg = resolve(load_config(args.config, overrides))
    ctx = build_context(cfg, init_from=str(folder))
    start_rl(ctx)
    print(f"actor {args.actor}: {args.steps} batches of {cfg.rollout.tasks_per_step} tasks x "
          f"{cfg.rollout.group_size}, writer {cfg.writer.kind}, {args.advantage} step "
          "advantages, never updated")
    with tqdm(total=args.steps, desc="alignment", unit="batch") as bar:
        records = alignment_records(ctx, args.steps, bar)
    out = Path(args.diagnose_dir)
    out.mkdir(parents=True, exist_ok=True)
    records.to_parquet(out / "records.parquet", index=False)
    alignment = regional_alignment(records, seed=cfg.seed, advantage=args.advantage)
    if isinstance(alignment, Skipped):
        print(f"regional alignment skipped: {alignment.reason}")
        return 1
    alignment.to_csv(out / "alignment.csv", index=False)
    draw(alignment, out / "regional_alignment")
    for r in alignment.itertuples():
        print(f"{r.region:>6} {r.polarity:<9} rho {r.rho:+.3f} [{r.ci_low:+.3f}, {r.ci_high:+.3f}]"
              f"  n = {r.n_turns} turns of {r.n_traj} trajectories")
    print(f"written: {out / 'alignment.csv'}, {out / 'regional_alignment.png'}, "
          f"{out / 'records.parquet'}")
    return 0
