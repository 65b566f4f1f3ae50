"""Pure algorithm parts (advantages, token credit, losses) and the method table.

The trainer calls :func:`token_advantages` and :func:`policy_loss` with the
:class:`MethodSpec` from :func:`get_method`; it never branches on method names.
Importing this package registers every part.
"""

from .credit import (
    ETRO_ROUTES,
    Regions,
    Route,
    etro_opd_advantages,
    region_metrics,
    register_route,
    rlsd_decay,
    trajectory_regions,
)
from .entrypoints import policy_loss, policy_loss_terms, token_advantages
from .grpo import STD_MODES, grpo_advantages, ppo_clip_loss, tied_groups
from .inputs import CreditInputs, LossInputs
from .masked import LOSS_AGGS, aggregate, aggregation_weights, masked_mean, masked_std
from .methods import (
    METHOD_SOURCES,
    METHODS,
    REMOVED_METHODS,
    SKILL_CONTEXTS,
    TEACHERS,
    WRITER_KINDS,
    MethodSpec,
    get_method,
    method_names,
    register_method,
    resolve_algo,
)
from .opd import opsd_loss, opsd_topk_loss, seed_gate, seed_opd_loss
from .registry import (
    ADVANTAGES,
    CREDITS,
    OPD_LOSSES,
    Registry,
    register_advantage,
    register_credit,
    register_opd_loss,
)

__all__ = [
    "ADVANTAGES",
    "CREDITS",
    "ETRO_ROUTES",
    "LOSS_AGGS",
    "METHODS",
    "METHOD_SOURCES",
    "OPD_LOSSES",
    "SKILL_CONTEXTS",
    "STD_MODES",
    "TEACHERS",
    "WRITER_KINDS",
    "REMOVED_METHODS",
    "CreditInputs",
    "LossInputs",
    "MethodSpec",
    "Regions",
    "Registry",
    "Route",
    "aggregate",
    "aggregation_weights",
    "etro_opd_advantages",
    "get_method",
    "grpo_advantages",
    "masked_mean",
    "masked_std",
    "method_names",
    "opsd_loss",
    "opsd_topk_loss",
    "policy_loss",
    "policy_loss_terms",
    "ppo_clip_loss",
    "region_metrics",
    "register_advantage",
    "register_credit",
    "register_method",
    "register_opd_loss",
    "register_route",
    "resolve_algo",
    "rlsd_decay",
    "seed_gate",
    "seed_opd_loss",
    "tied_groups",
    "token_advantages",
    "trajectory_regions",
]
