"""The ``hindsight`` command line: one argparse parser with subcommands.

Subcommands live in :data:`COMMANDS` (name -> ``(add_arguments, handler)``); a handler takes
the parsed ``argparse.Namespace`` and returns the exit code; its docstring's first line is
the subcommand's help.  Later work adds ``sweep``, ``status``, ``ui`` and ``report`` by adding
entries there; nothing else in this file changes.

Exit codes: 0 ok; 1 the command ran but its outcome is bad (a failed run); 2 bad usage or a
bad config/study (``error: <one line>`` on stderr, no traceback).

Heavy modules (the trainer, torch, sweeps.study) are imported inside the handlers, so
``hindsight validate`` and ``hindsight methods`` stay fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from typing import Any

from trainer.config import ConfigError, RunConfig, load_config, read_yaml, resolve

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


def _load_run(path: str, overrides: list[str]) -> RunConfig:
    """Load and resolve a run config (the method/backbone defaults filled in)."""
    return _loading(lambda: resolve(load_config(path, overrides)))


# --- validate ---------------------------------------------------------------------------


def _validate_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="a run config or a study YAML file")
    _add_overrides(parser)


def validate_command(args: argparse.Namespace) -> int:
    """Check a run config or study file and print one line; exit 2 with the error if bad."""
    if any(key in read_yaml(args.file) for key in STUDY_KEYS):
        if args.overrides:
            raise CommandError("--set applies to run configs; a study sets values in its "
                               "base and grid")
        study_module = _import("sweeps.study", "validating a study file")
        study = _loading(study_module.load_study, args.file)
        print(f"ok: study {args.file} (name={getattr(study, 'name', '?')})")
        return 0
    cfg = _load_run(args.file, args.overrides)
    print(f"ok: run config {args.file} (method={cfg.algo.method}, env={cfg.env.name}, "
          f"backbone={cfg.model.backbone})")
    return 0


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


def eval_command(args: argparse.Namespace) -> int:
    """Evaluate a checkpoint on the config's fixed evaluation panels; print the metrics."""
    cfg = _load_run(args.config, args.overrides)
    metrics = _import("trainer.run", "evaluation").evaluate(cfg, args.checkpoint)
    for key, value in sorted(metrics.items()):
        print(f"{key}: {value:.4g}" if isinstance(value, float) else f"{key}: {value}")
    return 0


# --- sweeps, status, ui, report (imported lazily: Ray and MLflow load only when used) ------


def _lazy(module: str, name: str, purpose: str) -> Handler:
    def handler(args: argparse.Namespace) -> int:
        return getattr(_import(module, purpose), name)(args)

    return handler


def _lazy_args(module: str, name: str) -> AddArguments:
    return lambda parser: getattr(importlib.import_module(module), name)(parser)


def _sweep_handler(module: str, name: str, doc: str, purpose: str) -> Handler:
    handler = _lazy(module, name, purpose)
    handler.__doc__ = doc
    return handler


# The extension point: subcommand name -> (add_arguments, handler).
COMMANDS: dict[str, tuple[AddArguments, Handler]] = {
    "validate": (_validate_args, validate_command),
    "methods": (_methods_args, methods_command),
    "train": (_train_args, train_command),
    "eval": (_eval_args, eval_command),
    "sweep": (_lazy_args("sweeps.runner", "add_sweep_arguments"),
              _sweep_handler("sweeps.runner", "sweep_command",
                             "Launch or continue a study on Ray Tune (skips finished trials).", "sweeping")),
    "status": (_lazy_args("sweeps.status", "add_status_arguments"),
               _sweep_handler("sweeps.status", "status_command",
                              "Cells x seeds of a study: finished/running/failed/missing; exit 0 when complete.",
                              "study status")),
    "ui": (_lazy_args("sweeps.status", "add_ui_arguments"),
           _sweep_handler("sweeps.status", "ui_command",
                          "Serve the MLflow UI on 127.0.0.1 against a study's store.", "the MLflow UI")),
    "report": (_lazy_args("sweeps.report", "add_report_arguments"),
               _sweep_handler("sweeps.report", "report_command",
                              "Regenerate a study's paper tables and figures from its tracked runs.", "reports")),
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``hindsight`` parser.  ``only``: give only that subcommand its arguments (the
    others keep their help line): adding the arguments of ``sweep`` imports Ray and Optuna,
    which ``hindsight train`` must not need (a GPU image may have neither)."""
    parser = argparse.ArgumentParser(
        prog="hindsight",
        description="Train, sweep and report hindsight on-policy distillation for LLM agents.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (add_arguments, handler) in COMMANDS.items():
        summary = (handler.__doc__ or "").strip().split("\n")[0]
        command = sub.add_parser(name, help=summary, description=summary)
        if only is None or name == only:
            add_arguments(command)
        command.set_defaults(handler=handler)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the ``hindsight`` command line; returns the exit code (never raises SystemExit
    for usage errors: argparse's exit code is returned instead)."""
    args_in = sys.argv[1:] if argv is None else argv
    first = next((a for a in args_in if not a.startswith("-")), "")
    parser = build_parser(only=first)
    try:
        args = parser.parse_args(args_in)
    except SystemExit as e:  # --help (0) or a usage error (2), already printed by argparse
        return int(e.code or 0)
    try:
        return args.handler(args)
    except (ConfigError, CommandError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
