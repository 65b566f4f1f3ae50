"""Benchmark: scoring a 15-turn episode in the ``full`` context vs per-turn ``window`` samples.

Tiny backbone on CPU (default TinyModelConfig, tokenizer trained on the episode's text).
Prints the token counts and the median wall time of ``sequence_logprobs`` (no_grad and
forward+backward) for: full (one sequence), window batched (all turns in one
micro-batch) and window looped (one forward per turn).  Target: full >= 3x faster than
per-turn window.

    .venv/bin/python scripts/bench_scoring.py [--turns 15] [--repeats 5] [--history 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from envs.base import Episode, Task, Turn, format_response
from trainer.config import TinyModelConfig
from trainer.episodes.samples import SampleBuilder, Trajectory
from trainer.episodes.scoring import sequence_logprobs
from trainer.models.backbones import build_tiny_model, train_tokenizer
from trainer.models.chat import encode

PLACES = [
    "cabinet",
    "countertop",
    "drawer",
    "shelf",
    "sinkbasin",
    "fridge",
    "microwave",
    "stoveburner",
]
THINGS = ["apple", "mug", "knife", "spatula", "plate", "bowl", "potato", "egg", "kettle", "pan"]


class BenchEnv:
    """ALFWorld-like prompt pieces."""

    def system_prompt(self) -> str:
        return (
            "You are an expert agent in a household. Each turn, think briefly inside <think></think> "
            "and then give exactly one admissible action inside <action></action>."
        )

    def task_instruction(self, task: Task) -> str:
        return f"Your task is to: {task.instruction}"

    def format_observation(self, observation: str) -> str:
        return observation


def episode(turns: int) -> Episode:
    obs = []
    for t in range(turns + 1):
        place, items = (
            PLACES[t % len(PLACES)],
            ", ".join(f"a {THINGS[(t + k) % len(THINGS)]} {k + 1}" for k in range(5)),
        )
        obs.append(
            f"You arrive at {place} {t % 3 + 1}. On the {place} {t % 3 + 1}, you see {items}. "
            f"Admissible actions: go to {PLACES[(t + 1) % 8]} 1, take {THINGS[t % 10]} 1 from {place} 1, look."
        )
    task = Task(
        id="household/bench/0",
        env="household",
        split="bench",
        instruction="put a clean apple in fridge",
    )
    steps = [
        Turn(
            obs[t],
            format_response(
                f"go to {PLACES[(t + 1) % 8]} 1", f"The apple is not on the {PLACES[t % 8]}."
            ),
            f"go to {PLACES[(t + 1) % 8]} 1",
            True,
            0.0,
            obs[t + 1],
            str(t),
            None,
            None,
        )
        for t in range(turns)
    ]
    return Episode(task, steps, success=False, score=0.0, first_observation=obs[0])


def median_time(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=15)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--history", type=int, default=2, help="window context N")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    env, ep = BenchEnv(), episode(args.turns)
    texts = [env.system_prompt()] + [t.observation + " " + t.response for t in ep.turns] * 10
    tokenizer = train_tokenizer(texts, TinyModelConfig().vocab_size)
    model = build_tiny_model(tokenizer, TinyModelConfig(), seed=0)
    traj = Trajectory(ep, [encode(tokenizer, t.response) for t in ep.turns])
    full = SampleBuilder(tokenizer, env, "full", max_prompt_tokens=8192).build(traj)
    window = SampleBuilder(
        tokenizer, env, "window", history_window=args.history, max_prompt_tokens=8192
    ).build(traj)

    def run(seqs, micro, grad):
        def go():
            logp, _ = sequence_logprobs(model, seqs, micro, grad=grad)
            if grad:
                logp.sum().backward()
                model.zero_grad(set_to_none=True)

        return go

    cases = {
        "full": (full, 1),
        f"window (N={args.history}) batched": (window, len(window)),
        f"window (N={args.history}) looped": (window, 1),
    }
    print(
        f"{args.turns}-turn episode, tiny backbone {sum(p.numel() for p in model.parameters()) / 1e3:.0f}k params, "
        f"{args.threads} CPU thread(s), median of {args.repeats}"
    )
    print(f"{'mode':28s} {'seqs':>5s} {'tokens':>7s} {'no_grad ms':>11s} {'fwd+bwd ms':>11s}")
    results = {}
    for name, (seqs, micro) in cases.items():
        inf = median_time(run(seqs, micro, False), args.repeats)
        train = median_time(run(seqs, micro, True), args.repeats)
        results[name] = (inf, train)
        print(
            f"{name:28s} {len(seqs):5d} {sum(len(s) for s in seqs):7d} {inf * 1e3:11.1f} {train * 1e3:11.1f}"
        )
    base = results["full"]
    for name, (inf, train) in results.items():
        if name != "full":
            print(
                f"speed-up of full over {name}: {inf / base[0]:.1f}x no_grad, {train / base[1]:.1f}x fwd+bwd"
            )


if __name__ == "__main__":
    main()
