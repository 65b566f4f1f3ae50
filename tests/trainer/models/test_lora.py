"""LoRA adapters (trainer/models/lora.py): the adapted model starts equal to its base, trains
only its adapters, scores its base with them disabled, hands an engine merged weights under
the base's names, and saves and loads as an adapter naming its base."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from support.tiny import CORPUS, SMALL
from trainer.config import ConfigError, LoRAConfig
from trainer.episodes.samples import TokenSequence
from trainer.episodes.scoring import sequence_logprobs
from trainer.models.backbones import build_tiny_model, load_pretrained
from trainer.models.lora import (
    SAVED_BASE,
    adapter_layers,
    adapters_disabled,
    base_name,
    engine_tensors,
    has_adapters,
    lora_params,
    merge_into_base,
    merged_tensors,
    save_adapter,
    save_merged,
    set_base_name,
    with_lora,
)
from trainer.models.tokenizers import train_tokenizer
from trainer.run.checkpoint import save_model

LORA = LoRAConfig(rank=4, alpha=8.0)


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(CORPUS, SMALL.vocab_size)


def base_model(tokenizer):
    return build_tiny_model(tokenizer, SMALL, seed=0)


def batch(tokenizer):
    ids = tokenizer.encode(CORPUS[0] + CORPUS[1])
    return [TokenSequence(tuple(ids), (0,) * 4 + (1,) * (len(ids) - 4), (-1,) * 4 + (0,) * (len(ids) - 4))]


def logp(model, tokenizer, grad=False):
    return sequence_logprobs(model, batch(tokenizer), grad=grad, with_entropy=False)[0]


def trained(tokenizer, lr=0.05):
    """A LoRA model after one AdamW step on the scored tokens, and the base before it."""
    model = with_lora(base_model(tokenizer), LORA, seed=1)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    (-logp(model, tokenizer, grad=True).sum()).backward()
    optimizer.step()
    return model, before


def test_at_initialisation_the_adapted_model_scores_exactly_as_its_base(tokenizer):
    base = base_model(tokenizer)
    expected = logp(base, tokenizer)
    model = with_lora(base_model(tokenizer), LORA, seed=1)
    assert has_adapters(model) and len(adapter_layers(model)) == 7 * SMALL.num_layers
    assert torch.equal(logp(model, tokenizer), expected)  # B = 0: not merely close
    trains = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trains and all(".lora_A." in n or ".lora_B." in n for n in trains)
    assert {p.dtype for p in model.parameters() if p.requires_grad} == {torch.float32}


def test_one_step_moves_only_the_adapters_and_disabled_adapters_score_the_base(tokenizer):
    expected = logp(base_model(tokenizer), tokenizer)
    model, before = trained(tokenizer)
    after = model.state_dict()
    moved = {k for k in after if not torch.equal(after[k], before[k])}
    assert moved and all(".lora_A." in k or ".lora_B." in k for k in moved)
    assert any(".lora_B." in k for k in moved)
    assert not torch.equal(logp(model, tokenizer), expected)  # the policy moved
    with adapters_disabled(model) as reference:
        assert torch.equal(logp(reference, tokenizer), expected)  # the KL reference is the base
    assert torch.equal(logp(model, tokenizer), logp(model, tokenizer))
    assert all(p.requires_grad for n, p in model.named_parameters() if ".lora_" in n)  # switched back on


def test_engine_gets_merged_weights_under_the_base_names(tokenizer):
    model, _ = trained(tokenizer)
    names = list(base_model(tokenizer).state_dict())
    pushed = list(engine_tensors(model))  # the generator VLLMBackend._push hands the engine
    assert sorted(n for n, _ in pushed) == sorted(names)  # each once (a weight waits for its adapter)
    merged = dict(pushed)
    layer = model.model.layers[0].mlp.down_proj
    a, b = layer.lora_A["default"].weight, layer.lora_B["default"].weight
    expected = layer.base_layer.weight + (LORA.alpha / LORA.rank) * b @ a  # W + s B A
    torch.testing.assert_close(merged["model.layers.0.mlp.down_proj.weight"], expected)
    # a plain model with those weights computes what the adapted one does
    plain = base_model(tokenizer)
    plain.load_state_dict(merged)
    torch.testing.assert_close(logp(plain, tokenizer), logp(model, tokenizer))
    assert not any(layer.merged for layer in adapter_layers(model).values())  # never merged in place
    assert dict(merged_tensors(model, model.state_dict().items(), merge=False)).keys() == set(names)


def test_merged_tensors_wait_for_a_weights_adapter_in_any_order(tokenizer):
    model, _ = trained(tokenizer)
    in_order = dict(merged_tensors(model, model.state_dict().items()))
    backwards = dict(merged_tensors(model, reversed(list(model.state_dict().items()))))
    assert in_order.keys() == backwards.keys()
    assert all(torch.equal(in_order[k], backwards[k]) for k in in_order)
    partial = [(k, v) for k, v in model.state_dict().items() if "lora_B" not in k]
    with pytest.raises(ValueError, match="without their base or adapter"):
        list(merged_tensors(model, partial))


def test_merge_into_base_makes_the_disabled_model_the_current_one(tokenizer):
    model, _ = trained(tokenizer)
    set_base_name(model, "some/hub-name")
    current = logp(model, tokenizer)
    assert merge_into_base(model, seed=2)
    assert base_name(model) is None  # the base no longer is what that name loads
    assert all(not layer.lora_B["default"].weight.any() for layer in adapter_layers(model).values())
    torch.testing.assert_close(logp(model, tokenizer), current)
    with adapters_disabled(model):
        torch.testing.assert_close(logp(model, tokenizer), current)
    assert not merge_into_base(model)  # zero adapters: nothing to fold


@pytest.mark.parametrize("named", [False, True])
def test_an_adapter_saves_with_its_base_and_loads_exactly(tmp_path, tokenizer, named):
    model, _ = trained(tokenizer)
    if named:  # a base saved elsewhere, named by path (relative to the adapter)
        base = base_model(tokenizer)
        base.save_pretrained(tmp_path / "base_elsewhere")
        tokenizer.save_pretrained(tmp_path / "base_elsewhere")
        set_base_name(model, str(tmp_path / "base_elsewhere"))
    save_model(model, tokenizer, tmp_path / "adapter")
    files = {p.name for p in (tmp_path / "adapter").iterdir()}
    assert {"adapter_model.safetensors", "adapter_config.json"} <= files
    assert "model.safetensors" not in files and (SAVED_BASE in files) != named
    loaded, _ = load_pretrained(str(tmp_path / "adapter"), torch.float32, "cpu")
    assert loaded.state_dict().keys() == model.state_dict().keys()
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in loaded.state_dict().items())
    generating, _ = load_pretrained(str(tmp_path / "adapter"), torch.float32, "cpu", master=False)
    assert not has_adapters(generating)  # folded in: a plain model for a writer or an engine
    torch.testing.assert_close(logp(generating, tokenizer), logp(model, tokenizer))


def test_with_lora_keeps_matching_adapters_and_folds_others(tokenizer):
    model, _ = trained(tokenizer)
    adapted = logp(model, tokenizer)
    assert with_lora(model, LORA) is model and has_adapters(model)
    torch.testing.assert_close(logp(model, tokenizer), adapted)
    with_lora(model, dataclasses.replace(LORA, rank=2))  # another rank: folded, fresh rank-2 adapters
    assert {layer.r["default"] for layer in adapter_layers(model).values()} == {2}
    torch.testing.assert_close(logp(model, tokenizer), adapted)
    with_lora(model, LoRAConfig())  # rank 0: full fine-tuning of the folded weights
    assert not has_adapters(model) and "model.layers.0.mlp.down_proj.weight" in model.state_dict()
    torch.testing.assert_close(logp(model, tokenizer), adapted)


def test_unknown_target_modules_are_refused_with_the_valid_names(tokenizer):
    with pytest.raises(ConfigError, match=r"model.lora.target_modules: \['qkv'\].*q_proj"):
        with_lora(base_model(tokenizer), dataclasses.replace(LORA, target_modules=("qkv",)))


def test_lora_params_counts_the_adapters_injected(tokenizer):
    model = with_lora(base_model(tokenizer), LORA)
    injected = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert lora_params(model.config, LORA) == injected
    assert lora_params(model.config, LoRAConfig()) == 0
    # by hand: hidden 32, 4 heads (head 8), 2 kv heads (kv 16), MLP 64, 2 layers, rank 4
    per_layer = 4 * ((32 + 32) + (32 + 16) * 2 + (32 + 32) + (32 + 64) * 2 + (64 + 32))
    assert lora_params(model.config, LORA) == 2 * per_layer


def test_an_adapter_checkpoint_needs_its_base_saved_once(tmp_path, tokenizer):
    """save_adapter writes a base without a name into the folder; with a name, not."""
    model = with_lora(base_model(tokenizer), LORA)
    save_adapter(model, tmp_path / "a")
    assert (tmp_path / "a" / SAVED_BASE / "model.safetensors").is_file()
    set_base_name(model, "some/hub-name")
    save_adapter(model, tmp_path / "b")
    assert not (tmp_path / "b" / SAVED_BASE).exists()


class RecordingEngine:
    """Stands in for ``vllm.LLM``: records what a weight push hands the worker."""

    def __init__(self):
        self.pushed = None

    def collective_rpc(self, method, args=()):
        (weights,) = args
        assert not isinstance(weights, (list, dict))  # a generator: one tensor at a time
        self.pushed = list(weights)

    def reset_prefix_cache(self):
        pass


def test_the_vllm_push_sends_merged_weights_under_the_base_names(tokenizer):
    from trainer.models.vllm_backend import VLLMBackend

    model, _ = trained(tokenizer)
    backend = object.__new__(VLLMBackend)  # the push alone: no engine is started
    backend.model, backend.dtype, backend.llm, backend.pushes = model, torch.bfloat16, RecordingEngine(), 0
    backend._push()
    pushed = dict(backend.llm.pushed)
    assert len(pushed) == len(backend.llm.pushed) and pushed.keys() == base_model(tokenizer).state_dict().keys()
    assert {t.dtype for t in pushed.values()} == {torch.bfloat16}  # the engine's dtype
    layer = model.model.layers[0].self_attn.q_proj
    merged = layer.base_layer.weight + 2.0 * layer.lora_B["default"].weight @ layer.lora_A["default"].weight
    assert torch.equal(pushed["model.layers.0.self_attn.q_proj.weight"], merged.to(torch.bfloat16))


def test_an_engine_starts_from_a_plain_folder_of_the_merged_weights(tmp_path, tokenizer):
    """What VLLMBackend saves for a model built in memory: a plain HF folder."""
    model, _ = trained(tokenizer)
    save_merged(model, tmp_path / "engine")
    tokenizer.save_pretrained(tmp_path / "engine")
    plain, _ = load_pretrained(str(tmp_path / "engine"), torch.float32, "cpu")
    assert not has_adapters(plain)
    torch.testing.assert_close(logp(plain, tokenizer), logp(model, tokenizer))


def test_a_vision_language_backbone_takes_adapters_on_its_text_layers():
    """tiny-vl (Qwen2-VL): the same switch; its decoder is still reached as before."""
    from trainer.models.vision import VISION_TOKENS, build_tiny_vl_model, decoder_states

    vl_tokenizer = train_tokenizer(CORPUS, SMALL.vocab_size, VISION_TOKENS)
    model = build_tiny_vl_model(vl_tokenizer, SMALL, 0)
    ids = torch.tensor([vl_tokenizer.encode(CORPUS[0])])
    expected = decoder_states(model, ids, torch.ones_like(ids))
    with_lora(model, LORA)
    assert len(adapter_layers(model)) == 7 * SMALL.num_layers
    assert torch.equal(decoder_states(model, ids, torch.ones_like(ids)), expected)
    assert not any(".lora_" in n or ".base_layer." in n for n, _ in engine_tensors(model))
