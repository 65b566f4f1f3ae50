"""Seconds a GRPO step: this trainer beside TRL's ``GRPOTrainer`` on the same task (issue 37).

Both trainers run in one process, back to back, on the same single-turn task: EZPoints cut
to one turn (``env.max_turns=1``: the first move of a deal; reward -0.1 for an invalid move,
else 0, from the environment itself in both), the same tiny model and tokenizer (the bundled
EZPoints warm start), the same prompts (the chat prompts this trainer builds, decoded to text
for TRL), group size, prompts a step, completion limit, temperature, KL coefficient (both with
a frozen reference), clip, loss aggregation (seq-mean-token-mean, TRL's ``loss_type="grpo"``),
one PPO epoch and one optimizer step a batch, both generating with transformers on the CPU,
one torch thread.  Seconds are CPU seconds of the process per step (``time.process_time``;
the machine may be shared), the median over the steps after the first.  Goal: this trainer
no slower (ratio <= 1).

What differs in the two steps' work: this trainer stops a completion at ``</action>`` (TRL at
the end-of-sequence token or the limit: its generated tokens are printed beside; at the
default limit of 24 both generate about the same tokens, at 48 TRL twice as many), scores the
old policy's log-probs and entropies in a separate no-grad pass (TRL's one epoch reuses the
live forward), computes the LM head only on the scored tokens, and plays the environment
through its episode machinery; TRL pads prompts and completions of a step into one batch and
runs gradient checkpointing (its default, kept).

TRL goes into a scratch virtual environment that this script builds (``--venv``, default
``~/.cache/hindsight-lab/bench-trl``) on top of the running environment's packages (a
``.pth`` file; torch pinned to the running version, so a CPU build stays the CPU build): the
project's own install is never changed.  The script then runs itself with that venv's python.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_peer_trl.py [--steps 4] [--tasks 4]
        [--group 4] [--max-new-tokens 24] [--trl-version 1.16.0]
"""

from __future__ import annotations

import argparse
import os
import site
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "examples" / "ezpoints_small.yaml"


def ensure_venv(folder: Path, trl_version: str) -> Path:
    """The scratch venv's python, built on first use: a venv that sees the running
    environment's packages and adds TRL and datasets with pip."""
    import torch  # the running environment's: pinned in the venv

    python = folder / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
        inner = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"], check=True,
                               capture_output=True, text=True).stdout.strip()
        Path(inner, "hindsight_base.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    pinned = folder / "constraints.txt"
    pinned.write_text(f"torch=={torch.__version__.split('+')[0]}\n")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "-c", str(pinned), f"trl=={trl_version}", "datasets"],
                   check=True)
    return python


def our_steps(cfg, steps: int) -> tuple[list[float], list[int]]:
    """CPU seconds and generated tokens of each of ``steps`` steps of this trainer."""
    from trainer.run.components import build_components, start_rl
    from trainer.stages.rl import PhaseTimer, collect_batch, update
    from trainer.stages.warm_start import bundle_path

    ctx = build_components(cfg, init_from=str(bundle_path(cfg.stages.warm_start.checkpoint)))
    start_rl(ctx)
    seconds, tokens = [], []
    for step in range(1, steps + 1):
        start = time.process_time()
        batch = collect_batch(ctx, step, PhaseTimer())
        update(ctx, batch, step, PhaseTimer())
        seconds.append(time.process_time() - start)
        tokens.append(batch.generated_tokens)
    return seconds, tokens


def trl_steps(cfg, steps: int) -> tuple[list[float], list[int], str]:
    """CPU seconds and generated tokens of each of ``steps`` steps of TRL's GRPOTrainer."""
    import trl
    from datasets import Dataset
    from transformers import TrainerCallback

    from trainer.models.backbones import load_pretrained
    from trainer.run.components import build_components
    from trainer.stages.warm_start import bundle_path

    ctx = build_components(cfg, init_from=str(bundle_path(cfg.stages.warm_start.checkpoint)))
    model, tokenizer = load_pretrained(str(bundle_path(cfg.stages.warm_start.checkpoint)), ctx.model.dtype, "cpu")
    tasks = {t.id: t for t in ctx.train_tasks}
    env = ctx.make_env()
    prompts = []
    for task in list(tasks.values())[:cfg.rollout.tasks_per_step * steps]:
        observation = env.reset(task)
        ids, _ = ctx.builder.rollout_input(task, [], [], observation)
        prompts.append({"prompt": tokenizer.decode(ids), "task_id": task.id})

    def reward(prompts, completions, task_id, **_):
        out = []
        for text, tid in zip(completions, task_id):
            env.reset(tasks[tid])
            out.append(float(env.step(text).reward))
        return out

    marks: list[float] = []
    generated: list[int] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            marks.append(time.process_time())

        def on_step_end(self, args, state, control, **kwargs):
            marks.append(time.process_time())

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "completions/mean_length" in logs:
                generated.append(round(logs["completions/mean_length"] * args.per_device_train_batch_size))

    algo, rollout = cfg.algo, cfg.rollout
    with tempfile.TemporaryDirectory(prefix="bench-trl-") as out:
        config = trl.GRPOConfig(
            output_dir=out, use_cpu=True, report_to="none", save_strategy="no", logging_steps=1, seed=cfg.seed,
            max_steps=steps, per_device_train_batch_size=rollout.tasks_per_step * rollout.group_size,
            gradient_accumulation_steps=1, num_generations=rollout.group_size, num_iterations=1,
            max_completion_length=rollout.max_new_tokens, temperature=rollout.temperature, top_p=rollout.top_p,
            beta=algo.kl_coef, epsilon=algo.clip_eps, loss_type="grpo", learning_rate=algo.lr,
            max_grad_norm=algo.grad_clip, weight_decay=algo.weight_decay, dataloader_num_workers=0,
        )
        runner = trl.GRPOTrainer(model=model, reward_funcs=reward, args=config, processing_class=tokenizer,
                                 train_dataset=Dataset.from_list(prompts), callbacks=[Clock()])
        runner.train()
    seconds = [end - begin for begin, end in zip(marks[::2], marks[1::2])]
    return seconds, generated, trl.__version__


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--tasks", type=int, default=4, help="prompts a step")
    parser.add_argument("--group", type=int, default=4, help="completions a prompt (GRPO group)")
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--trl-version", default="1.16.0")
    parser.add_argument("--venv", type=Path, default=Path.home() / ".cache" / "hindsight-lab" / "bench-trl")
    args = parser.parse_args()
    try:
        import trl  # noqa: F401  (inside the scratch venv)
    except ImportError:
        python = ensure_venv(args.venv, args.trl_version)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        sys.exit(subprocess.run([str(python), __file__, *sys.argv[1:]], env=env).returncode)
    import torch
    import transformers

    from trainer.run.resolve import load_config, resolve

    torch.set_num_threads(1)
    cfg = resolve(load_config(CONFIG, [
        "model.device=cpu", "env.max_turns=1", "env.invalid_penalty=0.1", "algo.method=grpo",
        f"rollout.tasks_per_step={args.tasks}", f"rollout.group_size={args.group}",
        f"rollout.max_new_tokens={args.max_new_tokens}", "algo.minibatch_size=0", "algo.ppo_epochs=1",
        "algo.loss_agg=seq-mean-token-mean", "stages.skill_sft.enabled=false", "algo.kl_coef=0.01"]))
    ours, our_tokens = our_steps(cfg, args.steps)
    theirs, their_tokens, version = trl_steps(cfg, args.steps)
    mine, peer = statistics.median(ours[1:] or ours), statistics.median(theirs[1:] or theirs)
    print(f"load average {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores); torch {torch.__version__}, "
          f"transformers {transformers.__version__}, TRL {version}")
    print(f"task: EZPoints, one turn; {args.tasks} prompts x {args.group} completions, <= {args.max_new_tokens} "
          f"new tokens, {args.steps} steps (median of steps 2..{args.steps}, CPU seconds)")
    print(f"hindsight-lab  {mine:7.2f} s/step  generated tokens/step {our_tokens}")
    print(f"TRL GRPO       {peer:7.2f} s/step  generated tokens/step {their_tokens}")
    print(f"ratio (this / TRL) {mine / peer:.2f}  goal <= 1.0 {'ok' if mine <= peer else 'MISSED'}")


if __name__ == "__main__":
    main()
