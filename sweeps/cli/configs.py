"""Commands on config and study files that run nothing: ``validate``, ``memory``, ``methods``."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import envs
from sweeps.cli.errors import CommandError
from sweeps.cli.loading import STUDY_KEYS, check_study_extras, load_run, loading
from sweeps.study import Study, load_study
from sweeps.trials import study_configs
from trainer import algos, plugins
from trainer.algos import METHOD_SOURCES
from trainer.config import RunConfig, apply_overrides, read_yaml
from trainer.hindsight.analyzer import WRITER_PROMPTS
from trainer.run import memory
from trainer.run.resolve import resolve


def validate_command(args: argparse.Namespace) -> int:
    """Check a run config or study file and print one line; exit 2 with the error if bad."""
    if any(key in read_yaml(args.file) for key in STUDY_KEYS):
        if args.overrides:
            raise CommandError("--set applies to run configs; a study sets values in its "
                               "base and grid")
        study = loading(load_study, args.file)
        configs = loading(study_configs, study)
        if not args.skip_extras:
            check_study_extras(configs)
        print(f"ok: study {args.file} (name={getattr(study, 'name', '?')})")
        _warn_memory(configs)
        return 0
    cfg = load_run(args.file, args.overrides, extras=not args.skip_extras)
    print(f"ok: run config {args.file} (method={cfg.algo.method}, env={cfg.env.name}, "
          f"backbone={cfg.model.backbone})")
    _warn_memory([cfg])
    return 0


def _study_with_overrides(path: str, overrides: list[str]) -> Study:
    """A study file with ``--set base.KEY=VALUE`` overrides applied to its base."""
    study = loading(load_study, path)
    bad = [o for o in overrides if not o.startswith("base.")]
    if bad:
        raise CommandError(f"--set {bad[0]}: a study's keys are under base. (e.g. --set base.{bad[0]})")
    if overrides:
        base = loading(apply_overrides, study.base, [o.removeprefix("base.") for o in overrides])
        study = dataclasses.replace(study, base=base)
    return study


def _memory_plans(configs: Iterable[RunConfig], gpu_memory: float) -> dict:
    """(method, backbone) -> the largest :func:`trainer.run.memory.plan_memory` among ``configs``."""
    plans = {}
    for cfg in configs:
        key = (cfg.algo.method, cfg.model.backbone)
        plan = loading(memory.plan_memory, cfg, gpu_memory)
        if key not in plans or _size(plan) > _size(plans[key]):
            plans[key] = plan
    return plans


def _size(plan: memory.MemoryPlan) -> tuple[float, int]:
    """The order of plans: the peak, then the phases (of two runs that peak alike, the one
    that also trains Stage 1 shows more)."""
    return plan.peak, len(plan.phases)


def _warn_memory(configs: list[RunConfig]) -> None:
    """``validate``'s warning: a GPU config (model.device cuda) whose peak does not fit one
    80 GiB GPU, with the figure ``hindsight memory`` prints."""
    gpu = [resolve(c) for c in configs if c.model.device == "cuda"]
    if not gpu:
        return
    for (method, backbone), plan in _memory_plans(gpu, 80.0).items():
        if not plan.fits:
            print(f"warning: {method} ({backbone}): {memory.describe(plan)}; `hindsight memory` gives the parts",
                  file=sys.stderr)


def memory_command(args: argparse.Namespace) -> int:
    """Per phase, what a run holds of its device (a GPU, or on a CPU the machine); exit 1 if it does not fit."""
    if any(key in read_yaml(args.file) for key in STUDY_KEYS):
        study = _study_with_overrides(args.file, args.overrides)
        configs = [loading(resolve, cfg) for cfg in loading(study_configs, study)]
    else:
        configs = [load_run(args.file, args.overrides, extras=False)]
    plans = _memory_plans(configs, args.gpu_memory)
    worst_key = max(plans, key=lambda k: _size(plans[k]))
    if len(plans) > 1:
        for (method, backbone), plan in plans.items():
            print(f"{method} ({backbone}): {memory.describe(plan)}")
        print(f"\nlargest: {worst_key[0]}")
    print(plans[worst_key].table())
    print(memory.describe(plans[worst_key]))
    return 0 if all(p.fits for p in plans.values()) else 1


def _method_row(spec: Any) -> list[str]:
    parts = [getattr(spec, attr) for attr in ("advantage", "credit", "opd_loss")]
    return [spec.name, " + ".join(p for p in parts if p), str(spec.writer), str(spec.teacher),
            f"{spec.lambda_opd:g}" if spec.lambda_opd is not None else "-", spec.summary]


def format_table(header: list[str], rows: list[list[str]]) -> str:
    """Left-aligned columns separated by two spaces; the last column is not padded."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]
    lines = ["  ".join([c.ljust(w) for c, w in zip(r, widths)] + [r[-1]])
             for r in [header, *rows]]
    return "\n".join(line.rstrip() for line in lines)


def code_of(fn: Callable) -> str:
    """``path:line  module:function`` of a registered part (its wrapped rule when it wraps one),
    the path relative to the project."""
    fn = inspect.unwrap(fn)
    where = _relative(Path(inspect.getsourcefile(fn)))
    return f"{where}:{inspect.getsourcelines(fn)[1]}  {fn.__module__}:{fn.__qualname__}"


def _relative(path: Path) -> Path:
    """``path`` relative to the project when it is inside it (sweeps/cli/configs.py's grandparent)."""
    path, root = path.resolve(), Path(__file__).resolve().parents[2]
    return path.relative_to(root) if path.is_relative_to(root) else path


def part_rows(specs: Iterable[Any]) -> list[list[str]]:
    """One row per registered part the methods use: its kind, name and code."""
    kinds = (("advantage", "advantage", algos.ADVANTAGES), ("credit", "credit rule", algos.CREDITS),
             ("opd_loss", "OPD loss", algos.OPD_LOSSES))
    rows, seen = [], set()
    for attr, kind, registry in kinds:
        for spec in specs:
            name = getattr(spec, attr)
            if name and (kind, name) not in seen:
                seen.add((kind, name))
                rows.append([kind, name, code_of(registry.get(name))])
    rows.append(["RL loss", "(every method with RL)", code_of(algos.ppo_clip_loss)])
    rows.append(["entry points", "(the trainer calls)", f"{code_of(algos.token_advantages)}, "
                 f"{code_of(algos.policy_loss).split('  ')[1]}"])
    return rows


def plugin_rows() -> list[list[str]]:
    """One row per method, env and writer prompt a loaded plugin registered: its kind, name,
    code (file and line) and the plugin with its source hash."""
    rows = []
    for name, (file, line) in METHOD_SOURCES.items():
        if (p := plugins.plugin_of(file)) is not None:
            rows.append(["method", name, f"{_relative(Path(file))}:{line}", f"{p.name} ({p.sha})"])
    for kind, table, fn in (("env", envs.REGISTRY, lambda c: c),
                            ("writer prompt", WRITER_PROMPTS, lambda w: w.prompt)):
        for name, value in table.items():
            if (p := plugins.plugin_of(plugins.source_file(fn(value)))) is not None:
                rows.append([kind, name, code_of(fn(value)).split("  ")[0], f"{p.name} ({p.sha})"])
    return rows


def methods_command(args: argparse.Namespace) -> int:
    """List the registered methods: parts (and where their code is), default writer/teacher/lambda_opd, summary."""
    loading(plugins.load_plugins, plugins.relative_to(args.plugins, Path.cwd()))
    specs = [algos.get_method(name) for name in algos.method_names()]
    print(format_table(["method", "parts", "writer", "teacher", "lambda", "summary"],
                       [_method_row(spec) for spec in specs]))
    print()
    print(format_table(["part", "name", "code"], part_rows(specs)))
    if rows := plugin_rows():
        print()
        print(format_table(["from plugins", "name", "code", "plugin"], rows))
    return 0
