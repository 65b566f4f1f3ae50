"""Why a frozen-actor regional alignment came out as it did (issue 43): reads the
``records.parquet`` that ``hindsight diagnose alignment`` wrote and prints the alignment with
its n/a reasons and between-task flags, where each skill lands (mean |Delta| by turn and by
offset from the error), SEED's gate over beta_opd from the recorded Delta+, and the error turns
task by task: the action taken, how many failed trajectories took it, the anchor group's
success share, the pooled step advantage and the mean gaps, with the rank correlation across
tasks of those task means (the only variation a between-task rho has).

    .venv/bin/python scripts/explain_alignment.py runs/i43/align_oracle/records.parquet
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd

from analysis.alignment import (
    delta_profile,
    error_regions,
    gate_over_beta,
    regional_alignment,
    step_advantages,
)
from analysis.diagnostics import batch_scope
from analysis.ranks import spearman
from reports.diagnostic_tables import alignment_markdown


def error_turns(records: pd.DataFrame) -> pd.DataFrame:
    """One row per task batch at the diagnosed error: the action(s) its failed trajectories
    took there, their count, the anchor group's size and success share, the pooled step
    advantage and the mean Delta-/Delta+ of those turns."""
    adv = step_advantages(records)
    failed = adv[~adv["success"].astype(bool) & (adv["error_turn_writer"] >= 0)]
    at_error = failed[error_regions(failed) == "error"]
    anchor = [*batch_scope(adv), "task_id", "state_key"]  # step_advantages' anchor groups
    anchors = adv.groupby(anchor)["success"].mean().rename("anchor_success")
    at_error = at_error.join(anchors, on=anchor)
    return (at_error.groupby([*batch_scope(adv), "task_id"], sort=True)
            .agg(actions=("action", lambda a: ",".join(sorted(set(a)))), n_failed=("traj", "size"),
                 anchor_size=("anchor_size", "first"), anchor_success=("anchor_success", "first"),
                 step_adv=("step_adv", "mean"), step_adv_spread=("step_adv", "std"),
                 delta_neg=("delta_neg", "mean"), delta_pos=("delta_pos", "mean"))
            .reset_index())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("records", type=Path)
    parser.add_argument("--beta", type=float, default=5.0, help="the run's beta_opd (Jensen gap)")
    args = parser.parse_args(argv)
    records = pd.read_parquet(args.records)
    pd.set_option("display.width", 200)
    print(f"{len(records)} turns of {records.groupby(['step', 'traj']).ngroups} trajectories, "
          f"{records.groupby(['step', 'task_id']).ngroups} task batches\n")
    print(alignment_markdown(regional_alignment(records, seed=0)))
    profile = delta_profile(records)
    print(profile.pivot_table(index=["axis", "position"], columns="polarity",
                              values=["n_turns", "mean", "mean_abs"]).round(4).to_string(), "\n")
    gates = gate_over_beta(records, by=("region",), beta_run=args.beta)
    print(gates.round(3).to_string(index=False), "\n")
    table = error_turns(records)
    print(table.round(3).to_string(index=False))
    print(f"\nacross the {len(table)} task batches: rho(mean Delta-, step advantage) = "
          f"{spearman(table['delta_neg'].to_numpy(float), table['step_adv'].to_numpy(float)):+.2f}, "
          f"rho(step advantage, anchor success share) = "
          f"{spearman(table['step_adv'].to_numpy(float), table['anchor_success'].to_numpy(float)):+.2f}, "
          f"rho(mean Delta-, anchor success share) = "
          f"{spearman(table['delta_neg'].to_numpy(float), table['anchor_success'].to_numpy(float)):+.2f}; "
          f"step advantage varies within {int((table['step_adv_spread'].fillna(0) > 0).sum())} of them")
    if "negative_skill" in records.columns:
        shown = records[(records["error_turn_writer"] == records["turn"]) & ~records["success"]].head(3)
        for row in shown.itertuples():
            print(f"\ntask {row.task_id}, turn {row.turn}, action {row.action!r}, Delta- {row.delta_neg:+.4f}\n"
                  f"  response: {row.response!r}\n  Negative skill: {row.negative_skill!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
