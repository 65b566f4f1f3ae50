"""Loading what a command is given: a run config resolved (the method and backbone defaults
filled in), with a missing optional package as a one-line error, and a study's configs."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any

from trainer.config import ConfigError, RunConfig
from trainer.run import memory
from trainer.run.dependencies import check_extras
from trainer.run.resolve import load_config, resolve

# Top-level keys that mark a YAML file as a study (sweeps.study) rather than a run config.
STUDY_KEYS = ("base", "grid", "search")


def loading(load: Callable[..., Any], *args: Any) -> Any:
    """Call a loader; any ValueError it raises becomes a one-line ConfigError."""
    try:
        return load(*args)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def load_run(path: str, overrides: list[str], extras: bool = True) -> RunConfig:
    """Load and resolve a run config (the method/backbone defaults filled in); a missing
    optional dependency it needs is a ConfigError too (unless ``extras`` is False)."""
    cfg = loading(lambda: resolve(load_config(path, overrides)))
    if extras:
        check_extras(cfg)
    return cfg


def check_study_extras(configs: Iterable[RunConfig]) -> None:
    """:func:`trainer.extras.check_extras` over every config a study can run."""
    for cfg in configs:
        check_extras(cfg)


def check_memory(configs: Iterable[RunConfig]) -> None:
    """Refuse, before anything loads, a resolved run whose planned peak
    (:func:`trainer.run.memory.plan_memory`) exceeds the device it would run on here: a
    ConfigError naming the phase and the setting to change.  A backbone the planner has no
    config for (a hub model not yet downloaded) is let through with a warning."""
    seen = set()
    for cfg in configs:
        try:
            plan = memory.plan_memory(cfg)
        except ValueError as e:
            if cfg.model.backbone not in seen:
                print(f"warning: no memory plan for {cfg.model.backbone}: {e}", file=sys.stderr)
            seen.add(cfg.model.backbone)
            continue
        if not plan.fits:
            raise ConfigError(
                f"{cfg.algo.method} ({cfg.model.backbone}) plans {plan.peak / 2**30:.1f} GiB in its "
                f"{memory.TITLES[plan.peak_phase]} phase, more than {plan.device_name()}: change "
                f"{plan.advice() or 'a smaller model.backbone'}; `hindsight memory` gives the parts, "
                f"--ignore-memory starts it anyway")
