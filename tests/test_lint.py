"""Package hygiene: the ruff rule set of pyproject.toml holds over the tree, the files listed
in FORMATTED keep ruff's format, and every source file compiles on each Python the package
declares (3.10 to 3.13; interpreters not installed here are skipped)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Files kept in `ruff format` style.  The rest of the tree predates the formatter choice and
# is not mass-reformatted (concurrent branches stay mergeable); add files here as they are
# written or rewritten.
FORMATTED = (
    "reports/html.py",
    "scripts/bench_cli.py",
    "sweeps/__init__.py",
    "sweeps/docs.py",
    "tests/sweeps/test_docs.py",
    "tests/test_lint.py",
    "tests/reports/test_html.py",
    "trainer/run/dependencies.py",
)
PYTHONS = ("3.10", "3.11", "3.12", "3.13")


def _ruff(*args: str) -> subprocess.CompletedProcess:
    if shutil.which("ruff") is None and not _has_module("ruff"):
        pytest.skip("ruff is not installed (pip install -e '.[dev]')")
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _has_module(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def test_ruff_rules_hold():
    proc = _ruff("check", "--output-format", "concise", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_listed_files_keep_the_format():
    proc = _ruff("format", "--check", "--diff", *FORMATTED)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_pre_commit_formats_the_same_files():
    import re

    import yaml

    hooks = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())["repos"][0]["hooks"]
    pattern = next(h["files"] for h in hooks if h["id"] == "ruff-format")
    listed = {p for p in _sources() if re.search(pattern, p)}
    assert listed == set(FORMATTED)


def _sources() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.split()
    return out or [str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py") if ".venv" not in p.parts]


def _interpreter(version: str) -> str | None:
    """A working ``python<version>``: on PATH, or one of pyenv's installed versions."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates = [
        shutil.which(f"python{version}"),
        *map(str, sorted(root.glob(f"versions/{version}.*/bin/python{version}"))),
    ]
    for python in filter(None, candidates):
        ok = subprocess.run([python, "-c", "pass"], capture_output=True, timeout=30, check=False)
        if ok.returncode == 0:
            return python
    return None


@pytest.mark.parametrize("version", PYTHONS)
def test_sources_compile_on_each_declared_python(version):
    python = _interpreter(version)
    if python is None:
        pytest.skip(f"python{version} is not installed here")
    code = (
        "import sys\nfor f in sys.argv[1:]:\n"
        "    compile(open(f, encoding='utf-8').read(), f, 'exec', dont_inherit=True)\n"
    )
    proc = subprocess.run(
        [python, "-c", code, *_sources()],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
