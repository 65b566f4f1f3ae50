"""scripts/bench_compute_aware.py prints the calibration table, the power-formula check and the
replay of the CPU reference studies, whose decisions match the full studies'."""

from __future__ import annotations

import importlib.util

from support.paths import ROOT


def bench():
    path = ROOT / "scripts" / "bench_compute_aware.py"
    spec = importlib.util.spec_from_file_location("bench_compute_aware", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_it_prints_the_calibration_and_a_replay_that_agrees(capsys):
    assert bench().main(["--studies", "400"]) == 0
    out = capsys.readouterr().out
    for part in ("## Calibration", "## Power formula against simulation", "## Replay"):
        assert part in out
    replay = [line for line in out.splitlines() if line.startswith("| cpu_reference")]
    assert len(replay) == 6 and all("| yes |" in line for line in replay)
    assert "cpu_reference: the rule ran 15 of the study's 15 runs" in out
