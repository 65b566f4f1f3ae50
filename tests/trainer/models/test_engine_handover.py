"""The vLLM backend's hand-over with the trainer, on a recording fake engine (no vLLM needed):
the engine sleeps from its creation until it generates and again before anything trains or
writes a checkpoint, PyTorch's cached memory is handed back before every wake-up, building it
leaves the trainer's random states alone, and an older vLLM is refused.  The real engine's
side is in test_vllm_backend.py (marked ``vllm``)."""

from __future__ import annotations

import importlib.machinery
import random
import sys
import types

import numpy as np
import pytest
import torch

from support.paths import DATA
from support.tiny import CORPUS, SMALL
from trainer.config import VLLMConfig
from trainer.models.backbones import build_tiny_model, train_tokenizer
from trainer.run.resolve import load_config

MICRO = DATA / "train_micro.yaml"


class FakeLLM:
    """``vllm.LLM`` as the backend uses it, recording every call in ``events``: reseeds the
    global random states in its constructor as ``vllm.LLM(seed=...)`` does, answers each
    request with the last three prompt tokens, and notes a generate call while asleep."""

    def __init__(self, events: list, **kwargs):
        self.events, self.kwargs, self.asleep = events, kwargs, False
        random.seed(kwargs["seed"])
        np.random.seed(kwargs["seed"])
        torch.manual_seed(kwargs["seed"])
        events.append(("build", self))

    def sleep(self, level: int) -> None:
        self.events.append(("sleep", level))
        self.asleep = True

    def wake_up(self, tags=None) -> None:
        self.events.append(("wake_up", tuple(tags or ())))
        self.asleep = tags is not None and "kv_cache" not in tags

    def collective_rpc(self, method, args=()):
        worker = types.SimpleNamespace(model_runner=types.SimpleNamespace(
            reload_weights=lambda weights_iterator: [w for _, w in weights_iterator]))
        self.events.append(("push", None))
        return [method(worker, *args)]

    def reset_prefix_cache(self) -> None:
        pass

    def generate(self, requests, sampling_params, use_tqdm=False):
        self.events.append(("generate", "asleep" if self.asleep else "awake"))
        outputs = []
        for request in requests:
            ids = list(request["prompt_token_ids"][-3:])
            steps = [{token: types.SimpleNamespace(logprob=-1.0)} for token in ids]
            completion = types.SimpleNamespace(token_ids=ids, logprobs=steps, finish_reason="length")
            outputs.append(types.SimpleNamespace(outputs=[completion]))
        return outputs


@pytest.fixture
def fake_vllm(monkeypatch):
    """A ``vllm`` package in ``sys.modules`` whose ``LLM`` is :class:`FakeLLM`; yields the
    shared event list (``empty_cache`` calls included, CUDA made to look available so that
    :func:`~trainer.models.handover.free_cached_memory` takes its GPU path)."""
    events: list = []
    vllm = types.ModuleType("vllm")
    vllm.__spec__ = importlib.machinery.ModuleSpec("vllm", None)
    vllm.__version__ = "0.32.0"
    vllm.LLM = lambda **kwargs: FakeLLM(events, **kwargs)
    vllm.SamplingParams = lambda **kwargs: types.SimpleNamespace(**kwargs)
    vllm.sampling_params = types.ModuleType("vllm.sampling_params")
    vllm.sampling_params.StructuredOutputsParams = lambda **kwargs: types.SimpleNamespace(**kwargs)
    vllm.inputs = types.ModuleType("vllm.inputs")
    vllm.inputs.TokensPrompt = dict
    vllm.platforms = types.ModuleType("vllm.platforms")
    vllm.platforms.current_platform = types.SimpleNamespace(is_sleep_mode_available=lambda: True)
    for name in ("", ".sampling_params", ".inputs", ".platforms"):
        monkeypatch.setitem(sys.modules, "vllm" + name, vllm if not name else getattr(vllm, name[1:]))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: events.append(("empty_cache", None)))
    return events


@pytest.fixture(scope="module")
def tiny():
    tokenizer = train_tokenizer(CORPUS, 400)
    return build_tiny_model(tokenizer, SMALL, seed=0), tokenizer


def backend(tiny, **settings):
    from trainer.models.vllm_backend import VLLMBackend

    model, tokenizer = tiny
    return VLLMBackend(model, tokenizer, VLLMConfig(**settings), max_model_len=256)


def test_the_engine_sleeps_from_its_creation_and_wakes_after_the_cache_is_freed(fake_vllm, tiny):
    engine = backend(tiny)
    assert [e for e, _ in fake_vllm] == ["build", "sleep"] and fake_vllm[1][1] == 2  # level 2 on a GPU
    assert engine.llm.kwargs["enable_sleep_mode"] and engine.llm.kwargs["enforce_eager"] is True  # auto, on a CPU
    del fake_vllm[:]
    engine.generate([[5, 6, 7]], max_new_tokens=3)
    assert [e for e, _ in fake_vllm] == ["empty_cache", "wake_up", "push", "empty_cache", "wake_up", "generate"]
    assert fake_vllm[-1] == ("generate", "awake")


def test_level_1_when_asked_and_on_a_cpu_build(fake_vllm, tiny, monkeypatch):
    """Level 1 keeps the weights: one wake-up, no push of unchanged weights.  A CPU build
    ignores sleep, so level 2 acts as 1 there (no push for weights that never left)."""
    for settings in ({"sleep_level": 1}, {}):
        del fake_vllm[:]
        engine = backend(tiny, **settings)
        engine.generate([[5, 6, 7]], max_new_tokens=3)
        assert [e for e, _ in fake_vllm] == ["build", "sleep", "empty_cache", "wake_up", "generate"]
        assert fake_vllm[1] == ("sleep", 1) and fake_vllm[3] == ("wake_up", ())
        monkeypatch.setattr(sys.modules["vllm.platforms"], "current_platform",
                            types.SimpleNamespace(is_sleep_mode_available=lambda: False))


def test_building_an_engine_leaves_the_trainers_random_states_alone(fake_vllm, tiny):
    random.seed(7)
    np.random.seed(7)
    torch.manual_seed(7)
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    random.seed(7)
    np.random.seed(7)
    torch.manual_seed(7)
    backend(tiny)  # the fake reseeds all three with 0, as vllm.LLM(seed=0) does
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected


def test_an_older_vllm_is_refused_in_one_line_naming_both_versions(fake_vllm, tiny, monkeypatch):
    monkeypatch.setattr(sys.modules["vllm"], "__version__", "0.12.0")
    with pytest.raises(ImportError) as info:
        backend(tiny)
    assert "\n" not in str(info.value) and "vLLM 0.12.0" in str(info.value) and "0.16" in str(info.value)
    assert not fake_vllm  # refused before an engine is built


def test_a_seed_run_hands_memory_over_at_every_phase(fake_vllm, tmp_path, monkeypatch):
    """SEED, 2 RL steps with the warm start and Stage 1, on the fake engine: every wake-up
    follows an empty_cache, and the engine is asleep at every optimizer step (warm start,
    Stage 1, every update) and every checkpoint write, while it generates awake."""
    from trainer.run import loop
    from trainer.run.loop import train

    def asleep(phase):
        engines = [llm for kind, llm in fake_vllm if kind == "build"]
        fake_vllm.append((phase, "asleep" if all(llm.asleep for llm in engines) else "awake"))

    step, save = torch.optim.AdamW.step, loop.save_checkpoint
    monkeypatch.setattr(torch.optim.AdamW, "step", lambda self, *a, **k: asleep("step") or step(self, *a, **k))
    monkeypatch.setattr(loop, "save_checkpoint", lambda *a, **k: asleep("checkpoint") or save(*a, **k))
    cfg = load_config(MICRO, [f"output.dir={tmp_path / 'out'}", f"tracking.uri=sqlite:///{tmp_path / 'db'}",
                              "algo.method=seed", "model.backend=vllm", "model.device=cpu"])
    train(cfg, progress=False)
    kinds = [kind for kind, _ in fake_vllm]
    assert kinds.count("build") == 1  # SEED's self writer shares the policy's engine
    wakes = [i for i, kind in enumerate(kinds) if kind == "wake_up"]
    assert wakes and all(kinds[i - 1] == "empty_cache" for i in wakes)
    states = {}
    for kind, state in fake_vllm:
        states.setdefault(kind, set()).add(state)
    assert states["step"] == {"asleep"} and states["checkpoint"] == {"asleep"} and states["generate"] == {"awake"}
    first = kinds.index("generate")  # Stage 1's rollouts, after the warm start trained
    assert "step" in kinds[:first] and "step" in kinds[first:]  # Stage 1 trains after it played
    assert kinds.count("step") > 2 and kinds.count("checkpoint") == 2  # ... and the 2 RL updates


def test_a_second_sleeping_engine_in_one_process_is_refused(fake_vllm, tiny):
    first = backend(tiny)  # sleep mode on (level 2 on a GPU)
    with pytest.raises(RuntimeError, match="model.vllm.sleep_level: 0"):
        backend(tiny, sleep_level=1)
    awake = backend(tiny, sleep_level=0)  # a writer snapshot's engine: no sleep mode, allowed
    assert "enable_sleep_mode" not in awake.llm.kwargs and first.llm.kwargs["enable_sleep_mode"]
    del first
    import gc

    gc.collect()
    assert backend(tiny, sleep_level=1).llm.kwargs["enable_sleep_mode"]  # the first one is gone


def test_a_stale_writer_run_keeps_one_sleeping_engine(fake_vllm, tmp_path):
    """seed_stale on vLLM: the policy's engine sleeps, the writer snapshot's engine is built
    without sleep mode and stays awake, and the run trains through both."""
    from trainer.run.loop import train

    cfg = load_config(MICRO, [f"output.dir={tmp_path / 'out'}", f"tracking.uri=sqlite:///{tmp_path / 'db'}",
                              "algo.method=seed_stale", "model.backend=vllm", "model.device=cpu",
                              "stages.rl.steps=1"])
    train(cfg, progress=False)
    engines = [llm for kind, llm in fake_vllm if kind == "build"]
    assert len(engines) == 2
    assert [bool(llm.kwargs.get("enable_sleep_mode")) for llm in engines] == [True, False]
    assert not engines[1].asleep
