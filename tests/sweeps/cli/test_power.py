"""``hindsight power``: per comparison of a study with its baseline, the pilot's SD of paired
differences, seeds needed and minimum detectable effect, from a real sqlite MLflow store."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from mlflow.tracking import MlflowClient

from analysis.power import min_detectable_effect, sd_upper, seeds_needed
from sweeps.cli import main
from sweeps.study import load_study
from sweeps.trials import expand

GRPO = [0.50, 0.53, 0.47, 0.52]
SEED = [0.54, 0.55, 0.50, 0.58]  # paired differences 4, 2, 3, 6 points
ETRO = [0.49, 0.55, 0.47, 0.51]  # -1, 2, 0, -1 points


def _study(tmp_path: Path, name: str = "power") -> Path:
    data = {"name": name, "base": {"model": {"backbone": "tiny"}}, "out": "out",
            "grid": {"algo.method": ["grpo", "seed", "etro"], "seed": [0, 1, 2, 3]}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _log_pilot(path: Path, values: dict[str, list[float]]) -> None:
    """Finished trial runs of the study, as a sweep leaves them (tags and the metric)."""
    study = load_study(path)
    client = MlflowClient(study.store_uri)
    exp = client.create_experiment(study.experiment)
    for trial in expand(study):
        value = values[trial.cfg.algo.method][trial.seed]
        tags = {"hindsight.kind": "trial", "study": study.name, "cell_id": trial.cell_id,
                "method": trial.cfg.algo.method, "env": "household", "backbone": "tiny",
                "seed": str(trial.seed)}
        run = client.create_run(exp, tags=tags)
        client.log_metric(run.info.run_id, "eval/eval_unseen/success", value)
        client.set_terminated(run.info.run_id, "FINISHED")


def test_power_prints_sd_seeds_needed_and_mde(tmp_path, capsys):
    path = _study(tmp_path)
    _log_pilot(path, {"grpo": GRPO, "seed": SEED, "etro": ETRO})
    assert main(["power", str(path), "--effect", "3"]) == 0
    out = capsys.readouterr().out
    assert "2 comparisons with the baseline" in out and "alpha 0.05 / 2 = 0.025" in out
    line = next(x for x in out.splitlines() if x.startswith("algo.method=seed vs"))
    d = np.array([4.0, 2.0, 3.0, 6.0])
    sd = d.std(ddof=1)
    expected = ["4", f"+{d.mean():.2f}", f"{sd:.2f}", f"{sd_upper(sd, 4):.2f}",
                f"{min_detectable_effect(sd, 4, 0.025):.2f}", str(seeds_needed(3.0, sd, 0.025)),
                str(seeds_needed(3.0, sd_upper(sd, 4), 0.025))]
    assert line.split()[3:] == expected


def test_power_reads_another_studys_pilot_and_refuses_bad_input(tmp_path, capsys):
    pilot = _study(tmp_path, "pilot")
    _log_pilot(pilot, {"grpo": GRPO, "seed": SEED, "etro": ETRO})
    (tmp_path / "big").mkdir()
    study = _study(tmp_path / "big", "big")  # another study, not launched: cells match by method
    assert main(["power", str(study), "--pilot", str(pilot)]) == 0
    out = capsys.readouterr().out
    assert "pilot: the runs of pilot in sqlite:///" in out and "seeds (SD)" not in out
    assert main(["power", str(study), "--pilot", str(pilot), "--effect", "-1"]) == 2
    assert capsys.readouterr().err.strip() == "error: --effect: -1.0; valid: points > 0"
    assert main(["power", str(study), "--pilot", str(pilot), "--baseline", "rlsd"]) == 2
    assert "error: baseline: 'rlsd' is not a method of study big; valid: etro, grpo, seed" in \
        capsys.readouterr().err


@pytest.mark.parametrize("pilot", ["nowhere.yaml", "not-a-store"])
def test_a_missing_pilot_is_a_one_line_error(tmp_path, capsys, pilot):
    assert main(["power", str(_study(tmp_path)), "--pilot", str(tmp_path / pilot)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --pilot: ") and "\n" not in err


def test_power_prints_a_readable_table(tmp_path, capsys):
    path = _study(tmp_path)
    _log_pilot(path, {"grpo": GRPO, "seed": SEED, "etro": ETRO})
    assert main(["power", str(path), "--effect", "3", "--alpha", "0.1"]) == 0
    out = capsys.readouterr().out
    assert "alpha 0.1 / 2 = 0.05" in out
    assert main(["power", str(path), "--alpha", "2"]) == 2
    assert capsys.readouterr().err.strip() == \
        "error: --alpha: 2.0; valid: a number strictly between 0 and 1"


def test_a_study_without_runs_yet_is_a_one_line_error(tmp_path, capsys):
    path = _study(tmp_path)
    assert main(["power", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --pilot: no runs of study 'power' yet: sqlite:///")
    assert not (tmp_path / "out").exists()  # nothing created
