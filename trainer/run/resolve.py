"""Resolution of a run config: the names it gives checked against the method registry, the
environments and the bundled shapes (:func:`load_config`), and every method- or
backbone-dependent default (``None`` in :mod:`trainer.config.schema`) filled in
(:func:`resolve`), so that the logged config is what runs.  It sits above
:mod:`trainer.algos`, :mod:`envs` and the models and imports them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import envs
from trainer import algos, plugins
from trainer.config import (
    DEFAULT_LR,
    DEFAULT_LR_TINY,
    SHAPE_SUFFIX,
    TINY_BACKBONES,
    TINY_VL_BACKBONE,
    ConfigError,
    RunConfig,
    apply_overrides,
    flatten,
    from_dict,
    is_builtin_backbone,
    read_yaml,
    unknown_name_error,
)
from trainer.hindsight.analyzer import WRITER_PROMPTS
from trainer.models import paper_shapes
from trainer.models.backbones import resolve_device, resolve_dtype
from trainer.models.folders import require_model_folder


def check_registered(cfg: RunConfig) -> None:
    """Cross-field names: ``algo.method`` must be in the trainer.algos registry,
    ``env.name`` in ``envs.names()`` and ``writer.prompt`` a registered writer prompt; the
    error lists the valid names with a suggestion.  The config's ``plugins`` are imported
    first (once a process), so that the names they register count."""
    plugins.load_plugins(cfg.plugins)
    if cfg.writer.prompt not in WRITER_PROMPTS:
        raise unknown_name_error("writer.prompt", "writer prompt", cfg.writer.prompt, WRITER_PROMPTS)
    methods = algos.method_names()
    removed = getattr(algos, "REMOVED_METHODS", {})
    if cfg.algo.method in removed:
        raise ConfigError(f"algo.method: {removed[cfg.algo.method]}")
    if cfg.algo.method not in methods:
        raise unknown_name_error("algo.method", "method", cfg.algo.method, methods)
    if cfg.env.name not in envs.names():
        raise unknown_name_error("env.name", "env", cfg.env.name, envs.names())
    levels = envs.env_class(cfg.env.name).levels
    if cfg.env.level and cfg.env.level not in levels:
        raise ConfigError(f"env.level: {cfg.env.level!r} is not a level of {cfg.env.name}; "
                          f"valid: {', '.join(levels)}")
    if cfg.env.show_admissible and not envs.has_admissible_switch(cfg.env.name):
        raise ConfigError(f"env.show_admissible: {cfg.env.name} has no admissible-command list "
                          f"to show; set it to false or null")
    if cfg.env.action_format != "text":
        if not envs.has_option(cfg.env.name, "action_format"):
            raise ConfigError(f"env.action_format: {cfg.env.name} takes only text actions; "
                              f"{cfg.env.action_format!r} needs an env with a numbered list "
                              f"(household)")
        if cfg.env.show_admissible is False:
            raise ConfigError(f"env.action_format: {cfg.env.action_format!r} picks from the "
                              f"admissible list, so env.show_admissible cannot be false")
    if cfg.env.action_match != "exact" and not envs.has_option(cfg.env.name, "action_match"):
        with_match = [n for n in envs.names() if envs.has_option(n, "action_match")]
        raise ConfigError(f"env.action_match: {cfg.env.name} reads commands only as written; "
                          f"{cfg.env.action_match!r} needs an env with admissible commands "
                          f"({', '.join(with_match)})")
    if cfg.env.progress_reward and not envs.has_option(cfg.env.name, "progress_reward"):
        shaped = [n for n in envs.names() if envs.has_option(n, "progress_reward")]
        raise ConfigError(f"env.progress_reward: {cfg.env.name} has no distance-to-goal reward; "
                          f"envs with one: {', '.join(shaped)}")
    if cfg.env.images and not envs.has_option(cfg.env.name, "images"):
        with_images = [n for n in envs.names() if envs.has_option(n, "images")]
        raise ConfigError(f"env.images: {cfg.env.name} renders no images; envs with images: "
                          f"{', '.join(with_images)}")
    if cfg.env.hidden_cards and not envs.has_option(cfg.env.name, "hidden_cards"):
        with_hidden = [n for n in envs.names() if envs.has_option(n, "hidden_cards")]
        raise ConfigError(f"env.hidden_cards: {cfg.env.name} deals no cards face down; envs with "
                          f"hidden cards: {', '.join(with_hidden)}")
    if cfg.env.hands != 1 and not envs.has_option(cfg.env.name, "hands"):
        with_hands = [n for n in envs.names() if envs.has_option(n, "hands")]
        raise ConfigError(f"env.hands: {cfg.env.name} plays one task an episode; envs with hands: "
                          f"{', '.join(with_hands)}")
    try:  # the env's own rules for its options together (ezpoints: a deck rule needs hidden_cards 1)
        envs.env_class(cfg.env.name).check_options(**envs.env_options(
            cfg.env.name, cfg.env.level, hidden_cards=cfg.env.hidden_cards, hands=cfg.env.hands))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    text_only = is_builtin_backbone(cfg.model.backbone) and cfg.model.backbone != TINY_VL_BACKBONE
    if cfg.env.images and text_only:
        raise ConfigError(f"model.backbone: {cfg.model.backbone!r} reads text only; env.images needs "
                          f"a vision-language backbone: tiny-vl or a Qwen2-VL / Qwen2.5-VL path")
    if cfg.model.backbone == TINY_VL_BACKBONE and not cfg.env.images:
        raise ConfigError("model.backbone: 'tiny-vl' reads images; set env.images=true (with "
                          "sokoban or ezpoints) or use backbone 'tiny' for text")


def load_config(path: str | Path, overrides: Iterable[str] | Mapping[str, Any] = ()) -> RunConfig:
    """Read a run-config YAML (overrides of the :class:`RunConfig` defaults), apply
    ``--set`` style ``overrides`` and check the method and env names.  Not yet resolved:
    call :func:`resolve` for the method/backbone defaults."""
    data = read_yaml(path)
    try:
        cfg = from_dict(data)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    cfg = dataclasses.replace(cfg, plugins=plugins.relative_to(cfg.plugins, Path(path).parent))
    cfg = apply_overrides(cfg, overrides)
    check_registered(cfg)
    return cfg


def resolve(cfg: RunConfig) -> RunConfig:
    """Fill every ``None`` (= "the default for this method/backbone") from the method table
    ``trainer.algos.get_method(cfg.algo.method)`` and the backbone, so that the logged config
    is what runs:

    * the ``algo`` section <- ``trainer.algos.resolve_algo(spec, cfg.algo)``, the method
      table's own rule: ``lambda_opd`` / ``teacher`` from the spec (SEED 0.01 with the
      current-policy teacher, ETRO 0.001 with the old one) and the ETRO suffix-ablation pins;
    * ``writer.kind`` <- spec ``writer``;
    * ``algo.lr`` <- DEFAULT_LR_TINY for the tiny backbone, DEFAULT_LR otherwise; Stage-1
      ``stages.skill_sft.lr`` <- the resolved ``algo.lr``;
    * ``stages.warm_start.enabled`` <- backbone is tiny or ``stages.warm_start.checkpoint``
      names one; ``stages.skill_sft.enabled`` <- spec
      ``skill_sft`` (SEED Stage 1);
    * ``model.dtype`` / ``model.vllm.enforce_eager`` ``auto`` <- their value on the run's
      device (:func:`device_defaults`).

    A method that pins the writer refresh (spec ``writer_refresh`` not None, e.g. the stale
    analyzer ``seed_stale`` = 0, never) overrides ``writer.refresh_every``, and so does the
    frozen writer (0); one that constrains its writer (``seed_constrained``) sets
    ``writer.constrained``, and one that replays Stage-1 writer examples
    (``seed_writer_replay``) sets ``stages.skill_sft.replay`` unless the config sets a
    non-zero weight (0 is the field's default, so it cannot turn the method's replay off).
    Raises ConfigError for an unknown method/env, an oracle writer on a non-built-in env, an
    external writer without endpoint, a replay without Stage 1, or a default the method
    table leaves open.
    """
    check_registered(cfg)
    spec = algos.get_method(cfg.algo.method)
    cfg = dataclasses.replace(cfg, algo=algos.resolve_algo(spec, cfg.algo))
    tiny = cfg.model.backbone in TINY_BACKBONES
    lr = cfg.algo.lr if cfg.algo.lr is not None else (DEFAULT_LR_TINY if tiny else DEFAULT_LR)
    env_cls = envs.env_class(cfg.env.name)
    defaults = {
        "env.show_admissible": envs.has_admissible_switch(cfg.env.name),
        "algo.lr": lr,
        "writer.kind": spec.writer,
        # naming a warm start to start from asks for one, whatever the backbone
        "stages.warm_start.enabled": tiny or bool(cfg.stages.warm_start.checkpoint),
        "stages.skill_sft.enabled": spec.skill_sft,
        "stages.skill_sft.lr": lr,
    }
    flat = flatten(cfg)
    fills = {k: v for k, v in defaults.items() if flat[k] is None}
    if not cfg.env.level:
        fills["env.level"] = env_cls.levels[0]
    if spec.writer_refresh is not None:
        fills["writer.refresh_every"] = spec.writer_refresh
    if spec.writer_constrained:
        fills["writer.constrained"] = True
    if spec.writer_replay and not cfg.stages.skill_sft.replay:
        fills["stages.skill_sft.replay"] = spec.writer_replay
    if (fills.get("writer.kind") or cfg.writer.kind) == "frozen":
        fills["writer.refresh_every"] = 0  # a frozen writer is never refreshed: logged as such
    fills.update(device_defaults(cfg))
    out = apply_overrides(cfg, fills)  # validates everything, resolve_algo's changes too
    open_keys = [k for k, v in flatten(out).items() if v is None]
    if open_keys:
        raise ConfigError(f"method {cfg.algo.method!r} gives no default for "
                          f"{', '.join(open_keys)}; set it explicitly")
    _check_writer(out)
    _check_oracle(out, spec)
    if out.stages.skill_sft.replay > 0 and not out.stages.skill_sft.enabled:
        raise ConfigError(f"stages.skill_sft.replay: replays Stage-1 examples, but Stage 1 is off "
                          f"for method {cfg.algo.method!r}; set stages.skill_sft.enabled=true or "
                          f"stages.skill_sft.replay=0")
    _check_backbone(out)
    _check_teacher(out, spec)
    if out.tracking.gradient_parts and out.parallel.workers > 1:
        raise ConfigError(f"tracking.gradient_parts: measures one process's gradients, but "
                          f"parallel.workers is {out.parallel.workers}; set parallel.workers=1")
    return out


def device_defaults(cfg: RunConfig) -> dict[str, Any]:
    """What ``auto`` means on the device the run computes on (``model.device``; ``auto`` =
    this machine's): ``model.dtype`` bfloat16 on a GPU that supports it, else float32, and
    ``model.vllm.enforce_eager`` false on a GPU (CUDA graphs), true on a CPU.  On a CPU both
    are the values that were the defaults before ``auto`` was, so a CPU cell keeps its id."""
    device = resolve_device(cfg.model.device)
    fills: dict[str, Any] = {}
    if cfg.model.dtype == "auto":
        fills["model.dtype"] = str(resolve_dtype("auto", device)).removeprefix("torch.")
    if cfg.model.vllm.enforce_eager == "auto":
        fills["model.vllm.enforce_eager"] = device == "cpu"
    return fills


def _check_teacher(cfg: RunConfig, spec) -> None:
    """``algo.teacher: current`` (and ``initial``) scores the teacher inside the update; a
    method that routes Delta through its advantages (ETRO's family, RLSD: spec ``credit``)
    computes them once before the update, so only the old-policy teacher means anything there."""
    if cfg.algo.teacher in ("current", "initial") and spec.credit is not None:
        raise ConfigError(f"algo.teacher: {cfg.algo.teacher!r} needs a method whose OPD is a loss term; "
                          f"{spec.name} puts Delta into advantages computed before the update, "
                          f"so its teacher is 'old' (set algo.teacher=old or leave it null)")
    if cfg.algo.teacher == "old" and spec.opd_loss == "opsd" and cfg.algo.opsd_top_k > 0:
        raise ConfigError(f"algo.opsd_top_k: distribution matching scores the teacher's top-k "
                          f"inside the update, so {spec.name} needs algo.teacher=current; set "
                          f"algo.opsd_top_k=0 (the sampled-token estimate) to use the old teacher")


def _check_backbone(cfg: RunConfig) -> None:
    """A name ending in ``-shape`` must be a bundled shape (trainer/models/paper_shapes.py)."""
    if cfg.model.backbone.endswith(SHAPE_SUFFIX):
        try:
            paper_shapes.check_shape(cfg.model.backbone)
        except ValueError as e:
            raise ConfigError(str(e)) from None


def _check_oracle(cfg: RunConfig, spec) -> None:
    """The oracle writer reads privileged state (DESIGN.md "Writers"): an env registered with
    ``oracle=True``.  What plays an env's scripted expert needs one registered with
    ``expert=True``: the warm start's demonstrations, Stage 1's annotated rollouts (unless the
    external writer writes them), a privileged context and a static library of expert
    episodes."""
    if cfg.writer.kind == "oracle" and not envs.has_oracle(cfg.env.name):
        raise ConfigError(f"writer.kind: 'oracle' needs a built-in env ({', '.join(envs.BUILTIN)}), got "
                          f"env.name {cfg.env.name!r}; use writer.kind=self, frozen or external (or "
                          f"register the env with register_env(..., oracle=True))")
    if envs.has_expert(cfg.env.name):
        return
    needs = {"stages.warm_start.enabled": cfg.stages.warm_start.enabled,
             "stages.skill_sft.enabled": cfg.stages.skill_sft.enabled and cfg.writer.kind != "external",
             f"method {spec.name}'s privileged context": "privileged" in spec.skills,
             f"method {spec.name}'s skill library": not cfg.writer.library and (
                 spec.rollout_skill or spec.eval_skill or (cfg.writer.kind == "static" and spec.library == "oracle"))}
    need = [k for k, v in needs.items() if v]
    if need:
        raise ConfigError(f"env.name: {cfg.env.name!r} has no scripted expert, which {', '.join(need)} "
                          f"needs; turn it off or register the env with register_env(..., expert=True)")


def _check_writer(cfg: RunConfig) -> None:
    """The external writer needs an endpoint; a checkpoint is the frozen writer's; the
    format-constrained writer samples the built-in analyzer format."""
    if cfg.writer.checkpoint and cfg.writer.kind != "frozen":
        raise ConfigError(f"writer.checkpoint: only the frozen writer reads it, but writer.kind "
                          f"is {cfg.writer.kind!r}; set writer.kind=frozen or drop the checkpoint")
    if cfg.writer.checkpoint:
        require_model_folder(cfg.writer.checkpoint, "writer.checkpoint")
    if cfg.writer.constrained and cfg.writer.prompt != "analyzer":
        raise ConfigError(f"writer.constrained: the constrained template is the analyzer format's; "
                          f"writer.prompt {cfg.writer.prompt!r} samples freely (drop writer.constrained)")
    if cfg.writer.constrained and cfg.writer.kind not in ("self", "frozen"):
        raise ConfigError(f"writer.constrained: only the self and frozen writers sample with the "
                          f"analyzer format, but writer.kind is {cfg.writer.kind!r}; drop it or "
                          f"set writer.kind=self or frozen")
    if cfg.writer.kind == "external" and not cfg.writer.endpoint:
        raise ConfigError("writer.endpoint: required when writer.kind is 'external' "
                          "(an OpenAI-compatible base URL)")
