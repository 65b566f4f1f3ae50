"""Synthetic loader-shaped frames for the reports tests (no MLflow)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis import diagnostics
from reports.index import ReportInputs, build_report
from reports.inputs import summarize_layout
from reports.layouts import LAYOUTS

SEARCHQA = ("nq", "triviaqa", "popqa", "hotpotqa", "2wiki", "musique", "bamboogle")
NOISE = (-0.02, 0.0, 0.02)  # per seed: mean 0, sample std 0.02 (scaled per method)


def fake_runs(methods: dict[str, float], *, envs=("household", "shop"), backbones=("tiny",),
              seeds=(0, 1, 2), params: dict[str, dict] | None = None) -> pd.DataFrame:
    """One row per (env, backbone, method, seed): metric = base + NOISE[seed] * (1 + i / 10)
    for the i-th method, so every method has mean ``base`` and std 0.02 * (1 + i / 10), and
    paired differences vary across seeds.

    ``params``: method -> {param column: value} added to that method's rows.
    """
    rows = []
    for env in envs:
        for backbone in backbones:
            for i, (method, base) in enumerate(methods.items()):
                for seed in seeds:
                    value = base + NOISE[seed % len(NOISE)] * (1 + i / 10)
                    row = {"run_id": f"{env}-{backbone}-{method}-{seed}", "status": "FINISHED",
                           "study": "s", "cell_id": f"{env}-{backbone}-{method}", "env": env,
                           "method": method, "backbone": backbone, "seed": seed,
                           "algo.beta_opd": 5.0, "algo.suffix_weight": 0.0,
                           **(params or {}).get(method, {})}
                    row.update(_metrics(env, value))
                    rows.append(row)
    return pd.DataFrame(rows)


def _metrics(env: str, value: float) -> dict:
    if env == "household":
        return {"eval/eval_unseen/success": value}
    if env == "shop":
        return {"eval/eval/success": value, "eval/eval/score": min(1.0, value + 0.1)}
    if env in ("sokoban", "ezpoints"):
        return {"eval/eval/success": value}
    return {f"eval/{d}/success": value + 0.01 * i for i, d in enumerate(SEARCHQA)}


def fake_histories(runs: pd.DataFrame, steps=(0, 1, 2, 3)) -> pd.DataFrame:
    """``run_id, key, step, value`` for train/success and train/entropy."""
    rows = []
    for i, run_id in enumerate(runs["run_id"]):
        for step in steps:
            rows.append((run_id, "train/success", step, 0.1 * step + 0.01 * (i % 3)))
            rows.append((run_id, "train/entropy", step, 1.0 - 0.1 * step))
    return pd.DataFrame(rows, columns=["run_id", "key", "step", "value"])


def fake_cost(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` with time/<phase>_s/sum columns: every method 10 s rollout; ETRO-like +5 s."""
    out = runs.copy()
    out["time/rollout_s/sum"] = 10.0
    out["time/update_s/sum"] = np.where(out["method"] == "grpo", 2.0, 7.0)
    return out


def study_store(study, uri: str, *, score=None, drop=(), fail=(), steps=(0, 1, 2),
                trials=None) -> dict:
    """Log into the MLflow store ``uri`` one trial run per (cell, seed) of the grid
    ``study``, with exactly the tags, params and metric names the trainer logs: params
    ``flatten(resolve(cfg))``, per step ``train/success``, ``train/episode_length``,
    ``time/rollout_s`` and at the last step ``eval/<split>/{success,score,episode_length,
    invalid_rate}`` for every split of ``cfg.eval.splits``.

    ``score(cfg) -> float`` gives a run's true eval success before seed noise (default 0.5);
    the seed adds NOISE[seed] x (1 + len(method) / 10) (paired differences vary over seeds;
    the mean over 3 seeds stays the true value). Trials whose index is in ``drop`` are not logged (missing),
    those in ``fail`` end FAILED. ``trials`` (default: the grid's ``expand(study)``) are
    :class:`sweeps.study.Trial` s, e.g. a search's points. Returns {"trials": [...], "true":
    {run_id: success}}.
    """
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    from sweeps.trials import expand
    from trainer.config import flatten
    from trainer.run.resolve import resolve
    from trainer.run.store import experiment_id
    from trainer.run.tracking import KIND_TAG, method_writer

    client = MlflowClient(uri)
    exp = experiment_id(client, study.experiment)
    trials = expand(study) if trials is None else trials
    true = {}
    for i, trial in enumerate(trials):
        if i in drop:
            continue
        cfg = trial.cfg
        tags = {"study": study.name, "cell_id": trial.cell_id, "method": cfg.algo.method,
                "env": cfg.env.name, "backbone": cfg.model.backbone, "seed": str(trial.seed),
                "method_writer": method_writer(cfg.algo.method), "git_sha": "test",
                KIND_TAG: "trial"}
        run = client.create_run(exp, tags=tags)
        rid = run.info.run_id
        params = [Param(k, str(v)[:6000]) for k, v in flatten(resolve(cfg)).items()]
        for j in range(0, len(params), 100):
            client.log_batch(rid, params=params[j:j + 100])
        value = (score(cfg) if score else 0.5) + \
            NOISE[trial.seed % len(NOISE)] * (1 + len(cfg.algo.method) / 10)
        true[rid] = value
        metrics = []
        for step in steps:
            metrics += [Metric("train/success", value * (step + 1) / len(steps), 0, step),
                        Metric("train/episode_length", 5.0, 0, step),
                        Metric("time/rollout_s", 1.0, 0, step)]
        last = steps[-1]
        for split in cfg.eval.splits:
            metrics += [Metric(f"eval/{split}/success", value, 0, last),
                        Metric(f"eval/{split}/score", min(1.0, value + 0.1), 0, last),
                        Metric(f"eval/{split}/episode_length", 5.0, 0, last),
                        Metric(f"eval/{split}/invalid_rate", 0.1, 0, last)]
        client.log_batch(rid, metrics=metrics)
        client.set_terminated(rid, status="FAILED" if i in fail else "FINISHED")
    return {"trials": trials, "true": true}


def study_frame(study, *, score=None, trials=None) -> pd.DataFrame:
    """The frame :func:`analysis.loader.load_runs` gives for a store that
    :func:`study_store` filled (same tags, params and latest metrics), built without MLflow
    through the loader's own row and type conversion. ``trials`` (default: the grid's
    ``expand(study)``) are :class:`sweeps.study.Trial` s, e.g. a search's points."""
    from analysis.loader import RUN_COLUMNS, _coerce_params, _Run, _run_row
    from sweeps.trials import expand
    from trainer.config import flatten
    from trainer.run.resolve import resolve

    rows = []
    for i, trial in enumerate(expand(study) if trials is None else trials):
        cfg = trial.cfg
        tags = {"study": study.name, "cell_id": trial.cell_id, "method": cfg.algo.method,
                "env": cfg.env.name, "backbone": cfg.model.backbone, "seed": str(trial.seed)}
        value = (score(cfg) if score else 0.5) + \
            NOISE[trial.seed % len(NOISE)] * (1 + len(cfg.algo.method) / 10)
        metrics = {}
        for split in cfg.eval.splits:
            metrics.update({f"eval/{split}/success": value,
                            f"eval/{split}/score": min(1.0, value + 0.1),
                            f"eval/{split}/episode_length": 5.0,
                            f"eval/{split}/invalid_rate": 0.1})
        params = {k: str(v) for k, v in flatten(resolve(cfg)).items()}
        rows.append(_run_row(_Run(f"run{i:04d}", "FINISHED", tags, params, metrics)))
    frame = _coerce_params(pd.DataFrame(rows), exclude=set(RUN_COLUMNS))
    frame["seed"] = pd.to_numeric(frame["seed"]).astype("Int64")
    return frame


def every_diagnostic(backbones=("Qwen/Qwen2.5-7B-Instruct",),
                     seeds=(0, 1, 2)) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(runs, records, histories) shaped like the papers' studies together, feeding every
    table and figure a report can write: ETRO Table 1's methods on household, Search QA and
    shop; SEED's ablation (and a stale writer: staleness) on household, where SEED runs a
    2 x 2 grid of beta_opd x lambda_opd (a heatmap, best cells, importances); ETRO's branch,
    suffix and alpha rows on shop; GRPO and SEED on Sokoban and EZPoints with images (the
    multimodal table). Each run's ``writer.kind`` is its method's own (GRPO: none), with
    phase times, the self writer's validity, per-turn training records with true and
    written boundaries, gates and returns, household evaluation records per family, and
    evaluation histories at step 0 and 10 (gain over the warm start, evaluation curves)."""
    from reports.layouts import LAYOUTS
    from trainer.run.tracking import method_writer

    def runs_of(methods, envs, suffix="", images=False, shift=0.0, **params):
        part = fake_runs({m: 0.4 + 0.01 * len(m) + shift for m in methods}, envs=envs,
                         backbones=backbones if not images else ("Qwen/Qwen2.5-VL-3B-Instruct",),
                         seeds=seeds, params={m: {**params, **({"env.images": True} if images
                                                               else {})} for m in methods})
        return _suffixed(part, suffix)

    layout = {name: list(layout.methods) for name, layout in LAYOUTS.items()}
    table1 = [m for m in layout["etro_table1"] if m != "seed"]
    shop_rows = list(dict.fromkeys(layout["etro_branches"] + layout["etro_suffix"]))
    parts = [runs_of(table1, ("household", "searchqa", "shop")),
             runs_of(["seed"], ("searchqa", "shop")),
             runs_of(layout["seed_ablation"][1:] + ["seed_stale"], ("household",)),
             runs_of([m for m in shop_rows if m not in table1], ("shop",)),
             runs_of(["grpo", "seed"], ("sokoban", "ezpoints"), "-vl", images=True)]
    parts += [runs_of(["seed"], ("household",), f"-b{b}-l{lam}", shift=b / 100 + lam,
                      **{"algo.beta_opd": b, "algo.lambda_opd": lam})
              for b in (1.0, 5.0) for lam in (0.01, 0.1)]
    parts += [runs_of(["etro_suffix_positive", "etro_suffix_negative"], ("shop",), f"-a{a}",
                      **{"algo.suffix_weight": a}) for a in (0.25, 0.5)]
    runs = fake_cost(pd.concat(parts, ignore_index=True))
    runs["method_writer"] = runs["method"].map(method_writer)
    runs["writer.kind"] = runs["method_writer"]
    runs["writer.refresh_every"] = np.where(runs["method"] == "seed_stale", 0, 1)
    default = pd.Series(np.where(runs["method"] == "grpo", 0.0, 0.01), index=runs.index)
    runs["algo.lambda_opd"] = runs["algo.lambda_opd"].fillna(default)  # set by SEED's grid
    runs["writer/invalid_rate/mean"] = np.where(runs["writer.kind"] == "self",
                                                0.1 + 0.05 * runs["seed"], np.nan)
    return runs, _records(runs), _eval_histories(runs)


def _suffixed(part: pd.DataFrame, suffix: str) -> pd.DataFrame:
    return part.assign(run_id=part["run_id"] + suffix, cell_id=part["cell_id"] + suffix)


def _records(runs: pd.DataFrame) -> pd.DataFrame:
    """Per run: two failed training trajectories of three turns (a true decisive error at
    turn 1; the writer names turn 1, or nothing without a writer) repeated on one anchor
    state, and for household runs an evaluation panel of 12 tasks (two per family)."""
    rows = []
    for i, run in enumerate(runs.to_dict("records")):
        writer = run["writer.kind"] != "none"
        for traj in (0, 1):
            for turn in range(3):
                delta = 0.05 * (turn - 1) + 0.01 * (i % 5) - 0.02 * traj
                rows.append({"run_id": run["run_id"], "step": 1, "split": "train",
                             "task_id": "t0", "group": 0, "traj": traj, "turn": turn,
                             "state_key": f"s{turn}", "action": f"a{traj}", "reward": 0.0,
                             "return": 0.9 ** (2 - turn) * (1 - traj), "success": False,
                             "error_turn_writer": 1 if writer else -1, "error_turn_true": 1,
                             "delta_pos": delta if writer else np.nan,
                             "delta_neg": -delta if writer else np.nan,
                             "gate_mean": 1 / (1 + np.exp(-5 * delta)) if writer else np.nan,
                             "region": ("prefix", "error", "suffix")[turn]})
        if run["env"] == "household":
            for task in range(12):
                rows.append({"run_id": run["run_id"], "step": 10, "split": "eval_unseen",
                             "task_id": f"household/eval_unseen/{task:04d}", "group": 0,
                             "traj": task, "turn": 0, "state_key": "e", "action": "a",
                             "reward": 0.0, "return": 0.0, "success": (task + i) % 3 > 0,
                             "error_turn_writer": -1, "error_turn_true": -1,
                             "delta_pos": np.nan, "delta_neg": np.nan, "gate_mean": np.nan,
                             "region": "no_boundary"})
    return pd.DataFrame(rows)


def _eval_histories(runs: pd.DataFrame) -> pd.DataFrame:
    """Every ``eval/.../success`` column of a run logged at step 0 (the warm start, 0.1 lower)
    and at step 10 (its final value), and train/success at both steps."""
    rows = []
    keys = [c for c in runs.columns if c.startswith("eval/") and c.endswith("/success")]
    for run in runs.to_dict("records"):
        for key in keys:
            if pd.notna(run[key]):
                rows += [(run["run_id"], key, 0, run[key] - 0.1), (run["run_id"], key, 10, run[key])]
        rows += [(run["run_id"], "train/success", 0, 0.2), (run["run_id"], "train/success", 10, 0.4)]
    return pd.DataFrame(rows, columns=["run_id", "key", "step", "value"])


def small_report(tmp_path):
    """A report on fake runs (shop: GRPO, ETRO and one ablation) written under tmp_path."""
    runs = fake_runs({"grpo": 0.5, "etro_global_positive": 0.7, "etro": 0.8}, envs=("shop",))
    summaries = {
        name: summarize_layout(runs, layout, n_boot=100) for name, layout in LAYOUTS.items()
    }
    gates = diagnostics.GateFrames(
        diagnostics.Skipped("gate_by_region", "no records"),
        diagnostics.Skipped("gate_sensitivity", "no sweep"),
        diagnostics.gate_table(np.linspace(-1, 1, 11), (1.0, 5.0)),
    )
    out = tmp_path / "report"
    build_report(
        ReportInputs(runs, summaries, diagnostics={"gate_curves": gates}), out, "demo", "abc123"
    )
    return out
