"""Data-parallel update (trainer/parallel, trainer/stages/rl.py): two gloo ranks, each with its
block of whole GRPO groups of the same trajectories and the policy and reference sharded by
FSDP2, take the same optimizer steps as one process on the whole batch, for GRPO, SEED and
ETRO (and OPSD's top-k matching), under every ``algo.loss_agg`` mode, with one and two PPO
minibatches (whose rows the ranks hold unevenly) and micro-batches of two sequences.

Compared: the gradients before clipping at every optimizer step (relative to their largest
entry) and the weights after the update (absolute), both within 1e-5 in float32.  With the
global counts replaced by each rank's own (``break_weighting``) every case fails: the
gradients are off by about 100%, which the weights alone would not always show (AdamW is
nearly blind to a uniform gradient scale)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.algos import LOSS_AGGS

RANKS = Path(__file__).parent / "ranks.py"
CASES = ([[m, agg, k, "full"] for m in ("grpo", "seed", "etro") for agg in LOSS_AGGS for k in (1, 2)]
         + [["etro", "seq-mean-token-mean", 2, "window"], ["grpo_opsd", "token-mean", 2, "full"]])
TOKEN_BUDGET = 2700  # full contexts: three micro-batches on rank 0 (929 and 814 tokens), two on rank 1 (875, 770)


def run_update(out: Path, **args) -> list[dict]:
    payload = json.dumps({"cases": CASES, **args})
    subprocess.run([sys.executable, str(RANKS), "launch", "2", "update", str(out), payload], check=True, timeout=900)
    return json.loads((out / "update_rank0.json").read_text())


@pytest.mark.slow
def test_two_ranks_update_equals_one_process(tmp_path):
    results = run_update(tmp_path)
    assert [r["case"] for r in results] == CASES
    for r in results:
        print(f"{r['case']}: weights {r['max_abs_diff']:.1e} (moved {r['moved']:.1e}), "
              f"gradients {r['grad_rel_diff']:.1e} relative")
        assert r["moved"] > 1e-4, r  # the update moved the weights
        assert r["max_abs_diff"] < 1e-5, r
        assert r["grad_rel_diff"] < 1e-5, r
        assert r["loss_ranks"] == pytest.approx(r["loss_single"], rel=1e-5, abs=1e-7), r


@pytest.mark.slow  # about 50 s (two gloo ranks); the one-process adapter tests stay in the default suite
def test_two_ranks_update_lora_adapters_as_one_process(tmp_path):
    """FSDP2 shards a LoRA policy (frozen base, float32 adapters, the reference its base with
    the adapters disabled): the adapters' gradients and weights after two PPO minibatches
    equal the one-process update's, and only the adapters move."""
    case = ["grpo", "token-mean", 2, "full"]
    (r,) = run_update(tmp_path, cases=[case], lora=4)
    assert r["moved"] > 1e-4 and r["moved_base"] == 0.0, r
    assert r["max_abs_diff"] < 1e-5 and r["grad_rel_diff"] < 1e-5, r
    assert r["grad_names"] and all(".lora_" in n for n in r["grad_names"]), r
    assert r["loss_ranks"] == pytest.approx(r["loss_single"], rel=1e-5, abs=1e-7), r


@pytest.mark.slow  # about a minute: two gloo ranks, two cases
@pytest.mark.parametrize("lora", [0, 4])
def test_two_ranks_score_the_initial_teacher_as_one_process(tmp_path, lora):
    """``algo.teacher: initial`` scores inside the update with the RL initialisation (the
    sharded reference; under LoRA the sharded policy with its adapters disabled): its forwards
    pair across the ranks, and two PPO minibatches (the second's policy has moved from its
    initialisation) take one process's steps."""
    (r,) = run_update(tmp_path, cases=[["seed", "token-mean", 2, "full", "initial"]], lora=lora)
    assert r["moved"] > 1e-4, r
    assert r["max_abs_diff"] < 1e-5 and r["grad_rel_diff"] < 1e-5, r
    assert r["loss_ranks"] == pytest.approx(r["loss_single"], rel=1e-5, abs=1e-7), r


@pytest.mark.slow
def test_local_counts_break_the_equivalence(tmp_path):
    """The check can fail: weights from each rank's own counts differ in every case."""
    for r in run_update(tmp_path, break_weighting=True):
        assert r["grad_rel_diff"] > 0.5 or r["max_abs_diff"] > 1e-4, r


@pytest.mark.slow
def test_two_ranks_with_a_token_budget_equal_one_process_by_count(tmp_path):
    """Micro-batches by token budget on the ranks give today's one-process step (micro-batches
    of two sequences): a rank whose sequences pack into fewer micro-batches than another's
    pads with zero-weight ones, so that the sharded model's collectives pair up."""
    cases = [[m, agg, 1, mode] for m in ("grpo", "seed", "etro") for agg in LOSS_AGGS for mode in ("full", "window")]
    payload = json.dumps({"cases": cases, "tokens": TOKEN_BUDGET})
    subprocess.run([sys.executable, str(RANKS), "launch", "2", "update", str(tmp_path), payload], check=True,
                   timeout=900)
    results, other = (json.loads((tmp_path / f"update_rank{r}.json").read_text()) for r in (0, 1))
    assert [r["case"] for r in results] == cases
    for r, r1 in zip(results, other):
        r["uneven"] += r1["uneven"]
        print(f"{r['case']}: weights {r['max_abs_diff']:.1e}, gradients {r['grad_rel_diff']:.1e}, "
              f"micro-batch counts raised to another rank's {r['uneven']}")
        assert r["moved"] > 1e-4, r
        assert r["max_abs_diff"] < 1e-5 and r["grad_rel_diff"] < 1e-5, r
        assert r["loss_ranks"] == pytest.approx(r["loss_single"], rel=1e-5, abs=1e-7), r
    assert all(r["uneven"] for r in results if r["case"][3] == "full")  # rank 1 padded its update



@pytest.mark.slow
def test_sft_micro_batches_by_token_budget_pair_across_ranks(tmp_path):
    """Stage 1, its replay and the warm start: ranks whose examples pack into different numbers
    of micro-batches still pair the sharded model's collectives (without the padding rank 1
    waits in its second forward for a partner that never comes) and sum to one process's
    gradients."""
    subprocess.run([sys.executable, str(RANKS), "launch", "2", "nll", str(tmp_path), "{}"], check=True, timeout=300)
    result = json.loads((tmp_path / "nll_rank0.json").read_text())
    assert result["plans"] == [3, 1]
    assert result["grad_rel_diff"] < 1e-5, result
