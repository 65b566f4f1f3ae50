"""ETRO's recovery protocol end to end on a micro tiny policy: forced starts, the
per-continuation frame, its summary over tasks and the Table 6 layout, and the command."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis.recovery import summarize_recovery
from reports.diagnostic_tables import recovery_table
from reports.tables import bold_cells, to_markdown
from support.paths import DATA
from sweeps.cli import main
from trainer.run.resolve import load_config, resolve

MICRO = DATA / "train_micro.yaml"
SMALL = ["env.level=small", "env.max_turns=12", "stages.warm_start.enabled=false"]


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    from trainer.run.components import build_components

    out = tmp_path_factory.mktemp("recovery")
    return build_components(resolve(load_config(MICRO, [*SMALL, f"output.dir={out}"])))


def test_continuations_start_from_the_perturbed_state(ctx):
    from trainer.episodes.rollout import Sampling, collect
    from trainer.protocols.continuations import continuations, suite_for

    suite = suite_for(ctx, "eval_unseen", 3)
    assert len(suite) == 3
    env = ctx.make_env()
    forced = [p.responses(env) for p in suite]
    trajectories, _ = collect(ctx.make_env, [p.task for p in suite], ctx.builder, ctx.backend,
                              Sampling(8), forced=forced, seed=0)
    for p, traj in zip(suite, trajectories):
        turns = traj.episode.turns
        assert [t.action for t in turns[:len(p.actions)]] == list(p.actions)
        assert turns[len(p.prefix)].distance_after == p.distance
        assert len(turns) > len(p.actions)  # the policy took over
    frame = continuations(ctx, suite, repeats=2, seed=0)
    assert len(frame) == 6 and frame.groupby("task_id").size().tolist() == [2, 2, 2]
    assert set(frame["first_class"]) <= {"recovers", "wrong_branch", "invalid"}
    assert (frame[["recovers", "wrong_branch", "invalid_first"]].sum(axis=1) == 1).all()
    assert frame["entropy"].between(0, math.log(ctx.model.config.vocab_size)).all()
    assert (frame["turn"] == [len(p.actions) for p in suite for _ in range(2)]).all()


def test_summary_averages_repeats_within_a_task_first():
    frame = pd.DataFrame({
        "label": ["a"] * 6, "task_id": ["t1", "t1", "t1", "t1", "t2", "t3"],
        "success": [1, 1, 1, 0, 0, 1.0], "score": [1, 1, 1, 0, 0, 1.0],
        "wrong_branch": [0, 0, 0, 1, 1, 0.0], "invalid_first": [0.0] * 6,
        "entropy": [0.2] * 6})
    s = summarize_recovery(frame).set_index("metric")
    assert s.at["success", "n_tasks"] == 3 and s.at["success", "n_continuations"] == 6
    assert s.at["success", "mean"] == pytest.approx((0.75 + 0 + 1) / 3)  # not 4/6
    assert s.at["entropy", "ci_low"] == pytest.approx(0.2)
    table = recovery_table(s.reset_index(), split="eval_unseen")
    text = to_markdown(table)
    assert "| a | 58.3 [" in text and "3 perturbed tasks of eval_unseen" in text
    assert bold_cells(table) == set()
    with pytest.raises(ValueError, match=r"\['entropy'\] not in the recovery frame"):
        summarize_recovery(frame.drop(columns="entropy"))


def test_recovery_command_writes_table_6(ctx, tmp_path, capsys):
    folder = tmp_path / "actor"
    ctx.model.save_pretrained(folder)
    ctx.tokenizer.save_pretrained(folder)
    argv = ["recovery", str(MICRO), *(f"--set={s}" for s in SMALL), "--actor", str(folder),
            "--actor", str(folder), "--label", "A", "--label", "B", "--tasks", "2",
            "--repeats", "1", "--recovery-dir", str(tmp_path / "r")]
    assert main(argv) == 0
    frame = pd.read_csv(tmp_path / "r" / "recovery.csv")
    assert list(dict.fromkeys(frame["label"])) == ["A", "B"] and len(frame) == 4
    # the same weights from the same states with the same sampling seed: the same continuations
    a, b = (frame[frame["label"] == x].reset_index(drop=True) for x in ("A", "B"))
    pd.testing.assert_frame_equal(a.drop(columns=["label"]), b.drop(columns=["label"]))
    assert {"recovery.md", "recovery.tex", "recovery.json"} <= {p.name for p in (tmp_path / "r").iterdir()}
    one_label = ["recovery", str(MICRO), "--actor", str(folder), "--actor",
                 str(folder), "--label", "only-one", "--recovery-dir", str(tmp_path / "r2")]
    capsys.readouterr()
    assert main(one_label) == 2
    assert "--label: 1 labels for 2 actors" in capsys.readouterr().err
    assert main(["recovery", str(MICRO), "--actor", str(tmp_path / "none")]) == 2
    assert "not a saved model folder" in capsys.readouterr().err
