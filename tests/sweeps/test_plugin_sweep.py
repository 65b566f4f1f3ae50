"""The plugins' worked example end to end (slow): ``examples/plugins/study.yaml`` swept on a
local Ray with real training (the plugin method ``seed_tau`` against ``grpo`` and ``seed``
on the plugin env ``codepage``, 2 seeds), then reported; the study folder also holds its own
``analysis.py`` and ``envs/``, which neither the driver nor a trial's worker may import."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from support.plugins import IMPORTS, isolated_registries, shadowing_folder, train_recording_imports
from sweeps.cli import main
from sweeps.ray_session import init_ray
from sweeps.runner import run_study
from sweeps.study import load_study
from trainer import plugins

pytestmark = pytest.mark.slow  # six real training trials on a local Ray: minutes on 2 CPUs

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def ray_session():
    import ray

    init_ray()
    yield
    ray.shutdown()


def test_the_example_plugins_sweep_and_report_beside_grpo_and_seed(tmp_path, monkeypatch, ray_session):
    lab = shadowing_folder(tmp_path)
    monkeypatch.chdir(lab)  # as a researcher runs it: from the study's own folder
    out = tmp_path / "out"
    with isolated_registries():
        study = load_study(lab / "study.yaml", out=out)
        lines: list[str] = []
        status = run_study(study, train_fn=train_recording_imports, echo=lines.append)
        print("\n".join(lines))
        assert status.complete, lines
        # every trial's worker imported the tool's analysis and envs, and the plugins privately
        for trial in sorted((out / "trials").iterdir()):
            seen = json.loads((trial / IMPORTS).read_text())
            assert seen["analysis"] == str(ROOT / "analysis" / "__init__.py"), seen
            assert seen["envs"] == str(ROOT / "envs" / "__init__.py"), seen
            assert any(m.startswith(plugins.MODULE_PREFIX + "codepage_") for m in seen["plugins"]), seen
        client = MlflowClient(study.store_uri)
        runs = client.search_runs([client.get_experiment_by_name(study.experiment).experiment_id],
                                  "tags.`hindsight.kind` = 'trial'")
        assert sorted((r.data.tags["method"], r.data.tags["env"]) for r in runs) == sorted(
            (m, "codepage") for m in ("grpo", "seed", "seed_tau") for _ in range(2))
        shas = {r.data.tags["method"]: r.data.params["plugins.sha"] for r in runs}
        assert all("codepage:" in s and "seed_tau.py:" in s for s in shas.values()), shas

        assert main(["report", str(lab / "study.yaml"), "--out", str(out), "--n-boot", "200",
                     "--ui-url", ""]) == 0
    table = (out / "report" / "tables" / "etro_table1.md").read_text()
    print(table)
    # a row's first cell, its "|" escaped as Markdown needs it ("SEED \\|Δ\\|≥τ")
    rows = [re.split(r"(?<!\\)\|", line)[1].strip().replace("\\|", "|")
            for line in table.splitlines() if line.startswith("| ")]
    assert [r for r in rows if r in ("GRPO", "SEED", "SEED |Δ|≥τ")] == ["GRPO", "SEED", "SEED |Δ|≥τ"], rows
    # paired by seed with the baseline, as every row (markers need 3 paired seeds; the example has 2)
    cells = json.loads((out / "report" / "tables" / "etro_table1.json").read_text())["cells"]
    ours = next(c for c in cells if c["row"] == "SEED |Δ|≥τ")
    assert (ours["n"], ours["n_paired"], len(ours["run_ids"])) == (2, 2, 2), ours
    aggregates = (out / "report" / "tables" / "aggregates.md").read_text()
    print(aggregates)
    assert "SEED \\|Δ\\|≥τ" in aggregates
