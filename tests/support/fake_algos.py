"""Loads tests/support/data/fake_algos.py, the stand-in method table, as the registry the
trainer's resolution reads (for the tests of configs and of the command line)."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import trainer.run.resolve as resolve_module
from support.paths import DATA


def install_fake_algos(monkeypatch) -> ModuleType:
    """The fake table as ``trainer.run.resolve.algos`` for the test's duration."""
    spec = importlib.util.spec_from_file_location("fake_algos", DATA / "fake_algos.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "fake_algos", module)  # dataclasses look it up
    spec.loader.exec_module(module)
    monkeypatch.setattr(resolve_module, "algos", module)  # the registry resolution reads
    return module
