"""The method table, the registries and the two entry points, over every method name."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from trainer.algos import (
    CREDITS,
    METHODS,
    CreditInputs,
    LossInputs,
    MethodSpec,
    Registry,
    get_method,
    grpo_advantages,
    method_names,
    opsd_loss,
    policy_loss,
    ppo_clip_loss,
    resolve_algo,
    seed_opd_loss,
    token_advantages,
)
from trainer.config import AlgoConfig

F64 = torch.float64
EXPECTED_NAMES = [
    "grpo",
    "seed",
    "seed_no_sft",
    "seed_no_self_evolving",
    "seed_stale",
    "seed_constrained",
    "seed_writer_replay",
    "seed_static",
    "seed_static_oracle",
    "gated_static",
    "opsd",
    "grpo_opsd",
    "skill_sd",
    "rlsd",
    "opd_only",
    "opd_only_shuffled",
    "opd_only_signed",
    "opd_only_signed_shuffled",
    "skill_grpo",
    "skill_grpo_star",
    "skill_prompt",
    "vanilla",
    "etro",
    "etro_global_positive",
    "etro_global_negative",
    "etro_global_both",
    "etro_positive_only",
    "etro_negative_only",
    "etro_suffix_positive",
    "etro_suffix_negative",
    "etro_random_boundary",
    "etro_neg_prefix",
    "etro_neg_suffix",
]

# --- a small batch: 2 groups x 2 trajectories, two tokens per turn, padding at the end -------
TURNS = (5, 5, 5, 3)  # success | failed k=2 | failed, no boundary | failed k=0 (group 1 ties)
SUCCESS = torch.tensor([True, False, False, False])
ERROR_TURN = torch.tensor([-1, 2, -1, 0])


def _turn_ids() -> torch.Tensor:
    ids = torch.full((4, 11), -1)
    for b, n in enumerate(TURNS):
        ids[b, : 2 * n] = torch.arange(n).repeat_interleave(2)
    return ids


def _credit_inputs(delta_scale: float = 1.0, seed: int = 0, **kw) -> CreditInputs:
    ids = _turn_ids()
    base = {
        "rewards": SUCCESS.to(F64),
        "group_ids": torch.tensor([0, 0, 1, 1]),
        "mask": ids >= 0,
        "turn_ids": ids,
        "success": SUCCESS,
        "error_turn": ERROR_TURN,
        "delta_pos": torch.full(ids.shape, 1.0 * delta_scale, dtype=F64),
        "delta_neg": torch.full(ids.shape, -2.0 * delta_scale, dtype=F64),
        "delta_priv": torch.full(ids.shape, 0.3 * delta_scale, dtype=F64),
        "generator": torch.Generator().manual_seed(seed),
    }
    return CreditInputs(**{**base, **kw})


def _loss_inputs(adv: torch.Tensor, seed: int = 0) -> LossInputs:
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(adv.shape, generator=gen, dtype=F64) - 0.1
    logp = (old + 0.3 * torch.randn(adv.shape, generator=gen, dtype=F64)).requires_grad_()
    return LossInputs(
        logp=logp,
        logp_old=old,
        advantages=adv,
        mask=_turn_ids() >= 0,
        logp_ref=old - 0.05,
        logp_teacher=old + 0.2 * torch.randn(adv.shape, generator=gen, dtype=F64),
    )


def _grpo_tok() -> torch.Tensor:
    traj = grpo_advantages(SUCCESS.to(F64), torch.tensor([0, 0, 1, 1]))  # [B]
    return traj[:, None] * (_turn_ids() >= 0)  # [B, T]


def _per_turn(tok: torch.Tensor) -> list[list[float]]:
    return [tok[b, : 2 * n : 2].tolist() for b, n in enumerate(TURNS)]


# --- method-specific properties ------------------------------------------------------------
ETRO_OPD = {  # per-turn A_OPD with Delta+ = 1, Delta- = -2 (ETRO Sec. 3.4, 4.3)
    "etro": [[1] * 5, [1, 1, -2, 0, 0], [1] * 5, [-2, 0, 0]],
    "etro_global_positive": [[1] * 5, [1] * 5, [1] * 5, [1] * 3],
    "etro_global_negative": [[0] * 5, [-2] * 5, [0] * 5, [-2] * 3],
    "etro_global_both": [[1] * 5, [-0.5] * 5, [1] * 5, [-0.5] * 3],
    "etro_positive_only": [[1] * 5, [1, 1, 0, 0, 0], [1] * 5, [0, 0, 0]],
    "etro_negative_only": [[0] * 5, [0, 0, -2, 0, 0], [0] * 5, [-2, 0, 0]],
    "etro_suffix_positive": [[1] * 5, [1, 1, -2, 1, 1], [1] * 5, [-2, 1, 1]],
    "etro_suffix_negative": [[1] * 5, [1, 1, -2, -2, -2], [1] * 5, [-2, -2, -2]],
}
ETRO_RANDOM_ROW1 = {  # allowed per-turn rows of the k=2 trajectory for the random rules
    "etro_random_boundary": [[1] * k + [-2] + [0] * (4 - k) for k in range(5)],
    "etro_neg_prefix": [[-2, 1, 1, 0, 0], [1, -2, 1, 0, 0]],  # k + 1 = 3 turns supervised, as ETRO
    "etro_neg_suffix": [[1, 1, 0, -2, 0], [1, 1, 0, 0, -2]],
}


def _check_advantages(spec: MethodSpec, adv: torch.Tensor) -> None:
    grpo = _grpo_tok()
    if spec.advantage == "none":
        assert torch.equal(adv, torch.zeros_like(adv))
    elif spec.credit is None:
        assert torch.equal(adv, grpo)
    elif spec.credit == "rlsd":  # A * exp(sign(A) * 0.3): larger credit for success, less blame
        assert torch.allclose(adv, grpo * torch.exp(0.3 * torch.sign(grpo)))
    else:
        opd = _per_turn((adv - grpo) / 0.001)
        want = ETRO_OPD.get(spec.name)
        if want is not None:
            assert all(got == pytest.approx(row) for got, row in zip(opd, want))
        else:
            assert any(opd[1] == pytest.approx(row) for row in ETRO_RANDOM_ROW1[spec.name])


def _check_loss(spec: MethodSpec, x: LossInputs, loss: torch.Tensor) -> None:
    cfg = AlgoConfig()
    rl = ppo_clip_loss(x.logp, x.logp_old, x.advantages, x.mask, 0.2, x.logp_ref, cfg.kl_coef)[0]
    opd = {
        "seed": lambda: seed_opd_loss(x.logp, x.logp_teacher, x.mask, cfg.beta_opd)[0],
        "opsd": lambda: opsd_loss(x.logp, x.logp_teacher, x.mask)[0],
        None: lambda: 0.0,
    }[spec.opd_loss]()
    expected = (rl if spec.uses_rl else 0.0) + spec.lambda_opd * opd
    assert loss.detach().item() == pytest.approx(
        float(torch.as_tensor(expected).detach()), rel=1e-12, abs=1e-12
    )


@pytest.mark.parametrize("name", method_names())
def test_every_method_runs_and_has_its_property(name):
    spec = get_method(name)
    adv, adv_metrics = token_advantages(spec, _credit_inputs(), AlgoConfig())
    assert adv.shape == (4, 11) and torch.isfinite(adv).all()
    assert torch.all(adv[_turn_ids() < 0] == 0)
    assert all(isinstance(v, float) and math.isfinite(v) for v in adv_metrics.values())
    _check_advantages(spec, adv)
    x = _loss_inputs(adv)
    if not spec.trains:
        with pytest.raises(ValueError, match=f"{name}' does not train"):
            policy_loss(spec, x, AlgoConfig())
        return
    # the sampled-token OPD path (opsd_top_k = 0); OPSD's top-k distribution matching needs
    # [B, T, k] inputs and is tested in test_algos_opd / test_trainer_rl
    loss, metrics = policy_loss(spec, x, AlgoConfig(opsd_top_k=0))
    (grad,) = torch.autograd.grad(loss, x.logp)
    assert torch.isfinite(loss) and torch.isfinite(grad).all() and grad.abs().sum() > 0
    assert all(isinstance(v, float) and math.isfinite(v) for v in metrics.values())
    _check_loss(spec, x, loss)


def test_method_names_and_table():
    assert method_names() == EXPECTED_NAMES
    assert all(METHODS[n].name == n for n in EXPECTED_NAMES)
    for name in EXPECTED_NAMES:
        spec = get_method(name)
        assert spec.paper and spec.summary
        if name.startswith(("seed", "gated")) and name != "seed_no_self_evolving":
            assert spec.lambda_opd == 0.01 and spec.opd_loss == "seed" and spec.teacher == "current"
        if name.startswith("etro"):
            assert spec.lambda_opd == 0.001 and spec.teacher == "old" and spec.opd_loss is None


def test_table_flags_for_baselines_and_ablations():
    g = get_method
    assert g("seed").skill_sft and not g("seed_no_sft").skill_sft
    assert g("seed_stale").writer_refresh == 0 and g("seed").writer_refresh is None
    # SEED Table 2 "w/o self-evolving": Stage 1's supervision, then GRPO with no OPD at all
    nse = g("seed_no_self_evolving")
    assert nse.skill_sft and nse.opd_loss is None and nse.credit is None and nse.skills == ()
    assert (nse.advantage, nse.lambda_opd, nse.writer) == ("grpo", 0.0, "none")
    assert g("seed_static").writer == "static" and g("seed").writer == "self"
    # SEED Table 2's static library is the policy's own, written once; the oracle's is a variant
    assert g("seed_static").library == "self" and g("seed_static_oracle").library == "oracle"
    assert g("seed_static_oracle").writer == "static" and g("skill_sd").library == "oracle"
    assert not g("opsd").uses_rl and g("grpo_opsd").uses_rl
    assert not g("vanilla").trains and not g("skill_prompt").trains and g("skill_prompt").eval_skill
    assert g("skill_grpo").rollout_skill and not g("skill_grpo").eval_skill
    assert g("skill_grpo_star").rollout_skill and g("skill_grpo_star").eval_skill
    assert g("etro").skills == ("positive", "negative") and g("opsd").skills == ("privileged",)


def test_unknown_method_suggests_close_match_and_lists_all():
    with pytest.raises(ValueError) as err:
        get_method("etro_global_postive")
    msg = str(err.value)
    assert "Did you mean 'etro_global_positive'?" in msg and "grpo_opsd" in msg and "vanilla" in msg


def test_registry_unknown_and_duplicate_names():
    reg = Registry("widget")
    reg.register("alpha")(lambda: 1)
    with pytest.raises(ValueError, match="already registered"):
        reg.register("alpha")(lambda: 2)
    with pytest.raises(ValueError, match="unknown widget 'alpah'. Did you mean 'alpha'"):
        reg.get("alpah")
    with pytest.raises(ValueError, match="unknown token-credit rule 'etr'.*rlsd"):
        CREDITS.get("etr")


@pytest.mark.parametrize(
    "change, message",
    [
        ({"skills": ("hindsight",)}, "skills"),
        ({"writer": "gpt"}, "writer 'gpt'"),
        ({"opd_loss": "kl"}, "unknown OPD loss 'kl'"),
        ({"skills": ("positive", "negative")}, "exactly one skill context"),
        ({"writer": "none"}, "need a writer"),
    ],
)
def test_method_spec_validation(change, message):
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(get_method("seed"), **change)


def test_resolve_algo_fills_method_defaults():
    cfg = resolve_algo(get_method("etro"), AlgoConfig())
    assert (cfg.lambda_opd, cfg.teacher, cfg.suffix_weight) == (0.001, "old", 0.0)
    assert (
        resolve_algo(get_method("seed"), AlgoConfig(lambda_opd=0.5, teacher="old")).lambda_opd
        == 0.5
    )
    neg = resolve_algo(get_method("etro_suffix_negative"), AlgoConfig())
    assert (neg.suffix_skill, neg.suffix_weight) == ("negative", 1.0)
    sweep = resolve_algo(get_method("etro_suffix_positive"), AlgoConfig(suffix_weight=0.25))
    assert (sweep.suffix_skill, sweep.suffix_weight) == ("positive", 0.25)


# --- equivalences --------------------------------------------------------------------------
def test_seed_with_zero_lambda_equals_grpo_loss_and_gradient():
    adv = _grpo_tok()
    cfg = AlgoConfig(lambda_opd=0.0)
    x = _loss_inputs(adv, seed=5)
    seed_loss, _ = policy_loss(get_method("seed"), x, cfg)
    grpo_loss, _ = policy_loss(get_method("grpo"), x, cfg)
    (g_seed,) = torch.autograd.grad(seed_loss, x.logp)
    (g_grpo,) = torch.autograd.grad(grpo_loss, x.logp)
    assert seed_loss.detach().item() == grpo_loss.detach().item()
    assert torch.equal(g_seed, g_grpo)
    # and with the default lambda the OPD term does change the gradient
    (g_default,) = torch.autograd.grad(policy_loss(get_method("seed"), x, AlgoConfig())[0], x.logp)
    assert not torch.allclose(g_default, g_grpo)


@pytest.mark.parametrize("name", [n for n in EXPECTED_NAMES if n.startswith("etro")])
def test_etro_family_with_zero_gaps_equals_grpo(name):
    adv, _ = token_advantages(get_method(name), _credit_inputs(delta_scale=0.0), AlgoConfig())
    grpo, _ = token_advantages(get_method("grpo"), _credit_inputs(), AlgoConfig())
    assert torch.equal(adv, grpo)


def test_etro_gives_credit_where_grpo_ties():
    adv, metrics = token_advantages(get_method("etro"), _credit_inputs(), AlgoConfig())
    grpo, _ = token_advantages(get_method("grpo"), _credit_inputs(), AlgoConfig())
    assert torch.all(grpo[2:] == 0) and metrics["adv/tied_group_frac"] == 0.5
    assert adv[2, 0].item() == pytest.approx(0.001) and adv[3, 0].item() == pytest.approx(-0.002)


def test_dr_grpo_none_mode_through_token_advantages():
    adv, _ = token_advantages(get_method("grpo"), _credit_inputs(), AlgoConfig(std_mode="none"))
    assert _per_turn(adv) == [[0.5] * 5, [-0.5] * 5, [0.0] * 5, [0.0] * 3]


def test_input_shapes_are_checked_with_field_names():
    with pytest.raises(
        ValueError, match=r"CreditInputs.delta_pos has shape \(4, 10\); expected \[4, 11\]"
    ):
        _credit_inputs(delta_pos=torch.zeros(4, 10))
    with pytest.raises(ValueError, match=r"LossInputs.advantages has shape \(3, 11\)"):
        LossInputs(
            logp=torch.zeros(4, 11),
            logp_old=torch.zeros(4, 11),
            advantages=torch.zeros(3, 11),
            mask=torch.ones(4, 11),
        )


def test_seed_no_self_evolving_resolves_to_stage1_then_plain_grpo():
    """SEED Table 2's "w/o self-evolving" (the review: Stage 1's supervision without the
    Stage-2 distillation loop) runs skill SFT and no OPD; the stale analyzer is another
    method, ``seed_stale``, which keeps OPD from a never-refreshed writer."""
    from trainer.config import RunConfig, apply_overrides
    from trainer.run.resolve import resolve

    cfg = resolve(apply_overrides(RunConfig(), {"algo.method": "seed_no_self_evolving"}))
    assert cfg.stages.skill_sft.enabled is True
    assert (cfg.algo.lambda_opd, cfg.writer.kind) == (0.0, "none")
    stale = resolve(apply_overrides(RunConfig(), {"algo.method": "seed_stale"}))
    assert stale.stages.skill_sft.enabled is True and stale.writer.refresh_every == 0
    assert (stale.algo.lambda_opd, stale.writer.kind) == (0.01, "self")


def test_seed_constrained_is_seed_with_a_format_constrained_writer():
    """The lever against the self writer's collapse changes the writer's sampling only: the
    resolved config equals SEED's but for ``writer.constrained``, which SEED leaves off."""
    from trainer.config import RunConfig, apply_overrides, flatten
    from trainer.run.resolve import resolve

    seed = flatten(resolve(apply_overrides(RunConfig(), {"algo.method": "seed"})))
    shaped = flatten(resolve(apply_overrides(RunConfig(), {"algo.method": "seed_constrained"})))
    assert {k for k in seed if seed[k] != shaped[k]} == {"algo.method", "writer.constrained"}
    assert (seed["writer.constrained"], shaped["writer.constrained"]) == (False, True)


def test_seed_writer_replay_is_seed_with_stage1_replay_and_needs_stage1():
    """The replay lever changes the update only by Stage-1 replay: the resolved config equals
    SEED's but for ``stages.skill_sft.replay`` (SEED's 0, a weight the config may set);
    a replay without Stage 1 is refused, naming the field."""
    from trainer.config import ConfigError, RunConfig, apply_overrides, flatten
    from trainer.run.resolve import resolve

    seed = flatten(resolve(apply_overrides(RunConfig(), {"algo.method": "seed"})))
    replay = flatten(resolve(apply_overrides(RunConfig(), {"algo.method": "seed_writer_replay"})))
    assert {k for k in seed if seed[k] != replay[k]} == {"algo.method", "stages.skill_sft.replay"}
    assert (seed["stages.skill_sft.replay"], replay["stages.skill_sft.replay"]) == (0.0, 1.0)
    set_weight = resolve(apply_overrides(RunConfig(), {"algo.method": "seed_writer_replay",
                                                       "stages.skill_sft.replay": 0.25}))
    assert set_weight.stages.skill_sft.replay == 0.25
    with pytest.raises(ConfigError, match="stages.skill_sft.replay: replays Stage-1 examples, but "
                                          "Stage 1 is off for method 'grpo'"):
        resolve(apply_overrides(RunConfig(), {"algo.method": "grpo", "stages.skill_sft.replay": 1.0}))


def test_sdar_is_not_passed_off_as_reproduced():
    """SDAR's student-uncertainty term is not defined by the papers followed here: the name
    is refused with the reason and the alternative, in the registry and in a config."""
    from trainer.config import ConfigError, RunConfig, apply_overrides
    from trainer.run.resolve import resolve

    with pytest.raises(ValueError, match="'sdar' was removed: SDAR's gate depends on the "
                                         "student's uncertainty.*'gated_static'"):
        get_method("sdar")
    with pytest.raises(ConfigError, match="algo.method: 'sdar' was removed"):
        resolve(apply_overrides(RunConfig(), {"algo.method": "sdar"}))
    assert "sdar" not in METHODS and get_method("gated_static").writer == "static"
