"""Rollout cost on CPU with and without reusing each episode's KV cache across turns.

Plays the same evaluation tasks with the bundled warm start of the CPU level
(examples/household_small.yaml) twice per temperature: once with the transformers backend as
it runs (``reuse_prefixes``: each turn prefills only its new tokens), once with every turn
prefilled from scratch.  Prints seconds, generated tokens/s, the prompt tokens served from the
kept cache, and whether both runs produced the same tokens.

    .venv/bin/python scripts/bench_rollout.py [--tasks 32] [--threads 1]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=32, help="eval_seen tasks played per run")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config field of examples/household_small.yaml (repeatable), "
                             "e.g. env.action_format=numbered with stages.warm_start.checkpoint=DIR")
    args = parser.parse_args(argv)

    import torch

    from trainer.episodes.rollout import Sampling, collect
    from trainer.models.generation import GenerationBackend
    from trainer.models.transformers_backend import TransformersBackend
    from trainer.run.components import build_components
    from trainer.run.resolve import load_config, resolve
    from trainer.stages.warm_start import bundle_path

    class Prefill(TransformersBackend):
        reuse_prefixes = GenerationBackend.reuse_prefixes

    torch.set_num_threads(args.threads)
    cfg = resolve(load_config(ROOT / "examples" / "household_small.yaml", ["model.device=cpu", *args.overrides]))
    ctx = build_components(cfg, init_from=str(bundle_path(cfg.stages.warm_start.checkpoint)))
    tasks = ctx.prompt_env.panel("eval_seen")[: args.tasks]
    print(f"{len(tasks)} episodes, env {cfg.env.name} ({cfg.env.level}), context {cfg.env.context}, "
          f"max {cfg.env.max_turns} turns, {args.threads} thread(s)")
    for temperature in (0.0, 0.7):
        runs = {}
        for name, backend in (("reuse", TransformersBackend(ctx.model, ctx.tokenizer)),
                              ("prefill", Prefill(ctx.model, ctx.tokenizer))):
            start = time.perf_counter()
            trajectories, generated = collect(ctx.make_env, tasks, ctx.builder, backend,
                                              Sampling(cfg.rollout.max_new_tokens, temperature), seed=3)
            seconds = time.perf_counter() - start
            runs[name] = [t.response_ids for t in trajectories]
            print(f"T={temperature} {name:7s} {seconds:6.1f}s  {generated / seconds:6.0f} tokens/s  "
                  f"prompt tokens from the kept cache: {backend.reused_tokens}")
            runs[name + "_s"] = seconds
        print(f"T={temperature} speed-up {runs['prefill_s'] / runs['reuse_s']:.2f}x, "
              f"same tokens: {runs['reuse'] == runs['prefill']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
