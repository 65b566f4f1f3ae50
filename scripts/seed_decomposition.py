"""What moved SEED's SmolLM2 policy (issue 43, docs/results/seed_harm_smollm2.md): SEED as
it is, SEED with a constant gate, Stage 1 then GRPO, and GRPO, each on the SmolLM2
reference study's setting (examples/cpu_reference_smollm2.yaml's shapes), with every
optimizer step's gradient split by loss term (tracking.gradient_parts).

The arms:

* ``seed``: SEED as the reference study ran it (Stage 1, its self writer, the gated OPD);
* ``seed_constant_gate``: the same with algo.beta_opd = 0, so g = sigmoid(0) = 1/2 on every
  token: its OPD gradient, -lambda/2 grad log pi of the policy's own samples, no longer
  depends on what the skill says (the hindsight's content is removed, its scale kept);
* ``seed_no_self_evolving``: Stage 1, then GRPO (no writer, no OPD). SEED with
  lambda_opd = 0 is this arm: its loss is GRPO's (tests/trainer/algos), and its writer's
  output enters no rollout;
* ``grpo``: no Stage 1, no OPD.

``run`` trains the missing (arm, seed) trials one at a time with ``hindsight train`` into one
MLflow store (a trial is done when its run finished; a relaunch skips it); ``table`` prints
per arm, over seeds: evaluation success and invalid actions at steps 0 and 3, their paired
differences from GRPO (95% t intervals over seeds), and per RL step the KL from the
reference, GRPO's tied-group share and the gradient split (OPD/RL norm ratio, the share of
AdamW step directions the OPD term flips).

    .venv-vllm/bin/python scripts/seed_decomposition.py run --seeds 0 1 2
    .venv/bin/python scripts/seed_decomposition.py table
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402

from analysis.loader import load_histories, load_runs  # noqa: E402
from analysis.stats import t_ci  # noqa: E402

STUDY = "seed_harm_smollm2"
OUT = ROOT / "runs" / STUDY
URI = f"sqlite:///{OUT / 'mlruns.db'}"
CONFIG = ROOT / "examples" / "ezpoints_smollm2_hidden.yaml"
# examples/cpu_reference_smollm2.yaml's shapes, without its writer panel (not read here)
SHAPES = ["model.backend=vllm", "model.vllm.kv_cache_gb=2", "rollout.tasks_per_step=2",
          "rollout.group_size=6", "stages.rl.steps=3", "eval.every=3", "eval.max_tasks=40",
          "algo.lr=1.0e-3", "stages.skill_sft.writer_panel=0", "tracking.gradient_parts=true"]
# in the order a seed's trials run: SEED first (the arm the question is about), then Stage 1 +
# GRPO (SEED's OPD term turned out to be about 1% of its gradient: docs/results/
# diagnostics_smollm2.md), GRPO, and the constant gate last
ARMS = {"seed": ["algo.method=seed"],
        "seed_no_self_evolving": ["algo.method=seed_no_self_evolving"],
        "grpo": ["algo.method=grpo"],
        "seed_constant_gate": ["algo.method=seed", "algo.beta_opd=0"]}
EVAL = ("eval/eval/success", "eval/eval/invalid_rate")
STEP = ("ppo/kl", "adv/tied_group_frac", "update/grad_ratio_opd_rl", "update/grad_sign_flip_opd",
        "update/grad_cos_opd_rl", "train/invalid_rate", "opd/gate_mean")


def run(seeds: list[int], arms: list[str]) -> None:
    """Train every missing (arm, seed) trial, one at a time, in seed-major order (a part that
    stops early leaves whole seeds)."""
    done = _finished()
    for seed in seeds:
        for arm in arms:
            if (arm, seed) in done:
                print(f"{arm} seed {seed}: finished, skipped")
                continue
            sets = [*SHAPES, *ARMS[arm], f"seed={seed}", f"tracking.uri={URI}", f"tracking.study={STUDY}",
                    f"tracking.run_name={arm}-s{seed}", f"output.dir={OUT / f'{arm}-s{seed}'}"]
            command = [str(Path(sys.executable).parent / "hindsight"), "train", str(CONFIG),
                       *(a for s in sets for a in ("--set", s))]
            print(f"{arm} seed {seed}: {' '.join(command)}", flush=True)
            subprocess.run(command, check=True, env={**os.environ, "OMP_NUM_THREADS": "2"})


def _finished() -> set[tuple[str, int]]:
    if not (OUT / "mlruns.db").exists():
        return set()
    try:
        runs = load_runs(URI, STUDY)
    except ValueError:
        return set()
    runs = runs[runs["status"] == "FINISHED"]
    return {(_arm(r), int(r["seed"])) for _, r in runs.iterrows()}


def _arm(run: pd.Series) -> str:
    if run["method"] == "seed" and run.get("algo.beta_opd") == 0.0:  # the constant-gate arm
        return "seed_constant_gate"
    return str(run["method"])


def table() -> None:
    runs = load_runs(URI, STUDY)
    runs = runs[runs["status"] == "FINISHED"].assign(arm=lambda f: f.apply(_arm, axis=1))
    hist = load_histories(URI, list(runs["run_id"]), [*EVAL, *STEP]).merge(
        runs[["run_id", "arm", "seed"]], on="run_id")
    ev = hist[hist["key"].isin(EVAL)].pivot_table(index=["arm", "seed"], columns=["key", "step"],
                                                 values="value")
    last = int(hist.loc[hist["key"] == EVAL[0], "step"].max())
    print(f"{STUDY}: {len(runs)} finished runs; evaluation on 40 tasks at steps 0 and {last}; "
          "brackets: 95% t intervals over seeds of paired differences from GRPO (same seed)\n")
    print("| arm | n | success 0 -> 3 (%) | gain | minus GRPO | invalid 0 -> 3 (%) | invalid change "
          "| minus GRPO |")
    print("|---|---|---|---|---|---|---|---|")
    for arm in [a for a in ARMS if a in set(runs["arm"])]:
        cells = [arm, str(int((runs["arm"] == arm).sum()))]
        for key in EVAL:
            start, end = ev.loc[arm][(key, 0)], ev.loc[arm][(key, last)]
            cells += [f"{100 * start.mean():.1f} -> {100 * end.mean():.1f}", _interval(end - start)]
            base = ev.loc["grpo"][(key, last)] - ev.loc["grpo"][(key, 0)] if "grpo" in ev.index else None
            cells.append("--" if arm == "grpo" or base is None else _interval((end - start) - base))
        print("| " + " | ".join(cells) + " |")
    print("\nPer RL step, mean over seeds [min, max]:\n")
    steps = hist[hist["key"].isin(STEP)]
    for key in STEP:
        part = steps[steps["key"] == key]
        if part.empty:
            continue
        print(f"{key}:")
        for arm, by_arm in part.groupby("arm", sort=False):
            row = [f"step {s}: {v.mean():.4g} [{v.min():.4g}, {v.max():.4g}]"
                   for s, v in by_arm.groupby("step")["value"]]
            print(f"  {arm:<22} " + "; ".join(row))


def _interval(diff: pd.Series) -> str:
    values = 100 * diff.dropna().to_numpy(float)
    if values.size < 2:
        return f"{values.mean():+.1f} (n = {values.size})" if values.size else "n/a"
    low, high = t_ci(values)
    return f"{values.mean():+.1f} [{low:+.1f}, {high:+.1f}]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    go = sub.add_parser("run", help="train the missing trials, one at a time")
    go.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    go.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    sub.add_parser("table", help="print the decomposition from the store")
    args = parser.parse_args(argv)
    if args.what == "run":
        run(args.seeds, args.arms)
    else:
        table()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
