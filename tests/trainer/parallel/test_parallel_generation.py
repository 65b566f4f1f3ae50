"""The transformers backend on a sharded policy (trainer/parallel/shard.py): under
``unsharded`` (what ``trainer.run.components.generating`` gives a live-model backend) two gloo
ranks sample exactly what the whole model samples, with different numbers of calls and
prompts per rank (no collective inside, so none can hang); afterwards the parameters are
shards again and train, and ``full_tensors`` (an engine's sync, the HF export) yields the
unsharded model's state dict, key for key and value for value, one gathered tensor at a time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

RANKS = Path(__file__).parent / "ranks.py"


def test_sharded_policy_generates_as_the_whole_model(tmp_path):
    subprocess.run([sys.executable, str(RANKS), "launch", "2", "generate", str(tmp_path), "{}"], check=True,
                   timeout=600)
    results = [json.loads((tmp_path / f"generate_rank{r}.json").read_text()) for r in range(2)]
    assert [r["calls"] for r in results] == [1, 2]
    for r in results:
        assert r["same"], r  # token ids and log-probs identical to the unsharded model's
        assert r["keys_equal"] and r["full_tensor_diff"] == 0.0, r
        assert r["shard_bytes"] < 0.5 * r["full_bytes"], r  # each rank holds about half


def test_tied_and_untied_heads_get_the_one_process_gradients(tmp_path):
    """Scoring calls the decoder and then the LM head on its own; the head is in the root
    group (trainer/parallel/shard.py), so its gradient, and a tied embedding's, is reduced
    over the ranks like any other (outside it: off by 50% tied, never sharded untied)."""
    subprocess.run([sys.executable, str(RANKS), "launch", "2", "heads", str(tmp_path), "{}"], check=True, timeout=600)
    result = json.loads((tmp_path / "heads_rank0.json").read_text())
    assert result["tied"] < 1e-5 and result["untied"] < 1e-5, result
