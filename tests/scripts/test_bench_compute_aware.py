"""scripts/bench_compute_aware.py prints the calibration table, the power-formula check and the
replay of the CPU reference studies, whose decisions match the full studies'."""

from __future__ import annotations

from support.paths import script_module


def bench():
    return script_module("bench_compute_aware")


def test_it_prints_the_calibration_and_a_replay_that_agrees(capsys):
    assert bench().main(["--studies", "400"]) == 0
    out = capsys.readouterr().out
    for part in ("## Calibration", "## Power formula against simulation", "## Replay"):
        assert part in out
    replay = [line for line in out.splitlines() if line.startswith("| cpu_reference")]
    assert len(replay) == 6 and all("| yes |" in line for line in replay)
    assert "cpu_reference: the rule ran 15 of the study's 15 runs" in out


def test_with_search_runs_the_pruned_search_benchmark(tmp_path, capfd):
    """--with-search runs scripts/bench_pruned_search.py as a subprocess and passes its output
    and exit code through (here a stand-in script: the real one trains two searches)."""
    module = bench()
    stand_in = tmp_path / "bench_pruned_search.py"
    stand_in.write_text("print('pruned / unpruned RL steps: 24 / 32')\nraise SystemExit(3)\n")
    module.PRUNED = stand_in
    module.ROOT = tmp_path
    assert module.main(["--studies", "200", "--with-search"]) == 3
    out = capfd.readouterr().out
    assert "## Pruned search" in out and "pruned / unpruned RL steps: 24 / 32" in out
