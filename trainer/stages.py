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

import dataclasses
import hashlib
import json
import os
import random
import shutil
from pathlib import Path

import envs
from envs.base import demo_policy, run_episode
from trainer.backend import request_seed
from trainer.config import ConfigError, RunConfig, canonical_json, to_dict
from trainer.context import Context, env_factory
from trainer.rollout import Sampling, collect
from trainer.samples import Trajectory, analyzer_target, encode
from trainer.sft import example, sft
from trainer.writers import ExternalWriter, OracleWriter, writer_input


def _demo_trajectory(ctx: Context, episode) -> Trajectory:
    """An expert episode with its response texts tokenised (demonstrations were not sampled,
    so tokenising their text is the only way to get ids)."""
    return Trajectory(episode, tuple(tuple(encode(ctx.tokenizer, t.response)) for t in episode.turns))


def _writer_example(ctx: Context, episode, hindsight):
    """A Stage-1 / warm-start writer example: the prompt the self writer reads (its images
    too, with env.images), the oracle's hindsight as target."""
    prompt, images = writer_input(ctx.tokenizer, ctx.prompt_env.domain_description(), episode,
                                  ctx.cfg.model.max_prompt_tokens, ctx.builder.vision)
    target = encode(ctx.tokenizer, analyzer_target(hindsight) + "<|im_end|>")
    return example(prompt, target, images)


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
                  seed=cfg.seed, progress=progress, vision=ctx.builder.vision,
                  micro_batch=cfg.algo.micro_batch_size)
    return {k.replace("sft/", "warm/"): v for k, v in metrics.items()}


def skill_sft(ctx: Context, progress=None) -> dict[str, float]:
    """SEED Stage 1: annotate base-policy rollouts with a strong writer, keep valid pairs,
    fine-tune trajectory -> skill."""
    st, cfg = ctx.cfg.stages.skill_sft, ctx.cfg
    rng = random.Random(f"sft:{cfg.seed}")
    tasks = rng.sample(ctx.train_tasks, min(st.tasks, len(ctx.train_tasks)))
    batch = [t for t in tasks for _ in range(st.rollouts_per_task)]
    sampling = Sampling(cfg.rollout.max_new_tokens, cfg.rollout.temperature, cfg.rollout.top_p)
    trajectories, _ = collect(ctx.make_env, batch, ctx.builder, ctx.backend, sampling,
                              seed=request_seed("stage1", cfg.seed))
    annotator = ExternalWriter(ctx.prompt_env.domain_description(), cfg.writer) if cfg.writer.endpoint \
        else OracleWriter(ctx.make_env)
    hindsights = annotator.write(trajectories, seed=request_seed("stage1-write", cfg.seed))
    pairs = [(t.episode, h) for t, h in zip(trajectories, hindsights) if h.valid and h.boundary_valid]
    metrics = {"sft/acceptance_rate": len(pairs) / max(1, len(trajectories)),
               "sft/rollout_success": sum(t.episode.success for t in trajectories) / max(1, len(trajectories))}
    if pairs:
        examples = [_writer_example(ctx, e, h) for e, h in pairs]
        metrics.update(sft(ctx.model, examples, epochs=st.epochs, lr=st.lr, batch_size=st.batch_size,
                           seed=cfg.seed, progress=progress, vision=ctx.builder.vision,
                           micro_batch=cfg.algo.micro_batch_size))
    return metrics



def warm_start_cache(cfg: RunConfig) -> Path | None:
    """Where the warm-started model of ``cfg`` is cached, or None when caching is off.

    The key hashes everything the warm start depends on: model, env, the warm-start
    settings (without the cache fields) and the seed.  Methods of a study share it."""
    ws = cfg.stages.warm_start
    if not ws.cache or not ws.enabled:
        return None
    parts = {"model": json.loads(canonical_json(cfg.model, exclude=("vllm",))),
             "env": json.loads(canonical_json(cfg.env)),
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


# -- saved warm starts (scripts/warm_start.py, `make warm-start`) --------------------------
BUNDLED_WARM_STARTS = Path(__file__).parent / "assets" / "warm_start"
BUNDLE_META = "warm_start.json"
# The settings a warm start depends on: they must match between the bundle and the run.
BUNDLE_KEYS = ("model.backbone", "model.tiny", "env.name", "env.level", "env.show_admissible",
               "env.action_format",
               "env.context", "env.history_window", "env.max_turns", "rollout.max_new_tokens")


def _bundle_settings(cfg: RunConfig) -> dict:
    flat = json.loads(canonical_json(cfg))
    out = {}
    for key in BUNDLE_KEYS:
        node = flat
        for part in key.split("."):
            node = node[part]
        out[key] = node
    return out


def bundled_warm_starts() -> list[str]:
    """Names of the warm starts shipped with the package."""
    if not BUNDLED_WARM_STARTS.is_dir():
        return []
    return sorted(p.name for p in BUNDLED_WARM_STARTS.iterdir() if (p / BUNDLE_META).is_file())


def bundle_path(name_or_path: str) -> Path:
    """The folder of a saved warm start given by bundled name or by path."""
    path = BUNDLED_WARM_STARTS / name_or_path
    if (path / BUNDLE_META).is_file():
        return path
    path = Path(name_or_path)
    if (path / BUNDLE_META).is_file():
        return path
    names = ", ".join(bundled_warm_starts()) or "none"
    raise ConfigError(f"stages.warm_start.checkpoint: {name_or_path!r} is neither a bundled warm "
                      f"start (bundled: {names}) nor a folder with {BUNDLE_META}")


def bundle_fingerprint(cfg: RunConfig) -> str:
    """The env fingerprint a saved warm start records for ``cfg``: that of ``cfg``'s env
    without its reward shaping (``env.progress_reward``), which changes the rewards RL sees
    and not the demonstrations behaviour cloning learns from."""
    unshaped = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, progress_reward=0.0))
    return envs.fingerprint(env_factory(unshaped)())


def check_bundle(cfg: RunConfig, path: Path) -> dict:
    """The bundle's metadata, after checking that it fits ``cfg``: same model shape and env
    settings, and an env fingerprint equal to the current environment's (else the policy
    would act on observations it was never trained on)."""
    meta = json.loads((path / BUNDLE_META).read_text())
    ours = _bundle_settings(cfg)
    wrong = [f"{k}={meta['settings'].get(k)!r} (run: {v!r})" for k, v in ours.items()
             if meta["settings"].get(k) != v]
    if wrong:
        raise ConfigError(f"stages.warm_start.checkpoint: {path.name} was trained with "
                          f"{'; '.join(wrong)}; match them or train a warm start for this run")
    current = bundle_fingerprint(cfg)
    if meta["env_fingerprint"] != current:
        raise ConfigError(f"stages.warm_start.checkpoint: {path.name} was trained on env version "
                          f"{meta['env_fingerprint']}, the env is now {current}; rebuild it "
                          f"(make warm-start)")
    return meta


def train_warm_start(cfg: RunConfig, progress=None) -> tuple[Context, dict[str, float]]:
    """Build the run's context from its backbone and behaviour-clone the demonstrator."""
    from trainer.context import build_context

    ctx = build_context(cfg)
    return ctx, warm_start(ctx, progress)


def evaluate_policy(ctx: Context, max_tasks: int) -> dict[str, float]:
    """Success of the current policy on every eval panel of the env (the first
    ``max_tasks`` tasks of each), greedy and at the config's evaluation temperature:
    ``{"eval_seen/success/greedy": ..., "eval_seen/success/t0.7": ..., ...}``."""
    from trainer.evaluate import evaluate_panels

    cfg, out = ctx.cfg, {}
    splits = tuple(s for s in ctx.prompt_env.splits if s != cfg.env.train_split)
    for temperature in sorted({0.0, cfg.eval.temperature}):
        ctx.cfg = dataclasses.replace(cfg, eval=dataclasses.replace(
            cfg.eval, splits=splits, max_tasks=max_tasks, temperature=temperature))
        metrics, _ = evaluate_panels(ctx, step=0)
        mode = "greedy" if temperature == 0 else f"t{temperature:g}"
        out.update({f"{k.removeprefix('eval/')}/{mode}": v for k, v in metrics.items()})
    ctx.cfg = cfg
    ctx.model.train()
    return out


def save_bundle(ctx: Context, out: Path, metrics: dict[str, float], evaluation: dict[str, float]) -> Path:
    """Write a warm-start checkpoint: weights, tokenizer and :data:`BUNDLE_META`."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    ctx.model.save_pretrained(out, safe_serialization=True)
    ctx.tokenizer.save_pretrained(out)
    meta = {"settings": _bundle_settings(ctx.cfg), "env_fingerprint": bundle_fingerprint(ctx.cfg),
            "warm_start": to_dict(ctx.cfg.stages.warm_start), "seed": ctx.cfg.seed,
            "metrics": metrics, "evaluation": evaluation}
    (out / BUNDLE_META).write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    return out


# -- the self writer's validity on a fixed panel -------------------------------------------
WRITER_PANEL_SIZE = 64
WRITER_PANEL_EPSILON = 0.3  # demonstrator mistakes, so that about half the episodes fail


def writer_panel(ctx: Context, size: int = WRITER_PANEL_SIZE) -> list[Trajectory]:
    """A fixed panel of ``size`` trajectories for measuring a writer: the demonstrator with
    mistakes on the first tasks of the env's first evaluation split (same every run)."""
    env = ctx.make_env()
    split = next(s for s in env.splits if s != ctx.cfg.env.train_split)
    act = demo_policy(WRITER_PANEL_EPSILON, seed="writer-panel")
    return [_demo_trajectory(ctx, run_episode(env, task, act)) for task in env.panel(split)[:size]]


def writer_validity(ctx: Context, size: int = WRITER_PANEL_SIZE) -> dict[str, float]:
    """How often the policy's own hindsight output is usable on :func:`writer_panel`:
    ``writer/panel_valid_rate`` (parses, names a real turn, non-empty skill, boundary included),
    ``writer/invalid_rate`` (its complement) and ``writer/panel_boundary_agreement`` (valid
    outputs on failed episodes whose error turn is the true first unrecovered error)."""
    from envs.base import error_turn
    from trainer.context import make_writer

    trajectories = writer_panel(ctx, size)
    hindsights = make_writer(ctx, "self").write(trajectories, seed=request_seed("writer-panel", ctx.cfg.seed))
    valid = [h.valid and h.boundary_valid for h in hindsights]
    failed = [(t, h) for t, h, ok in zip(trajectories, hindsights, valid) if ok and not t.episode.success]
    agree = sum(h.error_turn == error_turn(t.episode) for t, h in failed)
    rate = sum(valid) / max(1, len(valid))
    return {"writer/panel_valid_rate": rate, "writer/invalid_rate": 1.0 - rate,
            "writer/panel_boundary_agreement": agree / max(1, len(failed))}
