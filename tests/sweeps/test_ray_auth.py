"""Token authentication of the Ray a sweep runs on (sweeps.ray_auth, issue 27).

Unit checks of which token a driver uses, then (marked ``services``) two local sweeps at
once, started with ``RAY_AUTH_MODE=disabled`` exported: a driver without the token that
reaches the machine's own address is refused, one with the token joins, each launch has its
own token, and the token is in no file of the runs, no MLflow param or tag, no report."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from support.paths import FAKES
from support.services import service_env, stop_session
from sweeps import ray_auth
from sweeps.cli import main
from sweeps.ray_auth import MODE, TOKEN, TOKEN_PATH, auth_env, token_source, use_auth
from sweeps.study import load_study
from trainer.config import ConfigError

HEX64 = re.compile(r"[0-9a-f]{64}")


@pytest.fixture
def environ(tmp_path):
    """No Ray connected, no RAY_AUTH_* and an empty home; afterwards Ray reads the
    restored environment again."""
    import ray

    ray.shutdown()  # a Ray left by an earlier module would hold the old settings
    with pytest.MonkeyPatch.context() as mp:
        for name in (MODE, TOKEN, TOKEN_PATH):
            mp.delenv(name, raising=False)
        mp.setenv("HOME", str(tmp_path))
        yield mp
    ray_auth._reload_ray_auth()


def test_a_local_ray_gets_a_fresh_token_whatever_the_shell_says():
    first = auth_env("", {MODE: "disabled"})
    second = auth_env("", {MODE: "disabled", TOKEN: first[TOKEN]})
    assert first[MODE] == second[MODE] == "token"
    assert HEX64.fullmatch(first[TOKEN]) and HEX64.fullmatch(second[TOKEN])
    assert first[TOKEN] != second[TOKEN]
    assert auth_env("local", {})[MODE] == "token"  # ray.init's name for a fresh local Ray


def test_a_cluster_gets_the_token_at_hand_in_rays_order(tmp_path):
    home = tmp_path / "home"
    assert auth_env("head:6379", {MODE: "disabled"}, home) == {}  # no token: mode untouched
    assert token_source({}, home) == ""
    ray_file = home / ".ray" / "auth_token"
    ray_file.parent.mkdir(parents=True)
    ray_file.write_text("from-file\n")
    assert token_source({}, home) == str(ray_file)
    other = tmp_path / "other_token"
    other.write_text("from-path")
    assert token_source({TOKEN_PATH: str(other)}, home) == str(other)
    assert token_source({TOKEN: "from-env", TOKEN_PATH: str(other)}, home) == TOKEN
    # a token is passed through even where the shell disabled authentication
    assert auth_env("head:6379", {MODE: "disabled"}, home) == {MODE: "token"}
    with pytest.raises(ConfigError, match=r"RAY_AUTH_TOKEN_PATH=.*missing: no Ray token there"):
        token_source({TOKEN_PATH: str(tmp_path / "missing")}, home)


def test_use_auth_sets_rays_mode_and_token_then_forgets_them(environ, tmp_path):
    from ray._raylet import AuthenticationMode, AuthenticationTokenLoader, get_authentication_mode

    environ.setenv(MODE, "disabled")
    use_auth("")
    token = os.environ[TOKEN]
    assert HEX64.fullmatch(token)
    assert get_authentication_mode() == AuthenticationMode.TOKEN  # Ray re-read the mode
    assert AuthenticationTokenLoader.instance().get_raw_token(ignore_auth_mode=True) == token
    use_auth("")
    assert os.environ[TOKEN] != token  # a second launch, a second token

    # Then a cluster without a token at hand: the local token is not sent, the shell's
    # RAY_AUTH_MODE is back.
    use_auth("127.0.0.1:1")
    assert TOKEN not in os.environ
    assert os.environ[MODE] == "disabled"
    assert get_authentication_mode() == AuthenticationMode.DISABLED
    # A local token that comes back (code that saved the environment while it was set
    # restores it) is not sent either.
    environ.setenv(TOKEN, token)
    use_auth("127.0.0.1:1")
    assert TOKEN not in os.environ
    assert not (tmp_path / ".ray").exists()


# ---------------------------------------------------------------------------- two local sweeps

# A driver that knows nothing of hindsight-lab, as anyone on the network could start one.
RAW_ATTACH = ("import sys, ray; ray.init(address=sys.argv[1], log_to_driver=False); "
              "print('JOINED', ray.get(ray.remote(lambda: 1).remote()))")
# A driver as hindsight-lab connects one (sweeps.ray_session.init_ray with an address).
CLI_ATTACH = ("import sys, ray\n"
              "from sweeps.ray_session import init_ray\n"
              "from trainer.config import ConfigError\n"
              "try:\n    init_ray(sys.argv[1])\n"
              "except ConfigError as exc:\n    print(f'error: {exc}'); sys.exit(2)\n"
              "print('JOINED', ray.get(ray.remote(lambda: 1).remote()))")
# Ray retries a refused connection for 20 s; a refusal is final, 2 tries show it.
QUICK_REFUSAL = {"RAY_gcs_server_port_wait_time_s": "2"}


def _study(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "base": {"model": {"backbone": "tiny"}},
                                    "out": f"out-{name}", "grid": {"seed": [0]},
                                    "resources": {"cpus": 0.5}}))
    return path


def _wait_info(path: Path, driver: subprocess.Popen, timeout: float = 600) -> dict:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if path.exists():
            return json.loads(path.read_text())
        assert driver.poll() is None, driver.communicate()[0][-3000:]
        time.sleep(0.5)
    raise AssertionError(f"no trial reported its Ray in {timeout} s ({path.name})")


def _attach(code: str, address: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, address], env=env, capture_output=True,
                          text=True, timeout=300, check=False)


def _files(*folders: Path) -> list[Path]:
    return [p for folder in folders for p in folder.rglob("*") if p.is_file() and not p.is_symlink()]


@pytest.mark.services  # two local Rays and six drivers: about 45 s on 2 cores
def test_local_sweeps_refuse_drivers_without_their_token(tmp_path):
    home, attach = tmp_path / "home", tmp_path / "attach"
    home.mkdir()
    attach.mkdir()
    env = service_env(RAY_AUTH_MODE="disabled", HOME=str(home), HS_ATTACH_DIR=str(attach))
    for name in (TOKEN, TOKEN_PATH):
        env.pop(name, None)
    paths = {name: _study(tmp_path, name) for name in ("a", "b")}
    drivers = {name: subprocess.Popen([sys.executable, str(FAKES), str(path), "attach"],
                                      cwd=tmp_path, env=env, start_new_session=True, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
               for name, path in paths.items()}
    outputs = {}
    try:
        info = {name: _wait_info(attach / f"out-{name}.json", d) for name, d in drivers.items()}
        a, b = info["a"], info["b"]
        assert a["mode"] == b["mode"] == "token"  # despite RAY_AUTH_MODE=disabled exported
        assert HEX64.fullmatch(a["token"]) and HEX64.fullmatch(b["token"])
        assert a["token"] != b["token"]  # a fresh token per launch
        address = a["gcs"]  # the machine's own address, as Ray gives it to other nodes
        assert not address.startswith("127."), f"this machine has no other address: {address}"

        refused = _attach(RAW_ATTACH, address, {**env, **QUICK_REFUSAL})
        assert refused.returncode != 0 and "JOINED" not in refused.stdout
        assert "InvalidAuthToken" in refused.stderr, refused.stderr[-2000:]

        joined = _attach(CLI_ATTACH, address, {**env, TOKEN: a["token"]})
        assert "JOINED 1" in joined.stdout, joined.stderr[-2000:]

        friend = tmp_path / "friend"  # the token in Ray's file, RAY_AUTH_MODE=disabled
        (friend / ".ray").mkdir(parents=True)
        (friend / ".ray" / "auth_token").write_text(a["token"])
        joined = _attach(CLI_ATTACH, address, {**env, "HOME": str(friend)})
        assert "JOINED 1" in joined.stdout, joined.stderr[-2000:]

        wrong = _attach(CLI_ATTACH, address, {**env, **QUICK_REFUSAL, TOKEN: b["token"]})
        assert wrong.returncode == 2, wrong.stderr[-2000:]
        assert wrong.stdout.strip() == (
            f"error: the Ray cluster at {address} uses token authentication and refused this "
            f"driver: the token from RAY_AUTH_TOKEN is not the cluster's; copy the cluster's "
            f"~/.ray/auth_token to this machine (docs/cluster.md)")
    finally:
        for name in drivers:
            (attach / f"out-{name}.go").touch()
        for name, driver in drivers.items():
            try:
                outputs[name] = driver.communicate(timeout=600)[0]
            finally:
                stop_session(driver)
    for name, driver in drivers.items():
        assert driver.returncode == 0, outputs[name][-3000:]

    assert main(["report", str(paths["a"])]) == 0
    assert not (home / ".ray").exists()  # no ~/.ray/auth_token written
    folders = [tmp_path / "out-a", tmp_path / "out-b", Path(a["session"]), Path(b["session"])]
    assert (tmp_path / "out-a" / "report" / "index.md").is_file()
    files = _files(*folders)
    assert any(p.name == "trial.log" for p in files) and any(p.suffix == ".log" for p in
                                                               _files(*folders[2:]))
    for token in (a["token"], b["token"]):
        for path in files:
            assert token.encode() not in path.read_bytes(), path
        assert all(token not in text for text in outputs.values())
    for name in ("a", "b"):
        study = load_study(paths[name])
        client = MlflowClient(study.store_uri)
        experiment = client.get_experiment_by_name(study.experiment)
        runs = client.search_runs([experiment.experiment_id])
        assert len(runs) == 2  # the study and its trial
        values = [str(v) for r in runs for v in (*r.data.params.values(), *r.data.tags.values())]
        assert values and not any(t in v for v in values for t in (a["token"], b["token"]))
