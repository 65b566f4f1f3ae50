"""scripts/operator_choice.py reads the decisive choice of each evaluation episode of an EZPoints
deck-rule study: its first operator, right when it is its deal's family's (issue 44)."""

from __future__ import annotations

import sqlite3

import pandas as pd

from envs.ezpoints import EZPointsEnv
from support.paths import script_module


def records(rows):
    return pd.DataFrame(rows, columns=["split", "task_id", "traj", "turn", "action"])


def panel():
    env = EZPointsEnv(hidden_cards=1, level="suit")
    tasks = env.panel("eval")
    red = next(t.id for t in tasks if env.family(t) == "sum")
    black = next(t.id for t in tasks if env.family(t) == "product")
    return {t.id: env.family(t) for t in tasks}, red, black


def test_the_first_operator_of_each_evaluation_episode_is_scored_against_its_family():
    script = script_module("operator_choice")
    family, red, black = panel()
    frame = records([
        ("eval", red, 0, 0, "4"), ("eval", red, 0, 1, "+"), ("eval", red, 0, 2, "*"),  # right first
        ("eval", black, 1, 1, "+"), ("eval", black, 1, 0, "3"), ("eval", black, 1, 2, "*"),  # wrong first
        ("eval", black, 2, 0, "="),  # no operator written
        ("train", red, 3, 1, "+"),  # not an evaluation episode
    ])
    assert script.first_operators(frame, family) == (1, 2, 3)
    assert script.by_family(frame, family) == "product + 1; sum + 1"
    one_op = records([("eval", red, 0, 1, "+"), ("eval", black, 1, 1, "+"), ("eval", black, 2, 1, "*")])
    assert script.by_family(one_op, family) == "product * 1 + 1; sum + 1"


def test_it_prints_a_line_per_trial_and_step_from_a_store_moved_with_its_trials(tmp_path, capsys):
    script = script_module("operator_choice")
    _, red, _ = panel()
    store = tmp_path / "moved" / "mlruns.db"
    step = tmp_path / "moved" / "trials" / "abc-s0" / "records" / "step_000003.parquet"
    step.parent.mkdir(parents=True)
    records([("eval", red, 0, 1, "+")]).to_parquet(step)
    with sqlite3.connect(store) as db:
        db.execute("create table params (run_uuid, key, value)")
        db.execute("create table tags (run_uuid, key, value)")
        db.execute("create table metrics (run_uuid, key, step, value)")
        params = {"algo.method": "opd_only", "algo.teacher": "initial", "stages.rl.steps": "3", "seed": "0",
                  "rollout.tasks_per_step": "12", "rollout.group_size": "1",
                  "algo.lr": "0.001", "env.level": "suit",
                  "output.dir": str(tmp_path / "elsewhere" / "trials" / "abc-s0")}
        db.executemany("insert into params values ('r', ?, ?)", params.items())
        db.execute("insert into tags values ('r', 'hindsight.kind', 'trial')")
        db.execute("insert into metrics values ('r', 'eval/eval/success', 3, 0.25)")
    assert script.main([str(store)]) == 0
    line = "opd_only | initial | uniform | 12x1 | 3 | 0 | 0.001 | 3 | 1 / 1 / 1 | 0.250 | nan | sum + 1"
    assert line in capsys.readouterr().out
