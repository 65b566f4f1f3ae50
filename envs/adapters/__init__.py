"""Adapters from the :class:`envs.base.TextEnv` interface to real environments.

* ``alfworld``: the real ALFWorld engine (offline, on generated PDDL problems);
* ``webshop``: a running WebShop text server, reached by URL (:mod:`envs.adapters.webshop`);
* ``searchr1``: Search-R1 question files plus a Search-R1 retrieval server
  (:mod:`envs.adapters.searchr1`).

Adapters import their optional dependencies lazily.  A missing dependency, an unset URL or a
missing data file raises :class:`AdapterUnavailable` with one line that names what is
missing and how to provide it.  Privileged facts that a real server cannot supply
(``distance``, ``plan``) are ``None``.
"""

from __future__ import annotations

import importlib
import json
import os
import urllib.error
import urllib.request
from typing import Any


class AdapterUnavailable(RuntimeError):
    """An adapter cannot run here: a dependency, server URL or data file is missing.

    The message is one line: ``"<adapter>: <what is missing>; <how to fix it>"``.
    """


def require_module(adapter: str, module: str, pip_name: str | None = None):
    """Import ``module`` or raise :class:`AdapterUnavailable` naming the package to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise AdapterUnavailable(
            f"{adapter}: python package {pip_name or module!r} is missing ({exc}); "
            f"install it with `pip install {pip_name or module}`"
        ) from None


def option_or_env(adapter: str, value: str | None, env_var: str, what: str, example: str) -> str:
    """``value`` if given, else ``os.environ[env_var]``; neither -> :class:`AdapterUnavailable`."""
    value = value or os.environ.get(env_var, "")
    if not value:
        raise AdapterUnavailable(
            f"{adapter}: no {what} given; pass {what}=... or set {env_var} (e.g. {example})"
        )
    return value


def http_json(adapter: str, url: str, payload: Any = None, timeout_s: float = 30.0) -> Any:
    """GET ``url`` (or POST ``payload`` as JSON when given) and decode the JSON reply.

    An unreachable server raises :class:`AdapterUnavailable`; an HTTP error status or a
    reply that is not JSON raises ``RuntimeError``; both name the adapter and the URL.
    """
    data = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            raw = response.read()
    except urllib.error.HTTPError as exc:
        raise RuntimeError(f"{adapter}: {url} answered HTTP {exc.code} ({exc.reason})") from None
    except (urllib.error.URLError, OSError) as exc:
        raise AdapterUnavailable(f"{adapter}: server {url} is unreachable ({exc})") from None
    try:
        return json.loads(raw)
    except ValueError:
        raise RuntimeError(f"{adapter}: {url} did not answer JSON: {raw[:200]!r}") from None


__all__ = ["AdapterUnavailable", "http_json", "option_or_env", "require_module"]
