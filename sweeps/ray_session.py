"""Connect a driver to Ray: a cluster by address, or a fresh local Ray.

Its own module so that a parallel ``hindsight train`` reaches Ray without importing the study
runner (and Optuna with it): a GPU image with Ray but no Optuna still trains on ranks, and a
single-rank ``hindsight train`` imports neither (scripts/gpu_bundle.py).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import ray

from sweeps.ray_auth import refusal_message, refused, use_auth
from trainer.config import ConfigError


def init_ray(address: str = "", env: dict[str, str] | None = None) -> None:
    """Connect to the cluster at ``address`` or start a fresh local Ray (no dashboard, no
    usage stats; an empty ``~/ray_bootstrap_config.yaml`` so that Ray's usage-stats code does
    not probe the cloud metadata address 169.254.169.254).  A local Ray uses token
    authentication with a fresh token, a cluster gets its token if one is at hand
    (:mod:`sweeps.ray_auth`).  A local Ray's workers get the driver's ``sys.path`` as
    PYTHONPATH, so an injected train function imports, and ``env`` (they inherit the driver's
    environment as it is here: the driver keeps it too)."""
    if ray.is_initialized():
        return
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # verbose=0 then prints no tables
    use_auth(address)
    bootstrap = Path.home() / "ray_bootstrap_config.yaml"
    if not bootstrap.exists():
        bootstrap.write_text("{}\n")
    if not address:  # local workers import what the driver imports (e.g. an injected train fn)
        paths = [p for p in sys.path if p and Path(p).is_dir()]
        os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        os.environ.update(env or {})
    # Workers' output stays out of the sweep's console: each trial's goes to its trial.log
    # (run_trial), the rest to Ray's own logs under its session folder.
    try:
        ray.init(address=address or "local", include_dashboard=False, logging_level="WARNING",
                 log_to_driver=False)
    except ConnectionError as exc:  # the head answered TCP but is no (healthy) Ray head
        if refused(exc):
            raise ConfigError(refusal_message(address)) from None
        raise ConfigError(f"cannot connect to the Ray cluster at {address}: "
                          f"{' '.join(str(exc).split())[:300]}") from None
