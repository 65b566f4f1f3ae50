"""The CPU reference's per-seed results (docs/results/cpu_reference/per_seed.csv), the seed
SD the simulation tests of analysis.power and analysis.sequential use."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from support.paths import ROOT

PER_SEED = ROOT / "docs" / "results" / "cpu_reference" / "per_seed.csv"


def per_seed(path: Path = PER_SEED) -> dict[str, dict[int, float]]:
    """method -> {seed: last evaluation's success (%)}."""
    frame = pd.read_csv(path, comment="#")
    return {m: dict(zip(g["seed"], g["last_eval"])) for m, g in frame.groupby("method")}


def reference_sd() -> float:
    """The pooled SD (points) of the paired differences SEED - GRPO and ETRO - GRPO."""
    values = per_seed()
    diffs = [np.array([values[m][s] - values["grpo"][s] for s in sorted(values["grpo"])])
             for m in ("seed", "etro")]
    return float(np.sqrt(np.mean([d.var(ddof=1) for d in diffs])))
