"""``hindsight report`` on a real MLflow store filled with what the trainer logs."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from support.paths import EXAMPLES
from support.reports_fakes import study_store
from sweeps.cli import main
from sweeps.study import load_study
from sweeps.trials import expand, make_trial

PAPERS = EXAMPLES / "papers"


def _study(tmp_path: Path) -> Path:
    spec = {"name": "mini", "base": {"env": {"name": "household"},
                                     "model": {"backbone": "tiny"},
                                     "eval": {"splits": ["eval_unseen"]}},
            "grid": {"algo.method": ["grpo", "seed"], "seed": [0, 1, 2]},
            "tracking_uri": f"sqlite:///{tmp_path / 'mlruns.db'}", "out": str(tmp_path / "out")}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow  # an MLflow sqlite store is created (migrations take seconds)
def test_report_without_parent_never_writes_the_store(tmp_path, capsys):
    path = _study(tmp_path)
    study = load_study(path)
    score = {"grpo": 0.5, "seed": 0.7}
    store = study_store(study, study.store_uri, score=lambda c: score[c.algo.method],
                        drop=(5,), fail=(4,))
    db = tmp_path / "mlruns.db"
    before = _digest(db)
    assert main(["report", str(path), "--cells", "ci"]) == 0
    out = capsys.readouterr().out
    assert "no parent run" in out and "not logged" in out
    assert _digest(db) == before
    index = (tmp_path / "out" / "report" / "index.md").read_text()
    assert "- runs: 4 finished (used), 1 failed (not used), 1 missing of 6 trials" in index
    assert "Caution: fewer than 5 seeds per cell** (n = 1–3)" in index
    record = json.loads((tmp_path / "out" / "report" / "tables" / "etro_table1.json").read_text())
    cells = {c["row"]: c for c in record["cells"]}
    assert cells["GRPO"]["n"] == 3 and cells["SEED"]["n"] == 1
    assert cells["GRPO"]["mean"] == pytest.approx(0.5)
    assert cells["GRPO"]["ci_low"] < 0.5 < cells["GRPO"]["ci_high"]
    assert "[" in (tmp_path / "out" / "report" / "tables" / "etro_table1.md").read_text()
    assert len(store["true"]) == 5


@pytest.mark.slow
def test_seed_table5_study_reports_its_tables_through_the_store(tmp_path, monkeypatch, capsys):
    study = load_study(PAPERS / "seed_table5_alfworld.yaml", out=str(tmp_path / "out"))
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    # "w/o self-evolving" has the highest mean but one seed is missing (n = 2): it must not
    # be bold (it cannot be tested) and must not define the best; "w/o skill SFT" is the best.
    truth = {"grpo": 0.40, "seed": 0.50, "seed_no_sft": 0.85, "seed_no_self_evolving": 0.95,
             "seed_static": 0.55}
    lost = [i for i, t in enumerate(expand(study))
            if t.cfg.algo.method == "seed_no_self_evolving" and t.seed == 2]
    study_store(study, uri, score=lambda c: truth[c.algo.method], drop=lost)
    argv = ["report", str(PAPERS / "seed_table5_alfworld.yaml"), "--out", str(tmp_path / "out"),
            "--report-dir", str(tmp_path / "r")]
    assert main(argv) == 0
    tables = tmp_path / "r" / "tables"
    assert {"etro_table1", "seed_ablation"} <= {p.stem for p in tables.glob("*.md")}
    text = (tables / "seed_ablation.md").read_text()
    assert "ALFWorld Succ." in text and "| SEED (full) | 50.0 ± 2.8 |" in text
    assert "| w/o skill SFT | **85.0 ± 4.2**† |" in text
    assert "| w/o self-evolving | 95.0 ± 4.2 |" not in text  # n = 2 after the lost seed
    assert "| w/o self-evolving | 9" in text and "**9" not in text
    record = json.loads((tables / "seed_ablation.json").read_text())
    cells = {c["row"]: c for c in record["cells"]}
    assert cells["w/o self-evolving"]["n"] == 2 and cells["w/o skill SFT"]["n"] == 3


@pytest.mark.slow
def test_report_of_a_search_whose_trials_tie_says_so_and_writes_the_rest(tmp_path, monkeypatch,
                                                                         capsys):
    """`hindsight report examples/sensitivity.yaml` after a search whose four trials all
    scored 0% (each seed too): no fANOVA traceback; the index says in one line why there
    are no importances, and the best-cells table and the sensitivity figure are written."""
    out = tmp_path / "out"
    study = load_study(EXAMPLES / "sensitivity.yaml", out=str(out))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlruns.db'}")
    trials = [make_trial(study, {"algo.beta_opd": b, "algo.lambda_opd": lam}, seed)
              for b, lam in ((0.7, 0.002), (2.4, 0.02), (12.0, 0.05), (5.0, 0.001))
              for seed in study.seeds]
    study_store(study, study.store_uri, trials=trials, score=lambda cfg: 0.0, steps=(0,))
    client = MlflowClient(study.store_uri)  # every seed at exactly 0% (no seed noise), as on CPU
    for run in client.search_runs([client.get_experiment_by_name(study.experiment).experiment_id]):
        client.log_metric(run.info.run_id, study.search.metric, 0.0, step=1)
    assert main(["report", str(EXAMPLES / "sensitivity.yaml"), "--out", str(out)]) == 0
    index = (out / "report" / "index.md").read_text()
    lines = [x for x in index.splitlines() if x.startswith("- importance[seed]")]
    assert len(lines) == 1 and "(the trials tie)" in lines[0], lines
    assert (out / "report" / "tables" / "sensitivity_seed_best.md").is_file()
    assert (out / "report" / "figures" / "sensitivity_seed.png").stat().st_size > 5_000
    assert "report of 8 runs written" in capsys.readouterr().out
