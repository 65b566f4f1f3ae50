"""Each phase of a step against the bare computation it wraps (issue 37): tokens/s and ratio.

On one model, one batch and one machine, in one process, back to back:

- ``update``: the trainer's update (:func:`trainer.stages.rl.update`: its micro-batches,
  gathers, loss aggregation, clip and optimizer steps) against a bare loop over the same
  sequences packed without padding: concatenated longest first and cut into rows of the
  longest sequence's length (a sequence may straddle two rows; no padding, no mask), the
  backbone and the LM head on the scored tokens, forward and backward, nothing else;
- ``score``: the trainer's scoring pass (the student contexts with entropies, as the step runs
  it) against the same packed rows forward under ``no_grad`` with the head on the scored
  tokens;
- ``rollout`` (``--vllm``, run with the vLLM venv's python): the vLLM backend's rollout phase
  (:func:`trainer.episodes.rollout.collect`, environments included) against raw
  ``vllm.LLM.generate`` of the same engine on the same requests (each call's prompts,
  seeds and limits recorded during the rollout, replayed after a prefix-cache reset).

Tokens/s counts the sequences' tokens (update: times the PPO epochs) or the generated ones,
per CPU second of this process (``time.process_time``, all its threads: torch runs one), the
median of ``--repeats``.
Goals: update and score >= 0.8 of the bare loop, rollout >= 0.9 of raw vLLM.  Each
micro-batching given by ``--tokens`` (0 = by ``algo.micro_batch_size`` sequences) is a row,
with its ``perf/pad_share`` and ``perf/micro_batches`` over the step's scoring and update.
Settings: ``full`` (EZPoints, examples/ezpoints_small.yaml, the whole episode one sequence)
and ``window`` (household, examples/household_small.yaml with ``env.context=window``), each
from its bundled warm start.  The load average is printed: CPU time keeps most of other
processes' load out, not all of it (shared caches, memory bandwidth).

    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_limits.py [--settings full window]
        [--tokens 0 8192] [--repeats 3] [--set key=value ...]
    OMP_NUM_THREADS=1 .venv-vllm/bin/python scripts/bench_limits.py --vllm  # and the rollouts
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import os
import statistics
import time
from pathlib import Path

import torch

import trainer.stages.rl as rl
from trainer.episodes.rollout import Sampling, collect
from trainer.episodes.scoring import MicroBatching, PaddingCount, counting, score_trajectories
from trainer.models.generation import request_seed
from trainer.run.components import build_components, start_rl
from trainer.run.resolve import load_config, resolve
from trainer.stages.warm_start import bundle_path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SETTINGS = {
    "full": (EXAMPLES / "ezpoints_small.yaml", []),
    "window": (EXAMPLES / "household_small.yaml", ["env.context=window"]),
}
# a CPU-sized step: 16 trajectories, one minibatch, GRPO (no writer, no teacher)
SMALL = ["model.device=cpu", "algo.method=grpo", "rollout.tasks_per_step=4", "rollout.group_size=4",
         "algo.minibatch_size=0", "algo.ppo_epochs=1", "stages.skill_sft.enabled=false"]
GOALS = {"update": 0.8, "score": 0.8, "rollout": 0.9}


def context(setting: str, overrides: list[str]):
    path, extra = SETTINGS[setting]
    cfg = resolve(load_config(path, [*SMALL, *extra, *overrides]))
    ctx = build_components(cfg, init_from=str(bundle_path(cfg.stages.warm_start.checkpoint)))
    start_rl(ctx)
    return ctx


def with_tokens(ctx, tokens: int):
    ctx.cfg = dataclasses.replace(ctx.cfg, algo=dataclasses.replace(ctx.cfg.algo, micro_batch_tokens=tokens))
    return ctx


def packed_rows(sequences) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The sequences longest first as one stream cut into rows of the longest's length:
    ids [R, C], position ids [R, C] (restarting at every sequence) and the scored mask [R, C]
    (the stream's last row is cut to its own length: no padding anywhere)."""
    order = sorted(sequences, key=len, reverse=True)
    ids = torch.tensor([i for s in order for i in s.input_ids])
    pos = torch.tensor([j for s in order for j in range(len(s))])
    act = torch.tensor([m for s in order for m in s.action_mask], dtype=torch.bool)
    width = len(order[0])
    return tuple(t.split(width) for t in (ids, pos, act))


def bare_pass(model, rows, budget: int, grad: bool) -> None:
    """Forward (and backward) of the packed rows, as many rows a forward as ``budget`` tokens
    allow (at least one): backbone, LM head on the scored positions, log-softmax, the sum of
    the targets' log-probs."""
    ids, pos, act = rows
    full = [i for i, r in enumerate(ids) if len(r) == len(ids[0])]
    per = max(1, budget // len(ids[0]))
    groups = [full[i:i + per] for i in range(0, len(full), per)] + [[i] for i in range(len(ids)) if i not in full]
    with torch.enable_grad() if grad else torch.no_grad():
        for group in groups:
            x, p, a = (torch.stack([t[i] for i in group]) for t in (ids, pos, act))
            hidden = model.model(input_ids=x, position_ids=p).last_hidden_state  # [r, C, H]
            where = a[:, 1:]
            logits = model.get_output_embeddings()(hidden[:, :-1][where]).float()  # [K, V]
            loss = -torch.log_softmax(logits, -1).gather(-1, x[:, 1:][where][:, None]).sum()
            if grad:
                loss.backward()


def timed(fn, repeats: int) -> float:
    """Median CPU seconds of this process (all its threads) over ``repeats`` calls of ``fn``:
    on a machine shared with other work, wall time measures the others' load as well."""
    seconds = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        seconds.append(time.process_time() - start)
    return statistics.median(seconds)


def phase_rows(ctx, batch, tokens_list: list[int], repeats: int) -> list[dict]:
    """update and score, trainer and bare, for each micro-batching of ``tokens_list``."""
    sequences = ctx.builder.build_batch(batch.trajectories, batch.rollout_skills)
    n_tokens = sum(len(s) for s in sequences)
    rows = packed_rows(sequences)
    out = []
    for tokens in tokens_list:
        with_tokens(ctx, tokens)
        budget = tokens or ctx.cfg.algo.micro_batch_size * max(len(s) for s in sequences)
        seconds, pad = measure(ctx, batch, rows, budget, repeats)
        for phase, (trainer_s, bare_s) in seconds.items():
            work = n_tokens * (ctx.cfg.algo.ppo_epochs if phase == "update" else 1)
            out.append({"phase": phase, "tokens": tokens, "trainer": work / trainer_s, "bare": work / bare_s,
                        "pad_share": pad["perf/pad_share"],
                        "micro_batches": pad["perf/micro_batches"] / repeats})  # a step's update + score
    return out


def measure(ctx, batch, rows, budget: int, repeats: int) -> tuple[dict[str, tuple[float, float]], dict]:
    """Median seconds of the update and the scoring pass, trainer and bare, and the padding
    metrics of the trainer's passes."""
    state = copy.deepcopy(ctx.model.state_dict())
    count = PaddingCount()

    def update():
        ctx.optimizer = torch.optim.AdamW(ctx.model.parameters(), lr=1e-6)
        with counting(count):
            rl.update(ctx, batch, 1, rl.PhaseTimer())
        ctx.model.load_state_dict(state)

    def score():
        with counting(count):
            score_trajectories(ctx.model, ctx.builder, batch.trajectories, batch.rollout_skills,
                               micro_batch=MicroBatching.of(ctx.cfg.algo), with_entropy=True,
                               temperature=ctx.cfg.rollout.temperature)

    def bare_update():
        bare_pass(ctx.model, rows, budget, grad=True)
        ctx.model.zero_grad(set_to_none=True)

    seconds = {"update": (timed(update, repeats), timed(bare_update, repeats)),
               "score": (timed(score, repeats), timed(lambda: bare_pass(ctx.model, rows, budget, False), repeats))}
    return seconds, count.metrics()


def rollout_row(ctx, step: int, repeats: int) -> dict:
    """The vLLM backend's rollout phase against raw ``LLM.generate`` on its recorded requests."""
    backend, cfg = ctx.backend, ctx.cfg
    llm = backend.llm
    calls, real = [], llm.generate

    def record(requests, sampling_params=None, **kw):
        calls.append(([dict(r) for r in requests], [copy.copy(p) for p in sampling_params]))
        return real(requests, sampling_params=sampling_params, **kw)

    tasks = [t for t in ctx.train_tasks[:cfg.rollout.tasks_per_step] for _ in range(cfg.rollout.group_size)]
    sampling = Sampling(cfg.rollout.max_new_tokens, cfg.rollout.temperature, cfg.rollout.top_p)
    generated = 0

    def rollout():
        nonlocal generated
        llm.reset_prefix_cache()
        _, generated = collect(ctx.make_env, tasks, ctx.builder, backend, sampling,
                               seed=request_seed("rollout", cfg.seed, step))

    llm.generate = record
    rollout()  # warm-up, and the requests
    llm.generate = real
    trainer_s = timed(rollout, repeats)

    def raw():
        llm.reset_prefix_cache()
        for requests, params in calls:
            real(requests, sampling_params=params, use_tqdm=False)

    raw_s = timed(raw, repeats)
    return {"phase": "rollout", "tokens": -1, "trainer": generated / trainer_s, "bare": generated / raw_s,
            "pad_share": float("nan"), "micro_batches": float(len(calls))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--tokens", nargs="*", type=int, default=[0, 8192],
                        help="micro-batch token budgets to measure (0 = by algo.micro_batch_size; none: "
                             "no update or scoring figures)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--vllm", action="store_true", help="also the rollouts, with model.backend=vllm")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"load average {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores), torch {torch.__version__}, "
          f"median of {args.repeats}")
    print(f"{'setting':8s} {'phase':8s} {'micro-batches by':18s} {'trainer tok/s':>13s} {'bare tok/s':>11s} "
          f"{'ratio':>6s} {'goal':>5s} {'pad_share':>9s} {'micro-batches':>13s}")
    for setting in args.settings:
        overrides = [*args.overrides, *(["model.backend=vllm"] if args.vllm else [])]
        ctx = context(setting, overrides)
        batch = rl.collect_batch(ctx, 1, rl.PhaseTimer())
        rows = phase_rows(ctx, batch, args.tokens, args.repeats)
        if args.vllm:
            rows.append(rollout_row(ctx, 2, args.repeats))
        n = len(ctx.builder.build_batch(batch.trajectories, batch.rollout_skills))
        for r in rows:
            how = ("raw LLM.generate" if r["tokens"] < 0 else f"{r['tokens']} tokens" if r["tokens"]
                   else f"{ctx.cfg.algo.micro_batch_size} sequences")
            ratio = r["trainer"] / r["bare"]
            print(f"{setting:8s} {r['phase']:8s} {how:18s} {r['trainer']:13.0f} {r['bare']:11.0f} {ratio:6.2f} "
                  f"{GOALS[r['phase']]:5.1f} {r['pad_share']:9.3f} {r['micro_batches']:13.1f}")
        print(f"{setting}: {len(batch.trajectories)} trajectories, {n} sequences, "
              f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
