"""The report opens inside MLflow, checked in a real browser: a report logged on a run is
opened through the MLflow UI's artifact view in headless Chromium (driven by chromedriver over
the W3C WebDriver protocol), and every figure decodes and every table renders in the iframe
MLflow shows it in.  Needs Debian's `chromium` and `chromium-driver` (skips without them)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from support.reports_fakes import small_report
from sweeps.status import UI_ENV
from trainer.run.store import experiment_id, make_client, sqlite_uri

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, proc: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, f"{proc.args[0]} exited with {proc.returncode}"
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except (urllib.error.URLError, OSError):
            time.sleep(0.5)
    raise TimeoutError(f"{url} did not answer in {timeout:.0f} s")


def _start(argv: list[str], env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(argv, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def _stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


class WebDriver:
    """The few W3C WebDriver commands this test needs, over HTTP (no client library)."""

    def __init__(self, url: str) -> None:
        self.url = url
        options = {"binary": CHROMIUM, "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                                                "--disable-dev-shm-usage", "--window-size=1400,1000"]}
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome",
                                                 "goog:chromeOptions": options}}}
        self.session = self._call("POST", "/session", caps)["sessionId"]

    def _call(self, method: str, path: str, body: dict | None = None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as reply:
                return json.loads(reply.read())["value"]
        except urllib.error.HTTPError as exc:
            return json.loads(exc.read())["value"]

    def __call__(self, method: str, path: str, body: dict | None = None):
        return self._call(method, f"/session/{self.session}{path}", body)

    def quit(self) -> None:
        self._call("DELETE", f"/session/{self.session}")


@pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None,
                    reason="needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)")
def test_report_opens_in_the_mlflow_ui_with_its_figures(tmp_path):
    report = small_report(tmp_path)
    pngs = sorted(report.glob("figures/*.png"))
    tables = sorted(report.glob("tables/*.md"))
    uri = sqlite_uri(tmp_path / "store" / "mlruns.db")
    client = make_client(uri)
    exp = experiment_id(client, "report-check")
    run = client.create_run(exp, run_name="study").info.run_id
    client.log_artifacts(run, str(report), "report")

    port, driver_port = _free_port(), _free_port()
    root = (tmp_path / "store" / "artifacts").as_uri()
    server = _start([sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri,
                     "--default-artifact-root", root, "--host", "127.0.0.1", "--port", str(port),
                     "--workers", "1"], {**os.environ, **UI_ENV})
    chromedriver = _start([CHROMEDRIVER, f"--port={driver_port}"])
    browser = None
    try:
        _wait_http(f"http://127.0.0.1:{port}/health", server)
        _wait_http(f"http://127.0.0.1:{driver_port}/status", chromedriver)
        browser = WebDriver(f"http://127.0.0.1:{driver_port}")
        page = f"http://127.0.0.1:{port}/#/experiments/{exp}/runs/{run}/artifactPath/report/index.html"
        browser("POST", "/url", {"url": page})
        found, deadline = None, time.time() + 90
        while time.time() < deadline:
            frame = browser("POST", "/element", {"using": "css selector", "value": "iframe.mlflow-html-iframe"})
            if "element-6066-11e4-a52e-4f735466cecf" in frame:
                browser("POST", "/frame", {"id": frame})
                found = browser("POST", "/execute/sync", {"script": (
                    "return {images: Array.from(document.images).map(i => i.complete && i.naturalWidth > 0),"
                    " tables: document.querySelectorAll('table').length,"
                    " title: document.querySelector('h1') && document.querySelector('h1').textContent};"),
                    "args": []})
                browser("POST", "/frame", {"id": None})
                if isinstance(found, dict) and found.get("title") and len(found["images"]) == len(pngs) \
                        and all(found["images"]):
                    break
            time.sleep(1)
    finally:
        if browser is not None:
            browser.quit()
        _stop(chromedriver)
        _stop(server)
    assert found is not None, "MLflow's artifact view never showed the report's iframe"
    assert found["title"] == "Report: demo"
    assert found["images"] == [True] * len(pngs), found
    assert found["tables"] == len(tables)
