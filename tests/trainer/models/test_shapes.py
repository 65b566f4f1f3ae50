"""Paper-shaped backbones (trainer/models/paper_shapes.py) and the pieces of the GPU path they exercise."""

from __future__ import annotations

import pytest
import torch

from trainer.config import ConfigError, ModelConfig, RunConfig, TinyModelConfig, apply_overrides
from trainer.models.backbones import load_model, train_tokenizer
from trainer.models.chat import encode
from trainer.models.paper_shapes import (
    PAPER_SIZES,
    build_shaped_model,
    parameter_count,
    shape_config,
    shape_names,
    uses_local_tokenizer,
)
from trainer.models.transformers_backend import TransformersBackend
from trainer.run.resolve import resolve
from trainer.stages.rl import PhaseTimer

CORPUS = [
    "You are in the middle of a room. You see a fridge 1, a countertop 2 and a sinkbasin 1.",
    "<think>I need the apple.</think><action>go to countertop 2</action>",
] * 30
QWEN25_VOCAB = 151936


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(CORPUS, 400)


def test_shape_names_are_the_paper_sizes_and_the_cpu_stand_in():
    assert shape_names() == ["qwen2.5-0.5b-shape", "qwen2.5-1.5b-shape", "qwen2.5-3b-shape",
                             "qwen2.5-7b-shape", "qwen2.5-tiny-shape"]
    assert all(uses_local_tokenizer(n) for n in shape_names())
    assert uses_local_tokenizer("tiny") and not uses_local_tokenizer("Qwen/Qwen2.5-1.5B-Instruct")


@pytest.mark.parametrize("name", sorted(PAPER_SIZES))
def test_parameter_counts_match_the_released_models(name):
    # Model cards: 0.49B, 1.54B, 3.09B, 7.61B (7B unties its embeddings, the others tie them).
    assert abs(parameter_count(name) - PAPER_SIZES[name]) < 0.01e9


def test_exact_parameter_count_of_the_1_5b_shape():
    # Qwen2.5-1.5B: 28 layers of (q 1536x1536+b, k,v 1536x256+b, o 1536x1536, mlp 3x1536x8960,
    # 2 norms), tied 151936x1536 embedding, final norm.
    h, kv, ff, layers = 1536, 256, 8960, 28
    layer = (h * h + h) + 2 * (h * kv + kv) + h * h + 3 * h * ff + 2 * h
    assert parameter_count("qwen2.5-1.5b-shape") == layers * layer + QWEN25_VOCAB * h + h == 1_543_714_304


def test_config_keeps_qwen_vocabulary_and_takes_the_tokenizer_special_ids(tokenizer):
    config = shape_config("qwen2.5-1.5b-shape", tokenizer)
    assert config.vocab_size == QWEN25_VOCAB and len(tokenizer) <= 400
    assert config.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert config.pad_token_id == tokenizer.pad_token_id and config.bos_token_id is None
    assert shape_config("qwen2.5-7b-shape").tie_word_embeddings is False


def test_tokenizer_larger_than_the_shape_vocabulary_is_rejected(tokenizer):
    class Huge:
        def __len__(self):
            return QWEN25_VOCAB + 1

    with pytest.raises(ValueError, match="more than the shape's vocabulary of 151936"):
        shape_config("qwen2.5-0.5b-shape", Huge())


def test_unknown_shape_is_a_one_line_config_error():
    cfg = apply_overrides(RunConfig(), {"model.backbone": "qwen2.5-2b-shape"})
    with pytest.raises(ConfigError) as err:
        resolve(cfg)
    message = str(err.value)
    assert "unknown shape 'qwen2.5-2b-shape'" in message and "qwen2.5-1.5b-shape" in message
    assert "\n" not in message
    shaped = resolve(apply_overrides(RunConfig(), {"model.backbone": "qwen2.5-1.5b-shape"}))
    assert shaped.algo.lr == 1e-6 and shaped.stages.warm_start.enabled is False  # real-backbone defaults


def test_build_is_seeded_in_the_asked_dtype_and_leaves_global_rng_alone(tokenizer):
    state = torch.random.get_rng_state()
    a = build_shaped_model("qwen2.5-tiny-shape", tokenizer, seed=3)
    b = build_shaped_model("qwen2.5-tiny-shape", tokenizer, seed=3, dtype=torch.bfloat16)
    c = build_shaped_model("qwen2.5-tiny-shape", tokenizer, seed=4)
    assert torch.equal(torch.random.get_rng_state(), state)
    wa, wb, wc = (m.model.layers[0].mlp.down_proj.weight for m in (a, b, c))
    assert wb.dtype == torch.bfloat16 and all(p.dtype == torch.bfloat16 for p in b.parameters())
    assert torch.equal(wa.bfloat16(), wb) and not torch.equal(wa, wc)
    assert 0.015 < float(wa.std()) < 0.025  # transformers' normal(0, initializer_range=0.02)


def test_load_model_dispatches_a_shape_with_the_local_tokenizer():
    cfg = ModelConfig(backbone="qwen2.5-tiny-shape", tiny=TinyModelConfig(vocab_size=400),
                      device="cpu", gradient_checkpointing=True)
    model, tok = load_model(cfg, env_texts=CORPUS, seed=0)
    assert model.config.vocab_size == QWEN25_VOCAB and len(tok) <= 400 and model.training
    assert model.model.layers[0].gradient_checkpointing
    ids = torch.tensor([encode(tok, CORPUS[1])])
    assert model(input_ids=ids).logits.shape == (1, ids.shape[1], QWEN25_VOCAB)
    with pytest.raises(ValueError, match="needs env_texts"):
        load_model(cfg, env_texts=None)


def test_shape_samples_ids_beyond_the_tokenizer_which_decode_to_nothing(tokenizer):
    model = build_shaped_model("qwen2.5-tiny-shape", tokenizer, seed=0)
    prompt = encode(tokenizer, CORPUS[0])
    out = TransformersBackend(model, tokenizer).generate([prompt], max_new_tokens=6, seeds=[0])[0]
    beyond = [i for i in out.token_ids if i >= len(tokenizer)]
    assert beyond and tokenizer.decode(beyond) == ""


def test_generation_keeping_only_last_logits_equals_full_logits(tokenizer):
    model = build_shaped_model("qwen2.5-tiny-shape", tokenizer, seed=1)
    prompts = [encode(tokenizer, CORPUS[0]), encode(tokenizer, CORPUS[1])]
    kept = TransformersBackend(model, tokenizer)
    full = TransformersBackend(model, tokenizer)
    full._keep_kw = {}
    assert kept._keep_kw == {"logits_to_keep": 1}
    for temperature in (0.0, 1.0):
        a = kept.generate(prompts, max_new_tokens=5, temperature=temperature, seeds=[7, 8])
        b = full.generate(prompts, max_new_tokens=5, temperature=temperature, seeds=[7, 8])
        assert [g.token_ids for g in a] == [g.token_ids for g in b]


def test_phase_timer_synchronises_at_both_ends_of_each_phase():
    calls = []
    timer = PhaseTimer(sync=lambda: calls.append(len(calls)))
    with timer("rollout"):
        assert len(calls) == 1
    with timer("rollout"):
        pass
    assert len(calls) == 4 and set(timer.seconds) == {"rollout"}
    assert PhaseTimer.for_device(torch.device("cpu")).sync is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_paper_shape_is_built_on_the_gpu_in_bfloat16(tokenizer):
    torch.cuda.reset_peak_memory_stats()
    model = build_shaped_model("qwen2.5-0.5b-shape", tokenizer, seed=0, dtype=torch.bfloat16, device="cuda")
    params = list(model.parameters())
    assert all(p.is_cuda and p.dtype == torch.bfloat16 for p in params)
    # weights only, never a float32 copy: 2 bytes per parameter plus allocator slack
    assert torch.cuda.max_memory_allocated() < 1.2 * 2 * sum(p.numel() for p in params)
