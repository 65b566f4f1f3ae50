"""Plugins in study files and through the command line: a study's ``plugins:`` (relative to
the study file) reach every trial's config and cell id, ``hindsight methods --plugins`` lists
a plugin's method with its file and line, and a folder that holds its own ``analysis.py`` and
``envs/`` beside the study shadows none of the tool's packages."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from support.plugins import EXAMPLES, SEED_TAU, isolated_registries, shadowing_folder
from sweeps.cli import main
from sweeps.study import load_study
from sweeps.trials import expand
from trainer import plugins

ROOT = Path(__file__).resolve().parents[2]
HINDSIGHT = Path(sys.executable).parent / "hindsight"


@pytest.fixture(autouse=True)
def isolated():
    with isolated_registries():
        yield


def test_a_study_names_plugins_relative_to_itself_and_every_trial_gets_them(tmp_path):
    shutil.copy(SEED_TAU, tmp_path / "seed_tau.py")
    (tmp_path / "study.yaml").write_text(yaml.safe_dump({
        "name": "p", "plugins": ["seed_tau.py"], "base": {"env": {"max_turns": 4}},
        "grid": {"algo.method": ["grpo", "seed_tau"], "seed": [0, 1]}, "out": "out"}))
    study = load_study(tmp_path / "study.yaml")
    assert study.base.plugins == (str(tmp_path / "seed_tau.py"),)
    trials = expand(study)
    assert len(trials) == 4 and all(t.cfg.plugins == study.base.plugins for t in trials)
    assert len({t.cell_id for t in trials}) == 2


def test_a_study_plugin_that_fails_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "broken.py").write_text("import numpy\nraise KeyError('gate')\n")
    (tmp_path / "study.yaml").write_text(yaml.safe_dump({"name": "p", "plugins": ["broken.py"],
                                                             "grid": {"seed": [0, 1]}}))
    assert main(["validate", str(tmp_path / "study.yaml")]) == 2
    err = capsys.readouterr().err
    assert err == f"error: plugins: cannot import {str(tmp_path / 'broken.py')!r}: KeyError: 'gate'\n"


def test_methods_lists_a_plugins_method_with_its_file_and_line(capsys):
    assert main(["methods", "--plugins", str(SEED_TAU)]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("seed_tau "))
    assert "grpo + seed_tau" in row and "self" in row and "current" in row
    file, line = plugins.loaded()[0].root, None
    source = SEED_TAU.read_text().splitlines()
    line = next(i for i, text in enumerate(source, 1) if text.startswith("register_method("))
    assert f"examples/plugins/seed_tau.py:{line}" in out  # the method, like the built-ins' parts
    assert "OPD loss      seed_tau" in out and "examples/plugins/seed_tau.py:" in out
    assert f"seed_tau.py ({plugins.source_sha(file)})" in out


def test_the_example_study_resolves_both_plugins(capsys):
    assert main(["validate", str(EXAMPLES / "study.yaml")]) == 0
    study = load_study(EXAMPLES / "study.yaml")
    trials = expand(study)
    assert {(t.cfg.env.name, t.cfg.algo.method) for t in trials} == {
        ("codepage", m) for m in ("grpo", "seed", "seed_tau")}
    assert {p.name for p in plugins.used_plugins(trials[-1].cfg)} == {"codepage", "seed_tau.py"}


@pytest.mark.skipif(not HINDSIGHT.exists(), reason="the hindsight console script is not installed")
def test_a_folder_with_its_own_analysis_and_envs_shadows_nothing_in_the_driver(tmp_path):
    folder = shadowing_folder(tmp_path)
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    done = subprocess.run([str(HINDSIGHT), "validate", "--skip-extras", "study.yaml"], cwd=folder,
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    imported = next(line for line in done.stderr.splitlines() if line.startswith("imported "))
    assert imported == f"imported {ROOT / 'analysis' / '__init__.py'} {ROOT / 'envs' / '__init__.py'}"
    found = next(line for line in done.stderr.splitlines() if line.startswith("path-finds "))
    assert str(folder) not in found, found  # sys.path does not lead to the study folder
    assert done.stdout.startswith("ok: study study.yaml")
