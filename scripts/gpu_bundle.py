"""The wheels a lent GPU machine lacks for ``hindsight train`` and ``scripts/gpu_check.py``.

A lent GPU machine has no network and takes at most 64 MiB along with the working tree.  Its
image has Python 3.12 with :data:`IMAGE` (torch, transformers, pandas, pyarrow, matplotlib,
accelerate and what they depend on) but none of MLflow, Ray, Optuna or vLLM.  The trainer's
import path needs :data:`NEEDS` beyond that (the sqlite MLflow store, the searchqa
retriever and peft, which every model load imports for LoRA adapters); Ray and Optuna are
only imported by ``hindsight sweep``.

``make gpu-bundle`` (this script) downloads, for Python 3.12 on manylinux x86-64, the
distributions in the dependency closure of :data:`NEEDS` that the image does not surely have
(:func:`image_has`), pinned to the versions installed here (so the store written there reads back
here), with ``--no-deps`` so nothing the image already has is fetched.  The folder also holds
this machine's builds of the few compiled wheels (it runs Python 3.11), so that the CPU test
can install the same folder and run the check from it.  ``requirements.txt`` lists the pins;
the whole folder must stay under :data:`LIMIT_MIB`.

    .venv/bin/python scripts/gpu_bundle.py [--out .gpu-bundle] [--python 3.12 ...]

On the GPU machine, ``scripts/gpu_check.py --bundle .gpu-bundle`` installs it into an empty
folder with :func:`install` (pip, ``--no-index --no-deps``) and appends that folder to
``sys.path``, after the image's own packages.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

IMAGE = ("torch", "transformers", "pandas", "pyarrow", "matplotlib", "accelerate")
# What the image surely has: the closure of the packages whose requirements have been stable
# for years, plus transformers' and accelerate's long-standing core requirements.  Newer
# releases of huggingface-hub pull in more (pydantic, anyio, click, ...); whether the image's
# do is unknown, so those are bundled too: the image's own copy wins where it has one, since
# the bundle is appended to sys.path after the image's site-packages.
STABLE_ROOTS = ("torch", "pandas", "pyarrow", "matplotlib")
CORE_DEPS = ("transformers", "accelerate", "huggingface-hub", "tokenizers", "safetensors", "regex",
             "pyyaml", "tqdm", "psutil")
NEEDS = ("mlflow-skinny", "sqlalchemy", "alembic", "rank-bm25", "peft")
TARGET_PYTHON = "3.12"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
LIMIT_MIB = 50
REQUIREMENTS = "requirements.txt"
STAMP = "bundle.json"
DEFAULT_OUT = Path(__file__).resolve().parent.parent / ".gpu-bundle"

Requires = Callable[[str, frozenset, str], Iterable[tuple[str, frozenset]]]


class BundleError(RuntimeError):
    """A bundle that cannot be built or installed; the message is one line."""


def local_python() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def installed_requires(name: str, extras: frozenset, python: str) -> list[tuple[str, frozenset]]:
    """The requirements of installed distribution ``name`` with ``extras``, markers evaluated
    for Linux x86-64 CPython ``python`` -> ``[(canonical name, extras)]``."""
    env = {**default_environment(), "python_version": python, "python_full_version": f"{python}.0",
           "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
           "implementation_name": "cpython", "platform_python_implementation": "CPython"}
    out = []
    for text in md.requires(name) or []:
        req = Requirement(text)
        if req.marker is None or any(req.marker.evaluate({**env, "extra": e}) for e in extras or {""}):
            out.append((canonicalize_name(req.name), frozenset(req.extras)))
    return out


def closure(roots: Iterable[str], pythons: Iterable[str], requires: Requires = installed_requires) -> set[str]:
    """Canonical names of ``roots`` and everything they require (extras followed), for any of
    ``pythons``.  ``requires(name, extras, python)`` gives the direct requirements."""
    todo = [(canonicalize_name(r), frozenset()) for r in roots]
    seen: set[tuple[str, frozenset]] = set()
    for name, extras in todo:
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        for python in pythons:
            todo += [dep for dep in requires(name, extras, python) if dep not in seen]
    return {name for name, _ in seen}


def image_has(pythons: Iterable[str], requires: Requires = installed_requires) -> set[str]:
    """Canonical names the GPU image surely has: closure(STABLE_ROOTS) plus CORE_DEPS."""
    return closure(STABLE_ROOTS, pythons, requires) | {canonicalize_name(n) for n in CORE_DEPS}


def bundle_pins(pythons: Iterable[str] = (TARGET_PYTHON,), needs: Iterable[str] = NEEDS) -> dict[str, str]:
    """``{name: installed version}`` of closure(needs) minus what the image surely has."""
    pythons = tuple(pythons)
    names = closure(needs, pythons) - image_has(pythons)
    try:
        return {name: md.version(name) for name in sorted(names)}
    except md.PackageNotFoundError as e:
        raise BundleError(f"{e.name} is required but not installed here; install the project first") from None


def _pip(*args: str, python: str = sys.executable) -> None:
    proc = subprocess.run([python, "-m", "pip", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise BundleError(f"pip {args[0]} failed: {tail[0]}")


def download(pins: dict[str, str], dest: Path, python: str) -> None:
    """Binary wheels of ``pins`` for CPython ``python`` on manylinux x86-64 into ``dest``."""
    platforms = [a for p in PLATFORMS for a in ("--platform", p)]
    _pip("download", "--quiet", "--no-deps", "--only-binary=:all:", "--python-version", python,
         "--implementation", "cp", *platforms, "--dest", str(dest),
         *[f"{name}=={version}" for name, version in pins.items()])


def size_mib(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file()) / 2**20


def build(dest: Path = DEFAULT_OUT, pythons: Iterable[str] | None = None) -> dict[str, str]:
    """Download the bundle into ``dest`` (skipped when its stamp says it is complete for the
    same pins and pythons); returns the pins.  Raises BundleError over :data:`LIMIT_MIB`."""
    pythons = tuple(dict.fromkeys(pythons or (TARGET_PYTHON, local_python())))
    pins = bundle_pins(pythons)
    stamp = {"pins": pins, "pythons": list(pythons), "platforms": list(PLATFORMS)}
    dest.mkdir(parents=True, exist_ok=True)
    if (dest / STAMP).is_file() and json.loads((dest / STAMP).read_text()) == stamp:
        return pins
    (dest / STAMP).unlink(missing_ok=True)
    for python in pythons:
        download(pins, dest, python)
    size = size_mib(dest)
    if size > LIMIT_MIB:
        raise BundleError(f"{dest}: {size:.1f} MiB of wheels, over the {LIMIT_MIB} MiB limit")
    (dest / REQUIREMENTS).write_text("".join(f"{n}=={v}\n" for n, v in pins.items()))
    (dest / STAMP).write_text(json.dumps(stamp, indent=2) + "\n")
    return pins


def install(bundle: Path, target: Path, python: str = sys.executable, target_python: str | None = None) -> None:
    """Install the bundle's pins into the empty folder ``target`` from the folder alone.

    ``target_python`` (e.g. "3.12") installs the wheels of that Python instead of
    ``python``'s own (a check that the bundle is complete for the GPU image)."""
    if not (bundle / REQUIREMENTS).is_file():
        raise BundleError(f"{bundle}: no {REQUIREMENTS}; build it with `make gpu-bundle`")
    if target.exists() and any(target.iterdir()):
        raise BundleError(f"{target} is not empty")
    cross = []
    if target_python:
        cross = ["--only-binary=:all:", "--python-version", target_python, "--implementation", "cp",
                 *[a for p in PLATFORMS for a in ("--platform", p)]]
    _pip("install", "--quiet", "--no-index", "--no-deps", "--find-links", str(bundle), "--target", str(target),
         *cross, "-r", str(bundle / REQUIREMENTS), python=python)


def image_view(dest: Path, bundled: Iterable[str]) -> Path:
    """A folder of links that stands for the GPU image in tests: every top-level module and
    ``.dist-info`` of closure(:data:`IMAGE`) as installed here, less the ``bundled``
    distributions (so that only the bundle can provide them).  Run with ``python -S`` and
    ``PYTHONPATH=<repo>:<dest>``: what the trainer needs beyond both is then missing."""
    dest.mkdir(parents=True, exist_ok=True)
    hidden = {canonicalize_name(n) for n in bundled}
    for name in sorted(closure(IMAGE, (local_python(),)) - hidden):
        dist = md.distribution(name)
        for top in {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}:
            if top == "__pycache__" or top.endswith(".pth") or (dest / top).exists():
                continue
            os.symlink(dist.locate_file(top), dest / top)
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="bundle folder (default: .gpu-bundle)")
    parser.add_argument("--python", action="append", default=None,
                        help=f"CPython versions to download for (default: {TARGET_PYTHON} and this one)")
    args = parser.parse_args(argv)
    try:
        pins = build(args.out, args.python)
    except BundleError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{args.out}: {len(pins)} distributions, {size_mib(args.out):.1f} MiB "
          f"(limit {LIMIT_MIB} MiB): {', '.join(pins)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
