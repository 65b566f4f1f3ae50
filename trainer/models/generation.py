"""What a generation backend is: the interface (:class:`GenerationBackend`), one sampled response
(:class:`Generation`), per-request seeds (:func:`request_seed`), the checks every call makes and
the sampling of next tokens (:func:`sample_next`) the transformers backend uses.
"""

from __future__ import annotations

import abc
import contextlib
import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from trainer.models.constrained import Part

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
        template: Sequence[Part] | None = None,
    ) -> list[Generation]:
        """Sample one response per prompt.  ``temperature == 0`` is greedy decoding.
        ``stop_token_ids`` None = the tokenizer's ``<|im_end|>`` and EOS ids.  ``seeds[i]``:
        prompt i's own sampling seed (:func:`request_seed`), so that its response does not
        depend on the other prompts of the call; None = unseeded.  ``images[i]``: the
        images of prompt i's placeholders, in order (a vision-language model).
        ``template``: constrain every response to that tagged template
        (:mod:`trainer.models.constrained`); None = free sampling."""

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
class Request:
    """What both backends check and fill in before sampling a call's prompts."""

    images: list
    seeds: list[int | None]
    stops: list[int]


def prepare_request(tokenizer, prompts, max_new_tokens, temperature, top_p, stop_token_ids, seeds, images) -> Request:
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
    return Request(images, seeds, stops)


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
        logprobs = torch.log_softmax(logprobs.masked_fill(outside_nucleus(logprobs, top_p), float("-inf")), dim=-1)
    probs = logprobs.exp()
    if generators is None or isinstance(generators, torch.Generator):
        tokens = torch.multinomial(probs, 1, generator=generators).squeeze(-1)
    else:
        tokens = torch.cat([torch.multinomial(probs[row], 1, generator=g) for row, g in enumerate(generators)])
    return tokens, logprobs.gather(-1, tokens[:, None]).squeeze(-1)


# Tokens :func:`outside_nucleus` ranks first; the whole row is sorted only when its nucleus is larger.
NUCLEUS_CANDIDATES = 64


# How far beyond top_p the mass before the last candidate must lie for every later token to be
# outside too, whatever the float rounding of the sums beyond it (a float32 sum near 1 moves by
# about 1e-7 a term).
NUCLEUS_MARGIN = 1e-4


def outside_nucleus(logprobs: torch.Tensor, top_p: float) -> torch.Tensor:
    """[B, V] True for the tokens outside each row's nucleus of ``logprobs`` [B, V]: those
    whose more likely tokens (in descending order) already hold mass >= ``top_p``.

    The nucleus of a sampling row is a few tokens of a large vocabulary, so the
    :data:`NUCLEUS_CANDIDATES` most likely tokens (``topk``) decide it when the mass before
    the last of them passes ``top_p`` (by :data:`NUCLEUS_MARGIN`) in every row, and the whole
    rows are sorted otherwise (five times the time at a 2,048-token vocabulary).  On a CPU the
    masses are the same floats either way: a cumulative sum's first k terms are those of the
    whole row's.  Exactly tied tokens may be ranked in either order, as by a sort."""
    k = min(NUCLEUS_CANDIDATES, logprobs.shape[-1])
    ranked, order = logprobs.topk(k, dim=-1)  # [B, k], descending
    probs = ranked.exp()
    before = probs.cumsum(dim=-1) - probs  # [B, k] mass before each token
    if k < logprobs.shape[-1] and not bool((before[:, -1] >= top_p + NUCLEUS_MARGIN).all()):
        ranked, order = logprobs.sort(dim=-1, descending=True)  # [B, V]
        probs = ranked.exp()
        before = probs.cumsum(dim=-1) - probs
    cut = torch.ones_like(logprobs, dtype=torch.bool)
    return cut.scatter(-1, order, before >= top_p)  # [B, V] in vocab order


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
