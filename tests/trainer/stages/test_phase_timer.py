"""PhaseTimer's memory per phase: peaks nest (an outer phase holds its inner phases' peak),
a repeated phase keeps its largest, and a GPU run logs both figures for every phase."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch

from trainer.stages import phases
from trainer.stages.phases import PhaseTimer


@dataclass
class FakeMemory:
    """A device whose allocator holds ``now`` bytes (set by the test) and remembers its peak."""

    now: float = 0.0
    peak: float = 0.0
    device_used: float = 0.0
    resets: list[float] = field(default_factory=list)

    def hold(self, nbytes: float) -> None:
        self.now = nbytes
        self.peak = max(self.peak, nbytes)

    def peak_reserved(self, reset: bool) -> float:
        peak = self.peak
        if reset:
            self.peak = self.now
            self.resets.append(self.now)
        return peak

    def used(self) -> float:
        return self.device_used


def test_phases_record_their_own_and_their_inner_peaks():
    mem = FakeMemory()
    timer = PhaseTimer(memory=mem)
    mem.hold(100)  # held before any phase: not a phase's peak unless still held in it
    mem.hold(10)
    with timer("update"):
        mem.hold(50)
        mem.hold(20)
        with timer("teacher"):
            mem.hold(70)
            mem.hold(30)
        mem.hold(40)
        mem.device_used = 90
    with timer("score"):
        mem.hold(35)
        mem.device_used = 60
    peaks = timer.peaks
    assert peaks["teacher"][0] == 70
    assert peaks["update"] == (70, 90)  # its inner phase's 70 beats its own 50
    assert peaks["score"] == (40, 60)  # 40 was still held when score began
    metrics = timer.metrics()
    assert metrics["memory/update_reserved_gib"] == pytest.approx(70 / 2**30)
    assert metrics["memory/score_used_gib"] == pytest.approx(60 / 2**30)


def test_an_outer_peak_before_its_inner_phase_counts():
    mem = FakeMemory()
    timer = PhaseTimer(memory=mem)
    with timer("update"):
        mem.hold(80)  # the update's peak comes before the teacher resets the counter
        mem.hold(5)
        with timer("teacher"):
            mem.hold(20)
        mem.hold(5)
    assert timer.peaks["update"][0] == 80 and timer.peaks["teacher"][0] == 20


def test_a_repeated_phase_keeps_its_largest():
    mem = FakeMemory()
    timer = PhaseTimer(memory=mem)
    for nbytes in (30, 60, 10):
        with timer("score"):
            mem.hold(nbytes)
        mem.hold(0)
        mem.peak = 0
    assert timer.peaks["score"][0] == 60


def test_without_a_probe_only_time_is_logged():
    timer = PhaseTimer.for_device(torch.device("cpu"))
    with timer("update"):
        pass
    assert list(timer.metrics()) == ["time/update_s"]


def test_a_cuda_timer_reads_the_allocator_and_the_device(monkeypatch):
    state = {"peak": 3 * 2**30}
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda device=None: state["peak"])
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: state.update(peak=2**30))
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (60 * 2**30, 80 * 2**30))
    timer = PhaseTimer.for_device(torch.device("cuda", 0))
    with timer("rollout"):
        state["peak"] = 5 * 2**30
    metrics = timer.metrics()
    assert metrics["memory/rollout_reserved_gib"] == 5.0
    assert metrics["memory/rollout_used_gib"] == 20.0  # 80 GiB total, 60 free


def test_the_phase_timer_charges_a_nested_phase_to_itself_alone(monkeypatch):
    """The current-policy teacher's passes run inside the update: they count as teacher
    only, so a step's phases add up to its wall time (the compute-cost table sums them)."""
    clock = iter([0.0, 1.0, 3.0, 10.0, 10.0, 11.5])  # update in, teacher in/out, update out, eval in/out
    monkeypatch.setattr(phases.time, "perf_counter", lambda: next(clock))
    timer = PhaseTimer()
    with timer("update"):
        with timer("teacher"):
            pass
    with timer("eval"):
        pass
    assert timer.seconds == {"teacher": 2.0, "update": 8.0, "eval": 1.5}
    assert sum(timer.seconds.values()) == 11.5
