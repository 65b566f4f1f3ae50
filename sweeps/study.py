"""Study files: a base run config, grid axes and/or an Optuna search, resources, outputs.

A study YAML (validated like run configs; one-line errors name the bad key, the valid keys
and the closest match)::

    name: beta-sweep
    plugins: [my_method.py]               # optional: imported first (docs/extending.md)
    base: ../examples/train_tiny.yaml     # path relative to this file, or an inline mapping
    set: {stages.rl.steps: 8}             # study-wide overrides of the base (not axes)
    grid:                                 # dotted run-config keys -> lists of values
      algo.method: [grpo, seed]
      algo.beta_opd: [1.0, 5.0]
      seed: [0, 1]                        # seeds are an axis too; default [base.seed]
    seeds: {min: 3, max: 10, effect: 3}  # instead of grid.seed: seeds added until decided
    search:                               # optional Optuna search (instead of grid cells)
      space: {algo.lambda_opd: {type: float, low: 0.001, high: 0.1, log: true}}
      trials: 8
      sampler_seed: 0
      seeds_per_trial: 2
      metric: eval/eval_unseen/success
      mode: max
      storage: optuna.db                  # sqlite path (relative to out) or an RDB URL
    resources: {cpus: 1, gpus: 0}         # per trial; fractions allowed
    max_concurrent: 2
    tracking_uri: ""                      # "" = $MLFLOW_TRACKING_URI or sqlite:///<out>/mlruns.db
    ray_address: ""                       # "" = start a local Ray
    out: ""                               # "" = ./runs/<name> of the current folder

A *cell* is the resolved run config without seed, tracking and output
(:func:`trainer.tracking.cell_id`); a study expands into (cell, seed) :class:`Trial` s.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sweeps.keys import REQUIRED, KeySpec
from sweeps.pruning import PrunerSpec, parse_pruner
from sweeps.seeds import SeedsSpec, check_seeds, parse_seeds
from trainer import plugins
from trainer.config import (
    ConfigError,
    RunConfig,
    TrackingConfig,
    apply_overrides,
    flatten,
    from_dict,
    read_yaml,
    unknown_key_error,
)
from trainer.run.resolve import load_config
from trainer.run.store import sqlite_uri
from trainer.run.tracking import cell_id

DEFAULT_EXPERIMENT = TrackingConfig.experiment


PARAM_TYPES = ("float", "int", "categorical")


MODES = ("max", "min")


# A study name is a folder name under runs/ and an MLflow experiment: no separators, no
# leading dot (so neither "." nor ".." nor a hidden folder), so it cannot leave runs/.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


STUDY_FIELDS: dict[str, KeySpec] = {
    "name": KeySpec("string", REQUIRED, "Study name: the MLflow experiment, the parent run's "
                    "name and the default output folder `runs/<name>`.",
                    "letters, digits, `.`, `_`, `-`; starts with a letter or digit"),
    "base": KeySpec("path or mapping", None, "The run config every trial starts from: a YAML "
                    "file (relative to the study file) or an inline mapping; its keys are listed "
                    "under *Run config* below. Empty: all defaults."),
    "plugins": KeySpec("list", [], "Plugins every trial imports before its config resolves "
                       "(added to `base`'s): module names, or `.py` files and folders relative to "
                       "the study file; their methods, envs and writer prompts can then be named "
                       "in `set` and `grid` (docs/extending.md)."),
    "set": KeySpec("mapping", {}, "Dotted run-config key -> value: study-wide overrides of "
                   "`base` (every cell gets them; they are not axes)."),
    "grid": KeySpec("mapping", {}, "Dotted run-config key -> list of values; the study trains "
                    "the product of the axes. `seed: [0, 1, 2]` is the seed axis (default: "
                    "`[base.seed]`). Cannot be combined with `search`."),
    "seeds": KeySpec("mapping", None, "Seeds added until decided, instead of `grid.seed` (keys "
                     "below): every cell runs `min` seeds, then one more a round while its "
                     "comparison with the baseline is undecided, up to `max`."),
    "search": KeySpec("mapping", None, "An Optuna search instead of a grid (keys below).", ""),
    "resources": KeySpec("mapping", {}, "Ray resources per trial: `cpus`, `gpus`, `custom` "
                         "(keys below). Per trial whatever `parallel.workers` is: a trial of N "
                         "ranks gives each rank 1/N of them (`gpus: 8` with 8 workers: a GPU a "
                         "rank)."),
    "max_concurrent": KeySpec("integer", 0, "Trials running at once; 0 = as resources allow "
                              "(for parallel runs: the cluster's GPUs, or CPUs, over a trial's).",
                              ">= 0"),
    "tracking_uri": KeySpec("string", "", "MLflow tracking URI; empty = $MLFLOW_TRACKING_URI, "
                            "else `sqlite:///<out>/mlruns.db`."),
    "ray_address": KeySpec("string", "", "Ray cluster address; empty = start a local Ray "
                           "(dashboard and usage stats off)."),
    "out": KeySpec("string", "", "Output folder (relative to the study file): store, "
                   "artifacts, checkpoints, report; empty = `./runs/<name>` of the current "
                   "folder. `--out` on the command line overrides it.",
                   "inside the study file's folder (a folder elsewhere is chosen with `--out`)"),
}


SEARCH_FIELDS: dict[str, KeySpec] = {
    "space": KeySpec("mapping", REQUIRED, "Dotted run-config key -> dimension (keys below); at "
                     "least one."),
    "trials": KeySpec("integer", 8, "Optuna trials in all (a relaunch runs only the missing "
                      "ones).", ">= 1"),
    "sampler_seed": KeySpec("integer", 0, "Seed of the TPE sampler."),
    "seeds_per_trial": KeySpec("integer", 1, "Training seeds per trial (base.seed, base.seed + "
                               "1, ...); the objective is their mean.", ">= 1"),
    "metric": KeySpec("string", "eval/eval_unseen/success", "The logged metric to optimise."),
    "mode": KeySpec("string", "max", "Maximise or minimise `metric`.", ", ".join(MODES)),
    "storage": KeySpec("string", "optuna.db", "Optuna storage: a sqlite path relative to `out`, "
                       "or any RDB URL."),
    "pruner": KeySpec("mapping", None, "Stop trials whose intermediate evaluations (every "
                      "`eval.every` steps) trail the others' (keys below); a pruned trial is "
                      "Optuna PRUNED and its runs carry the tag `pruned_at`. Empty: none."),
}


PARAM_FIELDS: dict[str, KeySpec] = {
    "type": KeySpec("string", REQUIRED, "Kind of dimension.", ", ".join(PARAM_TYPES)),
    "low": KeySpec("number", REQUIRED, "Lower bound (float and int dimensions)."),
    "high": KeySpec("number", REQUIRED, "Upper bound (float and int), above `low`."),
    "log": KeySpec("true/false", False, "Sample on a log scale (needs `low > 0`)."),
    "choices": KeySpec("list", REQUIRED, "The values of a categorical dimension."),
}


RESOURCE_FIELDS: dict[str, KeySpec] = {
    "cpus": KeySpec("number", 1.0, "CPUs per trial; fractions allowed.", ">= 0"),
    "gpus": KeySpec("number", 0.0, "GPUs per trial; fractions allowed (0.5: two trials share "
                    "a GPU).", ">= 0"),
    "custom": KeySpec("mapping", {}, "Custom Ray resources per trial, name -> amount (e.g. "
                      "`{a100: 1}` for nodes started with `ray start --resources "
                      "'{\"a100\": 4}'`): trials run only on nodes that have them.",
                      "amounts >= 0"),
}


STUDY_KEYS = tuple(STUDY_FIELDS)


SEARCH_KEYS = tuple(SEARCH_FIELDS)


PARAM_KEYS = tuple(PARAM_FIELDS)


RESOURCE_KEYS = tuple(RESOURCE_FIELDS)


@dataclass(frozen=True)
class ParamSpace:
    """One Optuna search dimension over a dotted run-config key."""

    key: str
    type: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    choices: tuple = ()


@dataclass(frozen=True)
class SearchSpec:
    space: tuple[ParamSpace, ...]
    trials: int = 8
    sampler_seed: int = 0
    seeds_per_trial: int = 1
    metric: str = "eval/eval_unseen/success"
    mode: str = "max"
    # sqlite:///... or any RDB URL accepted by optuna.storages.RDBStorage.
    storage: str = ""
    pruner: PrunerSpec | None = None


@dataclass(frozen=True)
class Resources:
    cpus: float = 1.0
    gpus: float = 0.0
    # ((name, amount), ...): custom Ray resources per trial.
    custom: tuple[tuple[str, float], ...] = ()

    def ray(self) -> dict[str, float]:
        """The per-trial request for ``tune.with_resources``."""
        return {"cpu": self.cpus, "gpu": self.gpus, **dict(self.custom)}


@dataclass(frozen=True)
class Study:
    name: str
    base: RunConfig
    # ((dotted key, (values...)), ...) in file order; "seed" may be one of the axes.
    grid: tuple[tuple[str, tuple], ...] = ()
    search: SearchSpec | None = None
    resources: Resources = Resources()
    seeds_plan: SeedsSpec | None = None  # the grid's ``seeds:`` (sweeps.seeds)
    max_concurrent: int = 0
    tracking_uri: str = ""
    ray_address: str = ""
    out_dir: Path = Path("runs")
    path: Path | None = None

    @property
    def store_uri(self) -> str:
        """Study tracking_uri, else $MLFLOW_TRACKING_URI, else sqlite:///<out>/mlruns.db."""
        if self.tracking_uri:
            return self.tracking_uri
        return os.environ.get("MLFLOW_TRACKING_URI") or sqlite_uri(self.out_dir / "mlruns.db")

    @property
    def experiment(self) -> str:
        """The MLflow experiment: the base config's ``tracking.experiment`` when it names
        one, else the study's name (so a store's experiments read as its studies)."""
        named = self.base.tracking.experiment
        return named if named and named != DEFAULT_EXPERIMENT else self.name

    @property
    def seeds(self) -> tuple[int, ...]:
        """Grid seeds; for a search, base.seed + 0..seeds_per_trial-1; for a ``seeds:``
        plan, base.seed + 0..max-1 (the plan runs the first ones it needs)."""
        if self.search is not None:
            return tuple(self.base.seed + i for i in range(self.search.seeds_per_trial))
        if self.seeds_plan is not None:
            return tuple(self.base.seed + i for i in range(self.seeds_plan.max))
        return dict(self.grid).get("seed", (self.base.seed,))


def format_value(value: Any) -> str:
    """A config value for people: floats to 4 significant digits and still read as floats
    (``4.62``, ``0.001``, ``2.0``, ``1e-05``)."""
    if isinstance(value, float):
        text = f"{value:.4g}"
        return text if any(c in text for c in ".eninf") else text + ".0"
    return str(value)


def describe_overrides(overrides: Any) -> str:
    """``algo.method=seed, algo.beta_opd=4.62`` from (key, value) pairs or a mapping."""
    pairs = overrides.items() if isinstance(overrides, Mapping) else overrides
    return ", ".join(f"{k}={format_value(v)}" for k, v in pairs)


def distinguishing(cells: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each cell's overrides restricted to the keys whose values differ between cells (all of
    them when only one cell has any)."""
    keys = dict.fromkeys(k for cell in cells for k in cell)
    varying = [k for k in keys if len({repr(cell.get(k)) for cell in cells}) > 1]
    keep = varying if len(cells) > 1 else list(keys)
    return [{k: cell[k] for k in keep if k in cell} for cell in cells]


def _check_keys(where: str, data: Mapping, valid: tuple[str, ...]) -> None:
    for key in data:
        if key not in valid:
            raise ConfigError(f"{where}: {unknown_key_error(str(key), valid)}")


def _want(where: str, value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise ConfigError(f"{where}: expected {what}, got {value!r}")
    return value


def config_keys() -> tuple[str, ...]:
    """Every dotted run-config key a grid axis or search dimension may name."""
    return tuple(flatten(RunConfig()))


def _check_config_key(where: str, key: str) -> None:
    valid = config_keys()
    if key in valid:
        return
    head = key.partition(".")[0]
    if any(k.startswith(head + ".") for k in valid):  # a known section: list its keys
        keys = [k[len(head) + 1:] for k in valid if k.startswith(head + ".")]
        raise ConfigError(f"{where}: {unknown_key_error(key, keys, head)}")
    tops = sorted({k.partition(".")[0] for k in valid})
    raise ConfigError(f"{where}: {unknown_key_error(key, tops)}")


def _check_value(where: str, base: RunConfig, key: str, value: Any) -> None:
    try:
        cfg = apply_overrides(base, {key: value})
        cell_id(cfg)  # resolves: unknown methods/envs fail here
    except (ConfigError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _parse_grid(where: str, grid: Any, base: RunConfig) -> tuple[tuple[str, tuple], ...]:
    _want(where, grid, dict, "a mapping of dotted config keys to lists of values")
    axes = []
    for key, values in grid.items():
        _check_config_key(f"{where}", key)
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{where}.{key}: expected a non-empty list of values, got {values!r}")
        if len(set(map(repr, values))) != len(values):
            raise ConfigError(f"{where}.{key}: duplicate values in {values!r}")
        for value in values:
            _check_value(where, base, key, value)
        axes.append((key, tuple(values)))
    return tuple(axes)


def _parse_param(where: str, key: str, spec: Any, base: RunConfig) -> ParamSpace:
    _check_config_key(where, key)
    _want(f"{where}.{key}", spec, dict, "a mapping with type/low/high/log/choices")
    _check_keys(f"{where}.{key}", spec, PARAM_KEYS)
    kind = spec.get("type")
    if kind not in PARAM_TYPES:
        raise ConfigError(f"{where}.{key}.type: got {kind!r}; valid: {', '.join(PARAM_TYPES)}")
    if kind == "categorical":
        choices = spec.get("choices")
        if not isinstance(choices, list) or not choices:
            raise ConfigError(f"{where}.{key}.choices: expected a non-empty list, got {choices!r}")
        for choice in choices:
            _check_value(where, base, key, choice)
        return ParamSpace(key, kind, choices=tuple(choices))
    num = int if kind == "int" else (int, float)
    low = _want(f"{where}.{key}.low", spec.get("low"), num, f"a number ({kind})")
    high = _want(f"{where}.{key}.high", spec.get("high"), num, f"a number ({kind})")
    log = _want(f"{where}.{key}.log", spec.get("log", False), bool, "true or false")
    if not low < high:
        raise ConfigError(f"{where}.{key}: low {low!r} must be below high {high!r}")
    if log and low <= 0:
        raise ConfigError(f"{where}.{key}: log scale needs low > 0, got {low!r}")
    for bound in (low, high):
        _check_value(where, base, key, bound)
    return ParamSpace(key, kind, float(low) if kind == "float" else low,
                      float(high) if kind == "float" else high, log)


def _parse_search(where: str, data: Any, base: RunConfig, out_dir: Path) -> SearchSpec:
    _want(where, data, dict, "a mapping")
    _check_keys(where, data, SEARCH_KEYS)
    space = _want(f"{where}.space", data.get("space"), dict, "a non-empty mapping of keys to specs")
    if not space:
        raise ConfigError(f"{where}.space: expected at least one dimension")
    params = tuple(_parse_param(f"{where}.space", k, v, base) for k, v in space.items())
    ints = {k: _want(f"{where}.{k}", data.get(k, d), int, "an integer")
            for k, d in (("trials", 8), ("sampler_seed", 0), ("seeds_per_trial", 1))}
    for k in ("trials", "seeds_per_trial"):
        if ints[k] < 1:
            raise ConfigError(f"{where}.{k}: must be >= 1, got {ints[k]}")
    mode = data.get("mode", "max")
    if mode not in MODES:
        raise ConfigError(f"{where}.mode: got {mode!r}; valid: {', '.join(MODES)}")
    metric = _want(f"{where}.metric", data.get("metric", SearchSpec.metric), str, "a metric name")
    storage = _want(f"{where}.storage", data.get("storage", "") or "optuna.db", str, "a path or URL")
    if "://" not in storage:
        db = (out_dir / storage).resolve()
        if not db.is_relative_to(out_dir):
            raise ConfigError(f"{where}.storage: {storage!r} leaves the output folder; give a path "
                              f"inside it or an RDB URL")
        storage = sqlite_uri(db)
    pruner = None if data.get("pruner") is None else parse_pruner(f"{where}.pruner", data["pruner"], base,
                                                                  tuple(p.key for p in params))
    return SearchSpec(params, metric=metric, mode=mode, storage=storage, pruner=pruner, **ints)


def _parse_resources(where: str, data: Any) -> Resources:
    _want(where, data, dict, "a mapping with cpus/gpus/custom")
    _check_keys(where, data, RESOURCE_KEYS)
    values: dict[str, Any] = {}
    for key in ("cpus", "gpus"):
        values[key] = _amount(f"{where}.{key}", data.get(key, getattr(Resources, key)))
    custom = _want(f"{where}.custom", data.get("custom") or {}, dict, "a mapping of resource "
                   "names to amounts")
    for name in custom:
        if not isinstance(name, str) or not name or name.upper() in ("CPU", "GPU"):
            raise ConfigError(f"{where}.custom: {name!r} is not a custom resource name (CPUs and "
                              f"GPUs are resources.cpus and resources.gpus)")
    values["custom"] = tuple((k, _amount(f"{where}.custom.{k}", v)) for k, v in custom.items())
    return Resources(**values)


def _amount(where: str, value: Any) -> float:
    value = _want(where, value, (int, float), "a number")
    if value < 0:
        raise ConfigError(f"{where}: must be >= 0, got {value}")
    return float(value)


def _load_base(where: str, base: Any, folder: Path) -> RunConfig:
    if base is None:
        return RunConfig()
    if isinstance(base, str):
        path = (folder / base).resolve()
        if not path.is_file():
            raise ConfigError(f"{where}: base config file {str(path)!r} does not exist")
        return load_config(path)
    _want(where, base, dict, "a path (relative to the study file) or an inline mapping")
    try:
        cfg = from_dict(base)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return replace(cfg, plugins=plugins.relative_to(cfg.plugins, folder))


def _study_out(where: str, data: Mapping, folder: Path, name: str) -> Path:
    """The study file's ``out`` (inside the study file's folder) or ``./runs/<name>``.  A file
    cannot send the outputs elsewhere (``out: ../../x``, ``out: /etc``): the person who runs
    it chooses such a folder with ``--out``."""
    out = _want(f"{where}.out", data.get("out") or "", str, "a folder path")
    if not out:
        return (Path("runs") / name).resolve()
    home = folder.expanduser().resolve()
    out_dir = (home / Path(out).expanduser()).resolve()
    if not out_dir.is_relative_to(home):
        raise ConfigError(f"{where}.out: {out!r} is outside the study file's folder {str(home)!r}; "
                          f"a study file can only name a folder inside its own, choose another "
                          f"output folder with --out DIR")
    return out_dir


def parse_study(data: Any, *, folder: Path, out: str | Path | None = None,
                path: Path | None = None, where: str = "study") -> Study:
    """Build a :class:`Study` from a parsed YAML mapping; paths relative to ``folder``."""
    _want(where, data, dict, "a mapping")
    _check_keys(where, data, STUDY_KEYS)
    name = data.get("name")
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise ConfigError(f"{where}.name: expected a non-empty name of letters, digits, '.', '_' "
                          f"and '-' that starts with a letter or digit (it names a folder under "
                          f"the output folder), got {name!r}")
    entries = _want(f"{where}.plugins", data.get("plugins") or [], list, "a list of module names, "
                    ".py files or folders")
    if not all(isinstance(e, str) and e for e in entries):
        raise ConfigError(f"{where}.plugins: expected a list of module names, .py files or folders, "
                          f"got {entries!r}")
    entries = plugins.relative_to(entries, folder)
    plugins.load_plugins(entries)  # before the base: it may name what they register
    base = _load_base(f"{where}.base", data.get("base"), folder)
    base = replace(base, plugins=tuple(dict.fromkeys(base.plugins + entries)))
    overrides = _want(f"{where}.set", data.get("set") or {}, dict, "a mapping of dotted keys to values")
    for key, value in overrides.items():
        _check_value(f"{where}.set", base, key, value)
    base = apply_overrides(base, overrides)
    out_dir = Path(out).expanduser().resolve() if out else _study_out(where, data, folder, name)
    grid = _parse_grid(f"{where}.grid", data.get("grid") or {}, base)
    search = None
    if data.get("search") is not None:
        search = _parse_search(f"{where}.search", data["search"], base, out_dir)
        if grid:
            raise ConfigError(
                f"{where}: grid and search cannot be combined; put the grid keys in "
                f"search.space as categorical dimensions and the seeds in search.seeds_per_trial"
            )
    seeds_plan = None
    if data.get("seeds") is not None:
        if search is not None:
            raise ConfigError(f"{where}: seeds and search cannot be combined; a search's seeds "
                              f"are search.seeds_per_trial")
        seeds_plan = parse_seeds(f"{where}.seeds", data["seeds"], base)
        check_seeds(f"{where}.seeds", seeds_plan, grid, base)
    max_conc = _want(f"{where}.max_concurrent", data.get("max_concurrent", 0), int, "an integer")
    if max_conc < 0:
        raise ConfigError(f"{where}.max_concurrent: must be >= 0 (0 = as resources allow), got {max_conc}")
    return Study(
        name=name, base=base, grid=grid, search=search,
        resources=_parse_resources(f"{where}.resources", data.get("resources") or {}),
        max_concurrent=max_conc,
        tracking_uri=_want(f"{where}.tracking_uri", data.get("tracking_uri") or "", str, "a URI"),
        ray_address=_want(f"{where}.ray_address", data.get("ray_address") or "", str, "an address"),
        out_dir=out_dir, path=path, seeds_plan=seeds_plan,
    )


def load_study(path: str | Path, out: str | Path | None = None) -> Study:
    """Load and validate a study YAML file (``hindsight validate`` calls this)."""
    path = Path(path).expanduser().resolve()
    data = read_yaml(path)
    return parse_study(data, folder=path.parent, out=out, path=path, where=path.name)
