"""``train()`` on two spawned gloo ranks (the launcher's contract: the process group is
initialized, RANK / WORLD_SIZE / LOCAL_RANK set), end to end on EZPoints: one MLflow run
that rank 0 alone writes, every metric once per step, ranks returning the same result,
complete sharded checkpoints with an HF export; and a run killed in step 2 that resumes on
two ranks and reproduces the uninterrupted run's step 2 exactly (metrics and weights)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

RANKS = Path(__file__).parent / "ranks.py"
EZPOINTS = Path(__file__).resolve().parents[3] / "examples" / "ezpoints_small.yaml"
KEYS = ("train/success", "train/entropy", "loss/total", "ppo/kl", "adv/std", "update/grad_norm",
        "eval/eval/success", "perf/context_tokens")


def overrides(out: Path, *extra: str) -> list[str]:
    return ["stages.rl.steps=2", "rollout.tasks_per_step=2", "rollout.group_size=4", "algo.minibatch_size=4",
            "eval.max_tasks=4", "eval.every=0", "output.checkpoint_every=1", "parallel.workers=2",
            f"output.dir={out / 'out'}", f"tracking.uri=sqlite:///{out / 'mlruns.db'}", *extra]


def train_ranks(out: Path, extra: tuple[str, ...] = (), **args) -> list[dict]:
    payload = json.dumps({"config": str(EZPOINTS), "overrides": overrides(out, *extra), **args})
    subprocess.run([sys.executable, str(RANKS), "launch", "2", "train", str(out), payload], check=True, timeout=900)
    return [json.loads((out / f"train_rank{r}.json").read_text()) for r in range(2)]


def history(out: Path, run_id: str, keys=KEYS) -> dict[str, list[tuple[int, float]]]:
    from trainer.run.store import make_client

    client = make_client(f"sqlite:///{out / 'mlruns.db'}")
    return {k: [(m.step, m.value) for m in client.get_metric_history(run_id, k)] for k in keys}


def weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "model" / "model.safetensors"))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("ranks2")
    return out, train_ranks(out)


@pytest.mark.slow
def test_two_ranks_train_one_run_once_per_step_with_sharded_checkpoints(uninterrupted):
    from trainer.run.checkpoint import latest_checkpoint
    from trainer.run.store import make_client

    out, results = uninterrupted
    assert results[0] == {**results[1], "seconds": results[0]["seconds"]}  # same RunResult on both
    assert results[0]["status"] == "FINISHED" and results[0]["threads"] == 1
    client = make_client(f"sqlite:///{out / 'mlruns.db'}")
    runs = client.search_runs([client.get_experiment_by_name("hindsight").experiment_id])
    assert [r.info.run_id for r in runs] == [results[0]["run_id"]]  # one run
    run = runs[0]
    assert run.info.status == "FINISHED" and run.data.params["parallel.workers"] == "2"
    for key in run.data.metrics:  # every metric once per step
        steps = Counter(m.step for m in client.get_metric_history(run.info.run_id, key))
        assert max(steps.values()) == 1, (key, steps)
    logged = history(out, run.info.run_id)
    for key in ("train/success", "loss/total", "ppo/kl", "update/grad_norm"):
        assert [s for s, _ in logged[key]] == [1, 2], (key, logged[key])
    assert [s for s, _ in logged["eval/eval/success"]] == [0, 2]
    assert logged["perf/context_tokens"][0][1] > 0
    import pandas as pd

    records = pd.read_parquet(out / "out" / "records" / "step_000002.parquet")  # rank 0 wrote both ranks'
    train = records[records["split"] == "train"]
    assert sorted(set(train["traj"])) == list(range(8)) and sorted(set(train["group"])) == [0, 1]
    ckpt = latest_checkpoint(out / "out")
    assert ckpt is not None and ckpt.name == "step_000002"
    assert {"COMPLETE", "model", "sharded", "rng_rank0.pt", "rng_rank1.pt", "trainer_state.pt"} <= \
        {p.name for p in ckpt.iterdir()}
    assert (out / "out" / "checkpoints" / "rl_init_sharded").is_dir()
    # the export is a complete HF folder: it loads, and training moved it off the start
    from trainer.models.backbones import load_pretrained
    from trainer.stages.warm_start import bundle_path

    trained, _ = load_pretrained(str(ckpt / "model"), torch.float32, "cpu")
    start, _ = load_pretrained(str(bundle_path("ezpoints")), torch.float32, "cpu")
    after, before = trained.state_dict(), start.state_dict()
    assert after.keys() == before.keys()
    assert any(not torch.equal(after[k], before[k]) for k in before)
    assert trained.lm_head.weight is trained.model.embed_tokens.weight  # still tied


@pytest.mark.slow
def test_a_killed_two_rank_run_resumes_to_the_same_step(uninterrupted, tmp_path):
    """Killed in step 2 (after the step-1 checkpoint) on both ranks, resumed on two: the
    same MLflow run, and step 2's metrics and weights equal the uninterrupted run's."""
    reference_out, reference = uninterrupted
    crashed = train_ranks(tmp_path, crash_in_step=2)
    assert all("crashed" in r for r in crashed)
    resumed = train_ranks(tmp_path, resume=True)
    from trainer.run.store import make_client

    client = make_client(f"sqlite:///{tmp_path / 'mlruns.db'}")
    runs = client.search_runs([client.get_experiment_by_name("hindsight").experiment_id])
    assert [r.info.run_id for r in runs] == [resumed[0]["run_id"]] == [resumed[1]["run_id"]]
    expected = history(reference_out, reference[0]["run_id"])
    got = history(tmp_path, resumed[0]["run_id"])
    for key in KEYS:
        assert got[key] == expected[key], key
    final = weights(tmp_path / "out" / "checkpoints" / "step_000002")
    want = weights(reference_out / "out" / "checkpoints" / "step_000002")
    assert final.keys() == want.keys()
    assert all(torch.equal(final[k], want[k]) for k in want)


def test_ranks_must_match_parallel_workers(tmp_path):
    """Two ranks for a run that says one: a clear error on every rank, before any run exists."""
    payload = json.dumps({"config": str(EZPOINTS), "overrides": overrides(tmp_path, "parallel.workers=1")})
    done = subprocess.run([sys.executable, str(RANKS), "launch", "2", "train", str(tmp_path), payload],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode != 0
    assert done.stderr.count("parallel.workers is 1 but the process group has 2 ranks") >= 2, done.stderr[-3000:]
    assert not (tmp_path / "mlruns.db").exists()


@pytest.mark.slow
def test_ranks_split_the_panels_and_evaluate_as_one_process(uninterrupted, tmp_path):
    """Step 0 (the warm start's weights on every rank): the panel's episodes played in two
    blocks, seeded as one process seeds them, give the one-process evaluation exactly; the
    wall times of both runs are printed (the same config on this machine's cores)."""
    import time

    from trainer.run.loop import train
    from trainer.run.resolve import load_config

    out, results = uninterrupted
    cfg = load_config(EZPOINTS, overrides(tmp_path, "parallel.workers=1"))
    start = time.perf_counter()
    single = train(cfg, progress=False)
    seconds = time.perf_counter() - start
    keys = ("eval/eval/success", "eval/eval/invalid_rate", "eval/eval/episode_length", "eval/eval/score")
    one, two = history(tmp_path, single.run_id, keys), history(out, results[0]["run_id"], keys)
    for key in keys:
        assert one[key][0] == two[key][0], key  # (0, value) at step 0
    print(f"train(): 1 process {seconds:.1f} s, 2 ranks {results[0]['seconds']:.1f} s")


@pytest.mark.slow
def test_two_ranks_replay_stage1s_gathered_examples(tmp_path):
    """SEED with Stage-1 writer replay on two ranks: every rank replays Stage 1's gathered
    examples (the same number of forwards, so no collective waits forever), the replay loss is logged
    once per step, and the examples are saved for a resume."""
    from trainer.run.checkpoint import load_replay, replay_path

    extra = ["algo.method=seed_writer_replay", "stages.skill_sft.tasks=4", "stages.skill_sft.replay_batch=3"]
    payload = json.dumps({"config": str(EZPOINTS), "overrides": overrides(tmp_path, *extra)})
    subprocess.run([sys.executable, str(RANKS), "launch", "2", "train", str(tmp_path), payload], check=True,
                   timeout=900)
    results = [json.loads((tmp_path / f"train_rank{r}.json").read_text()) for r in range(2)]
    assert all(r["status"] == "FINISHED" for r in results)
    replayed = history(tmp_path, results[0]["run_id"], ("loss/replay",))["loss/replay"]
    assert [step for step, _ in replayed] == [1, 2] and all(v > 0 for _, v in replayed)
    assert load_replay(replay_path(tmp_path / "out"))


@pytest.mark.slow
def test_a_killed_two_rank_lora_run_resumes_to_the_same_step(tmp_path):
    """model.lora on two ranks: the checkpoints are adapters naming the run's base
    (checkpoints/rl_base, the bundled warm start it started from), no sharded reference is
    saved, and a run killed in step 2 resumes to the uninterrupted run's metrics and
    adapter weights."""
    from safetensors.torch import load_file

    lora = ("model.lora.rank=4",)
    whole = train_ranks(tmp_path / "whole", lora)
    crashed = train_ranks(tmp_path / "crash", lora, crash_in_step=2)
    assert all("crashed" in r for r in crashed)
    resumed = train_ranks(tmp_path / "crash", lora, resume=True)
    expected = history(tmp_path / "whole", whole[0]["run_id"])
    got = history(tmp_path / "crash", resumed[0]["run_id"])
    for key in KEYS:
        assert got[key] == expected[key], key
    checkpoints = tmp_path / "whole" / "out" / "checkpoints"
    assert (checkpoints / "rl_base" / "model.safetensors").is_file()
    assert not (checkpoints / "rl_init_sharded").exists()
    adapter = "model/adapter_model.safetensors"
    want = load_file(str(checkpoints / "step_000002" / adapter))
    final = load_file(str(tmp_path / "crash" / "out" / "checkpoints" / "step_000002" / adapter))
    assert final.keys() == want.keys() and all(".lora_" in k for k in want)
    assert all(torch.equal(final[k], want[k]) for k in want)
