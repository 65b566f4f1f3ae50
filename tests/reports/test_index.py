"""build_report: tables + figures on disk, index.md linking existing files only."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd

from analysis import diagnostics
from analysis.diagnostics import Skipped
from reports.index import ReportInputs, build_report
from reports.inputs import summarize_layout
from reports.layouts import LAYOUTS
from support.records_fakes import K, planted_records
from support.reports_fakes import fake_runs


def _inputs(tmp_path, runs):
    csv = tmp_path / "reported.csv"
    pd.DataFrame([{"method": "icsd", "backbone": "tiny", "shop.success": 75.8,
                   "source": "ETRO Table 1"}]).to_csv(csv, index=False)
    summaries = {name: summarize_layout(runs, layout, n_boot=100)
                 for name, layout in LAYOUTS.items()}
    gates = diagnostics.GateFrames(Skipped("gate_by_region", "no records"),
                                   Skipped("gate_sensitivity", "no sweep"),
                                   diagnostics.gate_table(np.linspace(-1, 1, 11), (1.0, 5.0)))
    return ReportInputs(runs, summaries, diagnostics={"gate_curves": gates}, external_csv=csv)


def test_build_report_writes_and_links_existing_files(tmp_path):
    runs = fake_runs({"grpo": 0.5, "etro_global_positive": 0.7, "etro": 0.8}, envs=("shop",))
    out = tmp_path / "report"
    index = build_report(_inputs(tmp_path, runs), out, "demo", "abc123")
    assert index == out / "index.md"
    text = index.read_text()
    links = re.findall(r"\]\(([^)]+)\)", text)
    assert links and all((out / link).is_file() for link in links)
    for name in ("etro_table1", "etro_branches"):
        assert f"tables/{name}.tex" in links and f"tables/{name}.json" in links
    assert "- etro_suffix: no runs of methods" in text and "besides the baseline etro" in text
    assert "figures/gate_curves.pdf" in links
    assert not (out / "tables" / "seed_ablation.md").exists()
    assert "- seed_ablation: no runs of methods" in text
    assert "- training_curves: its input frame was not given" in text
    assert "- runs: 9 finished (used)" in text and "seeds per cell: 3–3" in text
    assert "Caution: fewer than 5 seeds per cell" in text
    assert "hindsight report --study demo" in text and "`abc123`" in text
    record = json.loads((out / "tables" / "etro_branches.json").read_text())
    assert len(record["run_ids"]) == 9 and record["study"] == "demo"
    table1 = (out / "tables" / "etro_table1.md").read_text()
    assert "| ICSD§ | -- | 75.8 |" in table1  # the reported row lands in the main table only
    assert "ICSD" not in (out / "tables" / "etro_branches.md").read_text()


def test_from_frames_joins_methods_and_computes_diagnostics():
    runs = fake_runs({"grpo": 0.5, "seed": 0.7}, envs=("shop",), seeds=(0, 1),
                     params={"seed": {"time/rollout_s/sum": 3.0}})
    hist = pd.DataFrame({"run_id": runs["run_id"], "key": "train/success", "step": 0,
                         "value": 0.5})
    inputs = ReportInputs.from_frames(runs, histories=hist, n_boot=50)
    assert set(inputs.histories["method"]) == {"grpo", "seed"}
    assert set(inputs.histories["env"]) == {"shop"}
    frames = inputs.figure_frames()
    assert set(frames) == {"training_curves", "evaluation_curves", "gate_curves",
                           "regional_alignment", "delta_profile", "compute_cost"}
    assert "no per-turn records" in frames["regional_alignment"].reason
    assert "no method varies" in inputs.sensitivity.reason
    assert sorted(frames["gate_curves"].formula["beta"].unique()) == [5.0]
    assert "no per-turn records" in frames["gate_curves"].by_region.reason
    assert set(inputs.summaries) == set(LAYOUTS)


def test_index_counts_failed_and_missing_runs_inlines_tables_and_links_the_ui(tmp_path):
    runs = fake_runs({"grpo": 0.5, "etro": 0.8}, envs=("shop",), seeds=(0, 1, 2, 3, 4))
    runs["experiment_id"] = "7"
    runs.loc[runs["run_id"] == "shop-tiny-etro-4", "status"] = "FAILED"
    inputs = ReportInputs.from_frames(runs, expected=12, ui_url="http://127.0.0.1:5000",
                                      n_boot=50)
    assert len(inputs.runs) == 9  # statistics use the finished runs only
    text = build_report(inputs, tmp_path / "r", "demo", "abc").read_text()
    assert "- runs: 9 finished (used), 1 failed (not used), 2 missing of 12 trials" in text
    assert "Caution: fewer than 5 seeds per cell** (n = 4–5)" in text
    assert "| Method | Shop Score | Shop Succ. |" in text  # the table itself, inline
    assert ("[`shop-tiny-et`](http://127.0.0.1:5000/#/experiments/7/runs/shop-tiny-etro-4)"
            in text)
    assert "| FAILED |" in text


def test_report_aggregates_across_tasks(tmp_path):
    runs = fake_runs({"grpo": 0.5, "seed": 0.7}, envs=("household", "shop"))
    build_report(ReportInputs.from_frames(runs, n_boot=200), tmp_path, "demo", "abc")
    record = json.loads((tmp_path / "tables" / "aggregates.json").read_text())
    cells = {(c["row"], c["column"]): c for c in record["cells"]}
    # SEED beats GRPO on every seed pair of all 3 tasks (household, shop score, shop success)
    assert cells[("SEED", "p_improve")]["mean"] == 1.0 and ("GRPO", "p_improve") not in cells
    assert cells[("SEED", "n_tasks")]["mean"] == 3.0
    assert cells[("GRPO", "iqm")]["ci_low"] <= cells[("GRPO", "iqm")]["mean"]
    assert (tmp_path / "figures" / "performance_profiles.png").stat().st_size > 5_000


def test_index_states_the_gain_over_the_warm_start_per_row(tmp_path):
    from analysis.stats import t_ci

    runs = fake_runs({"grpo": 0.5, "seed": 0.7}, envs=("household",), seeds=(0, 1, 2))
    gains = {0: 0.10, 1: 0.05, 2: -0.03}
    rows = []
    for run_id, method, seed in zip(runs["run_id"], runs["method"], runs["seed"]):
        rise = gains[seed] if method == "grpo" else 0.0
        rows += [(run_id, "eval/eval_unseen/success", 0, 0.30),
                 (run_id, "eval/eval_unseen/success", 10, 0.30 + rise)]
    hist = pd.DataFrame(rows, columns=["run_id", "key", "step", "value"])
    inputs = ReportInputs.from_frames(runs, histories=hist, n_boot=50)
    text = build_report(inputs, tmp_path / "report", "demo", "abc").read_text()
    low, high = t_ci([100 * g for g in gains.values()])
    assert (f"- GRPO (Household): +4.0 points [{low:+.1f}, {high:+.1f}] from 30.0% to 34.0%; "
            "rose on 2 of 3 seeds") in text
    assert "- SEED (Household): +0.0 points [+0.0, +0.0] from 30.0% to 30.0%; rose on 0 of 3 seeds" in text
    gain_table = (tmp_path / "report" / "tables" / "warm_start_gain.md").read_text()
    # the seeds that rose are a count of seeds, not a percentage with a std
    assert re.search(r"\| GRPO \| 30\.0 ± 0\.0 \| 34\.0 ± [\d.]+ \| 4\.0 ± [\d.]+ \| 2 of 3 \|",
                     gain_table), gain_table
    assert "| 0 of 3 |" in gain_table and "66.7" not in gain_table
    assert "2 of 3" in (tmp_path / "report" / "tables" / "warm_start_gain.tex").read_text()
    # without an evaluation at step 0 there is no gain to state, and the index says why
    late = hist.assign(step=hist["step"] + 5)
    text = build_report(ReportInputs.from_frames(runs, histories=late, n_boot=50),
                        tmp_path / "late", "demo", "abc").read_text()
    assert "- not measured: no run was evaluated both at step 0 and after RL steps" in text


def test_the_report_recovers_planted_alignment_signs_and_says_na(tmp_path):
    """The report's regional alignment (figure and table) shows the planted signs (Delta+
    before the error, Delta- at it) with intervals that exclude 0, and a lost suffix (one
    return after every error) as n/a with its reason, never 0."""
    runs = fake_runs({"etro": 0.8}, envs=("shop",), seeds=(0,))
    records = planted_records(np.random.default_rng(5), n_tasks=80, run_id=runs["run_id"].iloc[0])
    suffix = records["turn"] > K
    records.loc[suffix, "return"] = 0.0  # the outcome is settled after the error
    out = tmp_path / "report"
    build_report(ReportInputs.from_frames(runs, records=records, n_boot=200), out, "demo", "abc")
    table = (out / "tables" / "regional_alignment.md").read_text()
    rows = {tuple(c.strip() for c in line.split("|")[2:4]): line for line in table.splitlines()[2:]}
    for key in (("prefix", "Δ+ (Positive skill)"), ("error", "Δ− (Negative skill)")):
        rho, low, high = (float(v) for v in re.findall(r"[+-]\d\.\d\d", rows[key])[:3])
        assert 0 < low <= rho <= high, rows[key]
    for gap in ("Δ+ (Positive skill)", "Δ− (Negative skill)"):
        assert "| n/a |" in rows[("suffix", gap)] and "outcome is settled" in rows[("suffix", gap)]
    index = (out / "index.md").read_text()
    assert "tables/regional_alignment.md" in index and "outcome is settled" in index
    assert "figures/delta_profile.png" in index  # where the skills land, beside it
