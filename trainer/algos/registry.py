"""Name -> function registries for ``trainer.algos`` (STYLE.md #1, verl ``core_algos`` style).

Three kinds of parts are registered, each with one shared signature:

* advantage estimators, ``fn(inputs: CreditInputs, cfg: AlgoConfig) -> (adv [B], metrics)``;
* token-credit rules, ``fn(inputs: CreditInputs, cfg: AlgoConfig, adv [B, T]) ->
  (adv [B, T], metrics)``: they turn the broadcast trajectory advantage into the final
  per-token advantage (ETRO routing, RLSD modulation);
* auxiliary OPD losses, ``fn(inputs: LossInputs, cfg: AlgoConfig) -> (loss [], metrics)``.

The trainer looks a part up once by name; an unknown name raises a ``ValueError`` that lists
the valid names and suggests the closest one.  The built-in parts and a plugin's
(:mod:`trainer.plugins`) register through the same decorators; a taken name raises.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Iterable
from typing import TypeVar

F = TypeVar("F", bound=Callable)


def unknown_name_error(kind: str, name: object, valid: Iterable[str]) -> ValueError:
    """A one-line error for an unknown ``name`` of ``kind``, listing ``valid`` names."""
    valid = sorted(valid)
    close = difflib.get_close_matches(str(name), valid, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return ValueError(f"unknown {kind} {name!r}.{hint} Valid: {', '.join(valid)}")


class Registry:
    """A named table of functions of one kind, filled by the :meth:`register` decorator."""

    def __init__(self, kind: str):
        self.kind = kind
        self._fns: dict[str, Callable] = {}

    def register(self, name: str) -> Callable[[F], F]:
        """Decorator registering a function under ``name`` (names are unique per kind)."""

        def decorate(fn: F) -> F:
            if name in self._fns:
                old = inspect.unwrap(self._fns[name])
                raise ValueError(f"{self.kind} {name!r} is already registered "
                                 f"({old.__module__}.{old.__qualname__}); choose another name")
            self._fns[name] = fn
            return fn

        return decorate

    def get(self, name: str) -> Callable:
        """The function registered as ``name``; unknown names raise listing the valid ones."""
        try:
            return self._fns[name]
        except KeyError:
            raise unknown_name_error(self.kind, name, self._fns) from None

    def names(self) -> list[str]:
        return sorted(self._fns)

    def __contains__(self, name: object) -> bool:
        return name in self._fns


ADVANTAGES = Registry("advantage estimator")
CREDITS = Registry("token-credit rule")
OPD_LOSSES = Registry("OPD loss")

register_advantage = ADVANTAGES.register
register_credit = CREDITS.register
register_opd_loss = OPD_LOSSES.register
