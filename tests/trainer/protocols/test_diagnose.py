"""ETRO's Fig. 1 protocol (hindsight diagnose alignment) on a micro tiny actor: the actor is
never updated, both Deltas are recorded per turn, and the alignment table and figure are
written."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from support.paths import DATA, ROOT
from sweeps.cli import main
from trainer.run.resolve import load_config, resolve

MICRO = DATA / "train_micro.yaml"
# The bundled warm start plays well enough to make decisive errors (a random micro policy
# mostly writes invalid actions, which the oracle never calls decisive).
ACTOR = ROOT / "trainer" / "assets" / "warm_start" / "household-small"
SETS = ["env.level=small", "stages.warm_start.enabled=false",
        "rollout.tasks_per_step=4", "rollout.group_size=4",
        "rollout.max_new_tokens=48", "model.max_prompt_tokens=2048", "env.max_turns=12"]


def test_alignment_records_leave_the_actor_unchanged(tmp_path):
    from trainer.protocols.alignment import alignment_records
    from trainer.run.components import build_components, start_rl

    cfg = resolve(load_config(MICRO, [*SETS, "algo.method=etro", "writer.kind=oracle",
                                      "algo.kl_coef=0", f"output.dir={tmp_path}"]))
    ctx = build_components(cfg, init_from=str(ACTOR))
    start_rl(ctx)
    before = {k: v.clone() for k, v in ctx.model.state_dict().items()}
    records = alignment_records(ctx, steps=2)
    assert all(torch.equal(v, before[k]) for k, v in ctx.model.state_dict().items())
    assert set(records["step"]) == {1, 2} and records["traj"].nunique() == 16
    failed = records[~records["success"]]
    assert failed["delta_pos"].notna().any() and failed["delta_neg"].notna().any()
    assert (records["error_turn_writer"] >= 0).any()
    with_boundary = records["error_turn_writer"] >= 0
    assert records.loc[~with_boundary, "delta_neg"].isna().all()  # Negative only with a boundary
    assert (records.loc[with_boundary, "negative_skill"].str.len() > 0).all()  # what the teacher read
    assert records["response"].str.len().gt(0).all()


def test_a_dead_alignment_run_continues_from_its_saved_batches(tmp_path, monkeypatch):
    """Each finished batch is saved as it finishes; a rerun plays only the batches that are
    missing, and ends with the records of an uninterrupted run (every batch is seeded)."""
    import trainer.protocols.alignment as protocol
    from trainer.run.components import build_components, start_rl

    cfg = resolve(load_config(MICRO, [*SETS, "algo.method=etro", "writer.kind=oracle", "algo.kl_coef=0",
                                      "rollout.tasks_per_step=2", f"output.dir={tmp_path}"]))
    ctx = build_components(cfg, init_from=str(ACTOR))
    start_rl(ctx)
    whole = protocol.alignment_records(ctx, steps=2)
    played, real = [], protocol.collect_batch

    def dies_at_step_2(ctx, step, timer):
        played.append(step)
        if step == 2 and played.count(2) == 1:
            raise RuntimeError("killed")
        return real(ctx, step, timer)

    monkeypatch.setattr(protocol, "collect_batch", dies_at_step_2)
    saved = tmp_path / "batches"
    with pytest.raises(RuntimeError, match="killed"):
        protocol.alignment_records(ctx, steps=2, saved=saved)
    assert sorted(p.name for p in saved.iterdir()) == ["batch_1.parquet"]
    resumed = protocol.alignment_records(ctx, steps=2, saved=saved)
    assert played == [1, 2, 2]  # the second run played only the batch that died
    pd.testing.assert_frame_equal(resumed, whole)


@pytest.mark.slow  # 25 s: two batches of the bundled warm start through the whole command
def test_diagnose_alignment_command_writes_the_figure(tmp_path, capsys):
    out = tmp_path / "d"
    argv = ["diagnose", "alignment", str(MICRO), *(f"--set={s}" for s in SETS), "--actor",
            str(ACTOR), "--writer", "oracle", "--steps", "2", "--diagnose-dir", str(out)]
    assert main(argv) == 0
    alignment = pd.read_csv(out / "alignment.csv")
    assert set(alignment["region"]) == {"prefix", "error", "suffix"}
    assert set(alignment["polarity"]) == {"delta_pos", "delta_neg"}
    assert (out / "regional_alignment.png").stat().st_size > 0
    printed = capsys.readouterr().out
    assert "writer oracle, etro step advantages, never updated" in printed
    assert "mean |Δ| by turn: 0: " in printed and "gate by beta_opd, " in printed
    profile = pd.read_csv(out / "delta_profile.csv")
    assert set(profile["axis"]) == {"turn", "offset"} and (profile["mean_abs"] >= 0).all()
    gates = pd.read_csv(out / "gate_over_beta.csv")
    assert gates.loc[gates["beta"] == 0.0, "gate"].tolist() == pytest.approx([0.5] * gates["region"].nunique())
    from analysis.alignment import regional_alignment
    from sweeps.cli import build_parser

    records = pd.read_parquet(out / "records.parquet")  # verl-agent's GiGPO on the same turns
    gigpo = regional_alignment(records, advantage="gigpo_std")
    assert set(gigpo["region"]) == {"prefix", "error", "suffix"}
    args = build_parser("diagnose").parse_args([*argv, "--advantage", "gigpo_std"])
    assert args.advantage == "gigpo_std"
    assert main(["diagnose", "alignment", str(MICRO), "--actor", str(tmp_path / "no")]) == 2
    assert "not a saved model folder" in capsys.readouterr().err


def test_an_actor_without_usable_turns_says_why_it_has_no_figure(tmp_path, capsys):
    from trainer.run.components import build_components

    ctx = build_components(resolve(load_config(MICRO, [f"output.dir={tmp_path / 'o'}"])))
    actor = tmp_path / "actor"  # an untrained micro policy: it never acts, no anchor varies
    ctx.model.save_pretrained(actor)
    ctx.tokenizer.save_pretrained(actor)
    argv = ["diagnose", "alignment", str(MICRO), "--actor", str(actor), "--steps", "1",
            "--diagnose-dir", str(tmp_path / "d")]
    assert main(argv) == 1
    assert "regional alignment skipped: no anchor state repeats with two or more distinct " \
        "actions" in capsys.readouterr().out
    assert (tmp_path / "d" / "records.parquet").exists()
    assert main(argv) == 1 and "continuing from 1 batches saved in" in capsys.readouterr().out
    assert main([*argv, "--set", "rollout.group_size=3"]) == 2  # another run's batches: refused
    assert "holds the batches of another run" in capsys.readouterr().err
