"""A run that names plugins on two gloo ranks (slow): each rank is a fresh process that
imports the plugins as its config resolves, so the plugin env and method exist on every rank
and the one run trains (examples/plugins/train.yaml, grpo and seed_tau on codepage)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

RANKS = Path(__file__).parent / "ranks.py"
TRAIN = Path(__file__).resolve().parents[3] / "examples" / "plugins" / "train.yaml"


@pytest.mark.slow
@pytest.mark.parametrize("method", ["grpo", "seed_tau"])
def test_two_ranks_train_a_run_that_names_plugins(tmp_path, method):
    overrides = [f"algo.method={method}", "parallel.workers=2", "stages.rl.steps=1", "eval.max_tasks=2",
                 "stages.warm_start.episodes=8", "stages.warm_start.epochs=1", "stages.warm_start.cache=false",
                 "stages.skill_sft.writer_panel=0", f"output.dir={tmp_path / 'out'}",
                 f"tracking.uri=sqlite:///{tmp_path / 'mlruns.db'}"]
    payload = json.dumps({"config": str(TRAIN), "overrides": overrides})
    subprocess.run([sys.executable, str(RANKS), "launch", "2", "train", str(tmp_path), payload], check=True,
                   timeout=900)
    ranks = [json.loads((tmp_path / f"train_rank{r}.json").read_text()) for r in range(2)]
    assert [r.get("status") for r in ranks] == ["FINISHED", "FINISHED"], ranks
    assert ranks[0]["run_id"] == ranks[1]["run_id"]
