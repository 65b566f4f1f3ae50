"""Does a pruned search save training without losing the best configuration?

    .venv/bin/python scripts/bench_pruned_search.py [--study examples/sensitivity_pruned.yaml]
                                                    [--out runs/bench_pruned_search] [--json]

Runs the study's search twice on a local Ray, with the same sampler seed, trial budget and
everything else: once as written (its ``search.pruner``) and once without the pruner
(``<name>-unpruned``), each in its own folder under ``--out``.  Prints the RL steps each
trained (a complete trial: its seeds x steps; a pruned one: its steps when it was stopped,
Optuna's last intermediate step; ``steps_logged`` in the JSON: the last step each run logged
to MLflow, summed), the saving, the
trials pruned and at which step, and both best configurations with their values and the
95% interval of their difference from evaluation noise alone (each value is a success rate
over the study's evaluation tasks: :func:`analysis.pruning.success_difference`).

A relaunch on the same ``--out`` trains nothing more (both searches resume as complete), so
another script (``scripts/bench_compute_aware.py``) gets the measured numbers from
:func:`measure` or from ``--json`` (one JSON object on stdout, nothing else) in seconds.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import optuna

from analysis.loader import load_histories, load_runs
from analysis.pruning import pruned_trials, steps_trained, success_difference
from sweeps import search
from sweeps.runner import run_study
from sweeps.study import Study, describe_overrides, parse_study
from trainer.config import read_yaml

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "examples" / "sensitivity_pruned.yaml"
TARGET = 0.6  # the pruned search may train at most this share of the unpruned one's steps


def studies(path: Path, out: Path) -> tuple[Study, Study]:
    """The study as written (pruned) and the same without ``search.pruner``."""
    data = read_yaml(path)
    if not isinstance(data.get("search"), dict) or not data["search"].get("pruner"):
        raise SystemExit(f"error: {path}: search.pruner is not set; this compares a pruned search "
                         f"with the same search unpruned")
    plain = copy.deepcopy(data)
    del plain["search"]["pruner"]
    plain["name"] = f"{data['name']}-unpruned"
    pruned = parse_study(data, folder=path.parent, out=out / "pruned", path=path)
    return pruned, parse_study(plain, folder=path.parent, out=out / "unpruned", path=path)


def summary(study: Study) -> dict[str, Any]:
    """What one finished search trained and found."""
    runs = load_runs(study.store_uri, study.name)
    logged = steps_trained(load_histories(study.store_uri, list(runs["run_id"]), ["train/success"]))
    best = search.best_trial(study)
    counts = pruned_trials(runs)
    ot = optuna.load_study(study_name=study.name, storage=study.search.storage)
    states = [t.state.name for t in ot.get_trials()]
    # A trial trains all its steps when complete and up to its trial_step when pruned (Optuna's
    # last intermediate step): what it trained even where its last metrics did not reach MLflow.
    full = study.base.stages.rl.steps * len(study.seeds)
    trained = sum(full if t.state.name == "COMPLETE" else (t.last_step or 0)
                  for t in ot.get_trials() if t.state.name in ("COMPLETE", "PRUNED"))
    return {
        "study": study.name, "trials": len(states), "complete": states.count("COMPLETE"),
        "pruned": states.count("PRUNED"),
        "pruned_at": {int(s): int(n) for s, n in zip(counts["pruned_at"], counts["trials"])},
        "runs": len(runs), "steps": int(trained), "steps_logged": int(logged.sum()),
        "best": None if best is None else {"params": best.params, "value": best.value,
                                           "trial": best.number},
    }


def measure(path: Path = STUDY, out: Path = ROOT / "runs" / "bench_pruned_search",
            echo=print) -> dict[str, Any]:
    """Run (or resume) both searches and compare them."""
    pruned, plain = studies(path, out)
    for study in (plain, pruned):
        run_study(study, echo=echo)
    a, b = summary(pruned), summary(plain)
    tasks = pruned.base.eval.max_tasks
    out = {"study": str(path), "eval_tasks": tasks, "pruned": a, "unpruned": b,
           "step_share": a["steps"] / b["steps"] if b["steps"] else None}
    if a["best"] and b["best"]:
        diff, low, high = success_difference(a["best"]["value"], b["best"]["value"], tasks)
        out["best_difference"] = {"diff": diff, "low": low, "high": high,
                                  "within_noise": bool(low <= 0 <= high)}
    return out


def _format(result: dict[str, Any]) -> str:
    a, b = result["pruned"], result["unpruned"]
    lines = [f"study {result['study']}: {a['trials']} trials each, evaluation on "
             f"{result['eval_tasks']} tasks", "",
             "| search | trials complete | pruned (at step: trials) | runs | RL steps trained | "
             "best configuration | best value |", "|---|---|---|---|---|---|---|"]
    for name, s in (("unpruned", b), ("pruned", a)):
        at = ", ".join(f"{k}: {v}" for k, v in s["pruned_at"].items()) or "-"
        best = s["best"] or {"params": {}, "value": float("nan")}
        lines.append(f"| {name} | {s['complete']} | {s['pruned']} ({at}) | {s['runs']} | "
                     f"{s['steps']} | {describe_overrides(best['params'])} | "
                     f"{100 * best['value']:.1f}% |")
    share = result["step_share"]
    lines += ["", f"pruned / unpruned RL steps: {a['steps']} / {b['steps']} = {100 * share:.0f}% "
                  f"(saving {100 * (1 - share):.0f}%; target <= {100 * TARGET:.0f}%)"]
    if "best_difference" in result:
        d = result["best_difference"]
        lines.append(f"best value, pruned minus unpruned: {100 * d['diff']:+.1f} points, 95% "
                     f"evaluation-noise interval [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}]: "
                     f"{'within' if d['within_noise'] else 'outside'} noise")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--study", type=Path, default=STUDY, help="a search study with a pruner")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_pruned_search",
                        help="both searches' folders (a rerun resumes them)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object and nothing else (for another script)")
    args = parser.parse_args(argv)
    quiet = args.json
    result = measure(args.study.resolve(), args.out.resolve(),
                     echo=(lambda line: print(line, file=sys.stderr)) if quiet else print)
    print(json.dumps(result, indent=1) if quiet else _format(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
