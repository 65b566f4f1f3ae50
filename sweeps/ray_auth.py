"""Token authentication for the Ray a sweep runs on (Ray's ``RAY_AUTH_MODE=token``).

Ray's servers (GCS, raylets, workers) listen on every interface of the machine whatever
``ray.init`` is given (Ray 2.60 has no bind address; docs/cluster.md lists what listens
where), so without authentication any process that reaches the machine's address can attach
a driver and run code as the user.  Hence:

* **a local Ray** (no address): token authentication with a fresh random token per launch,
  handed to Ray's processes and its workers through the environment (``RAY_AUTH_TOKEN``) and
  nowhere else: no file (not ``~/.ray/auth_token``, not Ray's session folder), no log, no
  MLflow param or tag.  An inherited ``RAY_AUTH_MODE=disabled`` does not turn it off.
* **a cluster** (an address): the cluster's token is passed through when the environment
  (``RAY_AUTH_TOKEN``, or the file ``RAY_AUTH_TOKEN_PATH`` names) or Ray's token file
  (``~/.ray/auth_token``) has one, whatever ``RAY_AUTH_MODE`` says (a cluster without
  authentication ignores a token); without one, the caller's ``RAY_AUTH_MODE`` stands.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from pathlib import Path

from trainer.config import ConfigError

MODE = "RAY_AUTH_MODE"
TOKEN = "RAY_AUTH_TOKEN"
TOKEN_PATH = "RAY_AUTH_TOKEN_PATH"


def new_token() -> str:
    """256 random bits as hex, as ``ray get-auth-token --generate`` makes them."""
    return secrets.token_hex(32)


def token_file(home: Path | None = None) -> Path:
    """Ray's default token file, ``~/.ray/auth_token``."""
    return (home or Path.home()) / ".ray" / "auth_token"


def token_source(environ: Mapping[str, str], home: Path | None = None) -> str:
    """Where Ray finds a cluster's token, in Ray's order of precedence: ``RAY_AUTH_TOKEN``,
    the file ``RAY_AUTH_TOKEN_PATH`` names, ``~/.ray/auth_token``; "" when there is none.
    A ``RAY_AUTH_TOKEN_PATH`` without a token in it is an error (Ray would abort on it)."""
    if environ.get(TOKEN, "").strip():
        return TOKEN
    if path := environ.get(TOKEN_PATH, ""):
        if not _has_token(Path(path)):
            raise ConfigError(
                f"{TOKEN_PATH}={path}: no Ray token there (missing, unreadable "
                f"or empty); fix the path or unset it"
            )
        return path
    return str(token_file(home)) if _has_token(token_file(home)) else ""


def _has_token(path: Path) -> bool:
    try:
        return bool(path.read_text().strip())
    except OSError:
        return False


def auth_env(address: str, environ: Mapping[str, str], home: Path | None = None) -> dict[str, str]:
    """The ``RAY_AUTH_*`` values a driver of the Ray at ``address`` sets: for a fresh local
    Ray (``address`` "" or "local", as ``ray.init`` reads it) token mode with a new token;
    for a cluster token mode when a token is at hand (Ray loads it from its source), else
    nothing."""
    if address in ("", "local"):
        return {MODE: "token", TOKEN: new_token()}
    return {MODE: "token"} if token_source(environ, home) else {}


# What use_auth set in this process: variable -> (the value before, the value set).
_applied: dict[str, tuple[str | None, str]] = {}
_local_tokens: set[str] = set()  # every token made here for a local Ray: never a caller's


def use_auth(address: str) -> None:
    """Set this process's ``RAY_AUTH_*`` for the Ray at ``address`` ("" = a fresh local
    Ray) before ``ray.init``: Ray's processes and workers inherit them.  What an earlier
    call set is undone first where nobody changed it since, and a token of an earlier
    local Ray is dropped wherever it came back from (a saved and restored environment), so
    that a connection to a cluster never sends a stale local token."""
    for name, (before, ours) in _applied.items():
        if os.environ.get(name) == ours:
            _put(name, before)
    _applied.clear()
    if os.environ.get(TOKEN) in _local_tokens:
        del os.environ[TOKEN]
    values = auth_env(address, os.environ)
    if TOKEN in values:
        _local_tokens.add(values[TOKEN])
    for name, value in values.items():
        _applied[name] = (os.environ.get(name), value)
        os.environ[name] = value
    _reload_ray_auth()


def _put(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def _reload_ray_auth() -> None:
    """Make an already imported Ray read ``RAY_AUTH_*`` again: its core reads the mode once
    (RayConfig) and caches the token it loaded.  Config first, then the token cache, as
    Ray's own reset does (ray._private.authentication_test_utils)."""
    from ray._raylet import AuthenticationTokenLoader, Config  # Ray: deferred, heavy

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def refused(exc: BaseException) -> bool:
    """Whether ``ray.init``'s error (or one it was raised from) is a refused token."""
    from ray.exceptions import AuthenticationError  # Ray: deferred, heavy

    seen: BaseException | None = exc
    while seen is not None:  # Ray 2.60: ConnectionError from RuntimeError naming the RPC error
        if isinstance(seen, AuthenticationError) or "InvalidAuthToken" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def refusal_message(address: str) -> str:
    """One line for a cluster that refused this driver's token (or its lack of one)."""
    source = token_source(os.environ)
    why = (
        f"the token from {source} is not the cluster's"
        if source
        else "this driver has no token (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token)"
    )
    return (
        f"the Ray cluster at {address} uses token authentication and refused this "
        f"driver: {why}; copy the cluster's ~/.ray/auth_token to this machine "
        f"(docs/cluster.md)"
    )
