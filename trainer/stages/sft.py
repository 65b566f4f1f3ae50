"""Supervised fine-tuning on token sequences: NLL of the masked tokens.

One function serves both SFT stages: the warm start (behaviour cloning on scripted-expert
demonstrations) and SEED's Stage 1 (trajectory -> hindsight skill, review Eq. SFT).  Each
example is a :class:`~trainer.samples.TokenSequence` whose ``action_mask`` marks the target
tokens; the loss is the token-mean NLL over the targets of a minibatch.

Data parallel (a sharded policy, :mod:`trainer.parallel`): every rank holds the same
examples (the warm start's are deterministic, Stage 1's are gathered) and so draws the same
minibatches; each rank backpropagates its block of every minibatch
(:func:`~trainer.parallel.batches.blocks`), divided by the whole minibatch's target tokens,
and the ranks' gradients are summed: the one-process gradient, as in the RL update.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import torch

from trainer.episodes.samples import TokenSequence, Trajectory
from trainer.episodes.scoring import MicroBatching, sequence_logprobs
from trainer.hindsight.analyzer import writer_prompt
from trainer.hindsight.writers import writer_input
from trainer.models.chat import encode
from trainer.parallel.batches import blocks, most
from trainer.parallel.group import all_sum, rank
from trainer.run.components import Components


def example(prompt_ids: Sequence[int], target_ids: Sequence[int], images: Sequence = ()) -> TokenSequence:
    """A prompt -> target example (the loss covers the target tokens only); ``images``: those
    of the prompt's placeholders."""
    n, m = len(prompt_ids), len(target_ids)
    return TokenSequence(tuple(prompt_ids) + tuple(target_ids), (0,) * n + (1,) * m, (-1,) * n + (0,) * m,
                         images=tuple(images))


def warmup_cosine(total_steps: int, warmup: float = 0.05, floor: float = 0.1):
    """Learning-rate factor per optimizer step: linear warm-up over the first ``warmup``
    fraction of ``total_steps``, then cosine decay to ``floor`` (the usual SFT schedule)."""
    ramp = max(1, round(warmup * total_steps))

    def factor(step: int) -> float:
        if step < ramp:
            return (step + 1) / ramp
        progress = min(1.0, (step - ramp) / max(1, total_steps - ramp))
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))

    return factor


def sft(
    model,
    examples: Sequence[TokenSequence],
    *,
    epochs: int,
    lr: float,
    batch_size: int,
    seed: int,
    weight_decay: float = 0.0,
    grad_clip: float = 1.0,
    progress=None,
    vision=None,
    micro_batch: int | MicroBatching | None = None,
) -> dict[str, float]:
    """Fine-tune ``model`` in place (AdamW, :func:`warmup_cosine` schedule); ``vision``: the
    codec of the examples' images (:mod:`trainer.vision`); ``progress``: a tqdm bar advanced
    once per optimizer step (one opened without a total gets this call's); ``micro_batch``:
    examples (or a :class:`MicroBatching`) per forward and backward (gradient accumulation;
    the step is the batch's, each micro-batch's NLL weighted by its share of the batch's
    target tokens), None = the batch.  Returns ``{"sft/loss_first", "sft/loss_last",
    "sft/examples", "sft/tokens"}`` (mean loss of the first and the last epoch).  Data
    parallel: every rank calls it with the same ``examples`` on the sharded ``model`` (AdamW
    over its shards) and trains its block of each minibatch (module docstring)."""
    if not examples:
        raise ValueError("sft: no examples")
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    total_steps = epochs * math.ceil(len(examples) / batch_size)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(total_steps))
    if progress is not None and getattr(progress, "total", 0) is None:
        progress.reset(total=total_steps)  # a bar opened before the examples existed: give it an ETA
    rng = random.Random(f"sft:{seed}")
    order = list(range(len(examples)))
    losses: list[list[float]] = []  # per epoch, per step: this rank's share of the step's NLL
    model.train()
    for _ in range(epochs):
        rng.shuffle(order)
        losses.append([])
        for start in range(0, len(order), batch_size):
            batch = [examples[i] for i in order[start:start + batch_size]]
            optimizer.zero_grad(set_to_none=True)
            losses[-1].append(nll_backward(model, batch, micro_batch=micro_batch, vision=vision, split=True))
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            schedule.step()
            if progress is not None:
                progress.update(1)
    summed = all_sum([loss for epoch in losses for loss in epoch])  # each step's NLL: the ranks' shares
    first, last = summed[:len(losses[0])], summed[len(summed) - len(losses[-1]):]
    return {
        "sft/loss_first": sum(first) / max(len(first), 1),
        "sft/loss_last": sum(last) / max(len(last), 1),
        "sft/examples": float(len(examples)),
        "sft/tokens": float(sum(sum(s.action_mask) for s in examples)),
    }


def nll_backward(model, batch: Sequence[TokenSequence], *, scale: float = 1.0,
                 micro_batch: int | MicroBatching | None = None, vision=None, split: bool = False) -> float:
    """Backpropagate ``scale`` times the token-mean NLL of ``batch``'s target tokens into
    ``model``'s gradients (accumulated, a forward per micro-batch of ``micro_batch``, an int
    being that many sequences, None the whole batch; each micro-batch weighted by its share
    of the batch's target tokens); returns the NLL (unscaled).

    ``split``: ``batch`` is the same on every rank, and this rank backpropagates its block
    of it (:func:`~trainer.parallel.batches.blocks`) over the whole batch's target tokens
    (the ranks' summed gradients are the batch's); it returns its block's share of the NLL.
    Every rank runs as many micro-batches as the busiest one (the extra ones repeat a
    sequence at weight 0), so that a sharded model's collectives pair up."""
    targets = max(1, sum(sum(s.action_mask) for s in batch))
    if micro_batch is None or isinstance(micro_batch, int):
        micro_batch = MicroBatching(size=micro_batch or max(1, len(batch)))
    lo, hi = blocks(len(batch))[rank()] if split else (0, len(batch))
    parts = [[lo + j for j in part] for part in micro_batch.plan([len(s) for s in batch[lo:hi]])]
    loss = 0.0
    for i, part in enumerate(parts + [[0]] * (most(len(parts)) - len(parts))):
        chunk = [batch[j] for j in part]
        logp, _ = sequence_logprobs(model, chunk, micro_batch=len(chunk), grad=True, with_entropy=False,
                                    vision=vision)  # [n, L]
        pad = torch.nn.functional.pad
        mask = torch.stack([pad(torch.tensor(s.action_mask, dtype=logp.dtype), (0, logp.shape[1] - len(s)))
                            for s in chunk]).to(logp.device)  # [n, L]
        piece = -(logp * mask).sum() / targets  # this chunk's share of the batch's token-mean NLL
        real = i < len(parts)  # else a micro-batch that only pairs the collectives
        (piece * (scale if real else 0.0)).backward()
        loss += piece.item() if real else 0.0
    return loss


def demo_trajectory(ctx: Components, episode) -> Trajectory:
    """An expert episode with its response texts tokenised (demonstrations were not sampled,
    so tokenising their text is the only way to get ids)."""
    return Trajectory(episode, tuple(tuple(encode(ctx.tokenizer, t.response)) for t in episode.turns))


def writer_example(ctx: Components, episode, hindsight):
    """A Stage-1 / warm-start writer example: the prompt the self writer reads (its images
    too, with env.images), the oracle's hindsight as target."""
    style = writer_prompt(ctx.cfg.writer.prompt)
    prompt, images = writer_input(ctx.tokenizer, ctx.prompt_env.domain_description(), episode,
                                  ctx.cfg.model.max_prompt_tokens, ctx.builder.vision, style)
    target = encode(ctx.tokenizer, style.target(hindsight) + "<|im_end|>")
    return example(prompt, target, images)
