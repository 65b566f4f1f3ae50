"""Wiring of one training run: every component the phases use, built once from the config.

:func:`build_components` only wires (STYLE.md #4): environment factory, tokenizer and policy,
frozen reference, rollout backend, sample builder, writer, optimizer.  The phases
(:mod:`trainer.stages`, :mod:`trainer.rl`, :mod:`trainer.evaluate`) read it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

import envs
from envs.base import Task, TextEnv, demo_policy, run_episode
from envs.oracle import Oracle
from trainer.algos import MethodSpec, get_method
from trainer.config import ConfigError, RunConfig
from trainer.episodes.rollout import Sampling, collect
from trainer.episodes.samples import SampleBuilder, TokenSequence
from trainer.hindsight.analyzer import ANALYZER, WRITER_IMAGES, WriterPrompt, writer_prompt
from trainer.hindsight.shuffled import ShuffledSkills
from trainer.hindsight.writers import (
    ExternalWriter,
    FrozenWriter,
    NoWriter,
    OracleWriter,
    PrivilegedContext,
    SelfWriter,
    StaticWriter,
    Writer,
    build_library,
    library_from,
    load_library,
)
from trainer.models.backbones import (
    apply_settings,
    load_model,
    load_pretrained,
    resolve_device,
    resolve_dtype,
)
from trainer.models.backends import make_backend
from trainer.models.folders import model_folder
from trainer.models.generation import GenerationBackend, request_seed
from trainer.models.lora import (
    adapters_disabled,
    base_name,
    has_adapters,
    merge_into_base,
    save_merged,
    set_base_name,
    with_lora,
)
from trainer.models.paper_shapes import uses_local_tokenizer
from trainer.models.precision import frozen_copy
from trainer.models.vision import VisionCodec, is_vision_model
from trainer.parallel.group import barrier, broadcast_object, is_main
from trainer.parallel.shard import frozen_shards, is_sharded, unsharded
from trainer.run.checkpoint import RL_BASE, WRITER, load_module, rl_init_path
from trainer.run.engines import snapshot_engine_config

LIBRARY_TASKS = 24  # train tasks the built-in static skill library is written from
SELF_LIBRARY = "library.json"  # a self-written static library, in output.dir (kept for resume)
TOKENIZER_EPISODES = 120  # expert episodes whose text trains a tiny/shaped backbone's tokenizer


@dataclass
class Components:
    cfg: RunConfig
    spec: MethodSpec
    make_env: Callable[[], TextEnv]
    prompt_env: TextEnv
    model: torch.nn.Module
    tokenizer: object
    builder: SampleBuilder
    backend: GenerationBackend
    reference: torch.nn.Module | None = None
    writer: Writer | None = None
    library: StaticWriter | None = None
    privileged: PrivilegedContext | None = None
    optimizer: torch.optim.Optimizer | None = None
    train_tasks: list[Task] = field(default_factory=list)
    # the training tasks by family, grouped once, when rollout.task_draw is family
    train_families: dict[str, list[Task]] | None = None
    # Stage-1 writer examples replayed in the RL update (stages.skill_sft.replay > 0)
    replay: list[TokenSequence] = field(default_factory=list)

    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @contextlib.contextmanager
    def initial_policy(self) -> Iterator[torch.nn.Module | None]:
        """The RL initialisation to score with inside the block: the frozen copy
        (:attr:`reference`), the policy with its adapters disabled under LoRA (no copy;
        :func:`~trainer.models.lora.adapters_disabled`), None when the run keeps none
        (:attr:`~trainer.config.schema.AlgoConfig.keeps_initial`)."""
        if self.reference is not None or not self.cfg.algo.keeps_initial or not has_adapters(self.model):
            yield self.reference
            return
        with adapters_disabled(self.model) as base:
            yield base

    @contextlib.contextmanager
    def kl_reference(self) -> Iterator[torch.nn.Module | None]:
        """The KL reference (:meth:`initial_policy`), None without a KL term."""
        if self.cfg.algo.kl_coef <= 0:
            yield None
            return
        with self.initial_policy() as reference:
            yield reference


def family_groups(tasks: list[Task], family: Callable[[Task], str | None]) -> dict[str, list[Task]]:
    """``tasks`` by the family ``family`` names (``TextEnv.family``), in their order; tasks of
    no family are left out."""
    groups: dict[str, list[Task]] = {}
    for task in tasks:
        name = family(task)
        if name is not None:
            groups.setdefault(name, []).append(task)
    return groups


def env_factory(cfg: RunConfig) -> Callable[[], TextEnv]:
    options = envs.env_options(cfg.env.name, cfg.env.level, cfg.env.show_admissible,
                               cfg.env.action_format, cfg.env.images, cfg.env.action_match,
                               cfg.env.progress_reward, cfg.env.hidden_cards, cfg.env.hands,
                               max_turns=cfg.env.max_turns, invalid_penalty=cfg.env.invalid_penalty)
    return functools.partial(envs.make, cfg.env.name, **options)


def tokenizer_corpus(make_env: Callable[[], TextEnv], tasks: list[Task], prompt: WriterPrompt = ANALYZER) -> list[str]:
    """Environment text for a tiny backbone's tokenizer: prompts, observations, expert
    responses, oracle skills and writer ``prompt``s of expert episodes with mistakes."""
    env, oracle = make_env(), Oracle(make_env)
    act = demo_policy(0.2, seed="tokenizer")
    texts = [env.system_prompt(), env.domain_description()]
    for task in tasks:
        episode = run_episode(env, task, act)
        texts.append(env.task_instruction(task))
        texts += [t.observation + "\n" + t.response for t in episode.turns]
        hindsight = oracle.write(episode)
        texts += [m["content"] for m in prompt.prompt(env.domain_description(), episode, 600, ())]
        texts.append(prompt.target(hindsight))
    return texts


def make_writer(ctx: Components, kind: str) -> Writer:
    cfg = ctx.cfg
    builders: dict[str, Callable[[], Writer]] = {
        "none": NoWriter,
        "oracle": lambda: OracleWriter(ctx.make_env),
        "static": lambda: ctx.library,
        "external": lambda: ExternalWriter(ctx.prompt_env.domain_description(), cfg.writer),
        "self": lambda: SelfWriter(
            ctx.model, ctx.tokenizer, writer_backends(ctx, ctx.tokenizer, ctx.builder.vision),
            ctx.prompt_env.domain_description(), cfg.writer, cfg.model.max_prompt_tokens, ctx.builder.vision),
        "frozen": lambda: frozen_writer_from(ctx),
    }
    writer = builders[kind]()
    # the shuffled-skills control (opd_only_shuffled): another family's hindsight for each trajectory
    return ShuffledSkills(writer, ctx.prompt_env) if ctx.spec.shuffled_skills and kind != "none" else writer


def policy_writer(ctx: Components) -> SelfWriter:
    """The policy as it is now writing with the run's analyzer settings, on the policy's own
    engine: the writer panel and a self-written library measure the policy itself, so even a
    stale or frozen writer's run builds no snapshot (nor a second engine) for them."""
    cfg = ctx.cfg
    return SelfWriter(ctx.model, ctx.tokenizer, writer_backends(ctx, ctx.tokenizer, ctx.builder.vision),
                      ctx.prompt_env.domain_description(), dataclasses.replace(cfg.writer, refresh_every=1),
                      cfg.model.max_prompt_tokens, ctx.builder.vision)


def writer_backends(ctx: Components, tokenizer, vision) -> Callable:
    """A writer's backend factory (model -> backend): the policy's own backend for the
    policy itself (one engine a trial: SEED's self writer, the writer panel, a self-written
    library), a new one of the run's kind for a frozen snapshot or a checkpoint's model
    (whose weights differ; its engine never sleeps, :mod:`trainer.run.engines`), taking the
    :data:`~trainer.samples.WRITER_IMAGES` images of a writer's prompt with ``vision``."""
    def factory(model):
        if model is ctx.model:
            return ctx.backend
        return make_backend(snapshot_engine_config(ctx.cfg), model, tokenizer, vision,
                            images_per_prompt=WRITER_IMAGES, max_model_len=engine_length(ctx.cfg))
    return factory


def engine_length(cfg: RunConfig) -> int:
    """The longest prompt plus response a run generates: a rollout turn or a writer's
    hindsight (:class:`~trainer.backend.VLLMBackend`'s ``max_model_len``)."""
    return cfg.model.max_prompt_tokens + max(cfg.rollout.max_new_tokens, cfg.writer.max_new_tokens)


def frozen_writer_from(ctx: Components) -> FrozenWriter:
    """The frozen writer: ``writer.checkpoint`` (its model and tokenizer) when set, else the
    policy as it is now (start_rl calls this after the SFT stages)."""
    cfg = ctx.cfg
    model, tokenizer, vision = None, ctx.tokenizer, ctx.builder.vision
    if cfg.writer.checkpoint:
        device = resolve_device(cfg.model.device)
        model, tokenizer = load_pretrained(str(model_folder(cfg.writer.checkpoint)),
                                           resolve_dtype(cfg.model.dtype, device), device, master=False)
        vision = VisionCodec(model.config, tokenizer, cfg.model.max_image_tokens) \
            if vision is not None and is_vision_model(model) else None
    return FrozenWriter(ctx.model, tokenizer, writer_backends(ctx, tokenizer, vision),
                        ctx.prompt_env.domain_description(), cfg.writer,
                        cfg.model.max_prompt_tokens, model=model, vision=vision)


def build_components(cfg: RunConfig, init_from: str | None = None) -> Components:
    """Build every component of a run from a resolved config; ``init_from`` loads the policy
    and its tokenizer from a saved model directory (a checkpoint) instead of the backbone."""
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    spec = get_method(cfg.algo.method)
    make_env = env_factory(cfg)
    prompt_env = make_env()
    train_tasks = prompt_env.panel(cfg.env.train_split)
    families = family_groups(train_tasks, prompt_env.family) if cfg.rollout.task_draw == "family" else None
    if families is not None and len(families) < 2:
        raise ConfigError(f"rollout.task_draw: 'family' draws evenly over task families, but env {cfg.env.name} "
                          f"(level {cfg.env.level or 'default'}) has fewer than two; set rollout.task_draw=uniform "
                          "or use an env with them (ezpoints with env.level: suit)")
    if init_from is not None:
        device = resolve_device(cfg.model.device)
        dtype = resolve_dtype(cfg.model.dtype, device)
        model, tokenizer = load_pretrained(init_from, dtype, device)
        apply_settings(model, cfg.model, dtype)  # as load_model does for a fresh backbone
    else:
        local = uses_local_tokenizer(cfg.model.backbone)
        corpus = tokenizer_corpus(make_env, train_tasks[:TOKENIZER_EPISODES],
                                  writer_prompt(cfg.writer.prompt)) if local else None
        model, tokenizer = load_model(cfg.model, env_texts=corpus, seed=cfg.seed)
    model = with_lora(model, cfg.model.lora, seed=cfg.seed)  # every backbone, fresh or loaded
    vision = None
    if cfg.env.images:
        if not is_vision_model(model):
            raise ValueError(f"env.images: model {cfg.model.backbone!r} has no vision tower; use "
                             f"backbone tiny-vl or a Qwen2-VL / Qwen2.5-VL path")
        vision = VisionCodec(model.config, tokenizer, cfg.model.max_image_tokens)
    builder = SampleBuilder(tokenizer, prompt_env, cfg.env.context, cfg.env.history_window,
                            cfg.model.max_prompt_tokens, vision)
    ctx = Components(cfg=cfg, spec=spec, make_env=make_env, prompt_env=prompt_env, model=model,
                  tokenizer=tokenizer, builder=builder,
                  backend=make_backend(cfg.model, model, tokenizer, vision,
                                       images_per_prompt=max(prompt_env.max_turns + 1, WRITER_IMAGES),
                                       max_model_len=engine_length(cfg)),
                  train_tasks=train_tasks, train_families=families)
    if cfg.writer.library and (spec.rollout_skill or spec.eval_skill or cfg.writer.kind == "static"):
        ctx.library = StaticWriter(load_library(cfg.writer.library), family=prompt_env.family)
    elif spec.rollout_skill or spec.eval_skill or (cfg.writer.kind == "static" and spec.library == "oracle"):
        ctx.library = StaticWriter(build_library(make_env, train_tasks[-LIBRARY_TASKS:]), family=prompt_env.family)
    # spec.library == "self": written by the policy after the SFT stages (start_rl)
    if "privileged" in spec.skills:
        ctx.privileged = PrivilegedContext(make_env)
    return ctx


def release_engines(ctx: Components) -> None:
    """Put the run's engines to sleep (the policy's, and a writer's own where it has one)
    before a phase that needs the memory: anything that trains, scores or writes a
    checkpoint.  The next generation wakes them; backends without an engine ignore it."""
    for backend in {id(b): b for b in (ctx.backend, getattr(ctx.writer, "backend", ctx.backend))}.values():
        backend.release()


@contextlib.contextmanager
def generating(ctx: Components) -> Iterator[None]:
    """The context the policy's backend generates in: a backend that samples with the live
    model (transformers) needs a sharded policy whole (:func:`~trainer.parallel.unsharded`),
    an engine holds its own copy of the weights and goes back to sleep on exit
    (:func:`release_engines`: it sleeps through scoring, the update and checkpoint writes)."""
    with unsharded(ctx.model) if getattr(ctx.backend, "generates_with_model", False) else contextlib.nullcontext():
        try:
            yield
        finally:
            release_engines(ctx)


def frozen_writer(ctx: Components) -> torch.nn.Module | None:
    """The self writer's frozen snapshot (stale / refresh_every > 1), None otherwise."""
    frozen = getattr(ctx.writer, "frozen", None)
    return frozen() if frozen is not None else None


def self_library(ctx: Components, resume: Path | None = None) -> StaticWriter:
    """SEED's static library (Table 2): the policy at the RL initialisation (after the warm
    start and Stage 1, the run's earliest checkpoint) plays one episode per library task and
    its own writer writes their skills, once; valid ones become the library.  Saved as
    ``output.dir/library.json`` and, on resume, read back instead of rewritten.  Metrics
    ``library/size`` and ``library/valid_rate`` land on the writer's ``metrics``."""
    cfg = ctx.cfg
    path = Path(cfg.output.dir) / SELF_LIBRARY
    if resume is not None and path.exists():
        library = StaticWriter(load_library(str(path)), allow_empty=True, family=ctx.prompt_env.family)
        library.metrics = {"library/size": float(len(library.entries))}
        return library
    tasks = ctx.train_tasks[-LIBRARY_TASKS:]
    sampling = Sampling(cfg.rollout.max_new_tokens, cfg.rollout.temperature, cfg.rollout.top_p)
    with generating(ctx):  # asleep again after it
        trajectories, _ = collect(ctx.make_env, tasks, ctx.builder, ctx.backend, sampling,
                                  seed=request_seed("library", cfg.seed))
        hindsights = policy_writer(ctx).write(trajectories, seed=request_seed("library-write", cfg.seed))
    entries = broadcast_object(library_from(trajectories, hindsights, ctx.prompt_env.family))  # rank 0's
    if is_main():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(entries, indent=1) + "\n")
    library = StaticWriter(entries, allow_empty=True, family=ctx.prompt_env.family)
    library.metrics = {"library/size": float(len(entries)),
                       "library/valid_rate": sum(h.valid for h in hindsights) / max(1, len(hindsights))}
    return library


def start_rl(ctx: Components, resume: Path | None = None) -> None:
    """Freeze the reference policy, build the writer and the optimizer (after the SFT
    stages, so that the reference and the self writer start from the RL initialisation).

    ``resume``: the checkpoint folder a resumed run continues from; the reference is then
    restored from the run's saved RL initialisation (:func:`trainer.checkpoint.rl_init_path`)
    and a frozen writer snapshot from the checkpoint, bit for bit, instead of being rebuilt
    from the resumed policy.  Data parallel: the policy is already sharded
    (:func:`trainer.parallel.run.shard_policy`, before the SFT stages); the reference is
    sharded the same way and AdamW is built on the policy's shards."""
    cfg = ctx.cfg
    if has_adapters(ctx.model):  # the reference is the base with adapters disabled (lora_base)
        if resume is None:
            lora_base(ctx)
    elif cfg.algo.keeps_initial:
        # stored in the compute dtype; sharded from the start when the policy already is
        ctx.reference = frozen_shards(ctx.model) if is_sharded(ctx.model) else frozen_copy(ctx.model)
        if resume is not None and rl_init_path(cfg.output.dir).exists():  # older runs: rebuilt
            load_module(ctx.reference, rl_init_path(cfg.output.dir))
    if ctx.library is None and ctx.spec.skills and cfg.writer.kind == "static":
        ctx.library = self_library(ctx, resume)
    ctx.writer = make_writer(ctx, cfg.writer.kind if ctx.spec.skills else "none")
    if resume is not None and frozen_writer(ctx) is not None and (Path(resume) / WRITER).exists():
        ctx.writer.restore(Path(resume) / WRITER)
    ctx.optimizer = torch.optim.AdamW([p for p in ctx.model.parameters() if p.requires_grad], lr=cfg.algo.lr,
                                      weight_decay=cfg.algo.weight_decay)


def lora_base(ctx: Components) -> None:
    """The RL initialisation as the base of a LoRA policy: the warm start's and Stage 1's
    adapters folded into the base, fresh ones for RL (:func:`~trainer.models.lora.merge_into_base`),
    so that the base with adapters disabled is the paper's reference.  A base that has no
    name a checkpoint could give (random init, adapters folded in, a local folder that may
    move) is saved once as ``checkpoints/rl_base`` and named by its checkpoints."""
    merged = merge_into_base(ctx.model, seed=ctx.cfg.seed)
    name = base_name(ctx.model)
    if merged or name is None or Path(name).is_dir():
        folder = Path(ctx.cfg.output.dir) / "checkpoints" / RL_BASE
        save_merged(ctx.model, folder, merge=False, write=is_main())  # a sharded policy: every rank gathers
        if is_main():
            ctx.tokenizer.save_pretrained(folder)
        barrier()  # the other ranks name a folder rank 0 has finished writing
        set_base_name(ctx.model, str(folder))
