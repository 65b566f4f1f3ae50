"""Where the tests find the repository, its examples and their own data, wherever a test
file sits in tests/."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

SUPPORT = Path(__file__).resolve().parent
TESTS = SUPPORT.parent
ROOT = TESTS.parent
DATA = SUPPORT / "data"
EXAMPLES = ROOT / "examples"
# The sweep fakes as a driver script (python tests/support/sweeps_fakes.py STUDY MODE).
FAKES = SUPPORT / "sweeps_fakes.py"


def script_module(name: str) -> ModuleType:
    """``scripts/<name>.py`` imported as a module (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
