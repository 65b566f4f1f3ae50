"""Loading the config tree: YAML files and ``--set key=value`` overrides onto the dataclasses
of :mod:`trainer.config.schema`, generic over the tree (no per-field code).

:func:`from_dict` / :func:`to_dict` (round trip), :func:`flatten` (``{dotted.key: leaf}``,
the MLflow params), :func:`apply_overrides`, :func:`read_yaml`, :func:`canonical_json`
(stable text hashed into cell ids).  Every bad key or value raises :class:`ConfigError`
with a one-line message.  Registry, environment and backbone names are checked one level
up, by :mod:`trainer.run.resolve`.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import math
import operator
import re
import typing
from collections.abc import Hashable, Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from trainer.config.schema import RunConfig


class ConfigError(ValueError):
    """A bad config key or value.  The message is one line naming the key, the bad value
    and what is allowed (valid keys/choices/range, plus a close-match suggestion)."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).splitlines()))


_BAD = object()  # sentinel: a value a parser rejects


def _as_bool(v: Any) -> Any:
    return v if isinstance(v, bool) else _BAD


def _as_int(v: Any) -> Any:
    return v if isinstance(v, int) and not isinstance(v, bool) else _BAD


def _as_float(v: Any) -> Any:
    """Ints are accepted for floats; bools and strings are not; nan/inf are rejected."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return _BAD
    return float(v)


def _as_str(v: Any) -> Any:
    return v if isinstance(v, str) else _BAD


def _as_str_tuple(v: Any) -> Any:
    ok = isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v)
    return tuple(v) if ok else _BAD


# field type -> (parser, how the allowed values are described in errors)
_PARSERS: dict[Any, tuple[typing.Callable[[Any], Any], str]] = {
    bool: (_as_bool, "true or false"),
    int: (_as_int, "an integer"),
    float: (_as_float, "a number"),
    str: (_as_str, "a string"),
    tuple[str, ...]: (_as_str_tuple, "a list of strings"),
}


# field(metadata=...) bound name -> (symbol in messages, check)
_BOUNDS = {"ge": (">=", operator.ge), "gt": (">", operator.gt),
           "le": ("<=", operator.le), "lt": ("<", operator.lt)}


@functools.cache
def field_types(cls: type) -> dict[str, tuple[Any, bool, Mapping]]:
    """``{name: (type without None, optional, metadata)}`` for a config dataclass."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        args = typing.get_args(hints[f.name])
        optional = type(None) in args
        base = next(a for a in args if a is not type(None)) if optional else hints[f.name]
        out[f.name] = (base, optional, f.metadata)
    return out


def _join(prefix: str, key: Any) -> str:
    return f"{prefix}.{key}" if prefix else str(key)


def _show(v: Any) -> str:
    """A value as the user wrote it in YAML: null, true/false, quoted strings."""
    if v is None or isinstance(v, bool):
        return {None: "null", True: "true", False: "false"}[v]
    text = repr(v)
    return text if len(text) <= 80 else text[:77] + "..."


def _show_choice(v: Any) -> str:
    """A choice as a config file spells it: true/false for a bool, the string itself else."""
    return _show(v) if isinstance(v, bool) else str(v)


def _suggest(word: str, valid: Iterable[str], prefix: str = "") -> str:
    """'; did you mean 'x'?' for the closest valid name (difflib), '' when none is close."""
    match = difflib.get_close_matches(str(word), list(valid), n=1)
    return f"; did you mean {_join(prefix, match[0])!r}?" if match else ""


def unknown_key_error(key: str, valid: Iterable[str], section: str = "") -> ConfigError:
    """The error for dotted ``key`` that is not one of ``valid`` (the keys of ``section``).

    ``unknown key 'algo.betta_opd'; did you mean 'algo.beta_opd'? valid keys in algo: ...``
    """
    valid = sorted(valid)
    leaf = key[len(section) + 1:] if section else key
    hint = _suggest(leaf, valid, section) or ";"
    where = f"in {section}" if section else "at the top level"
    return ConfigError(f"unknown key {key!r}{hint} valid keys {where}: {', '.join(valid)}")


def unknown_name_error(key: str, kind: str, name: str, valid: Iterable[str]) -> ConfigError:
    """``algo.method: unknown method 'sed'; did you mean 'seed'? valid methods: ...``"""
    valid = sorted(valid)
    return ConfigError(f"{key}: unknown {kind} {name!r}{_suggest(name, valid) or ';'} "
                       f"valid {kind}s: {', '.join(valid)}")


def _convert(value: Any, base: Any, optional: bool, meta: Mapping, key: str) -> Any:
    """Check one value against its field's type, choices and bounds; return it converted."""
    if value is None and optional:
        return None
    if dataclasses.is_dataclass(base):
        return value if isinstance(value, base) else from_dict(value, base, _prefix=key)
    if "choices" in meta:
        choices = meta["choices"]
        if not any(type(value) is type(c) and value == c for c in choices):  # 1 is not true
            raise ConfigError(f"{key}: {_show(value)} is not one of {', '.join(map(_show_choice, choices))}"
                              f"{_suggest(value, [c for c in choices if isinstance(c, str)])}")
        return value
    if base not in _PARSERS:
        raise TypeError(f"{key}: unsupported config field type {base!r}")
    parse, allowed = _PARSERS[base]
    out = parse(value)
    bounds = [(sym, check, meta[name]) for name, (sym, check) in _BOUNDS.items() if name in meta]
    if out is _BAD or not all(check(out, b) for _, check, b in bounds):
        limits = " and ".join(f"{sym} {b:g}" for sym, _, b in bounds)
        expected = f"{allowed} {limits}".strip() + (" or null" if optional else "")
        raise ConfigError(f"{key}: expected {expected}, got {_show(value)}")
    return out


def from_dict(d: Mapping, cls: type | None = None, *, _prefix: str = "") -> Any:
    """Build the config dataclass ``cls`` (default :class:`RunConfig`) from a nested mapping.

    Missing keys take the dataclass defaults; every given key and value is checked against
    the field's type, ``choices`` and bounds (``ge``/``gt``/``le``/``lt``).  Ints are accepted
    for floats, bools are not numbers, strings are never coerced to numbers, lists become
    tuples.  Raises :class:`ConfigError` naming the full dotted key.
    """
    cls = RunConfig if cls is None else cls
    if not isinstance(d, Mapping):
        raise ConfigError(f"{_prefix or 'config'}: expected a mapping of keys, got {_show(d)}")
    fields = field_types(cls)
    for key in d:
        if key not in fields:
            raise unknown_key_error(_join(_prefix, key), fields, _prefix)
    return cls(**{k: _convert(v, *fields[k], _join(_prefix, k)) for k, v in d.items()})


def _plain(v: Any) -> Any:
    if dataclasses.is_dataclass(v):
        return to_dict(v)
    return list(v) if isinstance(v, tuple) else v


def to_dict(cfg: Any) -> dict:
    """Nested plain dict (tuples as lists) that :func:`from_dict` turns back into ``cfg``."""
    return {f.name: _plain(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}


def flatten(cfg: Any, _prefix: str = "") -> dict[str, Any]:
    """``{dotted.key: leaf}`` over the whole tree (leaves: None, bool, int, float, str, or a
    tuple of str); the MLflow params of a run are ``flatten(resolve(cfg))``."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cfg):
        v, key = getattr(cfg, f.name), _join(_prefix, f.name)
        out.update(flatten(v, key) if dataclasses.is_dataclass(v) else {key: v})
    return out


class _Loader(yaml.SafeLoader):
    """yaml.SafeLoader that also reads ``1e-6`` as a float (YAML 1.2; PyYAML's 1.1 rules
    read it as a string) and rejects duplicate keys instead of silently keeping the last."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, Hashable) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark)
            if isinstance(key, Hashable):
                seen.add(key)
        return super().construct_mapping(node, deep)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def yaml_load(text: str, where: str = "yaml") -> Any:
    """Parse YAML text (safe); a syntax error becomes a one-line :class:`ConfigError`."""
    try:
        return yaml.load(text, Loader=_Loader)  # _Loader subclasses SafeLoader
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{where}: invalid YAML{at}: {getattr(e, 'problem', None) or e}") from e


def read_yaml(path: str | Path) -> dict:
    """Read a YAML file whose top level is a mapping (an empty file is ``{}``)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror or e})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a text file (expected UTF-8 YAML)") from None
    data = yaml_load(text, where=str(path))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of config keys at the top level, "
                          f"got {type(data).__name__}")
    return data


def parse_override(text: str) -> tuple[str, Any]:
    """``"algo.beta_opd=3"`` -> ``("algo.beta_opd", 3)``; the value is YAML-parsed."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"bad override {text!r}: expected key=value, e.g. algo.beta_opd=3")
    return key.strip(), yaml_load(raw, where=f"override {text!r}")


def _nest(key: str, value: Any) -> dict:
    head, _, rest = key.partition(".")
    return {head: _nest(rest, value) if rest else value}


def _merge(base: dict, update: Mapping) -> dict:
    """Deep merge: a mapping into a section merges, anything else replaces."""
    out = dict(base)
    for k, v in update.items():
        both = isinstance(v, Mapping) and isinstance(out.get(k), dict)
        out[k] = _merge(out[k], v) if both else v
    return out


def apply_overrides(cfg: Any, overrides: Iterable[str] | Mapping[str, Any]) -> Any:
    """Return ``cfg`` with dotted-key overrides applied and the result validated.

    ``overrides`` is either ``["algo.beta_opd=3", "eval.splits=[eval_seen]"]`` (values
    YAML-parsed, as ``--set`` gives them) or ``{"algo.beta_opd": 3}`` (values as they are;
    what sweeps pass).  A mapping value set on a section merges into it.
    """
    pairs = overrides.items() if isinstance(overrides, Mapping) else map(parse_override, overrides)
    d = to_dict(cfg)
    for key, value in pairs:
        d = _merge(d, _nest(key, value))
    return from_dict(d, type(cfg))


def _normalise(v: Any) -> Any:
    """Floats to 12 significant digits (0.1 + 0.2 == 0.3; -0.0 == 0.0), recursively."""
    if isinstance(v, float):
        return float(f"{v:.12g}") + 0.0
    if isinstance(v, dict):
        return {k: _normalise(x) for k, x in v.items()}
    return [_normalise(x) for x in v] if isinstance(v, list) else v


def canonical_json(cfg: Any, exclude: Iterable[str] = ()) -> str:
    """Stable text of ``cfg`` for hashing (cell ids): validated again (so ints on float
    fields read as floats), ``exclude`` dotted keys/sections dropped (unknown -> ConfigError),
    floats normalised, keys sorted, no whitespace."""
    d = to_dict(from_dict(to_dict(cfg), type(cfg)))
    for key in exclude:
        _drop(d, key)
    return json.dumps(_normalise(d), sort_keys=True, separators=(",", ":"), allow_nan=False)


def _drop(d: dict, key: str) -> None:
    """Remove dotted ``key`` (a leaf or a whole section) from the nested dict ``d``, and a
    section this leaves empty (a section added after studies were recorded, all of whose
    fields are dropped at their defaults, hashes as if it did not exist)."""
    node, section, path = d, "", []
    for part in key.split("."):
        if not isinstance(node, dict):
            raise ConfigError(f"unknown key {key!r}: {section} is a value, not a section")
        if part not in node:
            raise unknown_key_error(_join(section, part), node, section)
        path.append((node, part))
        node, section = node[part], _join(section, part)
    parent, part = path.pop()
    del parent[part]
    while path and not parent:
        parent, part = path.pop()
        del parent[part]
