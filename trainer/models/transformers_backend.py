"""Sampling with the live transformers model: left padding, a KV cache kept across the turns of
a rollout (prefix reuse), per-row stopping, and one random generator per request.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase
from transformers.cache_utils import DynamicLayer

from trainer.models.constrained import TemplateMask
from trainer.models.generation import (
    STOP_STRINGS,
    Generation,
    GenerationBackend,
    left_pad,
    prepare_request,
    sample_next,
)
from trainer.models.precision import autocast
from trainer.models.vision import is_vision_model, vision_inputs, vision_token_ids


class TransformersBackend(GenerationBackend):
    """Batched sampling with the live transformers model: left padding, a KV cache, and
    per-row stopping on stop strings or stop tokens.  Deterministic on CPU for a seed
    (all randomness comes from one ``torch.Generator``).  ``max_batch`` caps the rows in
    one forward pass; longer prompt lists are processed in chunks.  A vision-language model
    gets M-RoPE positions and, with ``vision`` (its :class:`~trainer.vision.VisionCodec`),
    the prompts' images at the prefill; prompts with images are prefilled afresh every call
    (no prefix reuse), and the vision tokens are never sampled (a sampled ``<|image_pad|>``
    would stand for an image that does not exist when the response is scored)."""

    # It samples with the live policy itself: a sharded one must be whole meanwhile
    # (trainer.run.components.generating), an engine would hold its own weights.
    generates_with_model = True
    # A finished row leaves the batch (and its KV cache) when the call keeps no cache for
    # prefix reuse: the rows still going decode as before, each from its own generator.
    drop_finished = True

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
        self.shared_tokens = 0  # prompt tokens a call did not feed: repeated prompts, a shared prefix (benchmarks)
        self._token_text: dict[int, str] = {}  # token id -> its own decoded text (stop strings)
        self._templates: dict[tuple, TemplateMask] = {}  # a template's token classes, built once

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
        template=None,
    ) -> list[Generation]:
        request = prepare_request(self.tokenizer, prompts, max_new_tokens, temperature, top_p, stop_token_ids,
                           seeds, images)
        device = self.model.device
        shape = None
        if template is not None:
            key = tuple(template)
            if key not in self._templates:
                vocab = self.model.get_output_embeddings().weight.shape[0]
                self._templates[key] = TemplateMask(self.tokenizer, key, vocab)
            shape = self._templates[key]
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
                None if generators is None else generators[rows], keep, pictures, shape,
            )
        return out

    def _generate_chunk(
        self, prompts, max_new_tokens, temperature, top_p, stop_strings, stops, generators, keep,
        images=(), template=None,
    ):
        was_training = self.model.training
        self.model.eval()
        try:
            with autocast(self.model):
                rows = self._decode_loop(
                    prompts, max_new_tokens, temperature, top_p, stop_strings, stops, generators, keep,
                    images, template,
                )
        finally:
            self.model.train(was_training)
        return [Generation(ids, self.tokenizer.decode(ids), done, tuple(lps)) for ids, lps, done in rows]

    def _decode_loop(
        self, prompts, max_new_tokens, temperature, top_p, stop_strings, stops, generators, keep,
        images=(), template=None,
    ):
        """Token-by-token decoding; returns [(token_ids, logprobs, finished)] per prompt.

        ``mask`` marks, per row, the cache positions that hold the row's own sequence (its
        prompt and its sampled tokens); positions fed after a row stopped are masked out, so
        that the cache can be kept for the next turn (``keep``, :meth:`reuse_prefixes`).
        ``generators``: one per row (their draws never depend on the other rows).
        ``images``: those of every prompt's placeholders, prompt by prompt.  ``template`` (a
        :class:`~trainer.models.constrained.TemplateMask`): each row samples only the tokens
        its cursor allows and stops when the template is complete."""
        device = self.model.device
        start, positions, logits = self._prefill(prompts, max_new_tokens, keep, images)
        cache, mask, seqs = start.cache, start.mask, start.sequences
        tokens: list[list[int]] = [[] for _ in prompts]
        logprobs: list[list[float]] = [[] for _ in prompts]
        done = [False] * len(prompts)
        nxt, fed = None, []  # last sampled tokens [B]; rows to which they belong
        live = list(range(len(prompts)))  # batch row -> prompt; a finished row leaves unless keep
        cursors = None if template is None else [template.cursor(max_new_tokens) for _ in prompts]
        for _ in range(max_new_tokens):
            if nxt is not None:
                step_ids = nxt.unsqueeze(-1)  # [B, 1]
                positions = positions[..., -1:] + 1  # [B, 1] ([3, B, 1] for M-RoPE)
                column = torch.tensor(fed, dtype=mask.dtype, device=device).unsqueeze(-1)  # [B, 1]
                mask = torch.cat([mask, column], dim=-1)  # [B, L+1]
                for b in (b for b, own in enumerate(fed) if own):
                    seqs[live[b]].append(tokens[live[b]][-1])
                logits = self._forward(step_ids, mask, positions, cache)  # [B, V]
            if self._banned:
                logits[:, self._banned] = float("-inf")
            if cursors is not None:  # a finished row (None) samples freely: its token is not kept
                allowed = [cursors[row].allowed() for row in live]
                every = torch.ones(logits.shape[-1], dtype=torch.bool)
                ok = torch.stack([every if a is None else a for a in allowed]).to(logits.device)
                logits = logits.masked_fill(~ok, float("-inf"))
            nxt, nxt_logp = sample_next(logits, temperature, top_p, generators)  # [B], [B]
            fed = [not done[row] for row in live]
            for row, tok, lp in zip(live, nxt.tolist(), nxt_logp.tolist()):
                if not done[row]:
                    tokens[row].append(tok)
                    logprobs[row].append(lp)
                    done[row] = tok in stops or self._hit_stop_string(tokens[row], stop_strings)
                    if cursors is not None:
                        cursors[row].feed(tok)
                        done[row] = done[row] or cursors[row].done
            if all(done):
                break
            if self.drop_finished and not keep and any(done[row] for row in live):
                # the rest now cost what they alone cost (the self writer's hindsight)
                stay = [b for b, row in enumerate(live) if not done[row]]
                index = torch.tensor(stay, device=device)
                cache.reorder_cache(index)
                mask, positions, nxt = mask[index], positions[..., index, :], nxt[index]
                live, fed = [live[b] for b in stay], [True] * len(stay)
                if generators is not None:
                    generators = [generators[b] for b in stay]
        if keep:
            self._kept = _KeptCache(cache, mask, seqs)
        return list(zip(tokens, logprobs, done))

    def _resume(self, prompts, max_new_tokens: int) -> _KeptCache | None:
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
        self.reused_tokens += sum(len(kept.sequences[j]) for j in rows)
        _spare(kept.cache, max_new_tokens)
        return self._extend(kept, rows, prompts)

    def _prefill(self, prompts, max_new_tokens: int, keep: bool,
                 images) -> tuple[_KeptCache, torch.Tensor, torch.Tensor]:
        """The cache after ``prompts`` (a kept one extended when ``keep`` allows), the positions
        of the tokens fed last [B, S] ([3, B, S] for M-RoPE) and the next-token logits [B, V]."""
        start = self._resume(prompts, max_new_tokens) if keep else None
        if start is None and not images and not is_vision_model(self.model):
            return self._prefill_distinct(prompts, max_new_tokens)
        extra = {}  # a vision model's pixel values, fed with the prefill only
        if start is None:  # a vision model: every prompt afresh, with its images and M-RoPE positions
            ids, mask = left_pad(prompts, self.tokenizer.pad_token_id, self.model.device)  # [B, P]
            extra, positions = vision_inputs(self.model, ids, mask, images, self.vision)  # [3, B, P]
            start = _KeptCache(_cache(self.model, max_new_tokens), mask, [list(p) for p in prompts], ids, positions)
        logits = self._forward(start.pending_ids, start.mask, start.pending_positions, start.cache, extra)
        return start, start.pending_positions, logits

    def _prefill_distinct(self, prompts, max_new_tokens: int) -> tuple[_KeptCache, torch.Tensor, torch.Tensor]:
        """A fresh prefill (:meth:`_prefill`) that encodes each distinct prompt once (a
        rollout's first turn repeats each task's prompt group-size times; a step's trajectories
        that played alike give the writer the same prompt) and, when they share at least
        :data:`SHARED_PREFIX_MIN` tokens (the writer's prompts share its system prompt and the
        environment's description, a third of each), that prefix once, as one row.  Each row
        then holds what a prefill of its own prompt holds: the same keys at the same positions
        (its padding, now between prefix and rest, masked), each row samples from its own
        generator, and a repeated prompt's rows are copies that part when they sample."""
        device = self.model.device
        distinct = list(dict.fromkeys(tuple(p) for p in prompts))
        shared = _common_prefix(distinct) if len(distinct) > 1 else 0
        shared = shared if shared >= SHARED_PREFIX_MIN else 0
        cache = _cache(self.model, max_new_tokens)
        if shared:
            self._forward(torch.tensor([distinct[0][:shared]], device=device),
                          torch.ones(1, shared, dtype=torch.long, device=device),
                          torch.arange(shared, device=device)[None], cache)  # [1, P]
            cache.batch_repeat_interleave(len(distinct))
        mask = torch.ones(len(distinct), shared, dtype=torch.long, device=device)  # [D, P]
        start = self._extend(_KeptCache(cache, mask, [list(distinct[0][:shared])] * len(distinct)),
                             list(range(len(distinct))), distinct)
        logits = self._forward(start.pending_ids, start.mask, start.pending_positions, cache)  # [D, V]
        fed = shared + sum(len(p) - shared for p in distinct)
        self.shared_tokens += sum(len(p) for p in prompts) - fed
        mask, positions = start.mask, start.pending_positions
        if len(distinct) < len(prompts):
            row = {p: i for i, p in enumerate(distinct)}
            index = torch.tensor([row[tuple(p)] for p in prompts], device=device)
            cache.reorder_cache(index)
            mask, positions, logits = mask[index], positions[index], logits[index]  # [B, ...]
        return _KeptCache(cache, mask, [list(p) for p in prompts]), positions, logits

    def _forward(self, ids, mask, positions, cache, extra=None) -> torch.Tensor:
        """The next-token logits [B, V] after feeding ``ids`` [B, S] at ``positions`` into
        ``cache`` (``mask`` [B, L + S]: 1 = attended)."""
        return self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                          **{self._cache_kw: cache}, **self._keep_kw, **(extra or {})).logits[:, -1, :]

    def _extend(self, kept: _KeptCache, rows: list[int], prompts) -> _KeptCache:
        """``kept`` narrowed to ``rows``, row b extended by what ``prompts[b]`` adds to its
        sequence: those tokens left-padded as the pending block, at the positions that follow."""
        device = self.model.device
        news = [list(p[len(kept.sequences[j]):]) for p, j in zip(prompts, rows)]
        ids, block = left_pad(news, self.tokenizer.pad_token_id, device)  # [B, S]
        positions = torch.zeros_like(ids)
        for b, (new, j) in enumerate(zip(news, rows)):
            first = len(kept.sequences[j])
            positions[b, ids.shape[1] - len(new):] = torch.arange(first, first + len(new))
        index = torch.tensor(rows, device=device)
        if rows != list(range(len(kept.sequences))):
            kept.cache.reorder_cache(index)
        return _KeptCache(kept.cache, torch.cat([kept.mask[index], block], dim=-1),
                          [list(p) for p in prompts], ids, positions)

    def _hit_stop_string(self, tokens: list[int], stop_strings: tuple[str, ...]) -> bool:
        """Whether the newest token completed a stop string (checks only the tail).  A stop
        string ending in a printable ASCII character can only be completed by a token whose
        own text holds that character, so the tail is decoded only after such a token (the
        token's text is cached per id: one dict lookup a row and a step otherwise)."""
        if not stop_strings:
            return False
        if all(s and 32 < ord(s[-1]) < 127 for s in stop_strings):
            text = self._token_text.get(tokens[-1])
            if text is None:
                text = self._token_text[tokens[-1]] = self.tokenizer.decode(tokens[-1:])
            if not any(s[-1] in text for s in stop_strings):
                return False
        longest = max(len(s) for s in stop_strings)
        tail = self.tokenizer.decode(tokens[-longest:])
        previous = self.tokenizer.decode(tokens[-longest:-1]) if len(tokens) > 1 else ""
        return any(s in tail and s not in previous for s in stop_strings)


# A fresh prefill encodes the prefix its prompts share once when it holds this many tokens (below
# it, the extra forward pass costs more than it saves).
SHARED_PREFIX_MIN = 16


class _GrowingLayer(DynamicLayer):
    """A :class:`~transformers.cache_utils.DynamicLayer` whose keys and values [B, H, L, D] are
    the leading positions of buffers with ``spare`` more.  DynamicLayer concatenates: it
    allocates and copies the whole cache for every sampled token (on a CPU the fresh allocation
    is paged in anew each time: 15% of the self writer's time); this layer writes into the room
    left and copies only when it runs out.  A row that leaves the batch keeps the others' room.
    The values it returns are those DynamicLayer returns."""

    def __init__(self, spare: int = 0):
        super().__init__()
        self.spare = spare
        self._buffers: tuple[torch.Tensor, torch.Tensor] | None = None  # [B, H, capacity, D] each

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        held = self.get_seq_length()
        size = held + key_states.shape[-2]
        if not self._viewing() or size > self._buffers[0].shape[-2]:
            room = (*key_states.shape[:-2], size + self.spare, key_states.shape[-1])
            buffers = (key_states.new_empty(room), value_states.new_empty(room))
            if held:
                buffers[0][..., :held, :] = self.keys
                buffers[1][..., :held, :] = self.values
            self._buffers = buffers
        self._buffers[0][..., held:size, :] = key_states
        self._buffers[1][..., held:size, :] = value_states
        self.keys, self.values = self._buffers[0][..., :size, :], self._buffers[1][..., :size, :]
        return self.keys, self.values

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        if not self._viewing():
            super().reorder_cache(beam_idx)
            return
        size = self.get_seq_length()
        self._buffers = tuple(b.index_select(0, beam_idx.to(b.device)) for b in self._buffers)
        self.keys, self.values = self._buffers[0][..., :size, :], self._buffers[1][..., :size, :]

    def _viewing(self) -> bool:
        """Whether keys and values are still views of the buffers (repeat, select and crop
        replace them with tensors of their own)."""
        return (self._buffers is not None and self.keys.numel() > 0
                and self.keys.data_ptr() == self._buffers[0].data_ptr()
                and self.keys.shape[0] == self._buffers[0].shape[0])


def _cache(model: PreTrainedModel, spare: int) -> DynamicCache:
    """The model's dynamic cache with its full-attention layers as :class:`_GrowingLayer` with
    ``spare`` room (a call's ``max_new_tokens``)."""
    cache = DynamicCache(config=model.config)
    cache.layers = [_GrowingLayer(spare) if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache


def _spare(cache: DynamicCache, spare: int) -> None:
    """Give a kept cache's growing layers the room of the next call."""
    for layer in cache.layers:
        if isinstance(layer, _GrowingLayer):
            layer.spare = spare


@dataclass
class _KeptCache:
    """A KV cache and, per row, its mask [B, L] (1 = the row's own token) and the token ids
    those positions hold; ``pending_*`` [B, S]: tokens to feed before sampling."""

    cache: DynamicCache
    mask: torch.Tensor
    sequences: list[list[int]]
    pending_ids: torch.Tensor | None = None
    pending_positions: torch.Tensor | None = None


def _common_prefix(prompts) -> int:
    """The number of leading tokens all ``prompts`` share, leaving each at least one."""
    width, shared = min(len(p) for p in prompts) - 1, 0
    while shared < width and all(p[shared] == prompts[0][shared] for p in prompts):
        shared += 1
    return shared


def _extends(prompt: Sequence[int], prefix: list[int]) -> bool:
    return len(prompt) > len(prefix) and list(prompt[: len(prefix)]) == prefix
