"""The command line's own error and its one-line message for a missing package."""

from __future__ import annotations

from trainer.run.dependencies import install_hint


class CommandError(Exception):
    """A user-facing failure of a command: printed as ``error: <message>``, exit 2."""


FIRST_PARTY = ("trainer", "sweeps", "analysis", "reports", "envs")


def missing_module_error(e: ModuleNotFoundError) -> str:
    """One line for a module that could not be imported: a package to install, or a module of
    this project missing from a broken install."""
    name = e.name or str(e)
    if name.partition(".")[0] in FIRST_PARTY:
        return f"{name} is missing from this install of hindsight-lab; reinstall it (pip install -e .)"
    return f"the python package {name!r} is not installed; install with: {install_hint(name)}"
