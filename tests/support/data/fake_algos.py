"""A stand-in for the ``trainer.algos`` method table used by tests/trainer/config/test_config.py and
tests/sweeps/cli/test_cli.py: the same ``method_names()`` / ``get_method(name)`` surface with a few
hand-written specs, so that config tests do not depend on (or import torch through) the
real registry.  Tests install it with ``monkeypatch.setattr(trainer.run.resolve, "algos",
module)``."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class FakeSpec:
    name: str
    summary: str
    advantage: str
    credit: str | None
    opd_loss: str | None
    writer: str
    teacher: str | None
    lambda_opd: float | None
    skill_sft: bool
    writer_refresh: int | None = None
    writer_constrained: bool = False
    writer_replay: float = 0.0


METHODS = {
    "grpo": FakeSpec("grpo", "GRPO baseline", "grpo", None, None, "none", "old", 0.0, False),
    "seed": FakeSpec("seed", "SEED: gated hindsight OPD", "grpo", None, "seed_gated", "self",
                     "current", 0.01, True),
    "seed_stale": FakeSpec("seed_stale", "SEED with a stale analyzer", "grpo", None, "seed_gated",
                           "self", "current", 0.01, True, writer_refresh=0),
    "etro": FakeSpec("etro", "ETRO: error-truncated OPD", "grpo", "etro", None, "oracle", "old",
                     0.001, False),
    "open": FakeSpec("open", "a method whose table leaves lambda_opd open", "grpo", None, None,
                     "none", "old", None, False),
}


def method_names() -> list[str]:
    return sorted(METHODS)


def get_method(name: str) -> FakeSpec:
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; valid: {', '.join(method_names())}")
    return METHODS[name]


def resolve_algo(spec: FakeSpec, cfg):
    """The contract of trainer.algos.resolve_algo: None lambda_opd / teacher <- the spec."""
    return replace(cfg, lambda_opd=spec.lambda_opd if cfg.lambda_opd is None else cfg.lambda_opd,
                   teacher=spec.teacher if cfg.teacher is None else cfg.teacher)


def grpo_part(inputs, cfg):
    """The fake advantage."""


def seed_gated_part(inputs, cfg):
    """The fake OPD loss."""


def etro_part(inputs, cfg, adv):
    """The fake credit rule."""


def ppo_clip_loss(*args, **kwargs):
    """The fake RL loss."""


def token_advantages(spec, inputs, cfg):
    """The fake entry point."""


def policy_loss(spec, inputs, cfg):
    """The fake entry point."""


class _Registry:
    def __init__(self, parts):
        self._parts = parts

    def get(self, name):
        return self._parts[name]


ADVANTAGES = _Registry({"grpo": grpo_part})
CREDITS = _Registry({"etro": etro_part})
OPD_LOSSES = _Registry({"seed_gated": seed_gated_part})
