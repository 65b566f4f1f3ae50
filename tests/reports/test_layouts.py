"""Layouts: summaries from run frames, variants, the alpha sweep and Skipped results."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.diagnostics import Skipped
from reports.inputs import summarize_layout
from reports.layouts import LAYOUTS, get_layout
from reports.prepared import FINAL_SUCCESS, add_variants, with_table_metrics
from reports.tables import BETTER, bold_cells
from support.reports_fakes import fake_runs

N_BOOT = 200
IMAGES = {"env.images": True}  # the policy saw the env's images (a multimodal run)


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
    assert [c.key for c in table.columns] == ["household.success", "shop.score", "shop.success"]
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


def test_a_cell_is_a_configuration_never_pooled():
    # Two SEED configs differing in a param that is no known sweep axis (the staleness
    # ablation): two rows, n = 3 seeds each, not one row with n = 6.
    fresh = fake_runs({"seed": 0.70}, envs=("shop",), params={"seed": {"writer.refresh_every": 1}})
    stale = fake_runs({"seed": 0.60}, envs=("shop",), params={"seed": {"writer.refresh_every": 0}})
    stale["run_id"] += "-stale"
    stale["cell_id"] += "-stale"
    runs = pd.concat([fresh, stale], ignore_index=True)
    summary = summarize_layout(runs, LAYOUTS["etro_table1"], n_boot=N_BOOT)
    shop = summary[summary["metric"] == "shop.success"].set_index("variant")
    assert shop.loc["seed (refresh_every=1)", "mean"] == pytest.approx(0.70)
    assert shop.loc["seed (refresh_every=0)", "mean"] == pytest.approx(0.60)
    assert shop["n"].tolist() == [3, 3]


def test_cells_with_the_same_label_keep_apart_by_cell_id():
    a = fake_runs({"seed": 0.7}, envs=("shop",))
    b = fake_runs({"seed": 0.5}, envs=("shop",))
    b["run_id"] += "-b"
    b["cell_id"] = "other"  # differs only in a setting that is not logged as a param
    out = add_variants(pd.concat([a, b], ignore_index=True))
    assert out["variant"].nunique() == 2 and out["variant"].str.contains(r"\[cell ").all()


def test_search_labels_round_to_significant_digits():
    runs = []
    for i, (beta, lam) in enumerate(((2.38611, 0.0195789), (7.1, 0.001))):
        part = fake_runs({"seed": 0.7}, envs=("shop",),
                         params={"seed": {"algo.beta_opd": beta, "algo.lambda_opd": lam}})
        part["run_id"] += f"-{i}"
        part["cell_id"] += f"-{i}"
        runs.append(part)
    table = LAYOUTS["etro_table1"].table(
        summarize_layout(pd.concat(runs, ignore_index=True), LAYOUTS["etro_table1"]))
    assert [r.labels[0] for r in table.sections[0].rows] == [
        "SEED (β=2.39, λ=0.0196)", "SEED (β=7.1, λ=0.001)"]


def test_two_seeds_draw_no_marker_and_the_caption_does_not_promise_one():
    from reports.tables import caption

    runs = fake_runs({"grpo": 0.5, "rlsd": 0.51, "etro": 0.9}, envs=("shop",), seeds=(0, 1))
    table = LAYOUTS["etro_table1"].table(summarize_layout(runs, LAYOUTS["etro_table1"]))
    assert all(c.marker == "" for _, r in table.rows() for c in r.cells.values())
    assert table.baseline is None
    text = caption(table)
    assert "†" not in text and "No significance markers" in text
    assert "fewer than 5 seeds" in text
    bold = {(table.sections[0].rows[ri].labels[0], k) for _, ri, k in bold_cells(table)}
    assert bold == set()  # two seeds: nothing can be tested, so nothing is ranked or bold


def test_swept_baseline_markers_compare_within_matching_beta():
    runs = []
    for beta, grpo, seed in ((1.0, 0.5, 0.8), (5.0, 0.6, 0.6)):
        part = fake_runs({"grpo": grpo, "seed": seed}, envs=("shop",),
                         params={"grpo": {"algo.beta_opd": beta}, "seed": {"algo.beta_opd": beta}})
        part["run_id"] += f"-b{beta}"
        part["cell_id"] += f"-b{beta}"
        runs.append(part)
    layout = LAYOUTS["etro_table1"]
    table = layout.table(summarize_layout(pd.concat(runs, ignore_index=True), layout))
    rows = {r.labels[0]: r for r in table.sections[0].rows}
    assert list(rows) == ["GRPO (β=1)", "GRPO (β=5)", "SEED (β=1)", "SEED (β=5)"]
    assert rows["SEED (β=1)"].cells["shop.success"].diff == pytest.approx(0.3)
    assert rows["SEED (β=1)"].cells["shop.success"].marker == BETTER
    assert rows["SEED (β=5)"].cells["shop.success"].diff == pytest.approx(0.0, abs=1e-3)
    assert table.baseline == "GRPO at the same β"


def test_ablation_rows_read_full_then_param():
    runs = fake_runs({"seed": 0.7, "seed_no_self_evolving": 0.6}, envs=("shop",),
                     params={"seed": {"algo.beta_opd": 1.0}})
    more = fake_runs({"seed": 0.75}, envs=("shop",), params={"seed": {"algo.beta_opd": 5.0}})
    more["run_id"] += "-5"
    more["cell_id"] += "-5"
    layout = LAYOUTS["seed_ablation"]
    table = layout.table(summarize_layout(pd.concat([runs, more]), layout))
    assert [r.labels[0] for r in table.sections[0].rows][:2] == ["SEED (full), β=1",
                                                                "SEED (full), β=5"]


@pytest.mark.parametrize("env,level,split,group", [
    ("alfworld", None, "eval_out_of_distribution", "ALFWorld"),
    ("household", "small", "eval_unseen", "Household-S"),
    ("household", "full", "eval_unseen", "Household"),
    ("webshop", None, "test", "WebShop"),
    ("mygym", None, "holdout", "mygym"),
    ("sokoban", "1box", "eval", "Sokoban"),
    ("sokoban", "2box", "eval", "Sokoban-2box"),
])
def test_env_registry_columns(env, level, split, group):
    runs = fake_runs({"grpo": 0.5, "seed": 0.7}, envs=("household",))
    runs["env"] = env
    runs = runs.rename(columns={"eval/eval_unseen/success": f"eval/{split}/success"})
    if level is not None:
        runs["env.level"] = level
    table = LAYOUTS["etro_table1"].table(summarize_layout(runs, LAYOUTS["etro_table1"]))
    assert [(c.group, c.label) for c in table.columns] == [(group, "Succ.")]
    assert table.sections[0].rows[1].cells[table.columns[0].key].mean == pytest.approx(0.7)


def test_rows_name_a_writer_that_is_not_the_methods_own():
    """ETRO's own writer is the oracle; a run with the frozen writer says so in its row, a
    run with the method's own writer (or without the tag, an older run) does not."""
    runs = fake_runs({"grpo": 0.5, "etro": 0.8, "seed": 0.7}, envs=("household",),
                     params={"grpo": {"writer.kind": "none", "method_writer": "none"},
                             "etro": {"writer.kind": "frozen", "method_writer": "oracle"},
                             "seed": {"writer.kind": "self", "method_writer": "self"}})
    out = add_variants(runs)
    assert set(out["variant"]) == {"grpo", "etro (writer=frozen)", "seed"}
    table = LAYOUTS["etro_table1"].table(summarize_layout(runs, LAYOUTS["etro_table1"],
                                                          n_boot=N_BOOT))
    assert "ETRO (writer=frozen)" in {r.labels[0] for r in table.sections[0].rows}
    assert set(add_variants(runs.drop(columns="method_writer"))["variant"]) == {
        "grpo", "etro", "seed"}


def test_multimodal_table_averages_the_two_envs_per_seed():
    """SEED's multimodal table: Sokoban, EZPoints, then their per-seed average, paired by
    seed against GRPO; only the seeds that ran on both envs enter the average, and the
    layout ignores the study's other envs."""
    sok = fake_runs({"grpo": 0.6, "seed": 0.8}, envs=("sokoban",)).assign(**IMAGES)
    ez = fake_runs({"grpo": 0.8, "seed": 0.9}, envs=("ezpoints",)).assign(**IMAGES)
    house = fake_runs({"grpo": 0.3, "seed": 0.4}, envs=("household",))
    ez = ez[~((ez["method"] == "seed") & (ez["seed"] == 2))]  # seed 2 of SEED missed EZPoints
    layout = LAYOUTS["seed_multimodal"]
    summary = summarize_layout(pd.concat([sok, ez, house], ignore_index=True), layout, n_boot=N_BOOT)
    table = layout.table(summary)
    assert [(c.group, c.label) for c in table.columns] == [
        ("Sokoban", "Succ."), ("EZPoints", "Succ."), ("Avg.", "Succ.")]
    rows = {r.labels[0]: r.cells for r in table.sections[0].rows}
    assert list(rows) == ["GRPO", "SEED"]
    avg = rows["SEED"]["average.success"]
    assert avg.n == 2 and avg.n_paired == 2
    both = pd.concat([sok, ez])
    seed_runs = both[(both["method"] == "seed") & both["seed"].isin([0, 1])]
    assert avg.mean == pytest.approx(seed_runs.groupby("seed")["eval/eval/success"].mean().mean())
    assert rows["GRPO"]["average.success"].mean == pytest.approx(0.7)
    assert rows["GRPO"]["average.success"].n == 3


def test_multimodal_table_is_skipped_without_its_envs():
    runs = fake_runs({"grpo": 0.5, "seed": 0.7}, envs=("household",))
    assert isinstance(summarize_layout(runs, LAYOUTS["seed_multimodal"]), Skipped)


@pytest.mark.parametrize("images", [None, False])
def test_no_multimodal_table_for_a_text_only_study(images):
    """A text-only EZPoints study (the quickstart: env.images false, or a store that
    predates the param) gets no multimodal table; its reason names env.images."""
    runs = fake_runs({"grpo": 0.5, "seed": 0.7}, envs=("ezpoints", "sokoban"))
    if images is not None:
        runs = runs.assign(**{"env.images": images})
    result = summarize_layout(runs, LAYOUTS["seed_multimodal"])
    assert isinstance(result, Skipped) and "env.images" in result.reason
    assert "needs a vision env" in result.reason


def test_levels_are_columns_never_row_labels_so_the_average_pairs_them():
    """Two sokoban levels and EZPoints: each level is a column, the rows read "GRPO" and
    "SEED" (not "GRPO (level=1box)"), and the average covers all three columns per seed."""
    one = fake_runs({"grpo": 0.6, "seed": 0.8}, envs=("sokoban",)).assign(**{"env.level": "1box"},
                                                                         **IMAGES)
    two = fake_runs({"grpo": 0.4, "seed": 0.5}, envs=("sokoban",)).assign(**{"env.level": "2box"},
                                                                         **IMAGES)
    two["run_id"] += "-2box"
    two["cell_id"] += "-2box"
    ez = fake_runs({"grpo": 0.8, "seed": 0.9}, envs=("ezpoints",)).assign(**{"env.level": "full"},
                                                                         **IMAGES)
    layout = LAYOUTS["seed_multimodal"]
    table = layout.table(summarize_layout(pd.concat([one, two, ez], ignore_index=True), layout,
                                          n_boot=N_BOOT))
    assert [c.group for c in table.columns] == ["Sokoban", "Sokoban-2box", "EZPoints", "Avg."]
    rows = {r.labels[0]: r.cells for r in table.sections[0].rows}
    assert list(rows) == ["GRPO", "SEED"]
    assert rows["GRPO"]["average.success"].mean == pytest.approx((0.6 + 0.4 + 0.8) / 3)
