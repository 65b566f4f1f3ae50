"""The decisive choice of every evaluation episode of an EZPoints deck-rule study (issue 44).

SEED's internalization test asks whether OPD alone moves the no-skill policy toward the
skilled one.  Success mixes that with format (a policy that writes invalid tokens loses deals
whatever operator it means), so this reads the choice the lesson decides: the first operator
of each evaluation episode, right when it is the one the deal's family needs (the family's
lesson, ``envs.ezpoints.rules.OPERATOR``).  One line per trial and evaluated step, from the
records every trial writes (``<output.dir>/records/step_N.parquet``, looked up beside the store
first, so that a store moved with its trials still reads its own), with the success and
invalid rate the trial logged.

    .venv/bin/python scripts/operator_choice.py runs/ezpoints_smollm2_internalization/mlruns.db
"""

from __future__ import annotations

import argparse
import sqlite3
from pathlib import Path

import pandas as pd

from envs.ezpoints import EZPointsEnv
from envs.ezpoints.cards import OPERATORS
from envs.ezpoints.rules import OPERATOR


def trials(store: Path) -> pd.DataFrame:
    """Every trial run of the study ``store``: its method, teacher, task draw, tasks and
    trajectories a step, RL steps, seed, lr, level and output dir."""
    wanted = {"algo.method": "method", "algo.teacher": "teacher", "rollout.task_draw": "draw",
              "rollout.tasks_per_step": "tasks", "rollout.group_size": "group", "stages.rl.steps": "steps",
              "seed": "seed", "algo.lr": "lr", "env.level": "level", "output.dir": "out"}
    with sqlite3.connect(store) as db:
        params = pd.read_sql_query(
            "select p.run_uuid, p.key, p.value from params p join tags t on t.run_uuid = p.run_uuid "
            "where t.key = 'hindsight.kind' and t.value = 'trial'", db)
        metrics = pd.read_sql_query("select run_uuid, key, step, value from metrics where key in "
                                    "('eval/eval/success', 'eval/eval/invalid_rate')", db)
    runs = params[params["key"].isin(wanted)].pivot(index="run_uuid", columns="key", values="value")
    return runs.rename(columns=wanted), metrics


def first_operators(records: pd.DataFrame, family: dict[str, str]) -> tuple[int, int, int]:
    """(right, written, episodes): evaluation episodes whose first operator is their family's,
    those that wrote one, and all of them."""
    evals = records[records["split"] == "eval"]
    episodes = evals.groupby(["task_id", "traj"]).ngroups
    ops = _first_ops(evals)
    right = sum(OPERATOR[family[task]] == op for (task, _), op in ops.items())
    return right, len(ops), episodes


def by_family(records: pd.DataFrame, family: dict[str, str]) -> str:
    """Each family's first operators, e.g. ``product * 14 + 5; sum * 12 + 9``: a policy that
    plays one operator everywhere is right on exactly one family's deals, which the count of
    right choices alone does not show."""
    ops = _first_ops(records[records["split"] == "eval"])
    counts = pd.crosstab([family[task] for task, _ in ops.index], ops.values)
    return "; ".join(f"{fam} " + " ".join(f"{op} {counts.at[fam, op]}" for op in counts.columns
                                          if counts.at[fam, op]) for fam in counts.index)


def _first_ops(evals: pd.DataFrame) -> pd.Series:
    """Each episode's first operator, indexed by (task_id, traj); episodes without one left out."""
    return evals[evals["action"].isin(OPERATORS)].sort_values("turn").groupby(["task_id", "traj"])["action"].first()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("store", type=Path, help="the study's mlruns.db")
    args = parser.parse_args(argv)
    runs, metrics = trials(args.store)
    print("method | teacher | draw | batch | steps | seed | lr | step | first operator right / written / episodes | "
          "success | invalid | first operators by family")
    families = {}  # level -> task id -> family, built once a level
    for level in runs["level"].unique():
        env = EZPointsEnv(hidden_cards=1, level=level)
        families[level] = {t.id: env.family(t) for split in env.splits for t in env.panel(split)}
    runs = runs.assign(**{k: runs[k].fillna(v) if k in runs else v  # older trials lack them
                          for k, v in (("teacher", "?"), ("draw", "uniform"), ("steps", "?"), ("tasks", "?"),
                                       ("group", "?"))})
    runs = runs.assign(batch=runs["tasks"] + "x" + runs["group"])  # tasks x trajectories a step
    for run, row in runs.sort_values(["method", "teacher", "draw", "batch", "steps", "lr", "seed"]).iterrows():
        family = families[row["level"]]
        moved = args.store.parent / "trials" / Path(row["out"]).name  # the store's folder, if it moved
        for path in sorted(((moved if moved.is_dir() else Path(row["out"])) / "records").glob("step_*.parquet")):
            step = int(path.stem.split("_")[1])
            frame = pd.read_parquet(path)
            right, written, episodes = first_operators(frame, family)
            logged = metrics[(metrics["run_uuid"] == run) & (metrics["step"] == step)].set_index("key")["value"]
            success, invalid = (logged.get(f"eval/eval/{k}", float("nan")) for k in ("success", "invalid_rate"))
            arm = " | ".join(str(row[k]) for k in ("method", "teacher", "draw", "batch", "steps", "seed", "lr"))
            print(f"{arm} | {step} | {right} / {written} / {episodes} | {success:.3f} | {invalid:.3f} | "
                  f"{by_family(frame, family)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
