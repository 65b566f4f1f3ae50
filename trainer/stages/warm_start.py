"""The warm start of a tiny backbone (behaviour cloning on the environment's
observation-consistent demonstrator with realistic mistakes, and, in a ``skill_fraction`` of
the demonstrations, the same demonstrator reading the task's hindsight skill and acting on it),
its cache, and the saved warm starts shipped with the package (``make warm-start``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import shutil
import sys
from pathlib import Path

import envs
from envs.base import Episode, Task, TextEnv, demo_policy, lesson_donor, run_episode
from envs.oracle import Oracle
from trainer import plugins
from trainer.config import ConfigError, RunConfig, canonical_json, to_dict
from trainer.episodes.scoring import MicroBatching
from trainer.parallel.checkpoint import export_model
from trainer.parallel.group import is_main
from trainer.parallel.shard import is_sharded
from trainer.run.checkpoint import save_model
from trainer.run.components import Components, build_components, env_factory
from trainer.stages.sft import demo_trajectory, sft, writer_example


def task_skill(oracle: Oracle, env: TextEnv, task: Task) -> str:
    """The hindsight a skill-conditioned demonstration reads: the oracle's Positive skill of
    a clean (mistake-free) demonstration of the same task, or, where the env has families of
    tasks that share a lesson (:meth:`~envs.base.TextEnv.family`: EZPoints' deck rules), of
    another task of the same family, so that behaviour cloning teaches reading a lesson that
    transfers rather than copying the task's own answer from its hindsight."""
    source, family = task, env.family(task)
    if family is not None:
        tasks = env.panel(task.split)
        donor = lesson_donor(family, task.id, [env.family(t) for t in tasks], [t.id for t in tasks],
                             True, random.Random(f"skill:{task.id}"))
        source = task if donor is None else tasks[donor]
    return oracle.write(run_episode(env, source, demo_policy(0.0, seed=f"skill:{source.id}"))).positive_skill


def demonstration(env: TextEnv, oracle: Oracle, task: Task, epsilon: float, seed: str,
                  with_skill: bool) -> tuple[Episode, str | None]:
    """One warm-start demonstration of ``task`` and the skill in its context (None: none).

    Without a skill the observation-consistent demonstrator makes its ``epsilon`` mistakes;
    with one (:func:`task_skill`) it acts on what the skill says
    (:meth:`envs.base.TextEnv.skilled_demo_action`), so that the skill carries information
    the observation does not and behaviour cloning teaches the policy to read it."""
    skill = task_skill(oracle, env, task) if with_skill else None
    return run_episode(env, task, demo_policy(epsilon, seed=seed, skill=skill)), skill


def warm_start(ctx: Components, progress=None) -> dict[str, float]:
    """Behaviour cloning on demonstrations (see module docstring): a ``skill_fraction`` of
    them have a skill spliced into their context where the teacher context puts it
    (``ctx.builder.build(traj, skill)``) and follow it (:func:`demonstration`)."""
    ws, cfg = ctx.cfg.stages.warm_start, ctx.cfg
    rng = random.Random(f"warm:{cfg.seed}")
    env, oracle = ctx.make_env(), Oracle(ctx.make_env)
    tasks = rng.sample(ctx.train_tasks, min(ws.episodes, len(ctx.train_tasks)))
    examples, lengths = [], []
    for i, task in enumerate(tasks):
        episode, skill = demonstration(env, oracle, task, ws.expert_epsilon, f"warm:{cfg.seed}:{i}",
                                       with_skill=rng.random() < ws.skill_fraction)
        traj = demo_trajectory(ctx, episode)
        lengths += [len(ids) for ids in traj.response_ids]
        examples += ctx.builder.build(traj, skill)
        if rng.random() < ws.writer_fraction:
            examples.append(writer_example(ctx, episode, oracle.write(episode)))
    cut = cut_share(lengths, cfg.rollout.max_new_tokens)
    metrics = sft(ctx.model, examples, epochs=ws.epochs, lr=ws.lr, batch_size=ws.batch_size,
                  seed=cfg.seed, progress=progress, vision=ctx.builder.vision,
                  micro_batch=MicroBatching.of(cfg.algo))
    return {**{k.replace("sft/", "warm/"): v for k, v in metrics.items()}, "warm/cut_turns": cut}


def cut_share(lengths: list[int], budget: int) -> float:
    """The share of demonstration responses (their token counts, ``lengths``) longer than the
    rollout's ``budget`` (``rollout.max_new_tokens``): behaviour cloning learns them whole, but
    the policy's own responses are cut there, before their action.  Warns on stderr when any is."""
    share = sum(n > budget for n in lengths) / max(len(lengths), 1)
    if share and is_main():
        print(f"warning: {share:.0%} of the warm start's demonstration turns (longest {max(lengths)} "
              f"tokens) exceed rollout.max_new_tokens={budget}: the policy's responses will be cut "
              "before their action there; raise rollout.max_new_tokens or shorten the demonstrator's "
              "thought", file=sys.stderr)
    return share


# Bumped when a demonstrator's behaviour changes without a setting changing, so that a cached
# warm start of the old demonstrations is not reused (2: household's skilled demonstrator
# makes the moves its skill names; 3: ezpoints' demonstrator with a face-down card guesses it
# and its thought no longer tells it; 4: that thought fits a 48-token response; 5: the skilled
# face-down thought writes both operators' results).
DEMONSTRATIONS = 5


def warm_start_cache(cfg: RunConfig) -> Path | None:
    """Where the warm-started model of ``cfg`` is cached, or None when caching is off.

    The key hashes everything the warm start depends on: model, env, the warm-start
    settings (without the cache fields), the seed and :data:`DEMONSTRATIONS`, and the writer
    prompt and the source of a plugin's env or writer prompt.  Methods of a study share it."""
    ws = cfg.stages.warm_start
    if not ws.cache or not ws.enabled:
        return None
    unused = ("lora",) if cfg.model.lora.rank == 0 else ()  # full fine-tuning keeps its old keys
    parts = {"model": json.loads(canonical_json(cfg.model, exclude=("vllm", *unused))),
             "env": json.loads(canonical_json(cfg.env)),
             "warm_start": {k: v for k, v in to_dict(ws).items() if k not in ("cache", "cache_dir")},
             "seed": cfg.seed, "max_new_tokens": cfg.rollout.max_new_tokens, "demonstrations": DEMONSTRATIONS}
    if cfg.writer.prompt != "analyzer":  # its writer examples (keys of the built-in prompt unchanged)
        parts["writer_prompt"] = cfg.writer.prompt
    if sources := [p.sha for p in plugins.used_plugins(cfg, ("env", "writer"))]:
        parts["plugins"] = sources  # a plugin env or writer prompt edited: a new warm start
    key = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]
    root = ws.cache_dir or os.environ.get("HINDSIGHT_CACHE") or str(Path.home() / ".cache" / "hindsight-lab")
    return Path(root) / "warm_start" / key


def load_cached_warm_start(path: Path | None) -> str | None:
    """The cached model directory if complete, else None."""
    return str(path / "model") if path is not None and (path / "COMPLETE").exists() else None


def save_warm_start(ctx: Components, path: Path, metrics: dict[str, float]) -> None:
    """Write the warm-started model atomically (a temp dir renamed into place).  Every
    data-parallel rank calls it (a sharded policy is gathered one tensor at a time,
    :func:`~trainer.parallel.checkpoint.export_model`); rank 0 writes."""
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    if is_main():
        shutil.rmtree(tmp, ignore_errors=True)
    if is_sharded(ctx.model):  # every rank gathers each tensor in turn, rank 0 writes
        export_model(ctx.model, ctx.tokenizer, tmp / "model")
    else:
        save_model(ctx.model, ctx.tokenizer, tmp / "model")  # under LoRA: the adapter, naming its base
    if not is_main():
        return
    (tmp / "metrics.json").write_text(json.dumps(metrics))
    (tmp / "COMPLETE").write_text("ok\n")
    try:
        tmp.rename(path)
    except OSError:  # another run cached the same warm start first
        shutil.rmtree(tmp, ignore_errors=True)


# -- saved warm starts (scripts/warm_start.py, `make warm-start`) --------------------------
BUNDLED_WARM_STARTS = Path(__file__).parents[1] / "assets" / "warm_start"


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


def train_warm_start(cfg: RunConfig, progress=None) -> tuple[Components, dict[str, float]]:
    """Build the run's context from its backbone and behaviour-clone the demonstrator."""
    ctx = build_components(cfg)
    return ctx, warm_start(ctx, progress)


def save_bundle(ctx: Components, out: Path, metrics: dict[str, float], evaluation: dict[str, float]) -> Path:
    """Write a warm-start checkpoint: weights (under LoRA the adapter and the name of its
    base), tokenizer and :data:`BUNDLE_META`."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    save_model(ctx.model, ctx.tokenizer, out)  # under LoRA: the adapter, naming its base
    write_card(ctx, out, metrics, evaluation)
    return out


def write_card(ctx: Components, out: Path, metrics: dict[str, float], evaluation: dict[str, float]) -> None:
    """The bundle's :data:`BUNDLE_META` alone (its settings, fingerprint, training figures and
    ``evaluation``), e.g. once the evaluation of weights already saved is done."""
    meta = {"settings": _bundle_settings(ctx.cfg), "env_fingerprint": bundle_fingerprint(ctx.cfg),
            "warm_start": to_dict(ctx.cfg.stages.warm_start), "seed": ctx.cfg.seed,
            "metrics": metrics, "evaluation": evaluation}
    (out / BUNDLE_META).write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
