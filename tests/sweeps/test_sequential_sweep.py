"""A grid with a ``seeds:`` plan on a real local Ray with a fake trainer whose outcomes are
fixed: the first round runs ``min`` seeds everywhere, later rounds add seeds only to the
undecided cell and its baseline, the parent run records the plan and each cell's n, a
relaunch resumes (nothing to run) and refuses a changed plan, and the status calls the
pairs the plan skipped unneeded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from support import sequential_fakes as fakes
from sweeps.ray_session import init_ray
from sweeps.runner import run_study
from sweeps.sequential import CELLS_TAG, PLAN_TAG, RULE_TAG
from sweeps.status import find_parent, study_children
from sweeps.study import load_study
from trainer.config import ConfigError

pytestmark = pytest.mark.slow  # local Ray and three rounds of Tune: minutes on 2 shared cores


@pytest.fixture(scope="module", autouse=True)
def ray_session():
    import ray

    init_ray()
    yield
    ray.shutdown()


def _study(tmp_path: Path, **seeds):
    data = {"name": "seq", "base": {"model": {"backbone": "tiny"}}, "resources": {"cpus": 0.5},
            "max_concurrent": 4, "out": "out",
            "grid": {"algo.method": ["grpo", "seed", "etro"]},
            "seeds": {"min": 3, "max": 5, "spending": "bonferroni", **seeds}}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_study(path)


def test_seeds_are_added_only_where_undecided(tmp_path):
    study = _study(tmp_path)
    lines: list[str] = []
    status = run_study(study, train_fn=fakes.planned_train, echo=lines.append)
    assert status.complete, status.format()
    seeds = {}
    for (_, seed), runs in study_children(study).items():
        method = runs[0].data.tags["method"]
        seeds.setdefault(method, set()).add(seed)
    assert seeds == {"grpo": {0, 1, 2, 3, 4}, "etro": {0, 1, 2, 3, 4}, "seed": {0, 1, 2}}
    rounds = [x for x in lines if x.startswith("seeds: next round: ")]
    assert lines[0].startswith("launch 9,") and [x.split(",")[0] for x in rounds] == [
        "seeds: next round: launch 2", "seeds: next round: launch 2",
        "seeds: next round: launch 0"]
    assert status.counts()["unneeded"] == 2 and status.counts()["finished"] == 13

    client = MlflowClient(study.store_uri)
    exp = client.get_experiment_by_name(study.experiment)
    parent = find_parent(client, exp.experiment_id, study.name)
    tags = parent.data.tags
    assert json.loads(tags[PLAN_TAG])["max"] == 5 and "bonferroni" in tags[RULE_TAG]
    cells = json.loads(tags[CELLS_TAG])
    states = sorted((c["n"], c.get("state", "baseline")) for c in cells.values())
    assert states == [(3, "different"), (5, "baseline"), (5, "undecided")]

    lines.clear()  # a relaunch resumes the same plan: nothing left to run
    assert run_study(study, train_fn=fakes.planned_train, echo=lines.append).complete
    assert lines[0].startswith("launch 0, skip 13 finished")
    with pytest.raises(ConfigError, match=r"^seeds: the study's parent run .* recorded the plan"):
        run_study(_study(tmp_path, max=6), train_fn=fakes.planned_train, echo=lines.append)


SMOKE_BASE = {
    "model": {"backbone": "tiny", "device": "cpu", "max_prompt_tokens": 1024,
              "tiny": {"hidden_size": 48, "num_layers": 1, "num_heads": 4, "num_kv_heads": 2,
                       "intermediate_size": 96, "vocab_size": 2048}},
    "env": {"name": "household", "max_turns": 4, "context": "full"},
    "rollout": {"group_size": 2, "tasks_per_step": 2, "max_new_tokens": 16},
    "algo": {"lr": 0.0002},
    "stages": {"warm_start": {"episodes": 16, "epochs": 1, "batch_size": 8},
               "rl": {"steps": 1}},
    "eval": {"every": 0, "max_tasks": 4, "splits": ["eval_unseen"]},
    "output": {"checkpoint_every": 0},
}


def test_a_tiny_adaptive_grid_trains_and_its_report_states_the_rule_and_n(tmp_path, capsys):
    """The smoke study's tiny backbone (one RL step, a 4-task panel), GRPO and ETRO with
    ``seeds: {min: 2, max: 3}``, trained for real on local Ray; the report states the rule
    and each cell's seeds, as many as the store holds."""
    from sweeps.cli import main

    data = {"name": "tiny_seq", "base": SMOKE_BASE, "out": "out", "max_concurrent": 2,
            "resources": {"cpus": 1}, "grid": {"algo.method": ["grpo", "etro"]},
            "seeds": {"min": 2, "max": 3, "effect": 10}}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    study = load_study(path)
    status = run_study(study, echo=lambda line: None)
    assert status.complete, status.format()
    ran = {}
    for (_, seed), runs in study_children(study).items():
        if any(r.info.status == "FINISHED" for r in runs):
            ran.setdefault(runs[0].data.tags["method"], set()).add(seed)
    assert ran["grpo"] >= {0, 1} and ran["etro"] >= {0, 1} and ran["grpo"] >= ran["etro"]
    assert main(["report", str(path)]) == 0
    index = (study.out_dir / "report" / "index.md").read_text()
    assert "## Seeds added until decided" in index
    assert "Seeds added until decided: every cell ran 2 seeds" in index
    assert f"| algo.method=grpo | {len(ran['grpo'])} | (baseline) |" in index
    assert f"| algo.method=etro | {len(ran['etro'])} | algo.method=grpo |" in index
