"""SEED's Stage 1 sharded as RL is (trainer/stages/skill_sft.py, trainer/stages/sft.py): on two
gloo ranks with the policy sharded by FSDP2 first, each rank plays and annotates its block of
the rollouts, so an external annotator (a fake OpenAI-compatible endpoint on loopback) is
asked about each trajectory once, the same trajectories one process plays; the ranks train on
the gathered examples, each its block of every minibatch over the whole minibatch's tokens,
and take one process's optimizer steps (gradients before clipping at every step, relative to
their largest entry, and weights after Stage 1, both within 1e-5 in float32).  The KL
reference is frozen from the shards, sharded, and equals the policy after Stage 1; the
warm-start cache written from the shards loads as the policy.

Five rollouts in minibatches of three over two ranks: blocks of one and two rollouts, and
micro-batches of one sequence, so one rank runs a micro-batch of weight 0 to pair the
collectives.  With every rank training the whole of each minibatch instead (``/broken``) the
gradients are twice one process's."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from envs.base import Hindsight
from support.chat import FakeChat
from trainer.hindsight.analyzer import analyzer_target

RANKS = Path(__file__).parent / "ranks.py"
ROLLOUTS = 5
OVERRIDES = ["algo.method=seed", f"stages.skill_sft.tasks={ROLLOUTS}", "stages.skill_sft.rollouts_per_task=1",
             "stages.skill_sft.batch_size=3", "stages.skill_sft.epochs=2", "stages.skill_sft.lr=0.001",
             "stages.skill_sft.replay=1", "algo.micro_batch_size=1", "algo.kl_coef=0.01", "parallel.workers=2"]


@pytest.fixture(scope="module")
def stage1(tmp_path_factory):
    out = tmp_path_factory.mktemp("stage1")
    # a valid hindsight for any trajectory: a Positive skill, no error turn
    with FakeChat(analyzer_target(Hindsight("Open every drawer before the cabinets."))) as server:
        payload = json.dumps({"overrides": OVERRIDES, "endpoint": f"http://127.0.0.1:{server.server_port}"})
        subprocess.run([sys.executable, str(RANKS), "launch", "2", "stage1", str(out), payload], check=True,
                       timeout=900)
    results = [json.loads((out / f"stage1_rank{r}.json").read_text()) for r in range(2)]
    return server.requests, results


def _prompts(requests, phase: str) -> Counter:
    return Counter(json.dumps(body["messages"]) for path, _, body in requests if path.startswith(f"/{phase}/"))


@pytest.mark.slow
def test_the_annotator_sees_each_stage1_trajectory_once_across_the_ranks(stage1):
    requests, _ = stage1
    single, ranks = _prompts(requests, "single"), _prompts(requests, "ranks")
    assert sum(single.values()) == ROLLOUTS
    assert ranks == single  # the same trajectories, each asked about once


@pytest.mark.slow
def test_two_ranks_stage1_equals_one_process(stage1):
    _, (first, second) = stage1
    print(f"weights {first['max_abs_diff']:.1e} (moved {first['moved']:.1e}), "
          f"gradients {first['grad_rel_diff']:.1e} relative over {first['steps']} steps; "
          f"every rank the whole minibatch: {first['broken_grad_rel_diff']:.2f}")
    assert first["same_examples"]
    assert first["steps"] == 4  # 2 epochs of minibatches of 3 and 2
    assert first["moved"] > 1e-4
    assert first["max_abs_diff"] < 1e-5
    assert first["grad_rel_diff"] < 1e-5
    assert first["broken_grad_rel_diff"] > 0.5  # the check can fail
    for key, value in first["single_metrics"].items():
        assert first["metrics"][key] == pytest.approx(value, rel=1e-5), key
    assert first["metrics"] == second["metrics"] and first["panel"] == second["panel"]
    assert 0.0 <= first["panel"]["writer/panel_valid_rate"] <= 1.0


@pytest.mark.slow
def test_the_reference_is_frozen_from_the_shards_after_stage1(stage1):
    _, results = stage1
    for r in results:
        assert r["reference_sharded"] and not r["reference_trains"]
        assert r["reference_diff"] == 0.0


@pytest.mark.slow
def test_a_sharded_warm_start_is_cached_whole(stage1):
    """The warm-start cache written from the shards (every rank gathers, rank 0 writes)
    loads as the policy's weights."""
    _, (first, _) = stage1
    assert first["export_diff"] == 0.0
