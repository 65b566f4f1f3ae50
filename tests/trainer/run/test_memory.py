"""``hindsight memory`` (trainer/run/memory.py): parameters counted on the meta device, the parts
of a run's memory phase by phase as the trainer holds them, the KV cache in tokens, a CPU run
against this machine's memory, every paper study file fitting one 80 GB GPU, and the estimates
of the score, update and Stage 1 phases against their measured CPU peaks (slow)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from support.paths import DATA, EXAMPLES, ROOT
from sweeps.cli import main
from trainer.models.architecture import HUB_CONFIGS, architecture
from trainer.models.paper_shapes import PAPER_SIZES
from trainer.run import memory
from trainer.run.memory import GIB, describe, plan_memory
from trainer.run.resolve import load_config, resolve

PAPERS = sorted((ROOT / "examples" / "papers").glob("*.yaml"))
SEED_TABLE5 = ROOT / "examples" / "papers" / "seed_table5_alfworld.yaml"
MICRO = DATA / "train_micro.yaml"
# The command line of issue 35's run that the kernel killed at 23.5 GB on a 24 GiB machine.
SMOLLM2_RUN = ["model.backbone=smollm2-135m", "stages.warm_start.enabled=false", "rollout.tasks_per_step=4"]


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


def _parts(plan, phase):
    return {part.name: part.bytes for part in plan.resident(phase)}


def test_parts_follow_the_precision_and_the_phases():
    """bf16 compute on one GPU: float32 masters (4P) in every phase, the RL AdamW moments (8P)
    from the rollout on, a bf16 reference (2P) from the RL start; the update's peak is AdamW's step: the
    gradients (4P) and foreach AdamW's float32 temporary (4P), 22P in all with the reference (traced); the
    autocast copies (2P) while scoring; the engine awake at its creation and the rollout, asleep (level 1)
    through score and update.  float32 compute has no copies."""
    cfg = resolve(load_config(SEED_TABLE5.parent / "etro_appendix_b_webshop_base.yaml"))
    plan = plan_memory(cfg, 80)
    p = plan.arch.params
    assert plan.phases == ("startup", "rollout", "score", "update")  # no warm start, no Stage 1
    startup, score, update = (_parts(plan, ph) for ph in ("startup", "score", "update"))
    assert startup == {"weights (float32 masters)": 4 * p, "CUDA context and allocator slack": 2 * GIB,
                       "vLLM engine, created awake (0.25 of the device; asleep after)": 0.25 * 80 * GIB}
    assert update["AdamW moments (float32)"] == 8 * p
    assert update["reference (bfloat16)"] == 2 * p and score["reference (bfloat16)"] == 2 * p
    assert update["gradients (float32) [AdamW's step]"] == 4 * p and not any(k.startswith("gradients") for k in score)
    assert update["foreach AdamW's float32 temporary [AdamW's step]"] == 4 * p
    assert plan.phase("update") - 2 * GIB == 22 * p
    assert score["autocast weight copies (bfloat16)"] == 2 * p and not any("autocast" in k for k in update)
    assert _parts(plan, "rollout")["vLLM engine, awake (0.25 of the device)"] == 0.25 * 80 * GIB
    assert not any(name.startswith("vLLM") for name in [*score, *update])
    assert plan.peak == max(plan.phase(ph) for ph in plan.phases) and plan.phase("stage1") == 0
    awake = plan_memory(resolve(load_config(SEED_TABLE5.parent / "etro_appendix_b_webshop_base.yaml",
                                            ["model.vllm.sleep_level=0"])), 80)
    assert all(awake.phase(ph) - plan.phase(ph) == 0.25 * 80 * GIB for ph in ("score", "update"))
    float32 = plan_memory(resolve(load_config(SEED_TABLE5.parent / "etro_appendix_b_webshop_base.yaml",
                                              ["model.dtype=float32"])), 80)
    assert not any("autocast" in part.name for part in float32.parts)


def test_a_rank_holds_its_share_of_the_sharded_state_and_scores_whole_models():
    """parallel.workers N: each rank loads the whole float32 model (4P) at start-up; then the
    masters, moments and reference are 1/N a rank; its update peaks at the backward's start (traced): the
    root group and two layers gathered in bf16, every layer's checkpointed input in bf16 (FSDP's
    compute-dtype parameters), the last layer recomputed, the head's bf16 weight gradient, no layer's
    gradient yet; it scores inside unsharded(policy, reference): both whole in bf16 (2P each, 28 GiB at
    7B where the plan used to count 2.9); its vLLM engine is whole."""
    base = SEED_TABLE5.parent / "etro_appendix_b_webshop_base.yaml"
    one = plan_memory(resolve(load_config(base, ["model.backbone=Qwen/Qwen2.5-7B-Instruct"])), 80)
    eight = plan_memory(resolve(load_config(base, ["model.backbone=Qwen/Qwen2.5-7B-Instruct",
                                                   "parallel.workers=8"])), 80)
    p, arch = one.arch.params, one.arch
    assert _parts(eight, "startup")["weights (float32 masters, whole: loaded before sharding)"] == 4 * p
    update, score = _parts(eight, "update"), _parts(eight, "score")
    assert update["weights (float32 masters, 1/8 a rank)"] == 4 * p / 8
    assert update["AdamW moments (float32, 1/8 a rank)"] == 8 * p / 8
    assert not any(k.startswith("gradients") for k in update)
    assert update["reference (bfloat16, 1/8 a rank)"] == 2 * p / 8
    head = "[the backward's start]"
    assert update[f"gathered root and two layers (bfloat16) {head}"] == 2 * (arch.root_params + 2 * arch.layer_params)
    tokens = 4 * (2048 + 2560)  # micro-batch x (max_prompt_tokens + rollout.max_new_tokens)
    assert update[f"activations (4 x 4608 tokens, checkpointed: every layer's input) {head}"] == \
        tokens * arch.layers * 2 * arch.hidden
    assert update[f"the LM head weight's gradient {head}"] == 2 * arch.vocab * arch.hidden
    layer = 2 * (5 * arch.intermediate + 2.5 * arch.kv_width + 1.5 * arch.hidden) + 16.5 * arch.hidden
    assert update[f"activations (4 x 4608 tokens, checkpointed: the last layer recomputed) {head}"] == tokens * layer
    assert tokens * layer > 1024 * arch.vocab * (2 + 12)  # than the LM head's chunk
    assert score["gathered policy, whole (bfloat16; unsharded to score)"] == 2 * p
    assert score["gathered reference, whole (bfloat16; unsharded to score)"] == 2 * p
    assert 2 * 2 * p / GIB == pytest.approx(28.4, abs=0.1)
    assert not arch.tied and arch.root_params == 2 * arch.vocab * arch.hidden  # 7B: untied head
    assert arch.root_params + arch.layers * arch.layer_params == p
    assert not any("autocast" in part.name for part in eight.parts)
    engine = [part.bytes for part in eight.parts if part.name.startswith("vLLM engine")]
    assert engine == [part.bytes for part in one.parts if part.name.startswith("vLLM engine")]
    assert eight.phase("update") < one.phase("update")


def test_stage1_trains_its_own_sharded_adamw_on_writer_examples():
    """SEED's Stage 1 on 8 ranks: masters, its own AdamW moments and gradients 1/8 each, the
    gathered root and two layers, activations of min(skill_sft.batch_size, micro_batch_size)
    writer examples of max_prompt_tokens + writer.max_new_tokens, at its peak at the backward's start
    (no layer's gradient yet); no reference, no engine (asleep)."""
    cfg = resolve(load_config(SEED_TABLE5.parent / "seed_table5_alfworld_base.yaml",
                              ["model.backbone=Qwen/Qwen2.5-7B-Instruct", "parallel.workers=8", "algo.method=seed"]))
    assert cfg.stages.skill_sft.enabled
    plan = plan_memory(cfg, 80)
    p, arch = plan.arch.params, plan.arch
    assert plan.phases == ("startup", "stage1", "rollout", "score", "update")
    stage1 = _parts(plan, "stage1")
    length = 2048 + 4096  # max_prompt_tokens + writer.max_new_tokens of the study
    tokens = 4 * length  # min(batch_size 8, micro_batch_size 4) sequences
    head = "[the backward's start]"
    assert set(stage1) == {"weights (float32 masters, 1/8 a rank)",
                           "the stage's own AdamW moments (float32, 1/8 a rank)", "CUDA context and allocator slack",
                           f"gathered root and two layers (bfloat16) {head}",
                           f"activations (4 x {length} tokens, checkpointed: every layer's input) {head}",
                           f"activations (4 x {length} tokens, checkpointed: the last layer recomputed) {head}",
                           f"the LM head weight's gradient {head}",
                           f"the last hidden states and their gradient (float32) {head}"}
    assert stage1["the stage's own AdamW moments (float32, 1/8 a rank)"] == 8 * p / 8
    assert stage1[f"activations (4 x {length} tokens, checkpointed: every layer's input) {head}"] == \
        tokens * arch.layers * 2 * arch.hidden
    assert plan.phase("stage1") > plan.phase("update")  # longer sequences than a turn


def test_the_kv_cache_is_counted_in_tokens_against_a_step():
    """7B on 8 ranks, engine 0.25 of 80 GiB: (20 GiB - 2P of bf16 weights) / (28 layers * 2 *
    512 * 2 bytes) tokens; a rank's 16 rollouts of 2048 + 512 tokens fit, with SEED's self
    writer its 16 prompts of 2048 + 4096 tokens too; at 0.2 they do not: a warning naming the
    settings."""
    base = SEED_TABLE5.parent / "seed_table5_alfworld_base.yaml"
    sets = ["model.backbone=Qwen/Qwen2.5-7B-Instruct", "parallel.workers=8", "algo.method=seed"]
    plan = plan_memory(resolve(load_config(base, sets)), 80)
    p = plan.arch.params
    assert plan.kv.capacity == pytest.approx((0.25 * 80 * GIB - 2 * p) / (28 * 2 * 512 * 2))
    assert plan.kv.asks == (("rollout", 16, 2560), ("writer", 16, 6144))
    assert not plan.kv.short and "holds them" in plan.table()
    small = plan_memory(resolve(load_config(base, [*sets, "model.vllm.gpu_memory_utilization=0.2"])), 80)
    assert small.kv.capacity < 16 * 6144 < plan.kv.capacity
    line = small.kv.line()
    assert "vLLM will queue and preempt" in line and "model.vllm.gpu_memory_utilization (now 0.2)" in line
    assert "rollout.tasks_per_step" in line and "KV cache holds" in describe(small)


def test_a_cpu_run_plans_against_this_machines_memory(tmp_path, monkeypatch):
    """On a CPU the device is /proc/meminfo's MemTotal (a rank's share with N ranks): no CUDA
    context, the process's own GiB instead; the engine-less transformers backend's KV cache."""
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:        8388608 kB\nMemFree:          1024 kB\n")  # 8 GiB
    monkeypatch.setattr(memory, "MEMINFO", meminfo)
    cfg = resolve(load_config(MICRO, ["model.device=cpu"]))
    plan = plan_memory(cfg)
    assert plan.device == "cpu" and plan.device_bytes == 8 * GIB and plan.fits
    assert not any("CUDA" in part.name for part in plan.parts)
    assert _parts(plan, "update")["the process (Python, torch, transformers)"] == GIB
    assert "of this machine's memory, 8.0 GiB: fits" in describe(plan)
    two = plan_memory(resolve(load_config(MICRO, ["model.device=cpu", "parallel.workers=2"])))
    assert two.device_bytes == 4 * GIB and "a rank's 1/2 of this machine's memory" in describe(two)


def test_the_smollm2_run_that_was_killed_does_not_fit_this_machine(tmp_path, monkeypatch):
    """The run of issue 35 (killed at 23.5 GB on a 24 GiB machine): its update's activations
    of 16 x 2096 tokens without checkpointing exceed 24 GiB, and the advice is checkpointing."""
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       25165824 kB\n")  # 24 GiB
    monkeypatch.setattr(memory, "MEMINFO", meminfo)
    plan = plan_memory(resolve(load_config(EXAMPLES / "ezpoints_small.yaml", SMOLLM2_RUN)))
    assert not plan.fits and plan.peak_phase == "update" and plan.device_bytes == 24 * GIB
    assert plan.advice().startswith("model.gradient_checkpointing=true (activations (16 x 2096 tokens")


def test_checkpointing_and_micro_batches_bound_the_activations():
    base = SEED_TABLE5.parent / "etro_appendix_b_webshop_base.yaml"

    def activations(*overrides):  # 8 ranks: the update peaks in its backward pass, not at AdamW's step
        plan = plan_memory(resolve(load_config(base, ["parallel.workers=8", *overrides])), 80)
        return sum(b for name, b in _parts(plan, "update").items() if name.startswith("activations"))

    assert activations("model.gradient_checkpointing=false") > 5 * activations()
    assert activations("algo.micro_batch_size=8") > 1.5 * activations("algo.micro_batch_size=4")


@pytest.mark.parametrize("name", ["etro_webshop_7b.yaml", "seed_alfworld_7b.yaml"])
def test_the_7b_studies_fit_eight_gpus_and_not_one(name, capsys):
    study = ROOT / "examples" / "papers" / name
    assert main(["memory", str(study), "--gpu-memory", "80"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert "per rank of 8 (a GPU each) of a 80 GiB GPU: fits" in last
    assert main(["memory", str(study), "--gpu-memory", "80", "--set", "base.parallel.workers=1"]) == 1
    last = capsys.readouterr().out.splitlines()[-1]
    assert "does not fit" in last and "masters and AdamW moments alone take 85.1 GiB" in last
    # LoRA: masters and moments for the adapters alone, so sharding is not what it lacks
    assert main(["memory", str(study), "--gpu-memory", "80", "--set", "base.parallel.workers=1",
                 "--set", "base.model.lora.rank=16"]) in (0, 1)
    assert "masters and AdamW moments alone" not in capsys.readouterr().out.splitlines()[-1]


@pytest.mark.parametrize("path", PAPERS, ids=lambda p: p.name)
def test_every_paper_study_fits_one_80gb_gpu(path, capsys):
    assert main(["memory", str(path), "--gpu-memory", "80"]) == 0
    out = capsys.readouterr().out
    assert "fits" in out.splitlines()[-1] and "does not fit" not in out
    for title in ("start-up", "rollout", "score", "update"):  # a table a phase
        assert f"\n{title} " in f"\n{out}"


def test_a_run_that_does_not_fit_exits_1_with_its_figure(capsys):
    assert main(["memory", str(SEED_TABLE5), "--gpu-memory", "40"]) == 1
    last = capsys.readouterr().out.splitlines()[-1]
    assert "does not fit" in last and "40 GiB" in last


def test_study_overrides_go_under_base(capsys):
    assert main(["memory", str(SEED_TABLE5), "--gpu-memory", "80", "--set",
                 "base.model.gradient_checkpointing=false"]) == 1
    assert main(["memory", str(SEED_TABLE5), "--set", "model.gradient_checkpointing=false"]) == 2
    assert "under base." in capsys.readouterr().err


@pytest.mark.slow
def test_score_update_and_stage1_are_within_25_percent_of_their_measured_cpu_peaks():
    """scripts/bench_memory.py: SEED's Stage 1 and two RL steps of a 25M-parameter tiny backbone
    in a fresh process; each of the three phases' peak resident-set growth within 25% of its
    estimate (the script exits 1 otherwise), and it prints the three rows."""
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_memory.py")],
                          capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines()
            if line.split()[:1] in (["stage1"], ["score"], ["update"]) and len(line.split()) == 4}
    assert set(rows) == {"stage1", "score", "update"}
    assert all(abs(float(ratio) - 1) <= 0.25 for _, _, ratio in rows.values())


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
    """With model.lora the moments (8 bytes a parameter) are the adapters' (rank x (in + out) per
    adapted layer), and the reference is the base itself, no copy."""
    from trainer.config import LoRAConfig
    from trainer.models.architecture import backbone_config
    from trainer.models.lora import lora_params

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
    assert parts["AdamW moments (float32, LoRA rank 16: the adapters' alone)"] == 8 * adapters
    # the update peaks at the backward's start, before any gradient; the frozen head has none
    assert not any(name.startswith(("gradients", "the LM head weight's")) for name in _parts(lora, "update"))
    assert _parts(full, "update")["gradients (float32) [AdamW's step]"] == 4 * full.arch.params
    assert not any(name.startswith("reference") for name in parts)
    assert lora.peak < full.peak


def test_the_initial_teacher_keeps_the_reference_without_a_kl_term():
    """``algo.teacher: initial`` scores with the RL initialisation, so a full fine-tune keeps its
    frozen copy (2P in bf16) even at kl_coef 0, where the current teacher keeps none."""
    path = SEED_TABLE5.parent / "etro_appendix_b_webshop_base.yaml"
    for teacher, kept in (("current", False), ("initial", True)):
        cfg = resolve(load_config(path, ["algo.method=seed", "algo.kl_coef=0", f"algo.teacher={teacher}"]))
        update = _parts(plan_memory(cfg, 80), "update")
        assert ("reference (bfloat16)" in update) == kept
        if kept:
            assert update["reference (bfloat16)"] == 2 * plan_memory(cfg, 80).arch.params
