"""Plugins: a researcher's own methods, environments and writer prompts, from their own files,
through every command (DESIGN.md "Extension points"; docs/extending.md walks one through).

A run config or a study file names them under ``plugins:``: module names (``my_lab.methods``,
installed or on the path) or ``.py`` files and folders (with an ``__init__.py``), paths
relative to the file.  :func:`trainer.run.resolve.check_registered` imports them before the
config's names are checked, so every process that resolves a config has them: the command
line, each Ray trial and each FSDP rank.  A file or folder is imported by its path under a
private module name (``hindsight_plugin_<stem>_<hash>``) and ``sys.path`` is never changed,
so a folder that holds its own ``analysis.py`` or ``envs/`` shadows nothing.

A plugin registers its parts through the names this module re-exports (``__all__``), the
same calls the built-ins use.  Whatever a run uses of a plugin (its method, that method's
parts, its env, its writer prompt) enters the run's cell id through the plugin's source hash
(:func:`used_plugins`), and every plugin a run names is logged as the MLflow param
``plugins.sha`` (:func:`plugin_params`).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import envs
from envs import has_expert, has_oracle, register_env
from envs.base import (
    Episode,
    Hindsight,
    StepResult,
    Task,
    TextEnv,
    Turn,
    format_response,
    parse_tagged,
)
from trainer.algos import (
    ADVANTAGES,
    CREDITS,
    METHOD_SOURCES,
    OPD_LOSSES,
    CreditInputs,
    LossInputs,
    MethodSpec,
    get_method,
    masked_mean,
    register_advantage,
    register_credit,
    register_method,
    register_opd_loss,
    register_route,
    seed_gate,
    seed_opd_loss,
)
from trainer.config import AlgoConfig, ConfigError, RunConfig
from trainer.hindsight.analyzer import WRITER_PROMPTS, WriterPrompt, register_writer_prompt

MODULE_PREFIX = "hindsight_plugin_"  # a file or folder plugin's private module name starts so
_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


@dataclass(frozen=True)
class Plugin:
    """One imported plugin: its ``entry`` as the config names it (a module name or an
    absolute path), the ``module`` it was imported as, its ``root`` file or folder and the
    ``sha`` (12 hex digits) of its ``.py`` sources."""

    entry: str
    module: str
    root: Path
    sha: str

    @property
    def name(self) -> str:
        """How messages and params name it: the file or folder name, or the module name."""
        return self.root.name if is_path(self.entry) else self.entry

    def owns(self, file: str | Path) -> bool:
        """Whether source ``file`` belongs to this plugin."""
        path = Path(file).resolve()
        return path == self.root or (self.root.is_dir() and path.is_relative_to(self.root))


_LOADED: dict[str, Plugin] = {}  # entry -> the plugin imported for it (once a process)


def is_path(entry: str) -> bool:
    """Whether a ``plugins:`` entry is a file or folder (ends in ``.py`` or has a ``/``)
    rather than a module name."""
    return entry.endswith(".py") or "/" in entry


def relative_to(entries: Iterable[str], folder: str | Path) -> tuple[str, ...]:
    """``entries`` with each relative path made absolute against ``folder`` (the folder of
    the file that names them); module names and absolute paths are kept."""
    base = Path(folder).expanduser().resolve()
    return tuple(str((base / Path(e).expanduser()).resolve()) if is_path(e) else e for e in entries)


def source_sha(root: Path) -> str:
    """sha256 (12 hex digits) of a plugin's ``.py`` sources: the file, or every ``.py`` file
    under the folder (paths and contents, in path order; ``__pycache__`` left out)."""
    files = [root] if root.is_file() else sorted(
        p for p in root.rglob("*.py") if "__pycache__" not in p.relative_to(root).parts)
    digest = hashlib.sha256()
    for path in files:
        digest.update(f"{path.relative_to(root.parent)}\0".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def load_plugins(entries: Iterable[str]) -> list[Plugin]:
    """Import each plugin once a process (later calls return the same :class:`Plugin`).
    A relative path is taken from the working folder.  Raises :class:`ConfigError` with one
    line: an entry that does not exist or fails to import (its name and the exception, a
    name that collides with a built-in's or another plugin's among them)."""
    out = []
    for entry in entries:
        key = str(Path(entry).expanduser().resolve()) if is_path(entry) else entry
        if key not in _LOADED:
            _LOADED[key] = _import(key, entry)
        out.append(_LOADED[key])
    return out


def _import(key: str, entry: str) -> Plugin:
    if not is_path(key):
        if not _MODULE_NAME.fullmatch(key):
            raise ConfigError(f"plugins: {entry!r} is neither a module name nor a .py file or folder "
                              f"(a folder is written with a '/', e.g. ./my_plugin/)")
        module = _run(entry, lambda: importlib.import_module(key))
        file = Path(inspect.getsourcefile(module) or module.__file__).resolve()
        root = file.parent if hasattr(module, "__path__") else file
        return Plugin(key, key, root, source_sha(root))
    root = Path(key)
    init = root / "__init__.py" if root.is_dir() else root
    if not init.is_file():
        raise ConfigError(f"plugins: {entry!r} is not a .py file or a folder with an __init__.py "
                          f"(on a cluster every node needs it at this path; docs/extending.md)")
    sha = source_sha(root)
    name = f"{MODULE_PREFIX}{re.sub(r'[^A-Za-z0-9_]', '_', root.stem)}_{sha[:8]}"
    spec = importlib.util.spec_from_file_location(
        name, init, submodule_search_locations=[str(root)] if root.is_dir() else None)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before it runs: its own relative imports find it

    def execute():
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(name, None)
            raise

    _run(entry, execute)
    return Plugin(key, name, root, sha)


def _run(entry: str, load):
    try:
        return load()
    except Exception as exc:  # any failure of a researcher's code: one line naming the plugin
        raise ConfigError(f"plugins: cannot import {entry!r}: {type(exc).__name__}: {exc}") from None


def loaded() -> list[Plugin]:
    """The plugins imported in this process, in import order."""
    return list(_LOADED.values())


def plugin_of(file: str | Path | None) -> Plugin | None:
    """The loaded plugin source ``file`` belongs to (None: a built-in or unknown)."""
    if not file:
        return None
    return next((p for p in _LOADED.values() if p.owns(file)), None)


def source_file(obj) -> str | None:
    """The source file of a registered function or class (its wrapped rule where it wraps one)."""
    try:
        return inspect.getsourcefile(inspect.unwrap(obj))
    except TypeError:
        return None


def used_plugins(cfg: RunConfig, parts: tuple[str, ...] = ("method", "env", "writer")) -> list[Plugin]:
    """The loaded plugins whose registrations ``cfg`` uses: its method (where it was
    registered, and its advantage, credit rule and OPD loss), its env and its writer
    prompt (``parts`` picks which); by module name.  Their source hashes enter the cell id
    (and, of the env and the writer prompt, the warm-start cache key)."""
    files: list[str | None] = []
    if "method" in parts:
        spec = get_method(cfg.algo.method)
        files.append(METHOD_SOURCES[spec.name][0])
        for registry, name in ((ADVANTAGES, spec.advantage), (CREDITS, spec.credit),
                               (OPD_LOSSES, spec.opd_loss)):
            if name is not None:
                files.append(source_file(registry.get(name)))
    if "env" in parts:
        files.append(source_file(envs.env_class(cfg.env.name)))
    if "writer" in parts:
        files += writer_prompt_files(cfg)
    found = {p.module: p for f in files if (p := plugin_of(f)) is not None}
    return [found[m] for m in sorted(found)]


def writer_prompt_files(cfg: RunConfig) -> list[str | None]:
    """The source file of the writer prompt ``cfg`` names."""
    prompt = WRITER_PROMPTS.get(cfg.writer.prompt) if cfg.writer.prompt else None
    return [source_file(prompt.prompt)] if prompt is not None else []


def plugin_params(cfg: RunConfig) -> dict[str, str]:
    """The MLflow param ``plugins.sha``: ``name:sha`` of every plugin ``cfg`` names, or none."""
    plugins = load_plugins(cfg.plugins)
    return {"plugins.sha": ",".join(f"{p.name}:{p.sha}" for p in plugins)} if plugins else {}


# The public API (docs/extending.md lists each name; tests/test_plugins.py fails when a name
# it documents disappears): the registration calls and the types a plugin builds on, then the
# plugin machinery the commands use.
__all__ = [
    "AlgoConfig", "CreditInputs", "Episode", "Hindsight", "LossInputs", "MethodSpec", "StepResult",
    "Task", "TextEnv", "Turn", "WriterPrompt", "format_response", "get_method", "masked_mean",
    "parse_tagged", "register_advantage", "register_credit", "register_env", "register_method",
    "register_opd_loss", "register_route", "register_writer_prompt", "seed_gate", "seed_opd_loss",
    "MODULE_PREFIX", "Plugin", "has_expert", "has_oracle", "is_path", "load_plugins", "loaded",
    "plugin_of", "plugin_params", "relative_to", "source_file", "source_sha", "used_plugins",
]
