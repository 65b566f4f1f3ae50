"""Layouts: summaries from run frames, variants, the alpha sweep and Skipped results."""

from __future__ import annotations

import pandas as pd
import pytest
from reports_fakes import fake_runs

from analysis.diagnostics import Skipped
from reports.layouts import (
    FINAL_SUCCESS,
    LAYOUTS,
    add_variants,
    get_layout,
    summarize_layout,
    with_table_metrics,
)
from reports.tables import BETTER, bold_cells

N_BOOT = 200


def test_table_metrics_average_searchqa_and_pick_final_success():
    runs = fake_runs({"grpo": 0.5}, envs=("searchqa", "household"), seeds=(1,))
    out = with_table_metrics(runs).set_index("env")
    # searchqa datasets are 0.5 + 0.01 * i for i = 0..6 -> mean 0.53.
    assert out.loc["searchqa", "searchqa.avg"] == pytest.approx(0.53)
    assert out.loc["searchqa", "searchqa.nq"] == pytest.approx(0.50)
    assert out.loc["searchqa", FINAL_SUCCESS] == pytest.approx(0.53)
    assert pd.isna(out.loc["searchqa", "household.success"])
    assert out.loc["household", FINAL_SUCCESS] == pytest.approx(0.5)


def test_variants_name_only_swept_params():
    a = fake_runs({"seed": 0.7, "grpo": 0.5}, params={"seed": {"algo.beta_opd": 1.0}})
    b = fake_runs({"seed": 0.8}, params={"seed": {"algo.beta_opd": 10.0}})
    b["run_id"] += "-b"
    out = add_variants(pd.concat([a, b], ignore_index=True))
    assert set(out["variant"]) == {"grpo", "seed (β=1)", "seed (β=10)"}


def test_summary_cells_and_markers_from_runs():
    runs = fake_runs({"grpo": 0.5, "etro_global_positive": 0.6, "etro": 0.8})
    summary = summarize_layout(runs, LAYOUTS["etro_branches"], n_boot=N_BOOT)
    shop = summary[(summary["metric"] == "shop.success")].set_index("variant")
    assert shop.loc["etro", "mean"] == pytest.approx(0.8)
    assert shop.loc["etro", "std"] == pytest.approx(0.02 * 1.2)  # third method: scale 1.2
    assert shop.loc["etro", "run_ids"] == ("shop-tiny-etro-0", "shop-tiny-etro-1",
                                           "shop-tiny-etro-2")
    table = LAYOUTS["etro_branches"].table(summary)
    assert [c.key for c in table.columns] == ["shop.success", "shop.score", "household.success"]
    rows = {r.labels[0]: r for r in table.sections[0].rows}
    assert list(rows) == ["GRPO", "Global Positive", "ETRO"]
    assert rows["ETRO"].cells["shop.success"].marker == BETTER
    assert rows["GRPO"].cells["shop.success"].marker == ""
    bold = {(table.sections[0].rows[ri].labels[0], key) for _, ri, key in bold_cells(table)}
    assert ("ETRO", "household.success") in bold and ("GRPO", "household.success") not in bold


def test_missing_methods_give_skipped():
    runs = fake_runs({"grpo": 0.5, "etro": 0.8})
    result = summarize_layout(runs, LAYOUTS["seed_ablation"], n_boot=N_BOOT)
    assert isinstance(result, Skipped) and "seed_no_sft" in result.reason
    assert LAYOUTS["seed_ablation"].table(result) is result
    no_metric = runs.drop(columns=[c for c in runs.columns if c.startswith("eval/")])
    skipped = summarize_layout(no_metric, LAYOUTS["etro_table1"], n_boot=N_BOOT)
    assert isinstance(skipped, Skipped) and "no evaluation metric" in skipped.reason


def _alpha_runs(alphas):
    parts = [fake_runs({"etro": 0.80}, envs=("shop",))]
    for alpha in alphas:
        for method, base in (("etro_suffix_positive", 0.78), ("etro_suffix_negative", 0.74)):
            part = fake_runs({method: base - 0.01 * alpha}, envs=("shop",),
                             params={method: {"algo.suffix_weight": alpha}})
            part["run_id"] += f"-a{alpha}"
            parts.append(part)
    return pd.concat(parts, ignore_index=True)


def test_alpha_sweep_rows():
    layout = LAYOUTS["etro_alpha"]
    table = layout.table(summarize_layout(_alpha_runs((1.0, 0.25, 0.5)), layout, n_boot=N_BOOT))
    assert table.label_headers == ("Method", "α")
    assert [r.labels for r in table.sections[0].rows] == [
        ("ETRO", "0"), ("Suffix Positive", "0.25"), ("Suffix Positive", "0.5"),
        ("Suffix Positive", "1"), ("Suffix Negative", "0.25"), ("Suffix Negative", "0.5"),
        ("Suffix Negative", "1")]
    cell = table.sections[0].rows[3].cells["shop.success"]
    assert cell.mean == pytest.approx(0.77) and len(cell.run_ids) == 3
    assert table.baseline == "ETRO"


def test_alpha_sweep_needs_two_nonzero_alphas():
    layout = LAYOUTS["etro_alpha"]
    result = layout.table(summarize_layout(_alpha_runs((1.0,)), layout, n_boot=N_BOOT))
    assert isinstance(result, Skipped) and "[1.0]" in result.reason


def test_swept_method_rows_carry_the_param():
    a = fake_runs({"grpo": 0.5, "seed": 0.7}, params={"seed": {"algo.beta_opd": 1.0}})
    b = fake_runs({"seed": 0.75}, params={"seed": {"algo.beta_opd": 10.0}})
    b["run_id"] += "-b"
    layout = LAYOUTS["etro_table1"]
    table = layout.table(summarize_layout(pd.concat([a, b]), layout, n_boot=N_BOOT))
    assert [r.labels[0] for r in table.sections[0].rows] == ["GRPO", "SEED (β=1)", "SEED (β=10)"]


def test_unknown_layout_lists_valid_names():
    with pytest.raises(ValueError, match="unknown table layout 'nope'; valid: etro_table1"):
        get_layout("nope")
