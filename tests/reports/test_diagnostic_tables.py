"""Writer reliability, value alignment, staleness and compute cost reach the report as
tables with one row per cell and statistics over seeds."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.cells import family_cells
from analysis.stats import t_ci
from reports import diagnostic_tables as dt
from reports.envs import FAMILY_ORDER, task_family
from reports.index import ReportInputs, build_report
from reports.inputs import cell_frames, family_panels
from reports.prepared import prepare_runs


def _runs():
    rows = []
    for refresh in (1, 0):
        for seed in (0, 1, 2):
            rows.append({"run_id": f"r{refresh}-{seed}", "status": "FINISHED", "method": "seed",
                         "env": "household", "backbone": "tiny", "seed": seed,
                         "cell_id": f"c{refresh}", "algo.beta_opd": 5.0,
                         "writer.refresh_every": refresh,
                         "eval/eval_unseen/success": 0.5 + 0.01 * seed,
                         "writer/invalid_rate/mean": 0.1 * seed,
                         "time/rollout_s/sum": 10.0 + seed, "time/write_s/sum": 2.0})
    return pd.DataFrame(rows)


def _records(runs):
    rows = []
    base = {"step": 1, "split": "train", "task_id": "t", "group": 0, "turn": 0, "reward": 0.0,
            "success": False, "delta_neg": np.nan, "region": "x"}
    for _, run in runs.iterrows():
        seed, stale = int(run["seed"]), run["writer.refresh_every"] == 0
        # traj 0: true boundary 2, writer says 2 on seeds 0-1 and nothing on seed 2
        writer = 2 if seed < 2 else -1
        rows.append({**base, "run_id": run["run_id"], "traj": 0, "state_key": "s",
                     "action": "a", "return": 1.0, "error_turn_writer": writer,
                     "error_turn_true": 2, "delta_pos": 0.3 if stale else 0.8,
                     "gate_mean": 0.6})
        rows.append({**base, "run_id": run["run_id"], "traj": 1, "state_key": "s",
                     "action": "b", "return": 0.0, "error_turn_writer": -1,
                     "error_turn_true": -1, "delta_pos": 0.1, "gate_mean": 0.2})
        rows.append({**base, "run_id": run["run_id"], "traj": 2, "split": "eval_unseen",
                     "state_key": "e", "action": "a", "return": 0.0, "error_turn_writer": -1,
                     "error_turn_true": 1, "delta_pos": np.nan, "gate_mean": np.nan})
    return pd.DataFrame(rows)


def test_cell_frames_rows_are_cells_with_seed_statistics():
    runs = prepare_runs(_runs())
    cells = cell_frames(runs, _records(runs))
    writer = cells["writer_reliability"].set_index(["variant", "column"])
    # eval-split records are left out: accepted on 2 of 3 seeds -> mean 2/3 over seeds
    row = writer.loc[("seed (refresh_every=1)", "boundary_acceptance")]
    assert row["n"] == 3 and row["mean"] == pytest.approx(2 / 3)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx(t_ci([1.0, 1.0, 0.0]))
    assert writer.loc[("seed (refresh_every=0)", "validity"), "mean"] == pytest.approx(0.9)
    stale = cells["staleness"].set_index(["variant", "column"])
    assert list(stale.index.get_level_values(0).unique()) == ["seed (refresh_every=0)"]
    gap = abs(1 / (1 + np.exp(-5 * 0.8)) - 1 / (1 + np.exp(-5 * 0.3))) / 2  # traj 1 matches: 0
    assert stale.loc[("seed (refresh_every=0)", "gate_discrepancy"), "mean"] == pytest.approx(gap)
    cost = cells["compute_cost"].set_index(["variant", "column"])
    assert cost.loc[("seed (refresh_every=1)", "total_s"), "mean"] == pytest.approx(13.0)
    align = cells["value_alignment"].set_index(["variant", "column"])
    assert align.loc[("seed (refresh_every=1)", "cov"), "mean"] == pytest.approx(0.1)


def test_staleness_pairs_runs_whose_results_differ():
    """The prepared runs carry table-metric columns ("household.success") that differ
    between any two runs; the stale and refreshed runs still pair on their config."""
    runs = _runs()
    runs["eval/eval_unseen/success"] += np.where(runs["writer.refresh_every"] == 0, 0.1, 0.0)
    cells = cell_frames(prepare_runs(runs), _records(prepare_runs(runs)))
    assert not isinstance(cells["staleness"], dt.Skipped), cells["staleness"]
    assert set(cells["staleness"]["variant"]) == {"seed (refresh_every=0)"}


def test_report_writes_the_diagnostic_tables(tmp_path):
    runs = _runs()
    inputs = ReportInputs.from_frames(runs, records=_records(prepare_runs(runs)), n_boot=20)
    text = build_report(inputs, tmp_path, "s", "sha").read_text()
    for name in ("writer_reliability", "value_alignment", "staleness", "compute_cost"):
        assert (tmp_path / "tables" / f"{name}.md").is_file(), name
    table = (tmp_path / "tables" / "writer_reliability.md").read_text()
    assert "| SEED (refresh_every=1) | 90.0 ± 10.0 | 66.7 ± 57.7 |" in table
    assert "**" not in table.split("\n", 1)[1]  # nothing ranked, nothing bold
    assert "## table compute_cost" in text


def test_a_method_without_a_writer_reads_missing_not_zero(tmp_path):
    """GRPO has no writer (writer.kind none): its records carry no boundary (-1), which
    would read 0.0 acceptance / exact / false; its row reads -- and the caption says why."""
    seed = _runs()[lambda r: r["writer.refresh_every"] == 1].assign(**{"writer.kind": "self"})
    grpo = seed.assign(method="grpo", cell_id="g", run_id=seed["run_id"].str.replace("r1", "g"),
                       **{"writer.kind": "none"}).drop(columns="writer/invalid_rate/mean")
    runs = pd.concat([seed, grpo], ignore_index=True)
    records = _records(prepare_runs(runs))
    records.loc[records["run_id"].str.startswith("g"), "error_turn_writer"] = -1
    build_report(ReportInputs.from_frames(runs, records=records, n_boot=20), tmp_path, "s", "sha")
    table = (tmp_path / "tables" / "writer_reliability.md").read_text()
    assert "| GRPO | -- | -- | -- | -- | -- |" in table, table
    assert "| SEED | 90.0 ± 10.0 | 66.7 ± 57.7 |" in table
    assert "n = 2–3 seeds per cell" in table and "--: the row's method has no writer" in table


def test_family_breakdown_from_eval_records():
    assert task_family("alfworld", "alfworld/eval_out_of_distribution/"
                       "pick_two_obj_and_place-Cup-None-Shelf-1/trial_1") == "Pick2"
    assert task_family("household", "household/eval_unseen/0007") == "Look"  # 7 % 6 = 1
    assert task_family("household", "household/eval_unseen/s0006") == "Heat"  # small: 6 % 4
    assert task_family("shop", "shop/eval/0001") is None
    runs = prepare_runs(_runs().iloc[:3])
    rows = []
    for _, run in runs.iterrows():
        for i in range(12):  # two tasks per family; Pick tasks succeed on seeds 0-1 only
            success = (i % 6 != 0) or int(run["seed"]) < 2
            for step in (0, 5):
                rows.append({"run_id": run["run_id"], "step": step, "split": "eval_unseen",
                             "task_id": f"household/eval_unseen/{i:04d}", "traj": i,
                             "turn": 0, "success": success if step == 5 else False})
    records = pd.DataFrame(rows)
    cells = family_cells(runs, records, family_panels(runs, records), task_family,
                         FAMILY_ORDER).set_index("column")
    assert cells.loc["Pick", "mean"] == pytest.approx(2 / 3) and cells.loc["Look", "mean"] == 1.0
    assert cells.loc["All", "mean"] == pytest.approx((1.0 + 1.0 + 10 / 12) / 3)
    table = dt.diagnostic_table(dt.family_spec(), family_cells(
        runs, records, family_panels(runs, records), task_family, FAMILY_ORDER))
    assert [c.label for c in table.columns] == ["Pick", "Look", "Clean", "Heat", "Cool",
                                                "Pick2", "All"]


def test_each_table_names_the_columns_its_cells_frame_has():
    """The diagnostic tables (reports) and the per-cell frames (analysis.cells) agree on
    the table names and value columns, in column order."""
    from analysis import cells

    specs = dt.specs({})
    assert [c.key for c in specs[cells.WRITER].columns] == list(cells.WRITER_COLUMNS)
    assert [c.key for c in specs[cells.ALIGNMENT].columns] == list(cells.ALIGNMENT_COLUMNS)
    assert [c.key for c in specs[cells.STALENESS].columns] == list(cells.STALENESS_COLUMNS)
    assert [c.key for c in specs[cells.GAIN].columns] == list(cells.GAIN_COLUMNS)
    assert [c.key for c in dt.cost_spec(["rollout", "update"]).columns] == [
        *cells.cost_columns(["rollout", "update"]), cells.TOTAL]
    assert {cells.FAMILY, cells.COST} <= set(specs)
