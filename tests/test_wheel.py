"""A release that installs: the wheel built from the source tree holds every file the package
reads. Built from a copy of the checkout (tracked and untracked, not ignored, files), installed
with ``--no-deps`` into a scratch venv that sees the main venv's packages (torch, MLflow, ...)
but not the source tree, then run from outside the tree: ``hindsight memory`` on a paper study
(the paper shapes' configs, ``trainer/models/shape_configs/``) and ``hindsight validate`` on
the quickstart (the bundled warm start, ``trainer/assets/warm_start/``)."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import tomllib

from support.paths import EXAMPLES, ROOT

pytestmark = pytest.mark.slow


def _checkout_files() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("the wheel is built from a git checkout's files; no git checkout here")
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard", "-z"],
                            capture_output=True, text=True, check=True).stdout
    return [f for f in listed.split("\0") if f and (ROOT / f).is_file()]


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """The scratch venv's bin folder and the environment to run it in."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    for name in _checkout_files():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, src / name)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env |= {"PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "HF_HUB_OFFLINE": "1"}
    # No build isolation: the build needs setuptools from this venv, not from the network.
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                  "-w", str(tmp / "dist"), str(src)], tmp, env)
    assert built.returncode == 0, built.stdout + built.stderr
    wheel = next((tmp / "dist").glob("hindsight_lab-*.whl"))
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    # The main venv's packages by a path line, not as a site dir: its .pth files (the editable
    # install of this very tree among them) are not run, so only the wheel provides the package.
    purelib = Path(sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})["purelib"])
    purelib.mkdir(parents=True, exist_ok=True)
    (purelib / "main_venv.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    python = venv / "bin" / "python"
    done = _run([str(python), "-m", "pip", "install", "--no-deps", "--ignore-installed", str(wheel)],
                tmp, env)
    assert done.returncode == 0, done.stdout + done.stderr
    shutil.rmtree(src)  # nothing of the source tree is left to import from but the checkout itself
    return venv / "bin", env


def test_the_wheel_imports_from_the_scratch_venv(installed, tmp_path):
    bin_dir, env = installed
    got = _run([str(bin_dir / "python"), "-c", "import trainer, sweeps; print(trainer.__file__); "
                "print(sweeps.__version__)"], tmp_path, env)
    where, version = got.stdout.split()
    assert Path(where).is_relative_to(bin_dir.parent), where
    assert not Path(where).is_relative_to(ROOT)
    with open(ROOT / "pyproject.toml", "rb") as f:
        release = tomllib.load(f)["project"]["version"]
    assert version == release  # the wheel's metadata, not the main venv's editable install
    printed = _run([str(bin_dir / "hindsight"), "--version"], tmp_path, env)
    assert printed.stdout == f"hindsight-lab {release}\n", printed.stdout + printed.stderr


def test_memory_plans_a_paper_study_from_the_installed_wheel(installed, tmp_path):
    bin_dir, env = installed
    got = _run([str(bin_dir / "hindsight"), "memory", str(EXAMPLES / "papers" / "seed_table5_alfworld.yaml")],
               tmp_path, env)
    assert got.returncode == 0, got.stdout + got.stderr
    assert "seed (Qwen/Qwen2.5-3B-Instruct):" in got.stdout and "fits (3.09B parameters)" in got.stdout


def test_validate_reads_the_bundled_warm_start_from_the_installed_wheel(installed, tmp_path):
    bin_dir, env = installed
    got = _run([str(bin_dir / "hindsight"), "validate", str(EXAMPLES / "quickstart.yaml")], tmp_path, env)
    assert got.returncode == 0, got.stdout + got.stderr
    assert got.stdout.startswith("ok: study ") and "(name=quickstart)" in got.stdout
