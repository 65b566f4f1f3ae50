"""Batched log-probabilities of sampled action tokens.

:func:`sequence_logprobs` scores token sequences built by :mod:`trainer.samples`:
``logp[n, j] = log pi(x_{n,j} | x_{n,<j})`` (the shifted next-token log-prob) and the
entropy ``H[n, j] = -sum_v pi(v | x_{n,<j}) log pi(v | x_{n,<j})`` of the same predictive
distribution, at the scored positions (``action_mask == 1``) only.  The LM head and the
float32 ``log_softmax`` run only on those positions, so observation-heavy ``full``
sequences do not pay for a vocabulary projection at every token.

:func:`collate_actions` turns per-sequence results into per-trajectory tensors [B, T]
(T = all scored tokens of a trajectory concatenated in turn order), the same layout for
``window`` and ``full`` contexts; this is what ``trainer/algos`` consumes (SEED Eq. 1's
l^skill / l^theta, ETRO's Delta^p, GRPO's ratio).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch.utils.checkpoint import checkpoint
from transformers import PreTrainedModel

from trainer.episodes.samples import SampleBuilder, TokenSequence, Trajectory
from trainer.models.precision import autocast
from trainer.models.vision import decoder_states

# Positions per LM-head chunk: its [chunk, V] float32 log-softmax is the largest transient of
# a scoring pass (0.6 GB at Qwen2.5's 152k vocabulary), and in the backward pass the largest
# recomputed one.
HEAD_CHUNK = 1024


@dataclass(frozen=True)
class MicroBatching:
    """How a pass cuts its sequences into micro-batches (one forward, and with gradient one
    backward, each): longest first, right-padded to the micro-batch's longest.

    ``tokens`` > 0: by token budget (verl's ``use_dynamic_bsz``): a micro-batch takes the next
    longest sequences while rows x its longest <= ``tokens``; a sequence longer than the
    budget gets a micro-batch of its own.  Sorted by length, a micro-batch's rows differ
    little in length, so padding stays small, and many short sequences (window contexts) share
    one forward instead of ``size`` each.  ``tokens`` = 0: ``size`` sequences each."""

    size: int = 8
    tokens: int = 0

    @classmethod
    def of(cls, algo) -> MicroBatching:
        """The micro-batching of an ``AlgoConfig`` (``micro_batch_size``, ``micro_batch_tokens``)."""
        return cls(algo.micro_batch_size, algo.micro_batch_tokens)

    def plan(self, lengths: Sequence[int]) -> list[list[int]]:
        """Indices into ``lengths`` (sequence lengths) grouped into micro-batches, longest first."""
        if self.size < 1 or self.tokens < 0:
            raise ValueError(f"micro-batches need size >= 1 and tokens >= 0, got {self.size}, {self.tokens}")
        order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
        if not self.tokens:
            return [order[i:i + self.size] for i in range(0, len(order), self.size)]
        parts: list[list[int]] = []
        for i in order:  # a part's first row is its longest: its padded size is rows x that length
            if parts and (len(parts[-1]) + 1) * lengths[parts[-1][0]] <= self.tokens:
                parts[-1].append(i)
            else:
                parts.append([i])
        return parts


@dataclass
class PaddingCount:
    """The micro-batches a set of passes ran: ``tokens`` real, ``computed`` = rows x padded
    width summed over them.  ``perf/pad_share`` = 1 - tokens / computed."""

    micro_batches: int = 0
    tokens: int = 0
    computed: int = 0

    def metrics(self) -> dict[str, float]:
        share = 1.0 - self.tokens / self.computed if self.computed else 0.0
        return {"perf/pad_share": share, "perf/micro_batches": float(self.micro_batches)}


_COUNTS: list[PaddingCount] = []  # the open counting() contexts; every micro-batch adds to each


@contextlib.contextmanager
def counting(count: PaddingCount) -> Iterator[PaddingCount]:
    """Add every micro-batch scored inside the context (any model, with or without gradient)
    to ``count``."""
    _COUNTS.append(count)
    try:
        yield count
    finally:
        _COUNTS.remove(count)


@dataclass
class ActionBatch:
    """Per-trajectory scored tokens, right-padded to T = the longest trajectory.

    token_ids [B, T] long (0 on padding); logp [B, T] float32; entropy [B, T] float32 or
    None; mask [B, T] float32 (1 = valid action token); turn_ids [B, T] long (-1 on padding).
    """

    token_ids: torch.Tensor
    logp: torch.Tensor
    entropy: torch.Tensor | None
    mask: torch.Tensor
    turn_ids: torch.Tensor
    # [B, T, k] with a TopK request: log-probs of the top-k ids (teacher) or of the given
    # support (student), and the ids (teacher only)
    topk_logp: torch.Tensor | None = None
    topk_ids: torch.Tensor | None = None


def _right_pad(
    batch: Sequence[TokenSequence], device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """-> input_ids [n, L], attention_mask [n, L], action_mask [n, L] (zeros on padding)."""
    width = max(len(s) for s in batch)
    ids = torch.zeros((len(batch), width), dtype=torch.long)
    attn = torch.zeros_like(ids)
    act = torch.zeros_like(ids)
    for row, seq in enumerate(batch):
        n = len(seq)
        ids[row, :n] = torch.tensor(seq.input_ids)
        attn[row, :n] = 1
        act[row, :n] = torch.tensor(seq.action_mask)
    if act[:, 0].any():
        raise ValueError("a sequence scores its first token, which has no prefix to condition on")
    return ids.to(device), attn.to(device), act.to(device)


@dataclass(frozen=True)
class TopK:
    """What a scoring pass returns about whole next-token distributions.

    ``k`` > 0: the ids [.., k] and log-probs of the k most likely tokens at every scored
    position (a teacher's support); ``ids`` given instead: the log-probs of those ids (a
    student evaluated on the teacher's support, with gradient)."""

    k: int = 0
    ids: torch.Tensor | None = None  # [N, L, k] per sequence position (gather mode)


def _score_micro_batch(
    model: PreTrainedModel, batch: Sequence[TokenSequence], with_entropy: bool, head_chunk: int,
    topk: TopK | None = None, rows: Sequence[int] = (), temperature: float = 1.0, vision=None,
):
    """logp, entropy [n, L] for one right-padded micro-batch (zeros off the action mask), and
    with ``topk`` the [n, L, k] (log-probs, ids) it asks for (ids None in gather mode).
    ``rows``: the micro-batch's rows of ``topk.ids``; ``vision``: the codec of the rows'
    images (:func:`trainer.vision.decoder_states`)."""
    ids, attn, act = _right_pad(batch, model.device)  # [n, L] each
    for count in _COUNTS:
        count.micro_batches += 1
        count.tokens += sum(len(s) for s in batch)
        count.computed += ids.numel()
    images = [image for seq in batch for image in seq.images]
    hidden = decoder_states(model, ids, attn, images, vision)  # [n, L, H]; no KV cache filled
    where = act[:, 1:].bool()  # [n, L-1]: hidden state j predicts token j+1
    states, targets = hidden[:, :-1][where], ids[:, 1:][where]  # [K, H], [K]
    support = None
    if topk is not None and topk.ids is not None:
        support = topk.ids[list(rows), 1:ids.shape[1]].to(ids.device)[where]  # [K, k]
    head = head_logprobs
    if torch.is_grad_enabled() and states.requires_grad:
        head = recomputed_head  # keeps states, not the [k, V] float32 log-softmax, for backward
    parts = [
        head(model, states[i : i + head_chunk], targets[i : i + head_chunk], with_entropy,
             topk.k if topk is not None else 0,
             None if support is None else support[i : i + head_chunk], temperature)
        for i in range(0, max(len(targets), 1), head_chunk)
    ]  # one (empty) chunk if K = 0
    token_logp = torch.cat([p[0] for p in parts])  # [K]
    entropy = _scatter(where, torch.cat([p[1] for p in parts])) if with_entropy else None  # [n, L]
    extra = None
    if topk is not None:
        extra = (_scatter(where, torch.cat([p[2] for p in parts])),
                 None if support is not None else _scatter(where, torch.cat([p[3] for p in parts])))
    return _scatter(where, token_logp), entropy, extra


def head_logprobs(
    model: PreTrainedModel, states: torch.Tensor, targets: torch.Tensor, with_entropy: bool,
    top_k: int = 0, support: torch.Tensor | None = None, temperature: float = 1.0,
):
    """LM head + float32 log_softmax of logits / ``temperature`` on scored positions
    (the policy that samples at that temperature, as verl scores it): states [k, H], targets [k] ->
    (log pi(target) [k], entropy [k] or None, then with ``support`` [k, K] the log-probs of
    those ids [k, K], or with ``top_k`` the top-k log-probs and ids [k, top_k])."""
    logits = model.get_output_embeddings()(states).float()  # [k, V]
    if temperature != 1.0:
        logits = logits / temperature
    logprobs = torch.log_softmax(logits, dim=-1)  # [k, V]
    token_logp = logprobs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # [k]
    entropy = -(logprobs.exp() * logprobs).sum(-1) if with_entropy else None
    if support is not None:
        return token_logp, entropy, logprobs.gather(-1, support), None
    if top_k:
        values, index = logprobs.topk(min(top_k, logprobs.shape[-1]), dim=-1)
        return token_logp, entropy, values, index
    return token_logp, entropy


def recomputed_head(model, states, targets, with_entropy, top_k=0, support=None, temperature=1.0):
    """:func:`head_logprobs` under activation checkpointing: autograd keeps the chunk's
    hidden states [k, H] and recomputes the logits in the backward pass, instead of keeping
    the float32 [k, V] log-softmax of every chunk (5 GB for 8k tokens at Qwen2.5's 152k
    vocabulary).  Same values and gradients; ids come back as they are."""
    def run(chunk):
        return head_logprobs(model, chunk, targets, with_entropy, top_k, support, temperature)
    return checkpoint(run, states, use_reentrant=False)


def _scatter(where: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """Place ``values`` [K] (or [K, k]) at the True entries of ``where`` [n, L-1]; return
    [n, L] (or [n, L, k]) with a leading zero column (token 0 is never scored).
    Differentiable in ``values``."""
    tail = tuple(values.shape[1:])
    dense = torch.zeros((*where.shape, *tail), dtype=values.dtype, device=values.device)
    dense = dense.masked_scatter(where.view(*where.shape, *([1] * len(tail))).expand_as(dense),
                                 values)
    return torch.nn.functional.pad(dense, (0, 0) * len(tail) + (1, 0))


def sequence_logprobs(
    model: PreTrainedModel,
    batch: Sequence[TokenSequence],
    micro_batch: int | MicroBatching = 8,
    *,
    grad: bool = False,
    with_entropy: bool = True,
    head_chunk: int = HEAD_CHUNK,
    topk: TopK | None = None,
    temperature: float = 1.0,
    vision=None,
):
    """Log-probs and entropies of the scored tokens of ``batch``; with ``topk`` a third
    item, ``(log-probs [N, L, k], ids [N, L, k] or None)`` (see :class:`TopK`).
    ``temperature``: score the policy softmax(logits / temperature), the one a rollout at
    that temperature samples from (0, greedy, scores at 1).  ``vision``: the
    :class:`~trainer.vision.VisionCodec` of a vision-language model (sequences with images).

    Returns ``(logp [N, L], entropy [N, L] or None)`` in float32, L = the longest sequence,
    zeros off each sequence's ``action_mask``.  Sequences are grouped by length into
    micro-batches (right padding, attention masks) as ``micro_batch`` says
    (:class:`MicroBatching`; an int: that many rows each) and returned in input order.
    ``grad=False`` runs under ``torch.no_grad``.  The vocabulary projection runs on at most
    ``head_chunk`` positions at a time, bounding the [k, V] float32 buffer.
    Assumes logits = output_embeddings(last_hidden_state), true for Qwen2/Llama/SmolLM2.
    """
    if not batch:
        raise ValueError("sequence_logprobs needs at least one sequence")
    if isinstance(micro_batch, int):
        micro_batch = MicroBatching(size=micro_batch)
    if micro_batch.size < 1 or head_chunk < 1:
        raise ValueError(
            f"micro_batch and head_chunk must be >= 1, got {micro_batch.size}, {head_chunk}"
        )
    temperature = temperature if temperature > 0 else 1.0
    width = max(len(s) for s in batch)
    logps, ents = [None] * len(batch), [None] * len(batch)
    tops, top_ids = [None] * len(batch), [None] * len(batch)
    with contextlib.nullcontext() if grad else torch.no_grad(), autocast(model):
        for rows in micro_batch.plan([len(s) for s in batch]):
            logp, ent, extra = _score_micro_batch(
                model, [batch[i] for i in rows], with_entropy, head_chunk, topk, rows, temperature,
                vision,
            )
            for k, i in enumerate(rows):
                logps[i] = _pad_to(logp[k], width)
                ents[i] = _pad_to(ent[k], width) if with_entropy else None
                if extra is not None:
                    tops[i] = _pad_to(extra[0][k], width)
                    top_ids[i] = None if extra[1] is None else _pad_to(extra[1][k], width)
    out = torch.stack(logps), (torch.stack(ents) if with_entropy else None)  # [N, L]
    if topk is None:
        return out
    ids = None if top_ids[0] is None else torch.stack(top_ids)
    return (*out, (torch.stack(tops), ids))  # [N, L, k]


def _pad_to(row: torch.Tensor, width: int) -> torch.Tensor:
    """Right-pad dimension 0 of ``row`` ([L] or [L, k]) with zeros to ``width``."""
    return torch.nn.functional.pad(row, (0, 0) * (row.dim() - 1) + (0, width - row.shape[0]))


def collate_actions(
    batch: Sequence[TokenSequence],
    logp: torch.Tensor,
    entropy: torch.Tensor | None,
    num_traj: int,
    topk: tuple[torch.Tensor, torch.Tensor | None] | None = None,
) -> ActionBatch:
    """Gather the scored tokens of each trajectory (``seq.traj``) in turn order.

    ``logp``/``entropy`` [N, L] come from :func:`sequence_logprobs` on ``batch``.  Every
    trajectory row b < ``num_traj`` is filled with its tokens sorted by turn (each turn
    lives in exactly one sequence), then right-padded.  Gradients flow through ``logp``.
    """
    seq_idx, pos_idx, turns, token_ids = _action_index(batch, num_traj)  # [B, T] each
    device = logp.device
    mask = (turns >= 0).float().to(device)  # [B, T]
    seq_idx, pos_idx = seq_idx.to(device), pos_idx.to(device)

    def gather(values: torch.Tensor) -> torch.Tensor:  # [N, L(, k)] -> [B, T(, k)]
        picked = values[seq_idx, pos_idx]
        return picked * mask.view(*mask.shape, *([1] * (picked.dim() - 2))).to(picked.dtype)

    entropy_bt = None if entropy is None else gather(entropy)
    top_logp = top_ids = None
    if topk is not None:
        top_logp = gather(topk[0])
        top_ids = None if topk[1] is None else gather(topk[1])
    return ActionBatch(token_ids.to(device), gather(logp), entropy_bt, mask, turns.to(device),
                       top_logp, top_ids)


def to_sequence_layout(values: torch.Tensor, batch: Sequence[TokenSequence],
                       num_traj: int) -> torch.Tensor:
    """The inverse of :func:`collate_actions` for ids: [B, T, k] per trajectory action token
    -> [N, L, k] per sequence position (zeros elsewhere), for ``batch``'s sequences."""
    seq_idx, pos_idx, turns, _ = _action_index(batch, num_traj)
    width = min(values.shape[1], turns.shape[1])
    keep = turns[:, :width] >= 0
    dense = torch.zeros((len(batch), max(len(s) for s in batch), values.shape[-1]),
                        dtype=values.dtype)
    dense[seq_idx[:, :width][keep], pos_idx[:, :width][keep]] = values[:, :width].cpu()[keep]
    return dense


def _action_index(batch: Sequence[TokenSequence], num_traj: int):
    """Where each trajectory's scored tokens live: (sequence, position, turn, token id),
    each [B, T], in turn order; padding has turn -1 and points at (0, 0)."""
    rows: list[list[tuple[int, int, int]]] = [[] for _ in range(num_traj)]  # (turn, seq, pos)
    for n, seq in enumerate(batch):
        if not 0 <= seq.traj < num_traj:
            raise ValueError(f"sequence {n} has traj={seq.traj}, outside [0, {num_traj})")
        marks = zip(seq.action_mask, seq.turn_ids)
        rows[seq.traj] += [(t, n, j) for j, (m, t) in enumerate(marks) if m]
    rows = [sorted(r, key=lambda x: x[0]) for r in rows]  # stable: positions stay in order
    width = max((len(r) for r in rows), default=0)
    index = torch.zeros((4, num_traj, width), dtype=torch.long)  # seq, pos, turn, token
    index[2] = -1
    for b, r in enumerate(rows):
        if r:
            cols = [[n for _, n, _ in r], [j for _, _, j in r], [t for t, _, _ in r]]
            cols.append([batch[n].input_ids[j] for _, n, j in r])
            index[:, b, : len(r)] = torch.tensor(cols)
    return index[0], index[1], index[2], index[3]


@dataclass(frozen=True)
class ActionIndex:
    """Where each sequence's scored tokens are, in the *sequence-action* layout [N, A]
    (sequence n's A_n scored tokens in order, right-padded): their ``positions`` in the
    sequence, and the ``rows`` / ``cols`` they take in the per-trajectory [B, T] layout of
    :func:`collate_actions`; ``mask`` [N, A] bool marks real tokens.  A micro-batch of the
    update is a set of sequences: this index gathers its tokens' advantages, old log-probs and
    weights from the [B, T] tensors of the data phase (:func:`gather_actions`)."""

    positions: torch.Tensor
    rows: torch.Tensor
    cols: torch.Tensor
    mask: torch.Tensor

    def part(self, seqs: Sequence[int]) -> ActionIndex:
        """The index of the sequences ``seqs`` (in that order), cut to their longest."""
        take = torch.as_tensor(list(seqs), dtype=torch.long)
        width = max(1, int(self.mask[take].sum(dim=1).max()))
        return ActionIndex(*(t[take, :width] for t in (self.positions, self.rows, self.cols, self.mask)))


def action_index(batch: Sequence[TokenSequence], num_traj: int | None = None) -> ActionIndex:
    """The :class:`ActionIndex` of ``batch`` (the sequences of ``num_traj`` trajectories;
    None: positions only, ``rows`` / ``cols`` left 0, e.g. for a teacher's sequences)."""
    width = max(1, max((sum(s.action_mask) for s in batch), default=0))
    index = torch.zeros((4, len(batch), width), dtype=torch.long)  # position, row, col, valid
    for n, seq in enumerate(batch):
        where = [j for j, m in enumerate(seq.action_mask) if m]
        index[0, n, :len(where)] = torch.tensor(where, dtype=torch.long)
        index[3, n, :len(where)] = 1
    if num_traj is not None:
        seq_idx, pos_idx, turns, _ = _action_index(batch, num_traj)  # [B, T] each
        filled = [0] * len(batch)
        for b, c in (turns >= 0).nonzero().tolist():  # row-major: each sequence's tokens in order
            n = int(seq_idx[b, c])
            if int(pos_idx[b, c]) != int(index[0, n, filled[n]]):
                raise AssertionError(f"sequence {n}: scored tokens out of order in its trajectory")
            index[1:3, n, filled[n]] = torch.tensor([b, c])
            filled[n] += 1
    return ActionIndex(index[0], index[1], index[2], index[3].bool())


def gather_actions(values: torch.Tensor, index: ActionIndex, traj_rows: torch.Tensor | None = None) -> torch.Tensor:
    """[B, T(, k)] per-trajectory values -> [N, A(, k)] at ``index``'s tokens (0 on padding);
    ``traj_rows`` maps the index's rows to rows of ``values`` (a minibatch's trajectories)."""
    rows = index.rows if traj_rows is None else traj_rows.to(index.rows.device)[index.rows]
    picked = values[rows.to(values.device), index.cols.to(values.device)]
    mask = index.mask.to(values.device).view(*index.mask.shape, *([1] * (picked.dim() - 2)))
    return torch.where(mask, picked, torch.zeros((), dtype=picked.dtype, device=picked.device))


def to_actions(values: torch.Tensor, index: ActionIndex) -> torch.Tensor:
    """[N, L(, k)] per-position values (:func:`sequence_logprobs` of the index's sequences)
    -> [N, A(, k)] at their scored tokens, in order (0 on padding); differentiable."""
    positions = index.positions.to(values.device)
    if values.dim() == 3:
        positions = positions[..., None].expand(-1, -1, values.shape[-1])
    picked = values.gather(1, positions)
    mask = index.mask.to(values.device).view(*index.mask.shape, *([1] * (picked.dim() - 2)))
    return torch.where(mask, picked, torch.zeros((), dtype=picked.dtype, device=picked.device))


def from_actions(values: torch.Tensor, index: ActionIndex, width: int) -> torch.Tensor:
    """The inverse of :func:`to_actions` for [N, A, k] ids: [N, width, k], zeros elsewhere."""
    dense = torch.zeros((values.shape[0], width, *values.shape[2:]), dtype=values.dtype)
    keep = index.mask
    rows = torch.arange(values.shape[0])[:, None].expand_as(keep)
    dense[rows[keep], index.positions[keep]] = values.cpu()[keep]
    return dense


def score_trajectories(
    model: PreTrainedModel,
    builder: SampleBuilder,
    trajectories: Sequence[Trajectory],
    skills: Sequence[str | None] | None = None,
    micro_batch: int | MicroBatching = 8,
    *,
    grad: bool = False,
    with_entropy: bool = True,
    added_skills: Sequence[str | None] | None = None,
    top_k: int = 0,
    support: torch.Tensor | None = None,
    sequences: list[TokenSequence] | None = None,
    temperature: float = 1.0,
) -> tuple[ActionBatch, list[TokenSequence]]:
    """Build (with ``skills`` spliced in, None = student context), score and collate.
    ``added_skills`` (a teacher's) go on top of ``skills`` with the history ``skills``
    alone keeps (:meth:`SampleBuilder.build`): the teacher sees the student's history.
    ``top_k``: also the k most likely ids and their log-probs per action token
    (``topk_ids``/``topk_logp``); ``support`` [B, T, k]: also the log-probs of those ids
    (``topk_logp``, differentiable with ``grad``).  ``sequences``: the ones
    ``builder.build_batch(trajectories, skills, added_skills)`` gives, when already built.
    ``temperature``: the rollout temperature (:func:`sequence_logprobs`).

    Returns the [B, T] :class:`ActionBatch` and the sequences (for
    :func:`trainer.samples.assert_same_actions` between teacher and student)."""
    if sequences is None:
        sequences = builder.build_batch(trajectories, skills, added_skills)
    if not sequences:
        raise ValueError("no turns to score: every trajectory is empty")
    topk = None
    if support is not None:
        topk = TopK(ids=to_sequence_layout(support, sequences, len(trajectories)))
    elif top_k:
        topk = TopK(k=top_k)
    scored = sequence_logprobs(
        model, sequences, micro_batch, grad=grad, with_entropy=with_entropy, topk=topk,
        temperature=temperature, vision=builder.vision,
    )
    logp, entropy, *extra = scored
    return collate_actions(sequences, logp, entropy, len(trajectories),
                           extra[0] if extra else None), sequences
