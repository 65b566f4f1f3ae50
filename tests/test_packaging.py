"""A release that installs. The wheel holds every file the packages read: each data file tracked
under a package is matched by ``[tool.setuptools.package-data]`` (a non-editable install has
nothing else). pyproject.toml's ``project.version`` is the one source of the version: CHANGELOG.md's
newest release is that version, and ``hindsight --version`` prints the installed distribution's."""

import fnmatch
import os
import re
import subprocess
import sys

import tomllib

from support.paths import ROOT

PACKAGES = ("trainer", "sweeps", "analysis", "reports", "envs")
# A release heading: "## 0.2.0 — 2026-12-05" (the date once released); "## Unreleased" sits above.
RELEASE = re.compile(r"^## (\d+\.\d+\.\d+)(?: — \d{4}-\d{2}-\d{2})?$", re.M)


def _pyproject() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def _package_data() -> dict[str, list[str]]:
    return _pyproject()["tool"]["setuptools"]["package-data"]


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


def test_the_newest_changelog_release_is_the_project_version():
    text = (ROOT / "CHANGELOG.md").read_text()
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert headings[0] == "Unreleased", headings[:2]  # where the next release's notes go
    releases = RELEASE.findall(text)
    assert len(releases) == len(headings) - 1, [h for h in headings[1:] if not RELEASE.match(f"## {h}")]
    assert releases[0] == _pyproject()["project"]["version"]


def test_version_prints_the_installed_distributions_version(tmp_path):
    """A distribution of another version found first on the path (as an install of it would be)
    is what ``hindsight --version`` reports: the version is read from the installed metadata, not
    written into the code or read from pyproject.toml."""
    installed = tmp_path / "site" / "hindsight_lab-9.8.7.dist-info"
    installed.mkdir(parents=True)
    (installed / "METADATA").write_text("Metadata-Version: 2.1\nName: hindsight-lab\nVersion: 9.8.7\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(installed.parent), str(ROOT)])}
    # run from tmp_path: a checkout's own hindsight_lab.egg-info must not come first on the path
    got = subprocess.run([sys.executable, "-m", "sweeps.cli", "--version"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stderr
    assert got.stdout == "hindsight-lab 9.8.7\n"
