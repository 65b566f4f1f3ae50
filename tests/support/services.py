"""Services for the tests marked ``services``, started on this machine's loopback in a
temporary folder and stopped afterwards (only the processes started here, by id):

* :func:`postgres`: a PostgreSQL server (Debian's ``postgresql``: initdb + pg_ctl, run as the
  ``postgres`` user when this is root), ``trust`` authentication on 127.0.0.1 only;
* :func:`mlflow_server`: ``mlflow server`` on a database with a local artifact folder
  (the command ``hindsight ui --backend-store-uri`` runs);
* :func:`ray_cluster`: a Ray head (``ray start --head``) plus a second node (``ray start
  --address``), each with its own resources, with token authentication: two raylets on
  this machine.

Each raises :class:`Unavailable` (the tests skip with its message) when the service cannot
start here: a missing program or Python package, or a start that fails.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = float(os.environ.get("HINDSIGHT_SERVICE_TIMEOUT_S", "600"))
# Offline and quiet, for every process started here.
QUIET_ENV = {"RAY_USAGE_STATS_ENABLED": "0",
             "MLFLOW_DISABLE_TELEMETRY": "true", "OMP_NUM_THREADS": "1",
             "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
             # A slow machine: Ray's raylet waits this long for its agents.
             "RAY_agent_register_timeout_ms": "300000"}


class Unavailable(RuntimeError):
    """The service cannot start on this machine; the message says why."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def service_env(**extra: str) -> dict[str, str]:
    """This process's environment, offline and quiet, with the repository and tests/ on
    PYTHONPATH (so Ray workers import sweeps and the fakes)."""
    path = os.pathsep.join([str(ROOT), str(TESTS), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {**os.environ, **QUIET_ENV, "PYTHONPATH": path, **extra}


def _wait(what: str, ready, procs: list[subprocess.Popen], logs: list[Path]) -> None:
    deadline = time.time() + START_TIMEOUT_S
    while time.time() < deadline:
        if ready():
            return
        for proc, log in zip(procs, logs):
            if proc.poll() is not None:
                raise Unavailable(f"{what} exited with {proc.returncode}: {_tail(log)}")
        time.sleep(0.5)
    raise Unavailable(f"{what} did not start in {START_TIMEOUT_S:.0f} s: {_tail(logs[-1])}")


def _tail(log: Path, n: int = 600) -> str:
    try:
        return " ".join(log.read_text(errors="replace")[-n:].split())
    except OSError:
        return "(no log)"


def stop_session(proc: subprocess.Popen, grace_s: float = 20.0) -> None:
    """Stop every process of the session ``proc`` leads (it was started with
    ``start_new_session=True``): SIGTERM, then SIGKILL after ``grace_s``."""
    pids = _session_pids(proc.pid)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.time() + grace_s
    while time.time() < deadline and _session_pids(proc.pid):
        with contextlib.suppress(Exception):
            proc.wait(timeout=0.5)
    for pid in _session_pids(proc.pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.wait(timeout=10)


def _session_pids(sid: int) -> list[int]:
    out = subprocess.run(["ps", "-s", str(sid), "-o", "pid=,stat="], capture_output=True,
                         text=True, check=False).stdout
    return [int(p) for p, stat in (line.split()[:2] for line in out.splitlines() if line.strip())
            if not stat.startswith("Z")]


# ---------------------------------------------------------------------------- PostgreSQL


@dataclass
class Postgres:
    port: int
    folder: Path

    def url(self, db: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{db}"

    def create_db(self, db: str) -> str:
        """Create database ``db``; return its URL."""
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres",
                             autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{db}"')
        return self.url(db)


def _pg_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    path = found[-1] if found else shutil.which(name)
    if not path:
        raise Unavailable(f"PostgreSQL's {name} is not installed (Debian: apt-get install postgresql)")
    return path


@contextlib.contextmanager
def postgres() -> Iterator[Postgres]:
    """A PostgreSQL server on 127.0.0.1 in a fresh temporary folder (removed afterwards)."""
    try:
        import psycopg  # noqa: F401 - MLflow and Optuna reach PostgreSQL through it
    except ImportError:
        raise Unavailable("the psycopg package is missing (pip install -e '.[cluster]')") from None
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    as_user: list[str] = []
    folder = Path(tempfile.mkdtemp(prefix="hs-pg-"))
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            shutil.rmtree(folder, ignore_errors=True)
            raise Unavailable("running as root and there is no postgres user") from None
        os.chown(folder, user.pw_uid, user.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    data, log, port = folder / "data", folder / "server.log", free_port()
    try:
        init = subprocess.run([*as_user, initdb, "-D", str(data), "-A", "trust", "-U", "postgres",
                               "--no-sync"], capture_output=True, text=True, check=False)
        if init.returncode != 0:
            raise Unavailable(f"initdb failed: {' '.join(init.stderr.split())[-400:]}")
        options = (f"-c listen_addresses=127.0.0.1 -p {port} -k {folder} -c fsync=off "
                   f"-c max_connections=200")
        start = subprocess.run([*as_user, pg_ctl, "-D", str(data), "-o", options, "-l", str(log),
                                "-w", "-t", str(int(START_TIMEOUT_S)), "start"],
                               capture_output=True, text=True, check=False)
        if start.returncode != 0:
            raise Unavailable(f"pg_ctl start failed: {_tail(log)}")
        try:
            yield Postgres(port, folder)
        finally:
            subprocess.run([*as_user, pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"],
                           capture_output=True, check=False)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# ---------------------------------------------------------------------------- MLflow server


@contextlib.contextmanager
def mlflow_server(backend: str, artifacts: Path, port: int = 0) -> Iterator[str]:
    """``mlflow server`` (the command ``hindsight ui --backend-store-uri`` runs) on 127.0.0.1
    storing runs in ``backend`` and artifacts under ``artifacts``; yields its http URI."""
    from sweeps.status import server_argv

    port = port or free_port()
    log = artifacts.parent / f"mlflow-server-{port}.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(server_argv(backend, artifacts, port), env=service_env(),
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        _wait("mlflow server", lambda: _healthy(uri), [proc], [log])
        yield uri
    finally:
        stop_session(proc)


def _healthy(uri: str) -> bool:
    try:
        with urllib.request.urlopen(f"{uri}/health", timeout=5) as reply:
            return reply.status == 200
    except OSError:
        return False


# ---------------------------------------------------------------------------- Ray


@dataclass
class RayCluster:
    address: str
    node_ids: dict[str, str]  # "head" / "worker" -> Ray node id
    procs: dict[str, subprocess.Popen]  # "head" / "worker" -> its `ray start --block`
    token_path: Path  # the cluster's token (RAY_AUTH_TOKEN_PATH while the cluster runs)

    def kill_worker_node(self) -> None:
        """SIGKILL every process of the second node (its raylet and the trials on it)."""
        stop_session(self.procs["worker"], grace_s=0.0)


def _ray_cli() -> str:
    path = Path(sys.executable).parent / "ray"
    if not path.exists():
        raise Unavailable("the `ray` command is not installed beside this Python")
    bootstrap = Path.home() / "ray_bootstrap_config.yaml"  # Ray's usage code probes the cloud
    if not bootstrap.exists():                              # metadata address without it
        bootstrap.write_text("{}\n")
    return str(path)


@contextlib.contextmanager
def ray_cluster(folder: Path, cpus: int = 2, gpus: int = 1,
                head_resources: dict | None = None,
                worker_resources: dict | None = None) -> Iterator[RayCluster]:
    """A Ray head and a second node on this machine (two raylets), each with ``cpus``
    CPUs, ``gpus`` declared GPUs (none need exist: Ray schedules by the declared count) and
    its own custom resources; dashboard off, usage stats off, ports chosen free.

    Token authentication as docs/cluster.md starts a cluster, with a fresh token kept in
    the temporary folder rather than ``~/.ray/auth_token``: while the cluster runs this
    process's ``RAY_AUTH_TOKEN_PATH`` names it (and ``RAY_AUTH_TOKEN`` is unset), so that
    its drivers and those started with :func:`service_env` find the token as a user's find
    ``~/.ray/auth_token``."""
    ray = _ray_cli()
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    temp = Path(tempfile.mkdtemp(prefix="hsray-"))  # short: Ray's socket paths have a limit
    token = temp / "auth_token"
    token.write_text(secrets.token_hex(32))
    token.chmod(0o600)
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    common = ["--disable-usage-stats", "--block", f"--num-cpus={cpus}", f"--num-gpus={gpus}"]
    head_log, worker_log = folder / "ray-head.log", folder / "ray-worker.log"
    procs: list[subprocess.Popen] = []

    def start(argv: list[str], log: Path, resources: dict | None) -> subprocess.Popen:
        with open(log, "w") as out:
            proc = subprocess.Popen(
                [ray, "start", *argv, *common, f"--resources={json.dumps(resources or {})}",
                 f"--dashboard-agent-listen-port={free_port()}"],
                env=service_env(**auth), stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)
        procs.append(proc)
        return proc

    started = lambda log: lambda: "Ray runtime started" in log.read_text(errors="replace")
    saved = {name: os.environ.pop(name, None) for name in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")}
    os.environ["RAY_AUTH_TOKEN_PATH"] = str(token)
    try:
        start(["--head", f"--port={port}", "--include-dashboard=false", f"--temp-dir={temp}"],
              head_log, head_resources)
        _wait("ray start --head", started(head_log), procs, [head_log])
        start([f"--address=127.0.0.1:{port}"], worker_log, worker_resources)
        _wait("ray start --address", started(worker_log), procs, [worker_log])
        yield RayCluster(f"127.0.0.1:{port}", _node_ids(f"127.0.0.1:{port}", auth),
                         {"head": procs[0], "worker": procs[1]}, token)
    finally:
        for proc in reversed(procs):  # the second node first, then the head
            stop_session(proc)
        for name, value in saved.items():
            os.environ.pop(name, None)
            if value is not None:
                os.environ[name] = value
        shutil.rmtree(temp, ignore_errors=True)


def _node_ids(address: str, auth: dict[str, str]) -> dict[str, str]:
    """head/worker -> node id, read by a short driver process with the cluster's ``auth``
    environment (so that this process stays free to connect to the cluster itself, or
    not)."""
    code = (f"import json, ray; ray.init(address={address!r}, logging_level='ERROR', log_to_driver=False); "
            "nodes = [n for n in ray.nodes() if n['Alive']]; "
            "print(json.dumps({('head' if 'node:__internal_head__' in n['Resources'] else "
            "'worker'): n['NodeID'] for n in nodes}))")
    deadline = time.time() + START_TIMEOUT_S
    while time.time() < deadline:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=service_env(**auth), check=False, timeout=START_TIMEOUT_S)
        lines = out.stdout.strip().splitlines()
        ids = json.loads(lines[-1]) if out.returncode == 0 and lines else {}
        if len(ids) == 2:
            return ids
        time.sleep(1)
    raise Unavailable(f"the Ray cluster at {address} did not show two nodes")
