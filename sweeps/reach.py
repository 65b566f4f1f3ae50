"""Is a service a study needs reachable?  Checked once at launch, so that a wrong address or
a server that is down ends the command with one line naming the address (exit 2) instead of
a client library's retries and traceback minutes later.

A TCP connection to the address is the check (5 s): it needs no credentials and no client
library, and tells "nothing listens there" (refused, timed out, unknown host) apart from the
errors the client itself reports once connected (bad password, no such database).
"""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

from trainer.config import ConfigError
from trainer.run.tracking import redact_url

DEFAULT_PORTS = {"http": 80, "https": 443, "postgresql": 5432, "postgres": 5432, "mysql": 3306}
RAY_DEFAULT_PORT = 6379


def unreachable(host: str, port: int, timeout: float = 5.0) -> str:
    """Why ``host:port`` takes no TCP connection ("" when it does)."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return ""
    except socket.gaierror:
        return f"unknown host {host!r}"
    except TimeoutError:
        return f"no answer in {timeout:g} s"
    except OSError as exc:
        return exc.strerror or str(exc)


def host_port(uri: str) -> tuple[str, int] | None:
    """(host, port) of a server URI (``http://``, ``postgresql+psycopg2://``, ...); None for
    local stores (``sqlite:///``, ``file:``, a path) and sockets given without a host."""
    parts = urlsplit(uri)
    scheme = parts.scheme.split("+", 1)[0].lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    try:
        port = parts.port
    except ValueError:
        raise ConfigError(f"{redact_url(uri)}: bad port") from None
    return parts.hostname, port or DEFAULT_PORTS[scheme]


def check_uri(uri: str, what: str) -> None:
    """Raise a one-line :class:`ConfigError` naming ``uri`` (password hidden) when the
    server it points at takes no connection; local stores pass."""
    where = host_port(uri)
    if where is None:
        return
    reason = unreachable(*where)
    if reason:
        raise ConfigError(f"cannot reach the {what} at {redact_url(uri)} ({where[0]}:{where[1]}): "
                          f"{reason}")


def check_ray_address(address: str) -> None:
    """Raise a one-line :class:`ConfigError` when the Ray head at ``address`` (``host:port``
    or ``ray://host:port``) takes no connection.  "" (a local Ray) and "auto" pass."""
    if not address or address in ("auto", "local"):
        return
    text = address.split("://", 1)[-1]
    host, _, port = text.rpartition(":")
    if not host:
        host, port = text, str(RAY_DEFAULT_PORT)
    if not port.isdigit():
        raise ConfigError(f"Ray address {address!r}: expected host:port")
    reason = unreachable(host, int(port))
    if reason:
        raise ConfigError(f"cannot reach the Ray head at {address}: {reason}; start it with "
                          f"`ray start --head --port={port}` or fix --address / ray_address")
