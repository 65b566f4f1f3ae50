"""Phase timing and memory: :class:`PhaseTimer` charges wall time (and, on a GPU, memory) to
the named phases of a step or stage (rollout, write, score, update, Stage 1, ...)."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Protocol

import torch

from trainer.episodes.scoring import PaddingCount, counting


@dataclass
class PhaseTimer:
    """Wall time per named phase (``time/<phase>_s``) and, with a ``memory`` probe, the
    memory each phase held (``memory/<phase>_reserved_gib``, ``memory/<phase>_used_gib``);
    ``padding`` counts the micro-batches the phases score (``perf/pad_share``,
    ``perf/micro_batches``).

    Phases nest and stay disjoint: an inner phase's time is charged to it alone (the
    current-policy teacher's passes inside the update count as ``teacher``, not ``update``),
    so a step's phases add up to its wall time instead of counting the inner one twice.
    ``sync`` (e.g. ``torch.cuda.synchronize``) is called at the start and the end of every
    phase, so that queued GPU work is charged to the phase that launched it; None (the
    default) measures host time only, which is exact on CPU.

    Memory, unlike time, is not disjoint: a phase's peak includes its inner phases' (the
    teacher's passes run inside the update's memory).  ``reserved`` is the most PyTorch's
    caching allocator held during the phase (the trainer's share); ``used`` is the device's
    memory in use at the phase's end, every process and vLLM's engine included (vLLM maps its
    memory outside PyTorch's allocator).  A phase run several times keeps its largest."""

    seconds: dict[str, float] = field(default_factory=dict)
    sync: Callable[[], None] | None = None
    memory: MemoryProbe | None = None
    padding: PaddingCount = field(default_factory=PaddingCount)  # the micro-batches the phases score
    peaks: dict[str, tuple[float, float]] = field(default_factory=dict)  # phase -> (reserved, used) bytes
    _inner: list[float] = field(default_factory=list, repr=False)  # per open phase: its inner phases' time
    _reserved: list[float] = field(default_factory=list, repr=False)  # per open phase: its peak so far

    @contextmanager
    def __call__(self, phase: str):
        if self.sync is not None:
            self.sync()
        self._open_memory()
        start = time.perf_counter()
        self._inner.append(0.0)
        try:
            with counting(self.padding) if len(self._inner) == 1 else nullcontext():  # once when nested
                yield
        finally:
            if self.sync is not None:
                self.sync()
            elapsed = time.perf_counter() - start
            inner = self._inner.pop()
            self.seconds[phase] = self.seconds.get(phase, 0.0) + elapsed - inner
            if self._inner:
                self._inner[-1] += elapsed
            self._close_memory(phase)

    def _open_memory(self) -> None:
        if self.memory is None:
            return
        if self._reserved:  # the enclosing phase's peak until now, before the counter restarts
            self._reserved[-1] = max(self._reserved[-1], self.memory.peak_reserved(reset=False))
        self.memory.peak_reserved(reset=True)
        self._reserved.append(self.memory.peak_reserved(reset=False))

    def _close_memory(self, phase: str) -> None:
        if self.memory is None:
            return
        reserved = max(self._reserved.pop(), self.memory.peak_reserved(reset=True))
        if self._reserved:  # the enclosing phase held at least as much
            self._reserved[-1] = max(self._reserved[-1], reserved)
        old = self.peaks.get(phase, (0.0, 0.0))
        self.peaks[phase] = (max(old[0], reserved), max(old[1], self.memory.used()))

    def metrics(self) -> dict[str, float]:
        metrics = {f"time/{k}_s": v for k, v in self.seconds.items()}
        for phase, (reserved, used) in self.peaks.items():
            metrics[f"memory/{phase}_reserved_gib"] = reserved / 2**30
            metrics[f"memory/{phase}_used_gib"] = used / 2**30
        return metrics

    @classmethod
    def for_device(cls, device: torch.device) -> PhaseTimer:
        """A timer that synchronises CUDA at phase boundaries and probes its memory when
        ``device`` is a GPU."""
        if device.type == "cuda":
            return cls(sync=torch.cuda.synchronize, memory=CudaMemory(device))
        return cls()


class MemoryProbe(Protocol):
    def peak_reserved(self, reset: bool) -> float:
        """The most bytes the trainer's allocator held since the last reset (then reset it)."""

    def used(self) -> float:
        """The device's bytes in use now, by every process and allocator."""


@dataclass(frozen=True)
class CudaMemory:
    """:class:`MemoryProbe` of one CUDA device."""

    device: torch.device

    def peak_reserved(self, reset: bool) -> float:
        peak = float(torch.cuda.max_memory_reserved(self.device))
        if reset:
            torch.cuda.reset_peak_memory_stats(self.device)
        return peak

    def used(self) -> float:
        free, total = torch.cuda.mem_get_info(self.device)
        return float(total - free)
