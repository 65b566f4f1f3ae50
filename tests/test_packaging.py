"""The wheel holds every file the packages read: each data file tracked under a package is
matched by ``[tool.setuptools.package-data]`` (a non-editable install has nothing else)."""

import fnmatch
import subprocess

import tomllib

from support.paths import ROOT

PACKAGES = ("trainer", "sweeps", "analysis", "reports", "envs")


def _package_data() -> dict[str, list[str]]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["setuptools"]["package-data"]


def _data_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", *PACKAGES], cwd=ROOT, capture_output=True, text=True, check=True)
    return [path for path in listed.stdout.split() if not path.endswith(".py")]


def test_every_tracked_data_file_is_package_data():
    globs = _package_data()
    files = _data_files()
    assert any("shape_configs" in f for f in files)  # the files the planner and paper shapes read
    missing = []
    for path in files:
        package, _, inside = path.partition("/")
        # setuptools' globs match within one folder level each, as fnmatch does on '/'-free parts
        if not any(_match(inside, pattern) for pattern in globs.get(package, [])):
            missing.append(path)
    assert not missing, f"not in pyproject.toml's package-data (a wheel would lack them): {missing}"


def _match(path: str, pattern: str) -> bool:
    parts, pattern_parts = path.split("/"), pattern.split("/")
    return len(parts) == len(pattern_parts) and all(fnmatch.fnmatchcase(p, q) for p, q in zip(parts, pattern_parts))
