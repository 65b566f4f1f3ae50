"""Plugins in tests: every registry a plugin can add to, restored after the test, so that a
test that loads ``examples/plugins/`` (or a planted plugin) leaves the built-ins as they were
for the tests after it."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import yaml

import envs
from trainer import algos, plugins
from trainer.algos import credit
from trainer.hindsight import analyzer

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "plugins"
SEED_TAU = EXAMPLES / "seed_tau.py"
CODEPAGE = EXAMPLES / "codepage"


@contextlib.contextmanager
def isolated_registries() -> Iterator[None]:
    """Snapshot the method table, the part registries, the envs, the writer prompts and the
    loaded plugins; restore them (and drop the plugins' private modules) on exit."""
    tables = [algos.METHODS, algos.METHOD_SOURCES, algos.ADVANTAGES._fns, algos.CREDITS._fns,
              algos.OPD_LOSSES._fns, credit.ETRO_ROUTES, envs.REGISTRY, analyzer.WRITER_PROMPTS,
              plugins._LOADED]
    sets = [envs._EXPERT, envs._ORACLE]
    saved = [dict(t) for t in tables], [set(s) for s in sets]
    try:
        yield
    finally:
        for table, old in zip(tables, saved[0]):
            table.clear()
            table.update(old)
        for names, old in zip(sets, saved[1]):
            names.clear()
            names.update(old)
        for name in [m for m in sys.modules if m.startswith(plugins.MODULE_PREFIX)]:
            del sys.modules[name]


def shadowing_folder(tmp_path: Path) -> Path:
    """A copy of ``examples/plugins/`` whose study folder also holds its own ``analysis.py``,
    ``envs/`` and ``reports.py`` (each fails when imported) and names one more plugin,
    ``where.py``, which imports them, says on stderr where they came from, and where a fresh
    search of ``sys.path`` would find them (which ignores modules imported already)."""
    folder = tmp_path / "lab"
    shutil.copytree(EXAMPLES, folder)
    (folder / "analysis.py").write_text("raise ImportError('the study folder shadowed analysis')\n")
    (folder / "envs").mkdir()
    (folder / "envs" / "__init__.py").write_text("raise ImportError('the study folder shadowed envs')\n")
    (folder / "reports.py").write_text("raise ImportError('the study folder shadowed reports')\n")
    (folder / "where.py").write_text(
        "import importlib.machinery, sys\nimport analysis, envs, reports\n"
        "print('imported', analysis.__file__, envs.__file__, file=sys.stderr)\n"
        "found = [importlib.machinery.PathFinder.find_spec(m) for m in ('analysis', 'envs', 'reports')]\n"
        "print('path-finds', *[s.origin if s else None for s in found], file=sys.stderr)\n")
    study = yaml.safe_load((folder / "study.yaml").read_text())
    study["plugins"] = ["where.py"]
    (folder / "study.yaml").write_text(yaml.safe_dump(study))
    return folder


IMPORTS = "imports.json"


def train_recording_imports(cfg, *, run_id=None, resume=False, progress=True):
    """The real trainer, after writing to ``<output.dir>/imports.json`` where this process
    (a Ray trial's worker) finds ``analysis`` and ``envs``, its working folder and its
    plugins' private modules."""
    import analysis  # the check itself: which analysis a trial's worker imports
    from trainer.run.loop import train  # deferred as the sweep's own train function does

    out = Path(cfg.output.dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / IMPORTS).write_text(json.dumps({
        "analysis": analysis.__file__, "envs": envs.__file__, "cwd": os.getcwd(),
        "plugins": sorted(m for m in sys.modules if m.startswith(plugins.MODULE_PREFIX))}))
    return train(cfg, run_id=run_id, resume=resume, progress=progress)
