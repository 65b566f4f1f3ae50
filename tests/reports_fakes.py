"""Synthetic loader-shaped frames for the reports tests (no MLflow)."""

from __future__ import annotations

import numpy as np
import pandas as pd

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


def study_store(study, uri: str, *, score=None, drop=(), fail=(), steps=(0, 1, 2)) -> dict:
    """Log into the MLflow store ``uri`` one trial run per (cell, seed) of the grid
    ``study``, with exactly the tags, params and metric names the trainer logs: params
    ``flatten(resolve(cfg))``, per step ``train/success``, ``train/episode_length``,
    ``time/rollout_s`` and at the last step ``eval/<split>/{success,score,episode_length,
    invalid_rate}`` for every split of ``cfg.eval.splits``.

    ``score(cfg) -> float`` gives a run's true eval success before seed noise (default 0.5);
    the seed adds NOISE[seed] x (1 + len(method) / 10) (paired differences vary over seeds;
    the mean over 3 seeds stays the true value). Trials whose index is in ``drop`` are not logged (missing),
    those in ``fail`` end FAILED. Returns {"trials": [...], "true": {run_id: success}}.
    """
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    from sweeps.study import expand
    from trainer.config import flatten, resolve
    from trainer.tracking import KIND_TAG, experiment_id, method_writer

    client = MlflowClient(uri)
    exp = experiment_id(client, study.experiment)
    trials = expand(study)
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
    from sweeps.study import expand
    from trainer.config import flatten, resolve

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
