"""The SFT stages that run before RL.

* Warm start (tiny backbones only): behaviour cloning on scripted demonstrations with
  realistic mistakes (``expert_epsilon``) from the environment's observation-consistent
  demonstrator (``TextEnv.demo_action``: it decides only from what the policy sees), some
  with a correct skill in context so the
  policy can read skills, some teaching it to write a skill from a trajectory (so that a
  self writer has something to start from).  A tiny model without a warm start cannot act.
* Stage 1, hindsight-skill SFT (SEED review, Stage 1): rollouts of the base policy
  (``tasks`` x ``rollouts_per_task``), annotated by a strong writer (an external endpoint when
  configured, else the privileged oracle standing in for it), valid pairs kept (acceptance
  rate logged), trajectory -> skill fine-tuning with NLL.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
from pathlib import Path

from envs.base import demo_policy, run_episode
from trainer.config import RunConfig, canonical_json, to_dict
from trainer.context import Context
from trainer.rollout import Sampling, collect
from trainer.samples import Trajectory, analyzer_prompt, analyzer_target, encode, encode_chat
from trainer.sft import example, sft
from trainer.writers import ExternalWriter, OracleWriter


def _demo_trajectory(ctx: Context, episode) -> Trajectory:
    """An expert episode with its response texts tokenised (demonstrations were not sampled,
    so tokenising their text is the only way to get ids)."""
    return Trajectory(episode, tuple(tuple(encode(ctx.tokenizer, t.response)) for t in episode.turns))


def _writer_example(ctx: Context, episode, hindsight):
    prompt = encode_chat(ctx.tokenizer, analyzer_prompt(ctx.prompt_env.domain_description(), episode))
    target = encode(ctx.tokenizer, analyzer_target(hindsight) + "<|im_end|>")
    return example(prompt[-ctx.cfg.model.max_prompt_tokens:], target)


def warm_start(ctx: Context, progress=None) -> dict[str, float]:
    """Behaviour cloning on expert demonstrations (see module docstring)."""
    from envs.oracle import OracleWriter as EnvOracle

    ws, cfg = ctx.cfg.stages.warm_start, ctx.cfg
    rng = random.Random(f"warm:{cfg.seed}")
    env, oracle = ctx.make_env(), EnvOracle(ctx.make_env)
    act = demo_policy(ws.expert_epsilon, seed=f"warm:{cfg.seed}")
    tasks = rng.sample(ctx.train_tasks, min(ws.episodes, len(ctx.train_tasks)))
    examples = []
    for task in tasks:
        episode = run_episode(env, task, act)
        traj = _demo_trajectory(ctx, episode)
        hindsight = oracle.write(episode)
        skill = hindsight.positive_skill if rng.random() < ws.skill_fraction else None
        examples += ctx.builder.build(traj, skill)
        if rng.random() < ws.writer_fraction:
            examples.append(_writer_example(ctx, episode, hindsight))
    metrics = sft(ctx.model, examples, epochs=ws.epochs, lr=ws.lr, batch_size=ws.batch_size,
                  seed=cfg.seed, progress=progress)
    return {k.replace("sft/", "warm/"): v for k, v in metrics.items()}


def skill_sft(ctx: Context, progress=None) -> dict[str, float]:
    """SEED Stage 1: annotate base-policy rollouts with a strong writer, keep valid pairs,
    fine-tune trajectory -> skill."""
    st, cfg = ctx.cfg.stages.skill_sft, ctx.cfg
    rng = random.Random(f"sft:{cfg.seed}")
    tasks = rng.sample(ctx.train_tasks, min(st.tasks, len(ctx.train_tasks)))
    batch = [t for t in tasks for _ in range(st.rollouts_per_task)]
    sampling = Sampling(cfg.rollout.max_new_tokens, cfg.rollout.temperature, cfg.rollout.top_p)
    trajectories, _ = collect(ctx.make_env, batch, ctx.builder, ctx.backend, sampling, seed=cfg.seed)
    annotator = ExternalWriter(ctx.prompt_env.domain_description(), cfg.writer) if cfg.writer.endpoint \
        else OracleWriter(ctx.make_env)
    hindsights = annotator.write(trajectories)
    pairs = [(t.episode, h) for t, h in zip(trajectories, hindsights) if h.valid]
    metrics = {"sft/acceptance_rate": len(pairs) / max(1, len(trajectories)),
               "sft/rollout_success": sum(t.episode.success for t in trajectories) / max(1, len(trajectories))}
    if pairs:
        examples = [_writer_example(ctx, e, h) for e, h in pairs]
        metrics.update(sft(ctx.model, examples, epochs=st.epochs, lr=st.lr, batch_size=st.batch_size,
                           seed=cfg.seed, progress=progress))
    return metrics



def warm_start_cache(cfg: RunConfig) -> Path | None:
    """Where the warm-started model of ``cfg`` is cached, or None when caching is off.

    The key hashes everything the warm start depends on: model, env, the warm-start
    settings (without the cache fields) and the seed.  Methods of a study share it."""
    ws = cfg.stages.warm_start
    if not ws.cache or not ws.enabled:
        return None
    parts = {"model": json.loads(canonical_json(cfg.model)), "env": json.loads(canonical_json(cfg.env)),
             "warm_start": {k: v for k, v in to_dict(ws).items() if k not in ("cache", "cache_dir")},
             "seed": cfg.seed, "max_new_tokens": cfg.rollout.max_new_tokens}
    key = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]
    root = ws.cache_dir or os.environ.get("HINDSIGHT_CACHE") or str(Path.home() / ".cache" / "hindsight-lab")
    return Path(root) / "warm_start" / key


def load_cached_warm_start(path: Path | None) -> str | None:
    """The cached model directory if complete, else None."""
    return str(path / "model") if path is not None and (path / "COMPLETE").exists() else None


def save_warm_start(ctx: Context, path: Path, metrics: dict[str, float]) -> None:
    """Write the warm-started model atomically (a temp dir renamed into place)."""
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    ctx.model.save_pretrained(tmp / "model", safe_serialization=True)
    ctx.tokenizer.save_pretrained(tmp / "model")
    (tmp / "metrics.json").write_text(json.dumps(metrics))
    (tmp / "COMPLETE").write_text("ok\n")
    try:
        tmp.rename(path)
    except OSError:  # another run cached the same warm start first
        shutil.rmtree(tmp, ignore_errors=True)
