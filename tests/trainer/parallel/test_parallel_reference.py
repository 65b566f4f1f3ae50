"""The KL reference of a sharded policy is built sharded, tensor by tensor in the compute
dtype (trainer/parallel/shard.py ``frozen_shards``), on two spawned gloo ranks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

RANKS = Path(__file__).parent / "ranks.py"


@pytest.mark.slow
def test_a_sharded_policys_reference_is_built_sharded_without_float32(tmp_path):
    subprocess.run([sys.executable, str(RANKS), "launch", "2", "reference", str(tmp_path), "{}"],
                   check=True, timeout=900)
    for rank in range(2):
        result = json.loads((tmp_path / f"reference_rank{rank}.json").read_text())
        assert result["float32_bytes"] == 0 and result["sharded"] and result["shards_equal"], result
        assert result["dtypes"] == ["torch.bfloat16"] and not result["trains"], result
        assert result["logits_max_diff"] == 0.0, result  # the one-process reference's forward
