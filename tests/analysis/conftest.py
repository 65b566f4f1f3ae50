"""Shared builders of the analysis tests."""

import numpy as np
import pytest


def _turn(**kw) -> dict:
    """One per-turn record (the contract columns of analysis.loader.load_records) with
    neutral defaults; keyword arguments override them."""
    base = {"run_id": "r", "step": 0, "split": "train", "task_id": "t0", "group": 0,
            "traj": 0, "turn": 0, "state_key": "s", "action": "a", "reward": 0.0,
            "return": 0.0, "success": False, "error_turn_writer": -1, "error_turn_true": -1,
            "delta_pos": np.nan, "delta_neg": np.nan, "gate_mean": np.nan,
            "region": "no_boundary"}
    return {**base, **kw}


@pytest.fixture
def turn():
    """The per-turn record builder: ``turn(traj=1, delta_pos=0.2)`` -> a record dict."""
    return _turn
