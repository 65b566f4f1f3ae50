"""Studies that spend compute where the evidence is missing (issue 45): is the sequential seed
rule honest, and what does it save?

    .venv/bin/python scripts/bench_compute_aware.py [--studies 10000] [--with-search]

1. Calibration: simulated studies of the CPU reference's shape (GRPO, SEED, ETRO: two
   comparisons with the baseline, paired by seed) with its SD of paired differences
   (docs/results/cpu_reference/per_seed.csv), 3 to 10 seeds. Per spending function and
   planted effect (SEED above GRPO by 0, half, one and two times the fixed design's minimum
   detectable effect at 10 seeds; ETRO equal to GRPO): the family-wise false-positive rate or
   the power, against the fixed design's (10 seeds everywhere, paired t, Holm), and the runs
   per study. The rule's equivalence margin is 3 points.
2. The power formula (:func:`analysis.power.paired_power`) against simulated paired t-tests.
3. Replay: the rule over the seeds of the three CPU reference studies (their per-seed
   results, ``docs/results/cpu_reference*/per_seed.csv``, copied from their pages): its
   decisions beside the full study's (the report's paired t-test, Holm-corrected) and the
   runs it needed.
4. ``--with-search``: the pruned search's saving, by running ``scripts/bench_pruned_search.py``
   (which reuses its earlier runs under ``runs/bench_pruned_search``) and printing its output.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import pandas as pd
from scipy import stats as sps

from analysis.power import comparison_alpha, min_detectable_effect, paired_power
from analysis.sequential import SPENDING, SeedPlan, fixed_design, replay, simulate_studies
from analysis.stats import summarize

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
STUDIES = ("cpu_reference", "cpu_reference_household", "cpu_reference_smollm2")
PRUNED = ROOT / "scripts" / "bench_pruned_search.py"
ALPHA = 0.05
M = 2  # SEED and ETRO against GRPO
N_MIN, N_MAX = 3, 10
MARGIN = 3.0  # points: the effect of interest of the equivalence decision


def per_seed(name: str) -> dict[str, dict[int, float]]:
    """method -> {seed: last evaluation's success (points)} of a CPU reference study."""
    frame = pd.read_csv(RESULTS / name / "per_seed.csv", comment="#")
    return {m: dict(zip(g["seed"], g["last_eval"])) for m, g in frame.groupby("method")}


def reference_sd() -> float:
    """Pooled SD (points) of the CPU reference's paired differences SEED and ETRO - GRPO."""
    values = per_seed("cpu_reference")
    var = [np.var([values[m][s] - values["grpo"][s] for s in sorted(values["grpo"])], ddof=1)
           for m in ("seed", "etro")]
    return float(np.sqrt(np.mean(var)))


def calibration(studies: int, sd: float) -> list[str]:
    mde = min_detectable_effect(sd, N_MAX, comparison_alpha(ALPHA, M))
    lines = [f"SD of paired differences {sd:.2f} points (CPU reference, SEED and ETRO - GRPO, "
             f"5 seeds each); fixed design's MDE at {N_MAX} seeds: {mde:.2f} points "
             f"(power 0.8 at alpha {ALPHA:g} / {M}); {studies} simulated studies per row; "
             f"equivalence margin {MARGIN:g} points.", "",
             "| spending | SEED - GRPO (points) | rule: any false positive / power | fixed: same "
             "| rule: runs per study | fixed: runs |",
             "|---|---:|---:|---:|---:|---:|"]
    for k, planted in enumerate((0.0, mde / 2, mde, 2 * mde)):
        rng = np.random.default_rng(1000 + k)
        values = rng.normal(57.0, sd / math.sqrt(2), size=(studies, M + 1, N_MAX))
        values[:, 1, :] += planted
        fixed = fixed_design(values, ALPHA)
        fixed_rate = fixed.any(axis=1).mean() if planted == 0 else fixed[:, 0].mean()
        for spending in SPENDING:
            sim = simulate_studies(values, SeedPlan(N_MIN, N_MAX, MARGIN, ALPHA, spending))
            called = sim.states == "different"
            rate = called.any(axis=1).mean() if planted == 0 else called[:, 0].mean()
            lines.append(f"| {spending} | {planted:.2f} | {rate:.3f} | {fixed_rate:.3f} | "
                         f"{sim.runs.mean():.1f} | {(M + 1) * N_MAX} |")
    error = 3 * math.sqrt(ALPHA * (1 - ALPHA) / studies)
    lines += ["", f"(false positives at 0: any of the {M} comparisons called different; "
                  f"3 standard errors of a rate {ALPHA:g} over {studies} studies: {error:.3f})"]
    return lines


def formula_check(sd: float, studies: int) -> list[str]:
    level = comparison_alpha(ALPHA, M)
    lines = ["| n | effect (points) | formula | simulated |", "|---:|---:|---:|---:|"]
    for n in (3, 5, 10):
        effect = min_detectable_effect(sd, n, level, power=0.5)
        d = np.random.default_rng(n).normal(effect, sd, size=(studies, n))
        simulated = (sps.ttest_1samp(d, 0.0, axis=1).pvalue <= level).mean()
        lines.append(f"| {n} | {effect:.2f} | {paired_power(effect, sd, n, level):.3f} | "
                     f"{simulated:.3f} |")
    return lines


def full_decisions(values: dict[str, dict[int, float]]) -> dict[str, tuple[str, bool]]:
    """The report's decision per comparison (paired t, Holm, alpha 0.05; untested below 3
    pairs) and whether it called a difference."""
    rows = [{"method": m, "seed": s, "success": v} for m, vs in values.items() for s, v in vs.items()]
    out = summarize(pd.DataFrame(rows), ["method"], "success", baseline="grpo", alpha=ALPHA)
    decided = {}
    for _, r in out[out["method"] != "grpo"].iterrows():
        if r["n_paired"] < 3:
            decided[r["method"]] = (f"untested (n = {r['n_paired']})", False)
        else:
            decided[r["method"]] = (f"{'different' if r['significant'] else 'not shown different'}"
                                    f" (Holm p = {r['p_holm']:.2f}, n = {r['n_paired']})",
                                    bool(r["significant"]))
    return decided


def replays() -> list[str]:
    lines = ["| study | comparison | full study | rule | same decision | seeds the rule ran "
             "(cell, GRPO) |", "|---|---|---|---|---|---|"]
    totals = []
    for name in STUDIES:
        values = per_seed(name)
        n_max = max(len(v) for v in values.values())
        plan = SeedPlan(N_MIN, max(N_MIN, n_max), MARGIN, ALPHA)
        result = replay(values, {"seed": "grpo", "etro": "grpo"}, plan, range(plan.max))
        full = full_decisions(values)
        for cell, look in result.looks.items():
            interval = (f" [{look.low:+.1f}, {look.high:+.1f}]" if math.isfinite(look.low) else "")
            text, called = full[cell]
            same = "yes" if (look.state == "different") == called else "NO"
            lines.append(f"| {name} | {cell.upper()} - GRPO | {text} | {look.state}"
                         f"{interval} at n = {look.n} | {same} | {result.seeds[cell]}, "
                         f"{result.seeds['grpo']} |")
        totals.append(f"{name}: the rule ran {result.runs} of the study's {result.full_runs} runs "
                      f"(min {plan.min}, max {plan.max} seeds)")
    return lines + [""] + totals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--studies", type=int, default=10_000,
                        help="simulated studies per calibration row (default 10000)")
    parser.add_argument("--with-search", action="store_true",
                        help="also print the pruned search's saving (scripts/bench_pruned_search.py)")
    args = parser.parse_args(argv)
    sd = reference_sd()
    print("## Calibration\n")
    print("\n".join(calibration(args.studies, sd)))
    print("\n## Power formula against simulation\n")
    print("\n".join(formula_check(sd, 4000)))
    print("\n## Replay on the CPU reference studies\n")
    print("\n".join(replays()))
    if args.with_search:
        print("\n## Pruned search\n")
        if not PRUNED.is_file():
            print(f"{PRUNED.relative_to(ROOT)} is not in this checkout")
            return 0
        done = subprocess.run([sys.executable, str(PRUNED)], cwd=ROOT, check=False)
        return done.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
