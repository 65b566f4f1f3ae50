"""Policy generation backends for rollouts.

A backend turns token-id prompts (built by :mod:`trainer.samples`) into sampled responses
and returns the *exact sampled token ids*: these are the tokens that are scored later, so
response text is never re-tokenised.  ``TransformersBackend`` runs the live training model
(CPU tests, small GPU runs); ``VLLMBackend`` holds its own copy of the weights in a vLLM
engine (GPU) and needs :meth:`GenerationBackend.sync_weights` after each update.
"""

from __future__ import annotations

import abc
import contextlib
import inspect
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from trainer.config import ModelConfig, is_builtin_backbone
from trainer.vision import is_vision_model, vision_inputs, vision_token_ids

# A response is complete when it closes its action, query or answer (or ends its turn).
STOP_STRINGS: tuple[str, ...] = ("</action>", "</search>", "</answer>")
END_OF_TURN = "<|im_end|>"


@dataclass(frozen=True)
class Generation:
    """One sampled response.

    ``token_ids`` are exactly the sampled tokens, up to and including the token that
    completed a stop string or the stop token itself; ``text`` is their decoding
    (special tokens kept); ``finished`` is False when ``max_new_tokens`` ran out first.
    """

    token_ids: list[int]
    text: str
    finished: bool


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
        seed: int | None = None,
        images: Sequence[Sequence] | None = None,
    ) -> list[Generation]:
        """Sample one response per prompt.  ``temperature == 0`` is greedy decoding.
        ``stop_token_ids`` None = the tokenizer's ``<|im_end|>`` and EOS ids.  ``images[i]``:
        the images of prompt i's placeholders, in order (a vision-language model)."""

    def sync_weights(self, model: PreTrainedModel) -> None:  # noqa: B027 - optional hook
        """Make the backend sample from ``model``'s current weights (no-op when the backend
        samples from the live model itself)."""

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


def _check_sampling(max_new_tokens: int, temperature: float, top_p: float) -> None:
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")


def sample_next(
    logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator | None
) -> torch.Tensor:
    """Next tokens from ``logits`` [B, V]: argmax at temperature 0, else nucleus sampling
    from softmax(logits / temperature) restricted to the smallest set with mass >= top_p.
    Returns [B] token ids."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)  # [B, V]
    if top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        outside = sorted_p.cumsum(dim=-1) - sorted_p >= top_p  # mass before token >= p
        sorted_p = sorted_p.masked_fill(outside, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


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
        seed=None,
        images=None,
    ) -> list[Generation]:
        _check_sampling(max_new_tokens, temperature, top_p)
        images = [()] * len(prompts) if images is None else list(images)
        if len(images) != len(prompts):
            raise ValueError(f"{len(images)} image lists for {len(prompts)} prompts")
        stops = set(
            default_stop_token_ids(self.tokenizer) if stop_token_ids is None else stop_token_ids
        )
        generator = None
        if seed is not None:
            generator = torch.Generator(device=self.model.device).manual_seed(seed)
        # A kept cache covers one chunk: a call split into chunks is prefilled afresh.
        keep = self._reusing and len(prompts) <= self.max_batch and not any(images)
        if not keep:
            self._kept = None
        out: list[Generation] = []
        for start in range(0, len(prompts), self.max_batch):
            chunk = prompts[start : start + self.max_batch]
            pictures = [i for row in images[start : start + self.max_batch] for i in row]
            out += self._generate_chunk(
                chunk, max_new_tokens, temperature, top_p, tuple(stop_strings), stops, generator, keep,
                pictures,
            )
        return out

    def _generate_chunk(
        self, prompts, max_new_tokens, temperature, top_p, stop_strings, stops, generator, keep,
        images=(),
    ):
        was_training = self.model.training
        self.model.eval()
        try:
            rows = self._decode_loop(
                prompts, max_new_tokens, temperature, top_p, stop_strings, stops, generator, keep,
                images,
            )
        finally:
            self.model.train(was_training)
        return [Generation(ids, self.tokenizer.decode(ids), done) for ids, done in rows]

    def _decode_loop(
        self, prompts, max_new_tokens, temperature, top_p, stop_strings, stops, generator, keep,
        images=(),
    ):
        """Token-by-token decoding; returns [(token_ids, finished)] per prompt.

        ``mask`` marks, per row, the cache positions that hold the row's own sequence (its
        prompt and its sampled tokens); positions fed after a row stopped are masked out, so
        that the cache can be kept for the next turn (``keep``, :meth:`reuse_prefixes`).
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
            nxt = sample_next(logits, temperature, top_p, generator)  # [B]
            fed = [not d for d in done]
            for row, tok in enumerate(nxt.tolist()):
                if not done[row]:
                    tokens[row].append(tok)
                    done[row] = tok in stops or self._hit_stop_string(tokens[row], stop_strings)
            if all(done):
                break
        if keep:
            self._kept = _KeptCache(cache, mask, seqs)
        return list(zip(tokens, done))

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
    """Sampling with a colocated vLLM engine (GPU only; vLLM is imported lazily here).

    Uses ``LLM.generate`` with ``TokensPrompt`` token-id prompts and ``SamplingParams``
    (``stop`` strings with ``include_stop_str_in_output=True``, ``stop_token_ids``,
    ``detokenize`` on, a per-call ``seed``); the returned ``CompletionOutput.token_ids``
    are the sampled ids.  The engine holds its own weights; :meth:`sync_weights` streams
    the training model's state dict into it through ``LLM.collective_rpc``.  The engine
    runs in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so that the weight update
    reaches the worker without serialisation.
    """

    def __init__(
        self,
        model_name_or_path: str,
        tokenizer: PreTrainedTokenizerBase,
        *,
        dtype: str = "bfloat16",
        gpu_memory_utilization: float = 0.4,
        seed: int = 0,
        max_model_len: int | None = None,
        vision=None,
        images_per_prompt: int = 1,
    ):
        """``vision`` (a :class:`~trainer.vision.VisionCodec`): the engine takes up to
        ``images_per_prompt`` images a prompt, resizes them within the codec's token budget
        (so its image tokens are the placeholders the prompts carry) and never samples a
        vision token."""
        try:
            import vllm
            from vllm.inputs import TokensPrompt
        except ImportError as err:
            raise ImportError(
                "model.backend='vllm' needs vLLM (GPU only): pip install 'hindsight-lab[gpu]'"
            ) from err
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        self._vllm, self._tokens_prompt = vllm, TokensPrompt
        self.tokenizer = tokenizer
        self._bias = None
        extra = {}
        if vision is not None:
            self._bias = dict.fromkeys(sorted(vision_token_ids(tokenizer)), -100.0)
            extra = {"limit_mm_per_prompt": {"image": images_per_prompt},
                     "mm_processor_kwargs": {"min_pixels": vision.min_pixels,
                                             "max_pixels": vision.max_pixels}}
        self.llm = vllm.LLM(
            model=model_name_or_path,
            dtype=dtype,
            seed=seed,
            enable_prefix_caching=True,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
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
        seed=None,
        images=None,
    ) -> list[Generation]:
        _check_sampling(max_new_tokens, temperature, top_p)
        images = [()] * len(prompts) if images is None else list(images)
        stops = (
            default_stop_token_ids(self.tokenizer)
            if stop_token_ids is None
            else list(stop_token_ids)
        )
        params = self._vllm.SamplingParams(
            max_tokens=max_new_tokens,
            temperature=temperature,
            top_p=top_p,
            seed=seed,
            stop=list(stop_strings),
            include_stop_str_in_output=True,
            stop_token_ids=stops,
            skip_special_tokens=False,
            **({"logit_bias": self._bias} if self._bias else {}),
        )
        # Prompts carry their image placeholders already expanded (trainer.vision), as the
        # training model scores them; vLLM takes the images as multi-modal data beside them.
        requests = [self._tokens_prompt(prompt_token_ids=list(p), multi_modal_data={"image": list(i)})
                    if i else self._tokens_prompt(prompt_token_ids=list(p))
                    for p, i in zip(prompts, images)]
        outputs = self.llm.generate(requests, sampling_params=params, use_tqdm=False)
        result = []
        for out in outputs:
            completion = out.outputs[0]
            ids = list(completion.token_ids)
            result.append(
                Generation(ids, self.tokenizer.decode(ids), completion.finish_reason == "stop")
            )
        return result

    def sync_weights(self, model: PreTrainedModel) -> None:
        weights = [(name, tensor.detach()) for name, tensor in model.state_dict().items()]
        self.llm.collective_rpc(_load_weights_into_worker, args=(weights,))
        self.llm.reset_prefix_cache()


def _load_weights_into_worker(worker, weights) -> None:
    """Runs inside the vLLM worker: load ``(name, tensor)`` pairs into its model."""
    worker.model_runner.model.load_weights(weights=weights)


def make_backend(
    model_cfg: ModelConfig, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, vision=None,
    images_per_prompt: int = 1,
) -> GenerationBackend:
    """The rollout backend named by ``model_cfg.backend``; ``vision``: the codec of prompts
    with images (:mod:`trainer.vision`), at most ``images_per_prompt`` of them a prompt.

    The vLLM engine starts from ``model_cfg.backbone`` (a local path or hub name) and is
    synced to ``model`` immediately, so it samples from the current weights."""
    if model_cfg.backend == "transformers":
        return TransformersBackend(model, tokenizer, vision=vision)
    if model_cfg.backend == "vllm":
        if is_builtin_backbone(model_cfg.backbone):
            raise ValueError(
                f"backend 'vllm' needs a transformers model path, not backbone {model_cfg.backbone!r}"
            )
        dtype = "bfloat16" if model_cfg.dtype == "auto" else model_cfg.dtype
        backend = VLLMBackend(model_cfg.backbone, tokenizer, dtype=dtype, vision=vision,
                              images_per_prompt=images_per_prompt)
        backend.sync_weights(model)
        return backend
    raise ValueError(f"unknown backend {model_cfg.backend!r}; valid: transformers, vllm")
