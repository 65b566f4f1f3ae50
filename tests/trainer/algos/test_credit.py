"""ETRO routing (Sec. 3.4, 4.3, 4.4) and RLSD modulation on constructed trajectories."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.algos import (
    CREDITS,
    CreditInputs,
    etro_opd_advantages,
    region_metrics,
    trajectory_regions,
)
from trainer.config import AlgoConfig

F64 = torch.float64
TOKENS_PER_TURN = 2
# rows: success (5 turns) | failed, k=2 (5 turns) | failed, no boundary (5) | failed, k=0 (3 turns)
TURNS = (5, 5, 5, 3)
SUCCESS = torch.tensor([True, False, False, False])
ERROR_TURN = torch.tensor([3, 2, -1, 0])  # row 0's 3 must be ignored: it succeeded


def _turn_ids() -> torch.Tensor:
    """``[4, 11]``: two tokens per turn, then -1 padding."""
    ids = torch.full((len(TURNS), 11), -1)
    for b, n in enumerate(TURNS):
        ids[b, : n * TOKENS_PER_TURN] = torch.arange(n).repeat_interleave(TOKENS_PER_TURN)
    return ids


def _per_turn(tok: torch.Tensor) -> list[list[float]]:
    """Per-turn values read from the first token of each turn (checks both tokens agree)."""
    out = []
    for b, n in enumerate(TURNS):
        row = tok[b, : n * TOKENS_PER_TURN].view(n, TOKENS_PER_TURN)  # [turns, tokens]
        assert torch.equal(row[:, 0], row[:, 1])
        assert torch.all(tok[b, n * TOKENS_PER_TURN :] == 0)
        out.append(row[:, 0].tolist())
    return out


def _inputs(seed: int = 0, **kw) -> CreditInputs:
    turn_ids = _turn_ids()
    nan = torch.full(turn_ids.shape, float("nan"), dtype=F64)
    base = {
        "rewards": SUCCESS.to(F64),
        "group_ids": torch.tensor([0, 0, 1, 1]),
        "mask": turn_ids >= 0,
        "turn_ids": turn_ids,
        "success": SUCCESS,
        "error_turn": ERROR_TURN,
        # NaN on padding: routing must never read it
        "delta_pos": torch.where(turn_ids >= 0, 1.0, nan),
        "delta_neg": torch.where(turn_ids >= 0, -2.0, nan),
        "generator": torch.Generator().manual_seed(seed),
    }
    return CreditInputs(**{**base, **kw})


def test_regions_follow_error_boundary():
    r = trajectory_regions(_turn_ids(), _turn_ids() >= 0, SUCCESS, ERROR_TURN)
    as_turns = {
        name: _per_turn(getattr(r, name).to(F64))
        for name in ("success", "no_boundary", "prefix", "error", "suffix")
    }
    assert as_turns["success"][0] == [1] * 5 and as_turns["success"][1] == [0] * 5
    assert as_turns["prefix"][1] == [1, 1, 0, 0, 0]
    assert as_turns["error"][1] == [0, 0, 1, 0, 0] and as_turns["error"][3] == [1, 0, 0]
    assert as_turns["suffix"][3] == [0, 1, 1]
    assert as_turns["no_boundary"][2] == [1] * 5


@pytest.mark.parametrize(
    "alpha, skill, row1, row3",
    [
        (0.0, "positive", [1, 1, -2, 0, 0], [-2, 0, 0]),  # ETRO: GRPO-only suffix
        (0.5, "positive", [1, 1, -2, 0.5, 0.5], [-2, 0.5, 0.5]),
        (0.25, "negative", [1, 1, -2, -0.5, -0.5], [-2, -0.5, -0.5]),
    ],
)
def test_etro_opd_advantages_by_hand(alpha, skill, row1, row3):
    x = _inputs()
    a = etro_opd_advantages(
        x.delta_pos, x.delta_neg, x.turn_ids, x.mask, x.success, x.error_turn, alpha, skill
    )
    assert _per_turn(a) == [[1] * 5, row1, [1] * 5, row3]


def test_etro_opd_advantages_rejects_unknown_suffix_skill():
    x = _inputs()
    with pytest.raises(ValueError, match="unknown suffix_skill 'both'.*positive, negative"):
        etro_opd_advantages(
            x.delta_pos, x.delta_neg, x.turn_ids, x.mask, x.success, x.error_turn, 1.0, "both"
        )


def _opd(name: str, x: CreditInputs, cfg: AlgoConfig | None = None) -> torch.Tensor:
    """The OPD part of a credit rule, (A - A_GRPO) / lambda with A_GRPO = 0 here."""
    cfg = cfg or AlgoConfig(lambda_opd=1.0)
    adv, _ = CREDITS.get(name)(x, cfg, torch.zeros(x.mask.shape, dtype=F64))
    return adv / cfg.lambda_opd


def _boundary_rows(k: int, n: int) -> list[float]:
    return [1.0] * k + [-2.0] + [0.0] * (n - k - 1)


def test_random_boundary_structure_and_reproducibility():
    seen = set()
    for seed in range(40):
        turns = _per_turn(_opd("etro_random_boundary", _inputs(seed)))
        assert turns[0] == [1] * 5 and turns[2] == [1] * 5  # success / no boundary unchanged
        k1, k3 = turns[1].index(-2.0), turns[3].index(-2.0)
        assert turns[1] == _boundary_rows(k1, 5) and turns[3] == _boundary_rows(k3, 3)
        seen.add(k1)
    assert seen == {0, 1, 2, 3, 4}  # uniform over all turns, not stuck at the diagnosed k
    assert torch.equal(
        _opd("etro_random_boundary", _inputs(7)), _opd("etro_random_boundary", _inputs(7))
    )


@pytest.mark.parametrize("where, allowed, before", [
    ("prefix", {0, 1}, [1.0, 1.0, 1.0, 0.0, 0.0]),  # j < k: Negative and Positive swap turns
    ("suffix", {3, 4}, [1.0, 1.0, 0.0, 0.0, 0.0]),  # j > k: prefix Positive, k off
])
def test_negative_placement_moves_only_the_negative_turn(where, allowed, before):
    seen = set()
    for seed in range(30):
        turns = _per_turn(_opd(f"etro_neg_{where}", _inputs(seed)))
        j = turns[1].index(-2.0)
        seen.add(j)
        expected = list(before)
        expected[j] = -2.0
        assert turns[1] == expected
        # ETRO Sec. 4.4: "the supervised turn count remains fixed": k + 1 = 3 turns, one of
        # them Negative, as ETRO's own [1, 1, -2, 0, 0]
        assert sum(v != 0 for v in turns[1]) == 3 and turns[1].count(-2.0) == 1
        assert turns[3] == [-2, 0, 0]  # k = 0: empty prefix, not eligible, Negative stays at k
        assert turns[0] == [1] * 5 and turns[2] == [1] * 5
    assert seen == allowed


@pytest.mark.parametrize("name", ["etro_random_boundary", "etro_neg_prefix", "etro_neg_suffix"])
def test_random_rules_need_a_generator(name):
    with pytest.raises(ValueError, match="torch.Generator"):
        _opd(name, _inputs(generator=None))


def test_missing_delta_is_named():
    with pytest.raises(ValueError, match="etro needs CreditInputs.delta_neg"):
        _opd("etro", _inputs(delta_neg=None))


def test_credit_adds_lambda_times_opd_to_grpo_and_reports_regions():
    turn_ids = _turn_ids()
    x = _inputs(delta_pos=(turn_ids + 1).to(F64))  # Delta+ = turn + 1 on valid tokens
    grpo = torch.full(turn_ids.shape, 0.3, dtype=F64) * x.mask
    adv, metrics = CREDITS.get("etro")(x, AlgoConfig(lambda_opd=0.001), grpo)
    expected = grpo + 0.001 * etro_opd_advantages(
        x.delta_pos, x.delta_neg, turn_ids, x.mask, SUCCESS, ERROR_TURN
    )
    assert torch.allclose(adv, expected)
    assert metrics["opd/delta_prefix"] == pytest.approx(1.5)  # row 1, turns 0-1: Delta+ 1, 2
    assert metrics["opd/delta_error"] == pytest.approx(-2.0)
    assert metrics["opd/delta_suffix"] == pytest.approx((4 + 5 + 2 + 3) / 4)  # rows 1 and 3
    # credit on every valid token except row 1's two suffix turns and row 3's two suffix turns
    assert metrics["opd/credit_frac"] == pytest.approx(1 - 8 / 36)


def test_region_metrics_leave_out_empty_regions():
    x = _inputs(success=torch.ones(4, dtype=torch.bool))
    assert region_metrics(x, AlgoConfig()) == {}


def _rlsd(adv: torch.Tensor, delta: torch.Tensor, step: int) -> torch.Tensor:
    mask = torch.ones(adv.shape, dtype=torch.bool)
    x = CreditInputs(
        rewards=torch.zeros(adv.shape[0]),
        group_ids=torch.zeros(adv.shape[0], dtype=torch.long),
        mask=mask,
        turn_ids=torch.zeros(adv.shape, dtype=torch.long),
        success=torch.zeros(adv.shape[0], dtype=torch.bool),
        error_turn=torch.full((adv.shape[0],), -1),
        delta_priv=delta,
        step=step,
    )
    out, _ = CREDITS.get("rlsd")(x, AlgoConfig(rlsd_bound=0.5, rlsd_decay_steps=100), adv)
    return out


def test_rlsd_scales_magnitude_keeps_sign_and_decays():
    adv = torch.tensor([[1.0, -1.0, 1.0, -1.0, 0.0]], dtype=F64)
    delta = torch.tensor([[0.3, 0.3, 2.0, -2.0, 0.4]], dtype=F64)
    e = math.exp
    assert _rlsd(adv, delta, 0).tolist()[0] == pytest.approx(
        [e(0.3), -e(-0.3), e(0.5), -e(0.5), 0.0]
    )
    assert _rlsd(adv, delta, 50).tolist()[0] == pytest.approx(
        [e(0.15), -e(-0.15), e(0.25), -e(0.25), 0.0]
    )
    assert torch.equal(_rlsd(adv, delta, 100), adv)  # fully decayed: GRPO
