"""``hindsight train`` and ``hindsight sweep`` refuse, before anything loads, a run whose planned
peak (trainer/run/memory.py) exceeds its device: one ``error:`` line naming the phase and the
setting, exit 2; ``--ignore-memory`` starts it.  This machine's memory is a small fake
/proc/meminfo, so the figures do not depend on the machine the tests run on; nothing trains
(the trainer and the study runner are stand-ins that record their calls)."""

from __future__ import annotations

import types

import pytest

from support.paths import EXAMPLES
from sweeps import cli
from sweeps.cli import studies, training
from trainer.run import memory

EZPOINTS = str(EXAMPLES / "ezpoints_small.yaml")
# Issue 35's command line: the kernel killed this run at 23.5 GB on a 24 GiB machine.
SMOLLM2 = ["--set", "model.backbone=smollm2-135m", "--set", "stages.warm_start.enabled=false",
           "--set", "rollout.tasks_per_step=4"]


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """This machine's memory: 24 GiB (the machine of the issue); SmolLM2's extra installed (the
    command checks it first)."""
    pytest.importorskip("gguf", reason="the smollm extra (gguf) is not installed")
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       25165824 kB\nMemAvailable:   20000000 kB\n")
    monkeypatch.setattr(memory, "MEMINFO", meminfo)
    return meminfo


@pytest.fixture
def trainer(monkeypatch):
    """A stand-in for trainer.run.loop that records the runs it is asked to train."""
    module = types.SimpleNamespace(calls=[])

    def train(cfg, *, run_id=None, resume=False, progress=True):
        module.calls.append(cfg)
        return types.SimpleNamespace(run_id="r1", status="FINISHED", final_metrics={})

    module.train = train
    monkeypatch.setattr(training, "loop", module)
    return module


def test_the_smollm2_run_is_refused_in_one_line_before_it_loads(machine, trainer, capsys):
    code = cli.main(["train", EZPOINTS, *SMOLLM2, "--set", "model.device=cpu"])
    out, err = capsys.readouterr()
    assert (code, out, trainer.calls) == (2, "", [])
    assert err.count("\n") == 1 and err.startswith("error: grpo (smollm2-135m) plans "), err
    assert "in its update phase, more than this machine's memory, 24.0 GiB" in err
    assert "change model.gradient_checkpointing=true (activations (16 x 2096 tokens, no checkpointing: every" in err
    assert "--ignore-memory starts it anyway" in err


def test_ignore_memory_starts_it_and_a_run_that_fits_starts(machine, trainer, capsys):
    assert cli.main(["train", EZPOINTS, *SMOLLM2, "--set", "model.device=cpu", "--ignore-memory"]) == 0
    assert len(trainer.calls) == 1 and trainer.calls[0].model.backbone == "smollm2-135m"
    assert cli.main(["train", EZPOINTS, "--set", "model.device=cpu"]) == 0  # the tiny backbone fits
    assert len(trainer.calls) == 2 and "error" not in capsys.readouterr().err


def test_a_sweep_whose_cell_does_not_fit_is_refused(machine, monkeypatch, tmp_path, capsys):
    calls = []
    monkeypatch.setattr(studies, "run_study", lambda *a, **k: calls.append(a))
    study = tmp_path / "study.yaml"
    study.write_text(f"name: s\nout: {tmp_path / 'out'}\nbase: {{model: {{device: cpu, max_prompt_tokens: 2048}}, "
                     "algo: {micro_batch_size: 16}}\n"
                     "grid: {model.backbone: [tiny, smollm2-135m], seed: [0]}\n")
    code = cli.main(["sweep", str(study)])
    err = capsys.readouterr().err
    assert (code, calls) == (2, []) and err.count("\n") == 1
    assert err.startswith("error: grpo (smollm2-135m) plans ") and "update phase" in err
    assert cli.main(["sweep", str(study), "--ignore-memory"]) == 0 and len(calls) == 1
