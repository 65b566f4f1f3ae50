"""Where the tests find the repository, its examples and their own data, wherever a test
file sits in tests/."""

from __future__ import annotations

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
TESTS = SUPPORT.parent
ROOT = TESTS.parent
DATA = SUPPORT / "data"
EXAMPLES = ROOT / "examples"
# The sweep fakes as a driver script (python tests/support/sweeps_fakes.py STUDY MODE).
FAKES = SUPPORT / "sweeps_fakes.py"
