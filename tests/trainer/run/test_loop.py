"""End-to-end training runs on a micro tiny backbone: MLflow run, metrics, artifacts,
parameters changing, resume, crash handling, determinism."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from support.paths import DATA
from trainer.run.resolve import load_config
from trainer.run.store import make_client

MICRO = DATA / "train_micro.yaml"


def micro(tmp_path, *overrides):
    db = tmp_path / "mlruns.db"
    return load_config(MICRO, [f"output.dir={tmp_path / 'out'}", f"tracking.uri=sqlite:///{db}", *overrides])


def run_metrics(cfg, run_id):
    client = make_client(cfg.tracking.uri)
    return client, client.get_run(run_id)


def test_train_logs_run_metrics_artifacts_and_changes_parameters(tmp_path):
    from trainer.run.components import build_components
    from trainer.run.loop import train

    cfg = micro(tmp_path, "algo.method=etro", "output.log_checkpoints=true")
    result = train(cfg, progress=False)
    client, run = run_metrics(cfg, result.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["method"] == "etro" and run.data.tags["env"] == "household"
    assert run.data.tags["hindsight.checkpoints"] == str(tmp_path / "out" / "checkpoints")
    metrics = run.data.metrics
    for key in ("train/success", "train/entropy", "adv/mean", "time/rollout_s", "time/teacher_s",
                "writer/invalid_rate", "eval/eval_unseen/success", "perf/tokens_per_s", "warm/loss_last"):
        assert key in metrics, key
    artifacts = {a.path for a in client.list_artifacts(result.run_id)}
    assert {"config.json", "records", "skills", "checkpoint"} <= artifacts
    logged = {a.path for a in client.list_artifacts(result.run_id, "checkpoint")}
    assert {"checkpoint/model", "checkpoint/trainer_state.pt"} <= logged, logged
    # the skill samples show the text each teacher context used, never an empty line
    skills = Path(client.download_artifacts(result.run_id, "skills/step_000002.txt", str(tmp_path)))
    lines = skills.read_text().splitlines()
    used = [line for line in lines if line.startswith(("positive:", "negative:"))]
    assert used and all(line.split(":", 1)[1].strip() for line in used), lines
    records = {a.path for a in client.list_artifacts(result.run_id, "records")}
    assert "records/step_000002.parquet" in records
    # the trained checkpoint differs from a fresh initialisation with the same seed
    ckpt = Path(cfg.output.dir) / "checkpoints" / "step_000002" / "model"
    trained = build_components(cfg, init_from=str(ckpt)).model.state_dict()
    fresh = build_components(cfg).model.state_dict()
    assert any(not torch.equal(trained[k], fresh[k]) for k in fresh)


def test_records_have_the_contract_columns(tmp_path):
    import pandas as pd

    from trainer.episodes.records import COLUMNS
    from trainer.run.loop import train

    cfg = micro(tmp_path, "algo.method=etro", "stages.rl.steps=1")
    train(cfg, progress=False)
    frame = pd.read_parquet(Path(cfg.output.dir) / "records" / "step_000001.parquet")
    assert tuple(frame.columns) == COLUMNS
    assert set(frame["split"]) == {"eval_unseen", "train"}
    train_rows = frame[frame["split"] == "train"]
    assert train_rows["delta_pos"].notna().any()


def test_training_records_between_evaluations_when_asked(tmp_path):
    """tracking.train_records_every writes the step's training turns between evaluation steps
    (the regional alignment of a short run needs them); by default only evaluation steps do."""
    import pandas as pd

    from trainer.run.loop import train

    def splits(cfg):
        folder = Path(cfg.output.dir) / "records"
        return {f.name: set(pd.read_parquet(f)["split"]) for f in sorted(folder.glob("*.parquet"))}

    cfg = micro(tmp_path / "every", "algo.method=etro", "stages.rl.steps=3", "eval.every=0",
                "tracking.train_records_every=1")
    train(cfg, progress=False)
    assert splits(cfg) == {"step_000000.parquet": {"eval_unseen"}, "step_000001.parquet": {"train"},
                           "step_000002.parquet": {"train"}, "step_000003.parquet": {"eval_unseen", "train"}}
    cfg = micro(tmp_path / "default", "algo.method=etro", "stages.rl.steps=2", "eval.every=0")
    train(cfg, progress=False)
    assert set(splits(cfg)) == {"step_000000.parquet", "step_000002.parquet"}


def test_a_writer_panel_of_zero_skips_the_panel_after_stage_1(tmp_path, monkeypatch):
    """stages.skill_sft.writer_panel: 0 runs Stage 1 without measuring the self writer."""
    import trainer.run.loop as loop

    monkeypatch.setattr(loop, "writer_validity", lambda *a, **k: pytest.fail("the panel ran"))
    cfg = micro(tmp_path, "algo.method=seed", "stages.skill_sft.writer_panel=0", "stages.rl.steps=0")
    result = loop.train(cfg, progress=False)
    client = make_client(cfg.tracking.uri)
    assert client.get_metric_history(result.run_id, "time/skill_sft_s")
    assert not client.get_metric_history(result.run_id, "time/writer_panel_s")


def test_a_trial_times_itself_and_its_stages_outside_the_rl_step(tmp_path):
    """SEED's Stage 1, its writer panel and the RL setup are timed (step 0), and so is the
    whole trial (time/trial_s, at the last step), which covers every phase."""
    from trainer.run.loop import train

    cfg = micro(tmp_path, "algo.method=seed")
    result = train(cfg, progress=False)
    client = make_client(cfg.tracking.uri)
    history = {k: [(m.step, m.value) for m in client.get_metric_history(result.run_id, k)]
               for k in ("time/skill_sft_s", "time/writer_panel_s", "time/start_rl_s", "time/trial_s",
                         "time/rollout_s", "time/write_s", "time/update_s", "time/eval_s")}
    for key in ("time/skill_sft_s", "time/writer_panel_s", "time/start_rl_s"):
        assert [step for step, _ in history[key]] == [0] and history[key][0][1] > 0, key
    (trial,) = history["time/trial_s"]
    assert trial[0] == cfg.stages.rl.steps
    spent = sum(v for key, points in history.items() if key != "time/trial_s" for _, v in points)
    assert spent <= trial[1]


def test_same_seed_gives_identical_metrics(tmp_path):
    from trainer.run.loop import train

    keys = ("train/success", "train/entropy", "adv/std", "loss/total", "eval/eval_unseen/success")
    values = []
    for name in ("a", "b"):
        cfg = micro(tmp_path / name)
        result = train(cfg, progress=False)
        client = make_client(cfg.tracking.uri)
        values.append({k: [m.value for m in client.get_metric_history(result.run_id, k)] for k in keys})
    assert values[0] == values[1]


@pytest.mark.parametrize("method", ["grpo", "seed_stale", "seed_writer_replay", "grpo_lora"])
def test_resume_after_a_crash_continues_the_same_run_with_identical_metrics(tmp_path, monkeypatch, method):
    """Crash in step 2 (after the step-1 checkpoint), resume: same MLflow run, steps 1..2,
    and the same learning metrics as an uninterrupted run (optimizer, RNG restored), with
    the KL reference and SEED-stale's frozen writer equal, bit for bit, to the uninterrupted
    run's RL initialisation (not rebuilt from the resumed step-1 policy), and the writer
    replay drawing from the same saved Stage-1 examples (without rerunning Stage 1).
    With LoRA the checkpoint is the adapter naming the run's base (its RL initialisation,
    the warm start's and Stage 1's adapters folded in), which is the reference."""
    import trainer.run.loop as run_module
    from trainer.models.lora import merged_tensors

    lora = method.endswith("_lora")
    method = method.removesuffix("_lora")
    extra = ("model.lora.rank=4",) if lora else ()

    keys = ("train/success", "adv/std", "loss/total", "train/entropy", "ppo/kl")
    if method != "grpo":
        keys += ("writer/invalid_rate", "writer/skill_tokens")
    if method == "seed_writer_replay":
        keys += ("loss/replay",)
    reference_cfg = micro(tmp_path / "ref", f"algo.method={method}", *extra)
    reference = run_module.train(reference_cfg, progress=False)
    client = make_client(reference_cfg.tracking.uri)
    expected = {k: [m.value for m in client.get_metric_history(reference.run_id, k)] for k in keys}

    real, calls = run_module.update, []

    def crash_on_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt("simulated kill during step 2")
        return real(*args, **kwargs)

    cfg = micro(tmp_path / "crash", f"algo.method={method}", *extra)
    monkeypatch.setattr(run_module, "update", crash_on_second)
    with pytest.raises(KeyboardInterrupt):
        run_module.train(cfg, progress=False)
    monkeypatch.setattr(run_module, "update", real)
    contexts, real_start = [], run_module.start_rl

    def spy_start(ctx, **kwargs):
        contexts.append(ctx)
        return real_start(ctx, **kwargs)

    monkeypatch.setattr(run_module, "start_rl", spy_start)
    monkeypatch.setattr(run_module, "skill_sft", lambda *a, **k: pytest.fail("resume reran Stage 1"))
    resumed = run_module.train(cfg, resume=True, progress=False)
    from trainer.run.checkpoint import rl_init_path
    from trainer.run.components import frozen_writer

    if lora:
        from safetensors.torch import load_file

        assert contexts[0].reference is None and not rl_init_path(reference_cfg.output.dir).exists()
        init = load_file(Path(reference_cfg.output.dir) / "checkpoints" / "rl_base" / "model.safetensors")
        base = dict(merged_tensors(contexts[0].model, contexts[0].model.state_dict().items(), merge=False))
        assert init.keys() <= base.keys()
        assert all(torch.equal(base[name], value) for name, value in init.items())
        assert (Path(cfg.output.dir) / "checkpoints" / "step_000002" / "model" / "adapter_config.json").is_file()
    else:
        init = torch.load(rl_init_path(reference_cfg.output.dir), weights_only=True)
        restored = [contexts[0].reference] + ([frozen_writer(contexts[0])] if method == "seed_stale" else [])
        for module in restored:
            for name, value in module.state_dict().items():
                assert torch.equal(value, init[name]), name
    client = make_client(cfg.tracking.uri)
    runs = client.search_runs([client.get_experiment_by_name("hindsight").experiment_id])
    assert [r.info.run_id for r in runs] == [resumed.run_id]
    assert runs[0].info.status == "FINISHED"
    got = {k: [m.value for m in client.get_metric_history(resumed.run_id, k)] for k in keys}
    steps = [m.step for m in client.get_metric_history(resumed.run_id, "train/success")]
    assert steps == [1, 2]
    assert got["train/success"] == expected["train/success"]
    assert all(got[k] for k in keys), [k for k in keys if not got[k]]  # every key was logged
    if method == "seed_writer_replay":
        assert len(got["loss/replay"]) == 2 and all(v > 0 for v in got["loss/replay"])
    for key in keys:  # float reductions over reloaded weights agree to float32 precision
        assert got[key] == pytest.approx(expected[key], rel=1e-5), key


def test_crash_marks_the_run_failed_with_traceback(tmp_path, monkeypatch):
    import trainer.run.loop as run_module

    def boom(*args, **kwargs):
        raise RuntimeError("injected failure in the update")

    monkeypatch.setattr(run_module, "update", boom)
    cfg = micro(tmp_path)
    with pytest.raises(RuntimeError, match="injected failure"):
        run_module.train(cfg, progress=False)
    client = make_client(cfg.tracking.uri)
    run = client.search_runs([client.get_experiment_by_name("hindsight").experiment_id])[0]
    assert run.info.status == "FAILED"
    path = client.download_artifacts(run.info.run_id, "traceback.txt", str(tmp_path))
    assert "injected failure" in Path(path).read_text()


def test_nonfinite_losses_are_skipped_then_stop_the_run(tmp_path, monkeypatch):
    import trainer.stages.rl as rl

    real = rl.policy_loss_terms

    def nan_loss(spec, inputs, cfg):
        terms, metrics = real(spec, inputs, cfg)
        return {k: v * float("nan") for k, v in terms.items()}, metrics

    monkeypatch.setattr(rl, "policy_loss_terms", nan_loss)
    from trainer.run.loop import NonFiniteLossError, train

    cfg = micro(tmp_path, "stages.rl.steps=3", "stages.rl.max_nonfinite_in_row=2")
    with pytest.raises(NonFiniteLossError, match="2 consecutive RL steps"):
        train(cfg, progress=False)
    client = make_client(cfg.tracking.uri)
    run = client.search_runs([client.get_experiment_by_name("hindsight").experiment_id])[0]
    history = client.get_metric_history(run.info.run_id, "train/nonfinite_steps")
    assert [m.value for m in history] == [1.0]
    assert run.info.status == "FAILED"


def test_config_json_is_the_resolved_config(tmp_path):
    from trainer.run.loop import train

    cfg = micro(tmp_path, "algo.method=seed")
    result = train(cfg, progress=False)
    client = make_client(cfg.tracking.uri)
    path = client.download_artifacts(result.run_id, "config.json", str(tmp_path))
    saved = json.loads(Path(path).read_text())
    assert saved["algo"]["method"] == "seed"


def test_a_replay_run_does_not_resume_without_its_stage1_examples(tmp_path):
    """Resuming without the saved examples would train a different run: refused, naming the
    field and the file; a saved list (empty when Stage 1 kept none) is what is replayed."""
    from trainer.run.checkpoint import load_replay, replay_path, save_replay

    with pytest.raises(FileNotFoundError, match="stages.skill_sft.replay: .*replay.pt"):
        load_replay(replay_path(tmp_path))
    save_replay([], replay_path(tmp_path))
    assert load_replay(replay_path(tmp_path)) == []


def test_on_eval_sees_each_evaluation_and_stops_the_run_killed(tmp_path):
    """A search's scheduler stops a trial through ``on_eval``: the run ends after that step,
    KILLED, with no later step trained or logged."""
    from trainer.run.loop import train

    seen = []

    def on_eval(step, metrics):
        seen.append((step, sorted(metrics)))
        return step == 2

    cfg = micro(tmp_path, "algo.method=grpo", "stages.rl.steps=3", "eval.every=1", "output.checkpoint_every=0")
    result = train(cfg, progress=False, on_eval=on_eval)
    assert result.status == "KILLED"
    assert [step for step, _ in seen] == [1, 2]  # not step 0 (no training yet) nor step 3
    assert all("eval/eval_unseen/success" in keys for _, keys in seen)
    client, run = run_metrics(cfg, result.run_id)
    assert run.info.status == "KILLED"
    steps = [m.step for m in client.get_metric_history(result.run_id, "train/success")]
    assert max(steps) == 2
