"""GPU check: one RL step of GRPO, SEED and ETRO at a paper shape, measured; a 7B-shape scoring pass.

On CUDA: ``qwen2.5-1.5b-shape`` (random weights, trainer/models/paper_shapes.py) in bfloat16 with gradient
checkpointing, one RL step per method on a household batch shaped like the papers' (``--tasks``
tasks x 8 trajectories, window context with N = 2, KL reference on, each method's default
writer and teacher), then ``qwen2.5-7b-shape`` scores GRPO's batch without gradients.  Printed
and saved per method: seconds per phase (rollout, write, score, reference, teacher, advantage,
update; ``update`` includes SEED's current-policy teacher), rollout tokens/s (generated tokens
over rollout seconds), training tokens/s (tokens of the sequences forwarded and back-propagated
in the update over update seconds), peak memory beside ``hindsight memory``'s estimate for
the same config (trainer/run/memory.py) and, at each phase boundary (start-up, rollout, write,
score, reference, teacher, advantage, update), the peak allocated, reserved and free memory
beside the planner's estimate of that phase, the share of one weight matrix of the float32 masters
that the update changed and the share that an lr-sized step can change at all in their dtype.
The update is the trainer's own: float32 master weights with bfloat16 autocast, backward per
micro-batch (``algo.micro_batch_size``), gradient checkpointing.
Then SEED's and ETRO's step time over GRPO's against the goals (SEED <= 1.15x, ETRO <= 1.20x).
Where vLLM is importable, the GRPO batch's rollout is also played on the vLLM backend and its
tokens/s set against the transformers backend's (goal: at least 5x); where it is not (the lent
GPU image has no vLLM), the results say that vLLM was not measured.
A random model emits noise, so every response runs to ``--new-tokens`` and
every episode to ``--turns``: the figures are those of the budget.

Without CUDA (or with ``--device cpu``) the same code runs at ``qwen2.5-tiny-shape`` on a tiny
batch: a pipeline check whose figures say nothing about a GPU.

Results: ``<out>/gpu_check.json`` (rewritten after every measurement), ``<out>/gpu_check.md``
and one MLflow run per measurement in ``sqlite:///<out>/mlruns.db`` (experiment gpu-check).
On a lent GPU machine, with the bundle of ``make gpu-bundle`` carried along:

    python scripts/gpu_check.py --bundle .gpu-bundle --out $OUT/gpu_check
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import platform
import resource
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
METHODS = ("grpo", "seed", "etro")
TARGETS = {"seed": 1.15, "etro": 1.20}
PHASES = ("rollout", "write", "score", "reference", "teacher", "advantage", "update")
EXPERIMENT = "gpu-check"


@dataclass(frozen=True)
class Settings:
    """What one check measures (a device's defaults, then the command-line flags)."""

    backbone: str
    score_backbone: str
    dtype: str
    tasks: int
    group: int
    turns: int
    new_tokens: int
    writer_tokens: int


GPU = Settings("qwen2.5-1.5b-shape", "qwen2.5-7b-shape", "bfloat16", tasks=4, group=8, turns=10,
               new_tokens=128, writer_tokens=96)
CPU = Settings("qwen2.5-tiny-shape", "qwen2.5-tiny-shape", "float32", tasks=1, group=2, turns=2,
               new_tokens=4, writer_tokens=4)


class CheckError(Exception):
    """Bad usage: printed as one ``error:`` line, exit 2."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                        help="auto: cuda when available (paper shapes), else cpu (tiny shape)")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "gpu_check", help="results folder")
    parser.add_argument("--bundle", type=Path, default=None,
                        help="install this wheel folder (make gpu-bundle) into <out>/deps first")
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated methods to step")
    parser.add_argument("--backbone", help="shape of the RL steps (default 1.5b on cuda, tiny on cpu)")
    parser.add_argument("--score-backbone", help="shape of the scoring pass (default 7b on cuda, tiny on cpu)")
    parser.add_argument("--tasks", type=int, help="tasks per step (8 trajectories each on cuda)")
    parser.add_argument("--group", type=int, help="trajectories per task")
    parser.add_argument("--turns", type=int, help="turn budget per episode")
    parser.add_argument("--new-tokens", type=int, help="response token budget per turn")
    parser.add_argument("--writer-tokens", type=int, help="self writer's token budget (SEED)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="any other run-config override, e.g. --set writer.kind=oracle")
    return parser.parse_args(argv)


def _given(args: argparse.Namespace) -> dict:
    """The Settings fields set on the command line; counts must be >= 1."""
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(Settings)
             if getattr(args, f.name, None) is not None}
    bad = [f"--{k.replace('_', '-')}" for k, v in given.items() if isinstance(v, int) and v < 1]
    if bad:
        raise CheckError(f"{', '.join(bad)} must be >= 1")
    return given


def _methods(args: argparse.Namespace) -> list[str]:
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if not methods or ("grpo" in methods and methods[0] != "grpo"):
        raise CheckError("--methods: list grpo first (the ratios and the scoring pass use its batch)")
    return methods


def settings(args: argparse.Namespace, device: str) -> Settings:
    return dataclasses.replace(GPU if device == "cuda" else CPU, **_given(args))


def install_bundle(bundle: Path, out: Path) -> Path:
    """Install the wheel folder into a fresh folder under ``out`` and append it to sys.path
    (after the image's own packages, which win where both have a distribution)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from gpu_bundle import install

    out.mkdir(parents=True, exist_ok=True)
    target = Path(tempfile.mkdtemp(prefix="deps-", dir=out))
    install(bundle, target)
    sys.path.append(str(target))
    return target


def run_config(s: Settings, device: str, out: Path, overrides: list[str]):
    """The unresolved RunConfig every measurement starts from."""
    from trainer.config import RunConfig, apply_overrides

    cfg = apply_overrides(RunConfig(), {
        "model.backbone": s.backbone, "model.dtype": s.dtype, "model.device": device,
        "model.gradient_checkpointing": True,
        "env.name": "household", "env.max_turns": s.turns, "env.context": "window", "env.history_window": 2,
        "rollout.tasks_per_step": s.tasks, "rollout.group_size": s.group, "rollout.max_new_tokens": s.new_tokens,
        "writer.max_new_tokens": s.writer_tokens, "stages.warm_start.enabled": False,
        "tracking.records": False, "tracking.experiment": EXPERIMENT, "output.dir": str(out),
    })
    return apply_overrides(cfg, overrides)


# ------------------------------------------------------------------------------ measuring


def _sync(device: str):
    import torch

    return torch.cuda.synchronize if device == "cuda" else None


def reset_memory(device: str) -> None:
    """Free the previous measurement's tensors and restart the CUDA peak (a no-op on CPU,
    whose peak resident set cannot be reset)."""
    import torch

    if device == "cuda":
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def memory(device: str) -> dict[str, float]:
    """Peak memory in MiB since the last reset: CUDA allocated and reserved, or on CPU the
    process's peak resident set (never reset: the largest of every measurement so far)."""
    import torch

    if device == "cuda":
        return {"peak_mem_mb": torch.cuda.max_memory_allocated() / 2**20,
                "peak_reserved_mb": torch.cuda.max_memory_reserved() / 2**20}
    return {"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def warm_up(ctx) -> None:
    """First calls pay for kernel selection and allocator growth: one short rollout of two
    episodes and a scored forward/backward, before anything is timed."""
    from trainer.episodes.rollout import Sampling, collect
    from trainer.episodes.scoring import score_trajectories

    trajs, _ = collect(ctx.make_env, ctx.train_tasks[:2], ctx.builder, ctx.backend, Sampling(4), seed=0)
    batch, _ = score_trajectories(ctx.model, ctx.builder, trajs, micro_batch=16, grad=True)
    batch.logp.sum().backward()
    ctx.model.zero_grad(set_to_none=True)


def _probe(model):
    """The first layer's first weight matrix, read before and after the update:
    ``changed_fraction`` is the share of its entries the step changed (zero when the step had
    no gradient, e.g. GRPO on a batch whose rewards all tie, as a random model's do) and
    ``lr_step_kept`` the share that an lr-sized step changes at all in the weights' dtype (an
    AdamW step is about lr per entry; bfloat16 keeps 8 bits of mantissa)."""
    return next(p for n, p in model.named_parameters() if ".layers.0." in n and p.ndim == 2)


# The trainer's phases (PhaseTimer's names) -> the planner's phase each falls in (trainer/run/memory.py).
PLANNER_PHASES = {"start-up": "startup", "rollout": "rollout", "write": "rollout", "score": "score",
                  "reference": "score", "teacher": "score", "advantage": "score", "update": "update"}


def _proc_status(key: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(f"{key}:"))


class Timeline:
    """Memory at each phase boundary beside the planner's estimate of that phase: on CUDA the
    peak allocated since the previous boundary, what PyTorch reserves, and the driver's free
    memory (which an engine's memory takes too); on a CPU the peak resident set since the
    previous boundary and the resident set (the process's, libraries included)."""

    def __init__(self, device: str, plan):
        self.device, self.plan, self.rows = device, plan, []

    def mark(self, after: str) -> None:
        import torch

        phase = PLANNER_PHASES.get(after, after)
        row = {"after": after, "phase": phase, "estimate_gib": self.plan.phase(phase) / 2**30 if self.plan else None}
        if self.device == "cuda":
            torch.cuda.synchronize()
            free, _ = torch.cuda.mem_get_info()
            row.update(peak_allocated_gib=torch.cuda.max_memory_allocated() / 2**30,
                       reserved_gib=torch.cuda.memory_reserved() / 2**30, free_gib=free / 2**30)
            torch.cuda.reset_peak_memory_stats()
        else:
            row.update(peak_rss_gib=_proc_status("VmHWM") / 2**30, rss_gib=_proc_status("VmRSS") / 2**30)
            with open("/proc/self/clear_refs", "w") as f:  # restart the high-water mark
                f.write("5")
        self.rows.append(row)

    def peak_mb(self) -> float:
        """The step's peak (allocated on CUDA, resident on a CPU) over its boundaries, in MiB."""
        key = "peak_allocated_gib" if self.device == "cuda" else "peak_rss_gib"
        return max((r[key] for r in self.rows if r["after"] != "start-up"), default=0.0) * 1024


def _marking_timer(sync, timeline: Timeline):
    """A PhaseTimer that marks the timeline at the end of every outermost phase (a phase
    inside another, e.g. SEED's teacher inside the update, belongs to that one's peak)."""
    from contextlib import contextmanager

    from trainer.stages.rl import PhaseTimer

    class Marking(PhaseTimer):
        @contextmanager
        def __call__(self, phase: str):
            outermost = not self._inner
            with PhaseTimer.__call__(self, phase):
                yield
            if outermost:
                timeline.mark(phase)

    return Marking(sync=sync)


def measure_method(base, method: str, device: str, warm: bool) -> tuple[dict, object]:
    """One RL step of ``method`` from a fresh context, memory marked at each phase boundary
    (:class:`Timeline`).  Returns the result and what the scoring pass needs of it:
    (tokenizer, sample builder, the step's trajectories)."""
    from trainer.config import apply_overrides
    from trainer.run.components import build_components, start_rl
    from trainer.run.resolve import resolve
    from trainer.stages.rl import collect_batch, update

    cfg = resolve(apply_overrides(base, {"algo.method": method}))
    timeline = Timeline(device, planned(cfg))
    reset_memory(device)
    ctx = build_components(cfg)
    timeline.mark("start-up")
    start_rl(ctx)
    if warm:
        warm_up(ctx)
    estimate = memory_estimate(cfg, device)
    reset_memory(device)
    probe = _probe(ctx.model)
    before = probe.detach().clone()
    sync = _sync(device)
    timer = _marking_timer(sync, timeline)
    start = time.perf_counter()
    batch = collect_batch(ctx, 1, timer)
    losses, finite = update(ctx, batch, 1, timer)
    if sync is not None:
        sync()
    step = time.perf_counter() - start
    train_tokens = sum(len(s) for s in ctx.builder.build_batch(batch.trajectories, batch.rollout_skills))
    train_tokens *= cfg.algo.ppo_epochs
    hindsights = batch.hindsights or []
    result = {
        "status": "ok" if finite else "non-finite loss",
        "step_s": step,
        "phases_s": {p: timer.seconds[p] for p in PHASES if p in timer.seconds},
        "trajectories": len(batch.trajectories),
        "turns": sum(len(t.turns) for t in batch.trajectories),
        "generated_tokens": batch.generated_tokens,
        "rollout_tokens_per_s": batch.generated_tokens / max(timer.seconds["rollout"], 1e-9),
        "train_tokens": train_tokens,
        "train_tokens_per_s": train_tokens / max(timer.seconds["update"], 1e-9),
        "scored_action_tokens": int(batch.old.mask.sum()),
        "writer": cfg.writer.kind,
        "teacher": cfg.algo.teacher,
        "writer_invalid_rate": (sum(not h.valid for h in hindsights) / len(hindsights)) if hindsights else None,
        "changed_fraction": float((probe.detach() != before).float().mean()),
        "lr_step_kept": float(((before + cfg.algo.lr) != before).float().mean()),
        "loss": {k: v for k, v in losses.items() if k.startswith("loss/")},
        "estimate_mb": estimate,
        **memory(device),
        "timeline": timeline.rows,
    }
    if device == "cuda":  # the timeline restarts the peak at every boundary
        result["peak_mem_mb"] = max(result["peak_mem_mb"], timeline.peak_mb())
    keep = (ctx.tokenizer, ctx.builder, batch.trajectories)
    del ctx, batch, probe, before
    reset_memory(device)
    return result, keep


def planned(cfg):
    """``hindsight memory``'s plan for ``cfg`` on this device (this GPU's size, or this machine's memory)."""
    from trainer.run.memory import plan_memory

    return plan_memory(cfg)


def memory_estimate(cfg, device: str) -> float | None:
    """``hindsight memory``'s peak for ``cfg`` on this device, in MiB (None without CUDA: a
    CPU's peak resident set is the whole process's, not comparable)."""
    import torch

    from trainer.run.memory import plan_memory

    if device != "cuda":
        return None
    total = torch.cuda.get_device_properties(0).total_memory / 2**30
    return plan_memory(cfg, total).peak / 2**20


def measure_rollout_backends(base, device: str) -> dict:
    """The GRPO batch's rollout on the transformers and the vLLM backend, same weights and
    tasks: generated tokens/s of each and their ratio (the goal: vLLM at least 5x)."""
    import importlib.util

    from trainer.config import apply_overrides
    from trainer.episodes.rollout import Sampling, collect
    from trainer.models.generation import request_seed
    from trainer.run.components import build_components
    from trainer.run.resolve import resolve

    if importlib.util.find_spec("vllm") is None:
        return {"status": "not measured: vLLM is not installed on this machine"}
    out = {}
    for backend in ("transformers", "vllm"):
        cfg = resolve(apply_overrides(base, {"algo.method": "grpo", "model.backend": backend}))
        ctx = build_components(cfg)
        tasks = [t for t in ctx.train_tasks[:cfg.rollout.tasks_per_step] for _ in range(cfg.rollout.group_size)]
        sampling = Sampling(cfg.rollout.max_new_tokens, cfg.rollout.temperature)
        collect(ctx.make_env, tasks[:2], ctx.builder, ctx.backend, sampling, seed=0)  # warm-up
        sync = _sync(device)
        start = time.perf_counter()
        _, generated = collect(ctx.make_env, tasks, ctx.builder, ctx.backend, sampling, seed=request_seed("check"))
        if sync is not None:
            sync()
        seconds = time.perf_counter() - start
        out[backend] = {"seconds": seconds, "generated_tokens": generated, "tokens_per_s": generated / seconds}
        del ctx
        reset_memory(device)
    ratio = out["vllm"]["tokens_per_s"] / out["transformers"]["tokens_per_s"]
    return {"status": "ok", **out, "ratio": ratio, "target": 5.0, "met": ratio >= 5.0}


def measure_scoring(backbone: str, kept, dtype: str, device: str, seed: int) -> dict:
    """A no-grad scoring pass of ``backbone`` over the GRPO step's trajectories."""
    from trainer.episodes.scoring import score_trajectories
    from trainer.models.backbones import resolve_dtype
    from trainer.models.paper_shapes import build_shaped_model

    tokenizer, builder, trajectories = kept
    reset_memory(device)
    model = build_shaped_model(backbone, tokenizer, seed, resolve_dtype(dtype, device), device)
    sync = _sync(device)
    if sync is not None:
        score_trajectories(model, builder, trajectories[:1], micro_batch=16)  # kernels for this shape
        sync()
    start = time.perf_counter()
    actions, sequences = score_trajectories(model, builder, trajectories, micro_batch=16)
    if sync is not None:
        sync()
    seconds = time.perf_counter() - start
    tokens = sum(len(s) for s in sequences)
    result = {"status": "ok", "backbone": backbone, "sequences": len(sequences), "tokens": tokens,
              "scored_action_tokens": int(actions.mask.sum()), "seconds": seconds,
              "tokens_per_s": tokens / max(seconds, 1e-9), **memory(device)}
    del model, actions
    reset_memory(device)
    return result


def guarded(fn, *args) -> tuple[dict, object]:
    """Run one measurement; an exception (out of memory included) becomes its status."""
    try:
        out = fn(*args)
        return out if isinstance(out, tuple) else (out, None)
    except Exception as exc:
        traceback.print_exc()
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        status = f"{type(exc).__name__}: {first}"
    reset_memory("cuda" if _cuda() else "cpu")  # the failed measurement's tensors, e.g. after OOM
    return {"status": status}, None


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


# ------------------------------------------------------------------------------ reporting


def ratios(methods: dict[str, dict]) -> dict[str, dict]:
    """Step time of SEED and ETRO over GRPO's, with the goals; only for measured steps."""
    grpo = methods.get("grpo", {})
    out = {}
    for name, target in TARGETS.items():
        step = methods.get(name, {})
        if grpo.get("status") == "ok" and step.get("status") == "ok":
            ratio = step["step_s"] / grpo["step_s"]
            out[name] = {"ratio": ratio, "target": target, "met": ratio <= target}
    return out


def environment(device: str) -> dict:
    import torch
    import transformers

    env = {"python": platform.python_version(), "torch": torch.__version__,
           "transformers": transformers.__version__, "git_sha": "unknown",  # set by track()
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        env.update(device=props.name, gpu_memory_gb=props.total_memory / 2**30, cuda=torch.version.cuda)
    else:
        env.update(device=f"CPU ({platform.machine()}, {torch.get_num_threads()} threads)")
    return env


def _fmt(value, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def render_markdown(results: dict) -> str:
    """The results as a Markdown section (what docs/results/gpu_check.md records)."""
    env, s = results["environment"], results["settings"]
    cuda = results["device"] == "cuda"
    mem_key, mem_name = ("peak_mem_mb", "peak GiB") if cuda else ("peak_rss_mb", "peak RSS GiB (process)")
    overrides = f"; overrides: {', '.join(results['overrides'])}" if results["overrides"] else ""
    setting = (f"torch {env['torch']}, transformers {env['transformers']}, Python {env['python']}, "
               f"git {env['git_sha'][:10]}. `{s['backbone']}` in {s['dtype']}, gradient checkpointing on; "
               f"{s['tasks']} household tasks x {s['group']} trajectories, {s['turns']} turns of "
               f"{s['new_tokens']} tokens, window context (N = 2), KL reference on; SEED's self writer "
               f"{s['writer_tokens']} tokens{overrides}.")
    header = (f"| method | step s | vs GRPO | {' | '.join(PHASES)} | rollout tok/s | train tok/s "
              f"| {mem_name} | estimate GiB | lr step kept | status |")
    lines = [f"### {env['device']}, {env['date']}", "", setting, "", header,
             "|---|" + "---:|" * (len(PHASES) + 7) + "---|"]
    grpo = results["methods"].get("grpo", {})
    for name, r in results["methods"].items():
        if r.get("status") != "ok":
            lines.append(f"| {name} |" + " - |" * (len(PHASES) + 7) + f" {r.get('status')} |")
            continue
        ratio = r["step_s"] / grpo["step_s"] if grpo.get("status") == "ok" else None
        phases = " | ".join(_fmt(r["phases_s"].get(p)) for p in PHASES)
        estimate = r.get("estimate_mb")
        lines.append(f"| {name} | {r['step_s']:.2f} | {_fmt(ratio)}x | {phases} | {r['rollout_tokens_per_s']:.0f} "
                     f"| {r['train_tokens_per_s']:.0f} | {r[mem_key] / 1024:.1f} "
                     f"| {_fmt(None if estimate is None else estimate / 1024, '.1f')} "
                     f"| {100 * r['lr_step_kept']:.1f}% | ok |")
    lines += timeline_markdown(results["methods"], cuda)
    sc = results.get("scoring")
    if sc and sc.get("status") == "ok":
        lines += ["", (f"Scoring pass, `{sc['backbone']}` (no gradients): {sc['sequences']} sequences, "
                       f"{sc['tokens']} tokens in {sc['seconds']:.2f} s ({sc['tokens_per_s']:.0f} tokens/s), "
                       f"{mem_name} {sc[mem_key] / 1024:.1f}.")]
    elif sc:
        lines += ["", f"Scoring pass, `{s['score_backbone']}`: {sc.get('status')}."]
    ro = results.get("rollout_backends") or {}
    if ro.get("status") == "ok":
        lines += ["", (f"Rollout of the GRPO batch: vLLM {ro['vllm']['tokens_per_s']:.0f} tokens/s, transformers "
                       f"{ro['transformers']['tokens_per_s']:.0f} tokens/s: {ro['ratio']:.1f}x (goal >= 5x: "
                       f"{'met' if ro['met'] else 'MISSED'}).")]
    elif ro:
        lines += ["", f"Rollout on the vLLM backend: {ro.get('status')}."]
    goals = [f"{name.upper()} <= {r['target']:.2f}x GRPO: {r['ratio']:.2f}x {'met' if r['met'] else 'MISSED'}"
             for name, r in results["ratios"].items()]
    if goals:
        note = "." if cuda else " (tiny shape on CPU: not the goals' measurement)."
        lines += ["", "Goals: " + "; ".join(goals) + note]
    return "\n".join(lines) + "\n"


def timeline_markdown(methods: dict[str, dict], cuda: bool) -> list[str]:
    """Per measured method, its memory at each phase boundary beside the planner's phase estimate."""
    lines = []
    for name, r in methods.items():
        rows = r.get("timeline") or []
        if not rows:
            continue
        if cuda:
            header = "| after | planner phase | estimate GiB | peak allocated GiB | reserved GiB | free GiB |"
            cells = [(row["peak_allocated_gib"], row["reserved_gib"], row["free_gib"]) for row in rows]
        else:
            header = "| after | planner phase | estimate GiB | peak RSS GiB (process) | RSS GiB |"
            cells = [(row["peak_rss_gib"], row["rss_gib"]) for row in rows]
        lines += ["", f"Memory of the {name} step at each phase boundary (peak since the previous one):", "",
                  header, "|---|---|" + "---:|" * (len(cells[0]) + 1)]
        for row, figures in zip(rows, cells):
            lines.append(f"| {row['after']} | {row['phase']} | {_fmt(row['estimate_gib'], '.1f')} | "
                         + " | ".join(f"{v:.1f}" for v in figures) + " |")
    return lines


def track(results: dict, base, db: Path) -> str:
    """One MLflow run per measurement in the sqlite store ``db`` (tag
    ``hindsight.kind=gpu_check``), metrics in one batch each, the results JSON as an
    artifact.  Returns the store's URI."""
    from trainer.config import apply_overrides
    from trainer.run.store import git_sha, sqlite_uri
    from trainer.run.tracking import KIND_TAG, RunLogger

    uri = sqlite_uri(db)
    results["environment"]["git_sha"] = git_sha()

    runs = [(name, {"algo.method": name}, r) for name, r in results["methods"].items()]
    if results.get("scoring"):
        runs.append(("scoring", {"model.backbone": results["settings"]["score_backbone"]}, results["scoring"]))
    for name, overrides, r in runs:
        logger = RunLogger(uri, EXPERIMENT)
        logger.start(apply_overrides(base, overrides),
                     tags={KIND_TAG: "gpu_check", "measurement": name, "device": results["environment"]["device"]})
        metrics = {f"time/{k}_s": v for k, v in r.get("phases_s", {}).items()}
        metrics.update({f"check/{k}": float(v) for k, v in r.items() if isinstance(v, (int, float)) and v is not None})
        if name in results["ratios"]:
            metrics["check/ratio_vs_grpo"] = results["ratios"][name]["ratio"]
        logger.log_metrics(1, metrics)
        logger.log_dict(results, "gpu_check.json")
        logger.finish("FINISHED" if r.get("status") == "ok" else "FAILED")
    return uri


def save(results: dict, out: Path) -> None:
    (out / "gpu_check.json").write_text(json.dumps(results, indent=2) + "\n")


# ------------------------------------------------------------------------------ main


def check(args: argparse.Namespace) -> dict:
    _given(args)
    methods = _methods(args)
    import torch

    from trainer.config import ConfigError, apply_overrides
    from trainer.run.resolve import resolve

    device = "cuda" if args.device == "auto" and torch.cuda.is_available() else args.device
    device = "cpu" if device == "auto" else device
    if device == "cuda" and not torch.cuda.is_available():
        raise CheckError("--device cuda: no CUDA device is available")
    if device == "cpu":
        torch.set_num_threads(1)  # as the benchmarks: a pipeline check, not a CPU speed test
    s = settings(args, device)
    try:
        base = run_config(s, device, args.out, args.overrides)
        for method in methods:
            resolve(apply_overrides(base, {"algo.method": method}))
    except (ConfigError, ValueError) as e:
        raise CheckError(str(e)) from None
    results = {"device": device, "environment": environment(device), "settings": dataclasses.asdict(s),
               "overrides": list(args.overrides), "methods": {}, "scoring": None, "ratios": {},
               "rollout_backends": None}
    kept = None
    for i, method in enumerate(methods):
        result, keep = guarded(measure_method, base, method, device, i == 0)
        kept = kept or keep
        results["methods"][method] = result
        results["ratios"] = ratios(results["methods"])
        save(results, args.out)
        print(f"{method}: {_summary(result)}", flush=True)
    if kept is not None:
        results["scoring"], _ = guarded(measure_scoring, s.score_backbone, kept, s.dtype, device, base.seed)
        save(results, args.out)
        print(f"scoring {s.score_backbone}: {_summary(results['scoring'])}", flush=True)
    results["rollout_backends"], _ = guarded(measure_rollout_backends, base, device)
    save(results, args.out)
    print(f"rollout backends: {results['rollout_backends'].get('status')}", flush=True)
    try:  # a store that cannot be written must not lose the measurements
        results["tracking"] = track(results, base, args.out / "mlruns.db")
    except Exception as exc:
        traceback.print_exc()
        results["tracking"] = f"failed: {type(exc).__name__}: {exc}"[:300]
    save(results, args.out)
    (args.out / "gpu_check.md").write_text(render_markdown(results))
    return results


def _summary(r: dict) -> str:
    if r.get("status") != "ok":
        return str(r.get("status"))
    keys = ("step_s", "seconds", "rollout_tokens_per_s", "train_tokens_per_s", "tokens_per_s",
            "peak_mem_mb", "peak_rss_mb")
    return ", ".join(f"{k} {r[k]:.2f}" for k in keys if k in r)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.bundle is not None:
        try:
            install_bundle(args.bundle, args.out)
        except RuntimeError as e:  # gpu_bundle.BundleError: measure anyway, tracking will fail
            print(f"warning: the bundle did not install, MLflow tracking will fail: {e}", file=sys.stderr)
    try:
        results = check(args)
    except CheckError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(render_markdown(results))
    failed = [k for k, r in [*results["methods"].items(), ("scoring", results["scoring"] or {})]
              if r.get("status") != "ok"]
    return 1 if failed or results["tracking"].startswith("failed") else 0


if __name__ == "__main__":
    raise SystemExit(main())
