"""The ``hindsight`` command line: one argparse parser with subcommands.

Subcommands live in :data:`COMMANDS` (name -> ``(add_arguments, handler)``); a handler takes
the parsed ``argparse.Namespace`` and returns the exit code; its docstring's first line is
the subcommand's help.  Conventions (those of mlflow, ray, optuna): ``--version``; no
arguments prints the help; one meaning per flag name; output that pipes cleanly.

Exit codes: 0 ok; 1 the command ran but its outcome is bad (a failed run, an incomplete
study); 2 bad usage, a bad or unreadable config/study, or a missing optional dependency
(``error: <one line>`` on stderr, no traceback); 141 the reader closed the pipe.

Heavy modules (the trainer, torch, Ray, MLflow, pandas) are imported inside the handlers, so
building the parser (``--help``), ``validate`` and ``methods`` stay fast
(``scripts/bench_cli.py`` prints the figures).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

from sweeps import __version__
from trainer.config import ConfigError, RunConfig, apply_overrides, load_config, read_yaml, resolve
from trainer.extras import check_extras, install_hint

AddArguments = Callable[[argparse.ArgumentParser], None]
Handler = Callable[[argparse.Namespace], int]

# Top-level keys that mark a YAML file as a study (sweeps.study) rather than a run config.
STUDY_KEYS = ("base", "grid", "search")


class CommandError(Exception):
    """A user-facing failure of a command: printed as ``error: <message>``, exit 2."""


def _import(module: str, purpose: str) -> Any:
    """Import ``module`` lazily; if that module itself is missing, one line says so."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name != module:
            raise
        raise CommandError(f"{purpose} needs {module}, which is not available in this "
                           f"install yet") from None


def _add_overrides(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE",
                        help="override a config field by dotted key; the value is YAML "
                             "(e.g. --set algo.beta_opd=3 --set eval.splits=[eval_seen]); "
                             "repeatable")


def _loading(load: Callable[..., Any], *args: Any) -> Any:
    """Call a loader; any ValueError it raises becomes a one-line ConfigError."""
    try:
        return load(*args)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _load_run(path: str, overrides: list[str], extras: bool = True) -> RunConfig:
    """Load and resolve a run config (the method/backbone defaults filled in); a missing
    optional dependency it needs is a ConfigError too (unless ``extras`` is False)."""
    cfg = _loading(lambda: resolve(load_config(path, overrides)))
    if extras:
        check_extras(cfg)
    return cfg


def check_study_extras(configs: Iterable[RunConfig]) -> None:
    """:func:`trainer.extras.check_extras` over every config a study can run."""
    for cfg in configs:
        check_extras(cfg)


# --- validate ---------------------------------------------------------------------------


def _validate_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="a run config or a study YAML file")
    _add_overrides(parser)
    parser.add_argument("--skip-extras", action="store_true",
                        help="check the file only, not whether this machine has the optional "
                             "packages it needs (e.g. a GPU study checked on a laptop)")


def validate_command(args: argparse.Namespace) -> int:
    """Check a run config or study file and print one line; exit 2 with the error if bad."""
    if any(key in read_yaml(args.file) for key in STUDY_KEYS):
        if args.overrides:
            raise CommandError("--set applies to run configs; a study sets values in its "
                               "base and grid")
        study_module = _import("sweeps.study", "validating a study file")
        study = _loading(study_module.load_study, args.file)
        configs = _loading(study_module.study_configs, study)
        if not args.skip_extras:
            check_study_extras(configs)
        print(f"ok: study {args.file} (name={getattr(study, 'name', '?')})")
        _warn_memory(configs)
        return 0
    cfg = _load_run(args.file, args.overrides, extras=not args.skip_extras)
    print(f"ok: run config {args.file} (method={cfg.algo.method}, env={cfg.env.name}, "
          f"backbone={cfg.model.backbone})")
    _warn_memory([cfg])
    return 0


# --- memory -----------------------------------------------------------------------------


def _memory_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="a run config or a study YAML file (a study's --set keys are under "
                                     "base., e.g. --set base.algo.micro_batch_size=4)")
    _add_overrides(parser)
    parser.add_argument("--gpu-memory", type=float, default=80.0, metavar="GiB",
                        help="memory of one GPU in GiB (default 80)")


def _study_with_overrides(path: str, overrides: list[str]) -> Any:
    """A study file with ``--set base.KEY=VALUE`` overrides applied to its base."""
    study_module = _import("sweeps.study", "planning a study's memory")
    study = _loading(study_module.load_study, path)
    bad = [o for o in overrides if not o.startswith("base.")]
    if bad:
        raise CommandError(f"--set {bad[0]}: a study's keys are under base. (e.g. --set base.{bad[0]})")
    if overrides:
        base = _loading(apply_overrides, study.base, [o.removeprefix("base.") for o in overrides])
        study = dataclasses.replace(study, base=base)
    return study_module, study


def _memory_plans(configs: Iterable[RunConfig], gpu_memory: float) -> dict:
    """(method, backbone) -> the largest :func:`trainer.memory.plan_memory` among ``configs``."""
    memory = _import("trainer.memory", "planning memory")
    plans = {}
    for cfg in configs:
        key = (cfg.algo.method, cfg.model.backbone)
        plan = _loading(memory.plan_memory, cfg, gpu_memory)
        if key not in plans or plan.peak > plans[key].peak:
            plans[key] = plan
    return plans


def _warn_memory(configs: list[RunConfig]) -> None:
    """``validate``'s warning: a GPU config (model.device cuda) whose peak does not fit one
    80 GiB GPU, with the figure ``hindsight memory`` prints."""
    gpu = [resolve(c) for c in configs if c.model.device == "cuda"]
    if not gpu:
        return
    describe = _import("trainer.memory", "planning memory").describe
    for (method, backbone), plan in _memory_plans(gpu, 80.0).items():
        if not plan.fits:
            print(f"warning: {method} ({backbone}): {describe(plan)}; `hindsight memory` gives the parts",
                  file=sys.stderr)


def memory_command(args: argparse.Namespace) -> int:
    """Per GPU: weights, gradients, optimizer, reference, engine, activations; exit 1 if it does not fit."""
    memory = _import("trainer.memory", "planning memory")  # torch and transformers: deferred
    if any(key in read_yaml(args.file) for key in STUDY_KEYS):
        study_module, study = _study_with_overrides(args.file, args.overrides)
        configs = [_loading(resolve, cfg) for cfg in _loading(study_module.study_configs, study)]
    else:
        configs = [_load_run(args.file, args.overrides, extras=False)]
    plans = _memory_plans(configs, args.gpu_memory)
    worst_key = max(plans, key=lambda k: plans[k].peak)
    if len(plans) > 1:
        for (method, backbone), plan in plans.items():
            print(f"{method} ({backbone}): {memory.describe(plan)}")
        print(f"\nlargest: {worst_key[0]}")
    print(plans[worst_key].table())
    print(memory.describe(plans[worst_key]))
    return 0 if all(p.fits for p in plans.values()) else 1


# --- methods ----------------------------------------------------------------------------


def _methods_args(parser: argparse.ArgumentParser) -> None:
    pass


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


def methods_command(args: argparse.Namespace) -> int:
    """List the registered methods: parts, default writer/teacher/lambda_opd, summary."""
    algos = _import("trainer.algos", "listing methods")
    rows = [_method_row(algos.get_method(name)) for name in algos.method_names()]
    print(format_table(["method", "parts", "writer", "teacher", "lambda", "summary"], rows))
    return 0


# --- train / eval -----------------------------------------------------------------------


def _train_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="run config YAML")
    _add_overrides(parser)
    parser.add_argument("--resume", action="store_true",
                        help="continue from the latest checkpoint in output.dir")
    parser.add_argument("--run-id", default=None, help="continue this MLflow run id")


def train_command(args: argparse.Namespace) -> int:
    """Train one run (warm start, skill SFT, RL) from a run config; exit 1 if it fails."""
    cfg = _load_run(args.config, args.overrides)
    run = _import("trainer.run", "training")
    result = run.train(cfg, run_id=args.run_id, resume=args.resume, progress=True)
    print(f"run {result.run_id}: {result.status}")
    for key, value in sorted(result.final_metrics.items()):
        print(f"  {key}: {value:.4g}" if isinstance(value, float) else f"  {key}: {value}")
    return 0 if result.status == "FINISHED" else 1


def _eval_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="run config YAML")
    _add_overrides(parser)
    parser.add_argument("--checkpoint", default=None,
                        help="checkpoint folder to evaluate (default: the config's model)")


ACTOR_HELP = ("a trained actor, frozen (a run's checkpoints/step_N or a saved model folder); "
              "recovery takes several, one table row each")


def _recovery_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="run config YAML (env, model settings, eval temperature)")
    _add_overrides(parser)
    parser.add_argument("--actor", action="append", required=True, metavar="DIR",
                        help=ACTOR_HELP)
    parser.add_argument("--label", action="append", default=None, metavar="NAME",
                        help="row label of each --actor, in order (default: folder names)")
    parser.add_argument("--split", default="eval_unseen",
                        help="held-out panel the perturbed tasks come from (default eval_unseen)")
    parser.add_argument("--tasks", type=int, default=20,
                        help="perturbed tasks (default 20; 0 = every task that has one)")
    parser.add_argument("--repeats", type=int, default=8,
                        help="continuations per task and actor (default 8)")
    parser.add_argument("--recovery-dir", default="recovery", metavar="DIR",
                        help="folder for recovery.csv and the table (default ./recovery)")


def _diagnose_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("what", choices=["alignment"],
                        help="alignment: ETRO's Fig. 1, regional alignment on a frozen actor")
    parser.add_argument("config", help="run config YAML (env, model settings, batch)")
    _add_overrides(parser)
    parser.add_argument("--actor", required=True, metavar="DIR", help=ACTOR_HELP)
    parser.add_argument("--writer", default=None, choices=["self", "frozen", "oracle", "external"],
                        help="who writes the hindsight (default: the ETRO family's own)")
    parser.add_argument("--steps", type=int, default=8,
                        help="batches of the config's rollout size to collect (default 8)")
    parser.add_argument("--advantage", default="etro", choices=["etro", "gigpo", "gigpo_std"],
                        help="step advantage: ETRO's pooled action returns (default) or "
                             "verl-agent's GiGPO (own return, optionally std-normalised)")
    parser.add_argument("--diagnose-dir", default="diagnose", metavar="DIR",
                        help="folder for the records, alignment.csv and the figure "
                             "(default ./diagnose)")


def eval_command(args: argparse.Namespace) -> int:
    """Evaluate a checkpoint on the config's fixed evaluation panels; print the metrics."""
    cfg = _load_run(args.config, args.overrides)
    if args.checkpoint is not None and not os.path.isdir(args.checkpoint):
        raise CommandError(f"--checkpoint {args.checkpoint}: no such checkpoint folder")
    try:
        metrics = _import("trainer.run", "evaluation").evaluate(cfg, args.checkpoint)
    except FileNotFoundError as e:  # no checkpoint in output.dir yet
        raise CommandError(str(e)) from None
    for key, value in sorted(metrics.items()):
        print(f"{key}: {value:.4g}" if isinstance(value, float) else f"{key}: {value}")
    return 0


# --- sweeps, status, ui, report (imported lazily: Ray and MLflow load only when used) ------
# Their arguments are declared here, not in the modules that run them, so that building the
# parser (``--help``) imports neither Ray, MLflow nor pandas.  One meaning per flag name:
# ``--out`` is always the study's output folder; the report's own folder is ``--report-dir``.


def _study_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("study", help="study YAML file")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="the study's output folder (default: the study's out, else "
                             "./runs/<name>)")


def _sweep_args(parser: argparse.ArgumentParser) -> None:
    _study_args(parser)
    parser.add_argument("--address", default=None,
                        help="Ray cluster address (default: the study's ray_address, else a "
                             "local Ray)")
    parser.add_argument("--max-concurrent", type=int, default=None, metavar="N",
                        help="trials at once (default: the study's max_concurrent; 0 = as "
                             "resources allow)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the trials that would launch and those skipped; run nothing")
    parser.add_argument("--retry-failed", action="store_true",
                        help="rerun (cell, seed) pairs whose run FAILED, continuing the same run")


def _ui_args(parser: argparse.ArgumentParser) -> None:
    _study_args(parser)
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1, this machine only; "
                             "0.0.0.0 serves every network the machine is on)")
    parser.add_argument("--port", type=int, default=5000,
                        help="port (default 5000)")
    parser.add_argument("--backend-store-uri", default="", metavar="URL",
                        help="serve this database (e.g. postgresql://user@host/db) as a "
                             "tracking server that studies log to by its http address "
                             "(default: the study's store)")
    parser.add_argument("--artifacts-destination", default="", metavar="DIR",
                        help="where a tracking server keeps the artifacts it serves "
                             "(default: <study output>/artifacts)")
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="server worker processes (default 1; MLflow's own default is 4)")


def _report_args(parser: argparse.ArgumentParser) -> None:
    _study_args(parser)
    parser.add_argument("--report-dir", default=None, metavar="DIR",
                        help="report folder (default: <study output>/report)")
    parser.add_argument("--external", default=None, metavar="CSV",
                        help="externally reported results to merge (method, backbone, "
                             "metrics, source)")
    parser.add_argument("--n-boot", type=int, default=2000, metavar="N",
                        help="bootstrap resamples for CIs (default 2000)")
    parser.add_argument("--cells", choices=("std", "ci"), default="std",
                        help="table cells: mean ± std (default) or mean [95%% CI]")
    parser.add_argument("--ci", choices=("t", "bootstrap"), default="t",
                        help="interval over seeds: Student t (default) or percentile bootstrap")
    parser.add_argument("--ui-url", default="http://127.0.0.1:5000",
                        help="MLflow UI address that run ids in index.md link to "
                             "(`hindsight ui` serves it; '' for no links)")


def _lazy(module: str, name: str, doc: str, purpose: str) -> Handler:
    """A handler that imports ``module`` only when its command runs."""

    def handler(args: argparse.Namespace) -> int:
        return getattr(_import(module, purpose), name)(args)

    handler.__doc__ = doc
    return handler


# The extension point: subcommand name -> (add_arguments, handler).
COMMANDS: dict[str, tuple[AddArguments, Handler]] = {
    "validate": (_validate_args, validate_command),
    "methods": (_methods_args, methods_command),
    "memory": (_memory_args, memory_command),
    "train": (_train_args, train_command),
    "eval": (_eval_args, eval_command),
    "diagnose": (_diagnose_args, _lazy(
        "trainer.diagnose", "diagnose_command",
        "Diagnostics on a frozen actor (alignment: ETRO's Fig. 1 regional alignment).",
        "diagnostics")),
    "recovery": (_recovery_args, _lazy(
        "trainer.recovery", "recovery_command",
        "ETRO's post-error recovery protocol (Table 6): checkpoints continue from the same "
        "perturbed states.", "the recovery protocol")),
    "sweep": (_sweep_args, _lazy(
        "sweeps.runner", "sweep_command",
        "Launch or continue a study on Ray Tune (skips finished trials).", "sweeping")),
    "status": (_study_args, _lazy(
        "sweeps.status", "status_command",
        "Cells x seeds of a study: finished/running/failed/missing; exit 0 when complete.",
        "study status")),
    "ui": (_ui_args, _lazy(
        "sweeps.status", "ui_command",
        "Serve the MLflow UI (or a tracking server on a database) on 127.0.0.1 (Ctrl-C stops it).",
        "the MLflow UI")),
    "report": (_report_args, _lazy(
        "sweeps.report", "report_command",
        "Regenerate a study's paper tables and figures from its tracked runs.", "reports")),
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``hindsight`` parser.  ``only``: give only that subcommand its arguments (the
    others keep their help line): adding the arguments of ``sweep`` imports Ray and Optuna,
    which ``hindsight train`` must not need (a GPU image may have neither)."""
    parser = argparse.ArgumentParser(
        prog="hindsight",
        description="Train, sweep and report hindsight on-policy distillation for LLM agents.",
        epilog="Run `hindsight COMMAND --help` for a command's options.")
    parser.add_argument("--version", action="version", version=f"hindsight-lab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (add_arguments, handler) in COMMANDS.items():
        summary = (handler.__doc__ or "").strip().split("\n")[0]
        command = sub.add_parser(name, help=summary, description=summary)
        if only is None or name == only:
            add_arguments(command)
        command.set_defaults(handler=handler)
    return parser


def _missing_module_error(e: ModuleNotFoundError) -> str:
    name = e.name or str(e)
    return f"the python package {name!r} is not installed; install with: {install_hint(name)}"


def _run(argv: list[str] | None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    parser = build_parser(only=next((a for a in args_in if not a.startswith("-")), ""))
    try:
        args = parser.parse_args(args_in)
    except SystemExit as e:  # --help/--version (0) or a usage error (2), printed by argparse
        return int(e.code or 0)
    if args.command is None:  # bare `hindsight`: help, as mlflow/ray/optuna do
        parser.print_help()
        return 0
    try:
        return args.handler(args)
    except (ConfigError, CommandError) as e:
        message = str(e)
    except ModuleNotFoundError as e:
        message = _missing_module_error(e)
    print(f"error: {' '.join(message.splitlines())}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    """Run the ``hindsight`` command line; returns the exit code (never raises SystemExit
    for usage errors: argparse's exit code is returned instead).  A reader that closes the
    pipe early (``hindsight methods | head``) ends the command quietly with exit 141, as a
    process killed by SIGPIPE would."""
    try:
        code = _run(argv)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # Python flushes stdout again at exit; point it at /dev/null so that flush is quiet.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    raise SystemExit(main())
