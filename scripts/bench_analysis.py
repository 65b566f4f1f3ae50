"""Benchmark analysis/ and the whole report on a synthetic study (targets: analysis of
1,000 runs <= 30 s; the report of 10,000 runs <= 60 s).

1. Generates a study into a temporary sqlite MLflow store with ``log_batch``: 5 method
   variants x 4 envs x 5 beta_opd values x ``--seeds`` seeds (10: 1,000 trial runs), each
   with ~50 params, 20 steps of ~24 metrics plus 4 evaluations, and small per-turn records
   parquet files for the household / beta 5 runs of ``seed`` and its never-refreshed
   variant. ``--clone-seeds N`` then copies the logged seeds' rows inside the sqlite store
   (runs, tags, params, metrics, latest_metrics; new run ids, the seed tag and param
   rewritten, evaluation metrics jittered) up to N seeds, because logging 10,000 runs
   through MLflow takes close to an hour on 2 cores; the loader cannot tell the difference.
2. Times, separately from generation: load_runs, load_histories, load_records, summarize,
   and every diagnostic; then the whole report (``hindsight report``'s pipeline: load,
   ReportInputs.from_frames, build_report with every table and figure); prints each figure
   and the totals.

Each stage prints wall and CPU seconds (CPU seconds of this process barely move when other
jobs share the cores).

Usage: ``python scripts/bench_analysis.py [--seeds 10] [--clone-seeds N] [--steps 20]
[--store DIR [--reuse]]``; the 10,000-run figure: ``--seeds 1 --clone-seeds 100 --steps
10`` (5 variants x 4 envs x 5 betas = 100 cells x 100 seeds; 1,000 runs: ``--clone-seeds
10``; ``--steps`` of 5 or more: evaluations are logged every 5 steps). ``--reuse`` times
the store an earlier run left in ``--store`` again without generating it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import sys
import tempfile
import time
import uuid
from pathlib import Path

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import pandas as pd
from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from analysis import alignment
from analysis import diagnostics as dg
from analysis.loader import load_histories, load_records, load_runs
from analysis.stats import summarize
from reports.envs import SEARCHQA_DATASETS

STUDY = "bench"
# (variant name, method tag, writer.refresh_every, relative skill)
VARIANTS = (("grpo", "grpo", 1, 0.0), ("seed", "seed", 1, 0.06), ("etro", "etro", 1, 0.08),
            ("rlsd", "rlsd", 1, 0.03), ("seed-stale", "seed", 0, 0.02))
ENVS = ("household", "shop", "searchqa", "alfworld")
BETAS = (1.0, 3.0, 5.0, 10.0, 20.0)
TRAIN_KEYS = ("train/success", "train/score", "train/episode_length", "train/invalid_rate",
              "train/entropy", "adv/mean", "adv/std", "adv/tied_group_frac", "opd/gate_mean",
              "opd/gate_std", "opd/delta_prefix", "opd/delta_error", "opd/delta_suffix",
              "writer/invalid_rate", "writer/skill_tokens", "perf/tokens_per_s",
              "perf/peak_mem_mb")
EVAL_KEYS = ("success", "score", "episode_length")
# env -> the eval metrics its report columns read (reports.envs: the held-out split of each
# env; Search QA: one success per dataset), so that every paper table, the sensitivity
# figures, the aggregates and the evaluation curves are drawn and timed.
EVAL_METRICS = {
    "household": tuple(f"eval/eval_unseen/{k}" for k in EVAL_KEYS),
    "alfworld": tuple(f"eval/eval_out_of_distribution/{k}" for k in EVAL_KEYS),
    "shop": tuple(f"eval/eval/{k}" for k in EVAL_KEYS),
    "searchqa": tuple(f"eval/{d}/success" for d, _ in SEARCHQA_DATASETS),
}


def _params(method: str, env: str, beta: float, refresh: int, seed: int) -> dict[str, str]:
    """About fifty dotted params, shaped like flatten(resolve(cfg))."""
    params = {"algo.method": method, "algo.beta_opd": beta, "algo.lambda_opd": 0.01,
              "algo.suffix_weight": 0.0, "algo.teacher": "old", "algo.clip_eps": 0.2,
              "algo.kl_coef": 0.01, "algo.lr": 1e-6, "env.name": env, "env.max_turns": 15,
              "writer.kind": "self", "writer.refresh_every": refresh, "seed": seed,
              "model.backbone": "tiny", "rollout.group_size": 8, "rollout.tasks_per_step": 4}
    params.update({f"misc.option_{i}": i * 0.5 for i in range(34)})
    return {k: str(v) for k, v in params.items()}


def _metrics(rng, skill: float, steps: int, env: str) -> list[Metric]:
    now = int(time.time() * 1000)
    out = []
    for step in range(1, steps + 1):
        level = min(0.95, 0.2 + skill + 0.03 * step + rng.normal(0, 0.03))
        values = {k: float(rng.normal(level, 0.1)) for k in TRAIN_KEYS}
        values.update({f"time/{p}_s": float(rng.uniform(0.5, 2.0)) * (p != "write" or skill > 0)
                       for p in dg.PHASES})
        if step % 5 == 0:
            values.update({k: float(level + rng.normal(0, 0.02)) for k in EVAL_METRICS[env]})
        out += [Metric(k, v, now + step, step) for k, v in values.items()]
    return out


def _records(rng, step: int, n_tasks: int = 8, group: int = 8) -> pd.DataFrame:
    """Synthetic per-turn records: states repeat along the good path, so anchors pool."""
    rows, traj = [], 0
    for task in range(n_tasks):
        horizon = int(rng.integers(3, 8))
        for _ in range(group):
            actions = ["good" if rng.random() < 0.8 else f"bad{rng.integers(3)}"
                       for _ in range(horizon)]
            bad = [t for t, a in enumerate(actions) if a != "good"]
            success, k_true = not bad, (bad[0] if bad else -1)
            k_writer = k_true if rng.random() < 0.85 else int(rng.integers(-1, horizon))
            ret = [float(success) * 0.95 ** (horizon - 1 - t) for t in range(horizon)]
            for t, action in enumerate(actions):
                dpos = rng.normal(0.3 if action == "good" else -0.3, 0.3)
                rows.append({"step": step, "split": "train", "task_id": f"task{task}",
                             "group": task, "traj": traj, "turn": t,
                             "state_key": f"s{t}" + ("" if k_true < 0 or t <= k_true else "x"),
                             "action": action, "reward": float(success and t == horizon - 1),
                             "return": ret[t], "success": success,
                             "error_turn_writer": k_writer, "error_turn_true": k_true,
                             "delta_pos": dpos, "delta_neg": -dpos + rng.normal(0, 0.2),
                             "gate_mean": float(1 / (1 + np.exp(-5 * dpos))),
                             "region": "success" if success else "prefix"})
            traj += 1
    return pd.DataFrame(rows)


def generate(uri: str, root: Path, seeds: int, steps: int) -> int:
    client = MlflowClient(uri)
    exp = client.create_experiment(STUDY, artifact_location=(root / "artifacts").as_uri())
    rng = np.random.default_rng(0)
    count = 0
    for name, method, refresh, skill in VARIANTS:
        for env in ENVS:
            for beta in BETAS:
                for seed in range(seeds):
                    rid = client.create_run(exp).info.run_id
                    tags = {"study": STUDY, "hindsight.kind": "trial", "method": method,
                            "cell_id": f"{name}-{env}-{beta}", "env": env, "backbone": "tiny",
                            "seed": str(seed), "git_sha": "bench"}
                    params = _params(method, env, beta, refresh, seed)
                    client.log_batch(rid, metrics=_metrics(rng, skill, steps, env),
                                     params=[Param(k, v) for k, v in params.items()],
                                     tags=[RunTag(k, v) for k, v in tags.items()])
                    if method == "seed" and env == "household" and beta == 5.0:
                        for step in (steps // 2, steps):
                            _log_records(client, rid, root, step, seed)
                    client.set_terminated(rid)
                    count += 1
    return count


def _log_records(client, rid: str, root: Path, step: int, seed: int) -> None:
    folder = root / "tmp" / rid
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"step_{step:06d}.parquet"
    _records(np.random.default_rng([seed, step]), step).to_parquet(path)
    client.log_artifact(rid, str(path), "records")


CLONED_TABLES = ("runs", "tags", "params", "metrics", "latest_metrics")


def clone_seeds(db: Path, seeds: int) -> int:
    """Copy the runs of the logged seeds (rows of CLONED_TABLES) until every cell has
    ``seeds`` seeds; returns the number of runs in the store. One INSERT ... SELECT per
    table and seed through a mapping table of new run ids (the CROSS JOIN keeps the small
    mapping table outer, so each copy is an index lookup, not a scan; journal and fsync off: the
    store is a throwaway)."""
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode = OFF")
    conn.execute("PRAGMA synchronous = OFF")
    conn.execute("PRAGMA cache_size = -1000000")  # 1 GB of page cache
    template = conn.execute("SELECT run_uuid, value FROM tags WHERE key = 'seed'").fetchall()
    logged = max(int(v) for _, v in template) + 1
    columns = {t: [c[1] for c in conn.execute(f"PRAGMA table_info({t})")]
               for t in CLONED_TABLES}
    conn.execute("CREATE TEMP TABLE clone_map (old TEXT PRIMARY KEY, new TEXT, seed TEXT)")
    for seed in range(logged, seeds):
        conn.execute("DELETE FROM clone_map")
        conn.executemany("INSERT INTO clone_map VALUES (?, ?, ?)",
                         [(rid, uuid.uuid4().hex, str(seed)) for rid, old in template
                          if int(old) == seed % logged])
        for table, cols in columns.items():
            pick = ", ".join(
                "m.new" if c == "run_uuid" else
                ("CASE WHEN t.key = 'seed' THEN m.seed ELSE t.value END"
                 if c == "value" and table in ("tags", "params") else
                 "t.value + CASE WHEN t.key LIKE 'eval/%' THEN "
                 "((abs(random()) % 2001) - 1000) / 50000.0 ELSE 0 END"
                 if c == "value" and table in ("metrics", "latest_metrics") else f"t.{c}")
                for c in cols)
            conn.execute(f"INSERT INTO {table} ({', '.join(cols)}) SELECT {pick} "
                         f"FROM clone_map m CROSS JOIN {table} t ON t.run_uuid = m.old")
        conn.commit()
    count = conn.execute("SELECT count(*) FROM runs").fetchone()[0]
    conn.close()
    return count


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _since(start: tuple[float, float]) -> tuple[float, float]:
    """(wall, CPU) seconds since ``start``: CPU seconds of this process barely move when
    other jobs share the cores, wall seconds do."""
    wall, cpu = _clock()
    return wall - start[0], cpu - start[1]


def report(uri: str, out: Path) -> dict[str, tuple[float, float]]:
    """``hindsight report``'s pipeline on the store; returns (wall, CPU) seconds per stage."""
    from analysis.curves import BUDGET_KEYS
    from reports.index import ReportInputs, build_report
    from sweeps.report import CURVE_KEYS

    times: dict[str, tuple[float, float]] = {}
    start = _clock()
    runs = load_runs(uri, STUDY)
    finished = runs[runs["status"] == "FINISHED"]
    ids = finished["run_id"].tolist()
    evals = sorted(c for c in runs.columns if c.startswith("eval/") and c.endswith("/success"))
    hist = load_histories(uri, ids, [*CURVE_KEYS, *BUDGET_KEYS, *evals])
    records = load_records(uri, ids)
    times["report: load"] = _since(start)
    start = _clock()
    inputs = ReportInputs.from_frames(runs, histories=hist, records=records, expected=len(runs))
    times["report: statistics"] = _since(start)
    start = _clock()
    build_report(inputs, out, STUDY, "bench")
    times["report: render"] = _since(start)
    print(f"report of {len(finished)} runs: {len(list(out.rglob('*.png')))} figures, "
          f"{len(list(out.rglob('*.md'))) - 1} tables")
    return times


def analyse(uri: str, steps: int) -> dict[str, tuple[float, float]]:
    """Everything a report needs after the store exists; returns (wall, CPU) seconds per
    stage."""
    times: dict[str, tuple[float, float]] = {}

    def timed(label, fn, *args, **kw):
        start = _clock()
        out = fn(*args, **kw)
        times[label] = _since(start)
        return out

    runs = timed("load_runs", load_runs, uri, STUDY)
    success = sorted({k for keys in EVAL_METRICS.values() for k in keys
                      if k.endswith("/success")})
    keys = ["train/success", "opd/gate_mean", *success]
    hist = timed("load_histories", load_histories, uri, runs["run_id"].tolist(), keys)
    has_records = runs[(runs["env"] == "household") & (runs["algo.beta_opd"] == 5.0)
                       & (runs["method"] == "seed")]["run_id"].tolist()
    records = timed("load_records", load_records, uri, has_records)
    metric = "final_success"  # per run: its env's success (the dataset mean on Search QA)
    runs = runs.assign(final_success=runs[[c for c in success if c in runs]].mean(axis=1))
    timed("summarize", summarize, runs, ["env", "algo.beta_opd", "method"], metric,
          baseline="grpo")
    timed("gate_sensitivity", dg.gate_sensitivity, runs, metric)
    timed("regional_alignment", alignment.regional_alignment, records)
    timed("value_alignment", dg.value_alignment, records)
    timed("staleness", dg.staleness, runs, records)
    timed("writer_reliability", dg.writer_reliability, records)
    timed("compute_cost", dg.compute_cost, runs)
    per_eval = runs["env"].map({e: sum(k in success for k in ks)
                                for e, ks in EVAL_METRICS.items()})
    expected = int((2 * steps + steps // 5 * per_eval).sum())
    print(f"runs {len(runs)} x {runs.shape[1]} columns; history rows {len(hist)} "
          f"(expected {expected}); record rows {len(records)} "
          f"from {len(has_records)} runs")
    return times


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10, help="seeds per cell (100 cells)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--clone-seeds", type=int, default=0,
                        help="copy runs inside the store up to this many seeds per cell")
    parser.add_argument("--store", default="", help="folder for the store (default: temp)")
    parser.add_argument("--no-report", action="store_true", help="skip the report timing")
    parser.add_argument("--reuse", action="store_true",
                        help="time the store already in --store (made by an earlier run with "
                             "the same --steps) instead of generating one")
    args = parser.parse_args(argv)
    if args.reuse and not args.store:
        parser.error("--reuse needs --store")
    with tempfile.TemporaryDirectory(prefix="bench-analysis-") as tmp:
        root = Path(args.store or tmp).resolve()
        root.mkdir(parents=True, exist_ok=True)
        uri = f"sqlite:///{root / 'mlruns.db'}"
        start = time.perf_counter()
        if args.reuse:
            with sqlite3.connect(root / "mlruns.db") as conn:
                n = conn.execute("SELECT count(*) FROM runs").fetchone()[0]
            shutil.rmtree(root / "report", ignore_errors=True)
            print(f"reusing the store of {n} runs in {root}")
        else:
            n = generate(uri, root, args.seeds, args.steps)
            if args.clone_seeds > args.seeds:
                n = clone_seeds(root / "mlruns.db", args.clone_seeds)
            print(f"generated {n} runs in {time.perf_counter() - start:.1f} s")
        times = analyse(uri, args.steps)
        reported = {} if args.no_report else report(uri, root / "report")
    print(f"  {'stage':<20s} {'wall':>7s}   {'CPU':>7s}")
    for label, (wall, cpu) in {**times, **reported}.items():
        print(f"  {label:<20s} {wall:7.2f} s {cpu:7.2f} s")
    wall, cpu = (sum(t[i] for t in times.values()) for i in (0, 1))
    print(f"analysis total {wall:.2f} s wall, {cpu:.2f} s CPU for {n} runs (target <= 30 s "
          f"for 1,000): {'OK' if wall <= 30 * max(1, n / 1000) else 'SLOW'}")
    if reported:
        wall, cpu = (sum(t[i] for t in reported.values()) for i in (0, 1))
        print(f"report total {wall:.2f} s wall, {cpu:.2f} s CPU for {n} runs (target <= 60 s "
              f"for 10,000): {'OK' if wall <= 60 * max(1.0, n / 10000) else 'SLOW'}")


if __name__ == "__main__":
    main()
