"""``hindsight memory`` (trainer/run/memory.py): parameters counted on the meta device, the parts
of a run's memory as the trainer holds them, every paper study file fitting one 80 GB GPU,
and the estimate against a measured CPU peak (slow)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from support.paths import DATA, ROOT
from sweeps.cli import main
from trainer.models.paper_shapes import PAPER_SIZES
from trainer.run.memory import GIB, HUB_CONFIGS, architecture, plan_memory
from trainer.run.resolve import load_config, resolve

PAPERS = sorted((ROOT / "examples" / "papers").glob("*.yaml"))
SEED_TABLE5 = ROOT / "examples" / "papers" / "seed_table5_alfworld.yaml"
MICRO = DATA / "train_micro.yaml"


@pytest.mark.parametrize("shape", sorted(PAPER_SIZES))
def test_parameters_are_counted_without_weights(shape):
    cfg = load_config(MICRO, [f"model.backbone={shape}"])
    assert architecture(cfg.model).params == pytest.approx(PAPER_SIZES[shape], rel=0.01)


def test_the_bundled_hub_configs_are_the_released_sizes():
    """Model cards: Qwen2.5-1.5B-Instruct 1.54B, 3B 3.09B, VL-3B 3.75B parameters."""
    sizes = {"Qwen/Qwen2.5-1.5B-Instruct": 1.54e9, "Qwen/Qwen2.5-3B-Instruct": 3.09e9,
             "Qwen/Qwen2.5-VL-3B-Instruct": 3.75e9}
    for name, size in sizes.items():
        assert name in HUB_CONFIGS
        cfg = load_config(MICRO, [f"model.backbone={name}"])
        assert architecture(cfg.model).params == pytest.approx(size, rel=0.01), name


def test_parts_follow_the_precision_and_the_phases():
    """bf16 compute: float32 masters (4P) and AdamW moments (8P) always, a bf16 reference
    (2P), gradients (4P) and autocast copies (2P) only while updating; the engine sleeps
    through the update.  float32 compute has no copies."""
    cfg = resolve(load_config(SEED_TABLE5.parent / "etro_appendix_b_webshop_base.yaml"))
    plan = plan_memory(cfg, 80)
    p = plan.arch.params
    parts = {part.name: part for part in plan.parts}
    assert parts["weights (float32 masters)"].bytes == 4 * p
    assert parts["optimizer (AdamW moments, float32)"].bytes == 8 * p
    assert parts["reference (bfloat16)"].bytes == 2 * p and parts["reference (bfloat16)"].when == "always"
    assert parts["gradients (float32)"].when == "update"
    assert parts["autocast weight copies (bfloat16)"].bytes == 2 * p
    engine = next(part for part in plan.parts if part.name.startswith("vLLM engine"))
    assert engine.when == "rollout" and engine.bytes == pytest.approx(0.25 * 80 * GIB)
    assert plan.peak == max(plan.phase("rollout"), plan.phase("score"), plan.phase("update"))
    float32 = plan_memory(resolve(load_config(SEED_TABLE5.parent / "etro_appendix_b_webshop_base.yaml",
                                              ["model.dtype=float32"])), 80)
    assert not any("autocast" in part.name for part in float32.parts)


def test_a_rank_holds_its_share_of_the_sharded_state():
    """parallel.workers N: the masters, moments, gradients and reference are 1/N a rank; the
    rank gathers the root group and two layers in bf16 instead of whole-model autocast
    copies; its vLLM engine is a whole one."""
    base = SEED_TABLE5.parent / "etro_appendix_b_webshop_base.yaml"
    one = plan_memory(resolve(load_config(base, ["model.backbone=Qwen/Qwen2.5-7B-Instruct"])), 80)
    eight = plan_memory(resolve(load_config(base, ["model.backbone=Qwen/Qwen2.5-7B-Instruct",
                                                   "parallel.workers=8"])), 80)
    p, arch = one.arch.params, one.arch
    parts = {part.name: part.bytes for part in eight.parts}
    assert parts["weights (float32 masters, 1/8 a rank)"] == 4 * p / 8
    assert parts["optimizer (AdamW moments, float32, 1/8 a rank)"] == 8 * p / 8
    assert parts["gradients (float32, 1/8 a rank)"] == 4 * p / 8
    assert parts["reference (bfloat16, 1/8 a rank)"] == 2 * p / 8
    assert parts["gathered root and two layers (bfloat16)"] == 2 * (arch.root_params + 2 * arch.layer_params)
    assert not arch.tied and arch.root_params == 2 * arch.vocab * arch.hidden  # 7B: untied head
    assert arch.root_params + arch.layers * arch.layer_params == p
    assert not any("autocast" in name for name in parts)
    engine = [part.bytes for part in eight.parts if part.name.startswith("vLLM engine")]
    assert engine == [part.bytes for part in one.parts if part.name.startswith("vLLM engine")]
    assert eight.peak < one.peak


@pytest.mark.parametrize("name", ["etro_webshop_7b.yaml", "seed_alfworld_7b.yaml"])
def test_the_7b_studies_fit_eight_gpus_and_not_one(name, capsys):
    study = ROOT / "examples" / "papers" / name
    assert main(["memory", str(study)]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert "per rank of 8 (a GPU each) of a 80 GiB device: fits" in last
    assert main(["memory", str(study), "--set", "base.parallel.workers=1"]) == 1
    last = capsys.readouterr().out.splitlines()[-1]
    assert "does not fit" in last and "masters and AdamW moments alone take 85.1 GiB" in last


def test_checkpointing_and_micro_batches_bound_the_activations():
    base = SEED_TABLE5.parent / "etro_appendix_b_webshop_base.yaml"

    def activations(*overrides):
        plan = plan_memory(resolve(load_config(base, list(overrides))), 80)
        return next(p.bytes for p in plan.parts if p.name.startswith("activations"))

    assert activations("model.gradient_checkpointing=false") > 5 * activations()
    assert activations("algo.micro_batch_size=8") > 1.5 * activations("algo.micro_batch_size=4")


@pytest.mark.parametrize("path", PAPERS, ids=lambda p: p.name)
def test_every_paper_study_fits_one_80gb_gpu(path, capsys):
    assert main(["memory", str(path)]) == 0
    out = capsys.readouterr().out
    assert "fits" in out.splitlines()[-1] and "does not fit" not in out


def test_a_run_that_does_not_fit_exits_1_with_its_figure(capsys):
    assert main(["memory", str(SEED_TABLE5), "--gpu-memory", "40"]) == 1
    last = capsys.readouterr().out.splitlines()[-1]
    assert "does not fit" in last and "40 GiB" in last


def test_study_overrides_go_under_base(capsys):
    assert main(["memory", str(SEED_TABLE5), "--set", "base.model.gradient_checkpointing=false"]) == 1
    assert main(["memory", str(SEED_TABLE5), "--set", "model.gradient_checkpointing=false"]) == 2
    assert "under base." in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("extra", [[], ["--set", "model.gradient_checkpointing=true"]])
def test_the_estimate_is_within_25_percent_of_a_measured_cpu_peak(extra):
    """scripts/bench_memory.py: one GRPO step of a 25M-parameter tiny backbone in a fresh
    process; its peak resident-set growth within 25% of the estimate."""
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_memory.py"), *extra],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr


def test_validate_warns_with_the_same_figure(capsys, tmp_path):
    """A GPU study that does not fit one 80 GB GPU validates with a warning line naming the
    peak; one that fits validates quietly."""
    assert main(["validate", str(SEED_TABLE5), "--skip-extras"]) == 0
    assert "warning" not in capsys.readouterr().err
    big = tmp_path / "big.yaml"
    base = SEED_TABLE5.parent / "seed_table5_alfworld_base.yaml"
    big.write_text(SEED_TABLE5.read_text().replace("base: seed_table5_alfworld_base.yaml",
                                                   f"base: {base}\nset: {{algo.micro_batch_size: 64}}"))
    assert main(["validate", str(big), "--skip-extras"]) == 0
    err = capsys.readouterr().err
    assert "warning: seed (Qwen/Qwen2.5-3B-Instruct)" in err and "does not fit" in err


def test_lora_plans_optimizer_states_and_gradients_for_the_adapters_only():
    """With model.lora the moments (8 bytes a parameter) and gradients (4) are the adapters'
    (rank x (in + out) per adapted layer), and the reference is the base itself, no copy."""
    from trainer.config import LoRAConfig
    from trainer.models.lora import lora_params
    from trainer.run.memory import backbone_config

    path = SEED_TABLE5.parent / "etro_appendix_b_webshop_base.yaml"
    full = plan_memory(resolve(load_config(path)), 80)
    lora = plan_memory(resolve(load_config(path, ["model.lora.rank=16"])), 80)
    parts = {part.name: part.bytes for part in lora.parts}
    config = backbone_config(resolve(load_config(path)).model)
    adapters = lora_params(config, LoRAConfig(rank=16))
    kv = config.hidden_size // config.num_attention_heads * config.num_key_value_heads
    by_hand = config.num_hidden_layers * 16 * (4 * config.hidden_size + 2 * (config.hidden_size + kv)
                                               + 3 * (config.hidden_size + config.intermediate_size))
    assert adapters == by_hand and 0 < adapters < full.arch.params / 50
    assert parts["optimizer (AdamW moments, float32)"] == 8 * adapters
    assert parts["gradients (float32)"] == 4 * adapters
    assert not any(name.startswith("reference") for name in parts)
    assert lora.peak < full.peak
