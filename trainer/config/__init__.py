"""One frozen config tree per run: the dataclasses (:mod:`trainer.config.schema`) and their
loading from YAML files and ``--set`` overrides (:mod:`trainer.config.loading`).

YAML files and overrides map onto the dataclasses; nothing reads raw dicts after loading.
The package imports nothing of the project (it is the leaf every other part reads); the
checks that need the method registry, the environments or the backbones, and the defaults
they decide, are :mod:`trainer.run.resolve`'s.
"""

from trainer.config.loading import (
    ConfigError,
    apply_overrides,
    canonical_json,
    field_types,
    flatten,
    from_dict,
    parse_override,
    read_yaml,
    to_dict,
    unknown_key_error,
    unknown_name_error,
    yaml_load,
)
from trainer.config.schema import (
    DEFAULT_LR,
    DEFAULT_LR_TINY,
    LORA_TARGETS,
    SHAPE_SUFFIX,
    SMOLLM2_BACKBONE,
    TINY_BACKBONE,
    TINY_BACKBONES,
    TINY_VL_BACKBONE,
    AlgoConfig,
    EnvConfig,
    EvalConfig,
    LoRAConfig,
    ModelConfig,
    OutputConfig,
    ParallelConfig,
    RLConfig,
    RolloutConfig,
    RunConfig,
    SkillSFTConfig,
    StagesConfig,
    TinyModelConfig,
    TrackingConfig,
    VLLMConfig,
    WarmStartConfig,
    WriterConfig,
    field_help,
    is_builtin_backbone,
)

__all__ = [
    "DEFAULT_LR", "DEFAULT_LR_TINY", "LORA_TARGETS", "SHAPE_SUFFIX", "SMOLLM2_BACKBONE", "TINY_BACKBONE",
    "TINY_BACKBONES", "TINY_VL_BACKBONE", "AlgoConfig", "ConfigError", "EnvConfig", "EvalConfig",
    "LoRAConfig", "ModelConfig", "OutputConfig", "ParallelConfig", "RLConfig", "RolloutConfig", "RunConfig",
    "SkillSFTConfig", "StagesConfig", "TinyModelConfig", "TrackingConfig", "VLLMConfig", "WarmStartConfig",
    "WriterConfig", "apply_overrides", "canonical_json", "field_help", "field_types", "flatten", "from_dict",
    "is_builtin_backbone", "parse_override", "read_yaml", "to_dict", "unknown_key_error",
    "unknown_name_error", "yaml_load",
]
