"""The ``hindsight`` command line: one argparse parser with subcommands.

Subcommands live in :data:`COMMANDS` (name -> ``(add_arguments, handler)``); a handler takes
the parsed ``argparse.Namespace`` and returns the exit code; its docstring's first line is
the subcommand's help.  Every handler is in this package, one module per kind of command
(:mod:`~sweeps.cli.configs`, :mod:`~sweeps.cli.training`, :mod:`~sweeps.cli.protocols`,
:mod:`~sweeps.cli.studies`); the command line is the one place that imports every other
package.  Conventions (those of mlflow, ray, optuna): ``--version``; no
arguments prints the help; one meaning per flag name; output that pipes cleanly.

Exit codes: 0 ok; 1 the command ran but its outcome is bad (a failed run, an incomplete
study); 2 bad usage, a bad or unreadable config/study, or a missing optional dependency
(``error: <one line>`` on stderr, no traceback); 141 the reader closed the pipe.

A command's module (the trainer and torch, Ray, MLflow, pandas) is imported when the command
runs, so that building the parser (``--help``) stays fast (``scripts/bench_cli.py`` prints
the figures).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from sweeps import __version__
from sweeps.cli import arguments
from sweeps.cli.errors import CommandError, missing_module_error
from trainer.config import ConfigError

AddArguments = Callable[[argparse.ArgumentParser], None]
Handler = Callable[[argparse.Namespace], int]


# Each handler imports its command's module when it runs: those import the trainer (torch),
# Ray, MLflow or pandas, which the parser (``--help``) must not load.
def validate(args: argparse.Namespace) -> int:
    """Check a run config or study file and print one line; exit 2 with the error if bad."""
    from sweeps.cli import configs  # deferred: the trainer's resolution imports torch

    return configs.validate_command(args)


def memory(args: argparse.Namespace) -> int:
    """Per phase, what a run holds of its device (a GPU, or on a CPU the machine); exit 1 if it does not fit."""
    from sweeps.cli import configs  # deferred: torch, transformers

    return configs.memory_command(args)


def methods(args: argparse.Namespace) -> int:
    """List the registered methods: parts (and where their code is), default writer/teacher/lambda_opd, summary."""
    from sweeps.cli import configs  # deferred: the registry imports torch

    return configs.methods_command(args)


def train(args: argparse.Namespace) -> int:
    """Train one run (warm start, skill SFT, RL) from a run config; exit 1 if it fails."""
    from sweeps.cli import training  # deferred: torch, transformers, MLflow

    return training.train_command(args)


def evaluate(args: argparse.Namespace) -> int:
    """Evaluate a checkpoint on the config's fixed evaluation panels; print the metrics."""
    from sweeps.cli import training  # deferred: torch, transformers, MLflow

    return training.eval_command(args)


def diagnose(args: argparse.Namespace) -> int:
    """Diagnostics on a frozen actor (alignment: ETRO's Fig. 1 regional alignment)."""
    from sweeps.cli import protocols  # deferred: torch, pandas, matplotlib

    return protocols.diagnose_command(args)


def recovery(args: argparse.Namespace) -> int:
    """ETRO's post-error recovery protocol (Table 6): checkpoints continue from the same perturbed states."""
    from sweeps.cli import protocols  # deferred: torch, pandas

    return protocols.recovery_command(args)


def sweep(args: argparse.Namespace) -> int:
    """Launch or continue a study on Ray Tune (skips finished trials)."""
    from sweeps.cli import studies  # deferred: Ray, MLflow

    return studies.sweep_command(args)


def status(args: argparse.Namespace) -> int:
    """Cells x seeds of a study: finished/running/failed/missing; exit 0 when complete."""
    from sweeps.cli import studies  # deferred: MLflow

    return studies.status_command(args)


def ui(args: argparse.Namespace) -> int:
    """Serve the MLflow UI (or a tracking server on a database) on 127.0.0.1 (Ctrl-C stops it)."""
    from sweeps.cli import studies  # deferred: MLflow

    return studies.ui_command(args)


def report(args: argparse.Namespace) -> int:
    """Regenerate a study's paper tables and figures from its tracked runs."""
    from sweeps.cli import studies  # deferred: MLflow, pandas, matplotlib

    return studies.report_command(args)


def power(args: argparse.Namespace) -> int:
    """Seeds each comparison with the baseline needs, from a pilot's spread (and the minimum detectable effect)."""
    from sweeps.cli import planning  # deferred: MLflow, pandas, scipy

    return planning.power_command(args)


# The extension point: subcommand name -> (add_arguments, handler).
COMMANDS: dict[str, tuple[AddArguments, Handler]] = {
    "validate": (arguments.validate, validate),
    "memory": (arguments.memory, memory),
    "methods": (arguments.methods, methods),
    "train": (arguments.train, train),
    "eval": (arguments.evaluate, evaluate),
    "diagnose": (arguments.diagnose, diagnose),
    "recovery": (arguments.recovery, recovery),
    "sweep": (arguments.sweep, sweep),
    "status": (arguments.study, status),
    "ui": (arguments.ui, ui),
    "report": (arguments.report, report),
    "power": (arguments.power, power),
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
        message = missing_module_error(e)
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
