"""A service a study needs is down at launch (the Ray head, the tracking database or
server, the Optuna storage): `hindsight sweep` prints one line that names the address
(password hidden) and exits 2 before it writes anything.  No service is started here."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import yaml

from sweeps import cli
from sweeps.reach import check_ray_address, check_uri, host_port
from trainer.config import ConfigError


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _study(tmp_path: Path, **data) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({"name": "down", "base": {"model": {"backbone": "tiny"}},
                                    "out": "out", "grid": {"seed": [0]}, **data}))
    return path


def _sweep(capsys, *argv: str) -> tuple[int, list[str]]:
    code = cli.main(["sweep", *argv])
    return code, capsys.readouterr().err.strip().splitlines()


def test_unreachable_ray_head_one_line_exit_2(tmp_path, capsys):
    port = _closed_port()
    code, err = _sweep(capsys, str(_study(tmp_path)), "--address", f"127.0.0.1:{port}")
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"error: cannot reach the Ray head at 127.0.0.1:{port}: ")
    assert not (tmp_path / "out").exists()  # nothing written before the check
    code, err = _sweep(capsys, str(_study(tmp_path, ray_address=f"127.0.0.1:{port}")))
    assert code == 2 and f"Ray head at 127.0.0.1:{port}" in err[0]  # the study field too


def test_unreachable_postgresql_store_one_line_exit_2_password_hidden(tmp_path, capsys):
    port = _closed_port()
    uri = f"postgresql://hs:s3cret@127.0.0.1:{port}/mlflow"
    code, err = _sweep(capsys, str(_study(tmp_path, tracking_uri=uri)))
    assert code == 2 and len(err) == 1, err
    assert f"MLflow tracking store at postgresql://hs:***@127.0.0.1:{port}/mlflow" in err[0]
    assert "s3cret" not in err[0]
    search = {"space": {"algo.beta_opd": {"type": "float", "low": 1, "high": 5}},
              "storage": f"postgresql://hs@127.0.0.1:{port}/optuna"}
    path = _study(tmp_path, search=search)
    data = yaml.safe_load(path.read_text())
    del data["grid"]
    path.write_text(yaml.safe_dump(data))
    code, err = _sweep(capsys, str(path), "--dry-run")
    assert code == 2 and f"Optuna storage at postgresql://hs@127.0.0.1:{port}/optuna" in err[0]


def test_address_parsing():
    assert host_port("postgresql+psycopg2://u:p@db.lab:6543/x") == ("db.lab", 6543)
    assert host_port("http://127.0.0.1/") == ("127.0.0.1", 80)
    assert host_port("sqlite:////tmp/x.db") is None and host_port("/tmp/mlruns") is None
    check_uri("sqlite:////nonexistent/x.db", "store")  # local stores are not checked
    check_ray_address("")  # a local Ray
    with pytest.raises(ConfigError, match="expected host:port"):
        check_ray_address("127.0.0.1:abc")
