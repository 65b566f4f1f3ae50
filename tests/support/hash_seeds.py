"""Run a Python snippet in fresh interpreters under different PYTHONHASHSEED values: the
built-in envs promise that panels and episodes do not depend on the process or on string
hashing, and each env's test checks it with its own digest snippet."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def outputs_under_hash_seeds(code: str, seeds=("0", "4242"), timeout: float = 300) -> list[str]:
    """The stripped stdout of ``python -c code`` (cwd and PYTHONPATH the repository root) under
    each hash seed, run in parallel; a failing run raises with its stderr."""
    procs = [subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)})
             for seed in seeds]
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"digest snippet failed (exit {proc.returncode}): {err[-2000:]}")
        outputs.append(out.strip())
    return outputs
