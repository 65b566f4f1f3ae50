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
    """Every trial run of the study ``store``: its method, teacher, RL steps, seed, lr, level
    and output dir."""
    wanted = {"algo.method": "method", "algo.teacher": "teacher", "stages.rl.steps": "steps", "seed": "seed",
              "algo.lr": "lr", "env.level": "level", "output.dir": "out"}
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
    ops = evals[evals["action"].isin(OPERATORS)].sort_values("turn").groupby(["task_id", "traj"]).first()
    right = sum(OPERATOR[family[task]] == op for (task, _), op in ops["action"].items())
    return right, len(ops), episodes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("store", type=Path, help="the study's mlruns.db")
    args = parser.parse_args(argv)
    runs, metrics = trials(args.store)
    print("method | teacher | steps | seed | lr | step | first operator right / written / episodes | success | invalid")
    families = {}  # level -> task id -> family, built once a level
    for level in runs["level"].unique():
        env = EZPointsEnv(hidden_cards=1, level=level)
        families[level] = {t.id: env.family(t) for split in env.splits for t in env.panel(split)}
    runs = runs.assign(teacher=runs.get("teacher", "?"), steps=runs.get("steps", "?"))  # older stores lack them
    for run, row in runs.sort_values(["method", "teacher", "steps", "lr", "seed"]).iterrows():
        family = families[row["level"]]
        moved = args.store.parent / "trials" / Path(row["out"]).name  # the store's folder, if it moved
        for path in sorted(((moved if moved.is_dir() else Path(row["out"])) / "records").glob("step_*.parquet")):
            step = int(path.stem.split("_")[1])
            right, written, episodes = first_operators(pd.read_parquet(path), family)
            logged = metrics[(metrics["run_uuid"] == run) & (metrics["step"] == step)].set_index("key")["value"]
            success, invalid = (logged.get(f"eval/eval/{k}", float("nan")) for k in ("success", "invalid_rate"))
            print(f"{row['method']} | {row['teacher']} | {row['steps']} | {row['seed']} | {row['lr']} | {step} | "
                  f"{right} / {written} / {episodes} | "
                  f"{success:.3f} | {invalid:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
