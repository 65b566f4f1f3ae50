"""Every paper study in examples/papers/ gets the tables it should feed, from runs that carry
exactly the env, split and metric names its trials log; true values are known."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.diagnostics import Skipped
from reports.inputs import summarize_layout
from reports.layouts import LAYOUTS
from reports.prepared import prepare_runs
from support.paths import EXAMPLES
from support.reports_fakes import study_frame
from sweeps.study import load_study
from trainer.run.resolve import resolve

PAPERS = EXAMPLES / "papers"
# study file -> (layouts it must produce, the env column group those tables show)
EXPECTED = {
    "seed_table5_alfworld.yaml": ({"etro_table1", "seed_ablation"}, "ALFWorld"),
    "etro_appendix_b_webshop.yaml": ({"etro_table1", "etro_branches", "etro_suffix"}, "WebShop"),
    "etro_alpha_sweep.yaml": ({"etro_suffix", "etro_alpha"}, "WebShop"),
    "seed_multimodal.yaml": ({"etro_table1", "seed_multimodal"}, "Sokoban / EZPoints"),
    "etro_webshop_7b.yaml": ({"etro_table1", "etro_branches"}, "WebShop"),
    "seed_alfworld_7b.yaml": ({"etro_table1"}, "ALFWorld"),
}
STUDIES = sorted(p.name for p in PAPERS.glob("*.yaml") if not p.stem.endswith("_base"))


def _score(cfg) -> float:
    """True success: 0.4 + 0.02 per letter of the method name, + the resolved alpha / 10."""
    return 0.4 + 0.02 * len(cfg.algo.method) + resolve(cfg).algo.suffix_weight / 10


def test_every_paper_study_is_listed():
    assert set(STUDIES) == set(EXPECTED)


@pytest.mark.parametrize("name", STUDIES)
def test_paper_study_gets_its_tables(name):
    study = load_study(PAPERS / name)
    runs = study_frame(study, score=_score)
    want, group = EXPECTED[name]
    produced = {}
    for layout_name, layout in LAYOUTS.items():
        table = layout.table(summarize_layout(runs, layout))
        if not isinstance(table, Skipped):
            produced[layout_name] = table
    assert set(produced) == want
    prepared = prepare_runs(runs)
    envs = group.split(" / ")
    for name_of, table in produced.items():
        groups = envs + (["Avg."] if name_of == "seed_multimodal" else [])
        assert [c.group for c in table.columns] == (groups if len(envs) > 1 else groups * len(table.columns))
        assert [c.label for c in table.columns] == (["Score", "Succ."] if group == "WebShop"
                                                     else ["Succ."] * len(groups))
        for _, row in table.rows():
            cell = row.cells[table.columns[-1].key]
            assert cell.n == len(study.seeds)
            runs_of = prepared[prepared["run_id"].isin(cell.run_ids)]
            # one row is one configuration (per env: an average column reads one run per env)
            assert len(runs_of) == len(study.seeds) * (len(envs) if name_of == "seed_multimodal" else 1)
            assert (runs_of.groupby("env")["cell_id"].nunique() == 1).all()
            method = runs_of["method"].iloc[0]
            alpha = runs_of["algo.suffix_weight"].iloc[0]
            assert cell.mean == pytest.approx(0.4 + 0.02 * len(method) + alpha / 10)


def test_alpha_study_rows_are_the_alpha_grid():
    study = load_study(PAPERS / "etro_alpha_sweep.yaml")
    table = LAYOUTS["etro_alpha"].table(summarize_layout(study_frame(study), LAYOUTS["etro_alpha"]))
    assert [r.labels for r in table.sections[0].rows] == [
        (m, a) for m in ("Suffix Positive", "Suffix Negative") for a in ("0.25", "0.5", "1")]
    assert table.baseline is None  # ETRO (alpha = 0) ran in another study: no markers promised


def test_runs_frame_has_no_pooled_cells():
    study = load_study(PAPERS / "seed_table5_alfworld.yaml")
    prepared = prepare_runs(study_frame(study))
    per_variant = prepared.groupby(["env_key", "backbone", "variant"])["cell_id"].nunique()
    assert (per_variant == 1).all() and len(per_variant) == 5
    assert set(prepared["env_label"]) == {"ALFWorld"}
    assert isinstance(prepared, pd.DataFrame)
