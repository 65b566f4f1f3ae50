"""Train a warm start (behaviour cloning of the scripted demonstrator), evaluate it on the
fixed panels, and save it as a self-contained warm-start checkpoint.

    python scripts/warm_start.py examples/household_small.yaml --out DIR [--set key=value ...]

``make warm-start`` rebuilds the bundled ones (``trainer/assets/warm_start/household-small``
from ``examples/household_small.yaml``, ``.../ezpoints`` from ``examples/ezpoints_small.yaml``)
with this script.  The folder holds the model and its tokenizer (``save_pretrained``) and
``warm_start.json``: the settings it was trained with (model, env, warm-start stage), the
env fingerprint (``envs.fingerprint``; a test fails when the environment moves on), the
training figures (loss, examples, seconds) and its evaluation on the panels.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", help="run config (YAML) whose model, env and warm-start stage are used")
    parser.add_argument("--out", required=True, help="folder to write the warm-start checkpoint to")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--eval-tasks", type=int, default=60, help="tasks per eval panel (0 = all)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    args = parser.parse_args(argv)

    import torch
    from tqdm.auto import tqdm

    from trainer.config import apply_overrides
    from trainer.run.resolve import load_config, resolve
    from trainer.stages.evaluate import evaluate_policy
    from trainer.stages.skill_sft import writer_validity
    from trainer.stages.warm_start import save_bundle, train_warm_start, write_card

    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = resolve(apply_overrides(load_config(args.config, args.overrides),
                                  {"stages.warm_start.cache": False, "stages.warm_start.checkpoint": "",
                                   "model.device": "cpu"}))
    start = time.perf_counter()
    with tqdm(desc="warm start", unit="batch") as bar:
        ctx, metrics = train_warm_start(cfg, bar)
    metrics["warm/seconds"] = time.perf_counter() - start
    print(json.dumps(metrics, indent=1))
    path = save_bundle(ctx, Path(args.out), metrics, {})  # kept if the evaluation is cut short
    evaluation = evaluate_policy(ctx, args.eval_tasks)
    evaluation.update({k.removeprefix("writer/"): v for k, v in writer_validity(ctx).items()})
    evaluation["writer_max_new_tokens"] = cfg.writer.max_new_tokens  # the panel's budget
    print(json.dumps(evaluation, indent=1))
    write_card(ctx, path, metrics, evaluation)
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
