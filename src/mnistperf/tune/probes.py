"""Short timed probes: the input pipeline alone, the training step alone, and both together.

Every probe runs on the real data and the real device, leaves its warm-up out (worker start,
first batches, allocator and kernel warm-up), and is repeated: a probe's figure is the median
of its repeats, and the spread between them says how much of a difference is noise. Every repeat
is timed as an epoch of training is, by :class:`~mnistperf.diagnosis.record.clock.EpochClock`.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterable
from dataclasses import dataclass, field
from statistics import median
from typing import Any

import torch

from mnistperf.diagnosis.figures import HOST_WAIT_SHARE, SAMPLES_PER_S
from mnistperf.diagnosis.record.clock import EpochClock


@dataclass
class Probe:
    """One measured setting: what ran, samples/s per repeat, the host's wait share, and the seconds it took."""

    kind: str  # "loader", "step" or "both"
    settings: dict[str, Any]
    rates: list[float] = field(default_factory=list)
    wait_share: float | None = None
    seconds: float = 0.0
    note: str = ""
    start_s: float = 0.0  # a new epoch's time to its first batch (loader probes)

    @property
    def rate(self) -> float:
        """Median samples/s of the repeats (0 before any)."""
        return median(self.rates) if self.rates else 0.0

    @property
    def spread(self) -> float:
        """Relative spread of the repeats: (max - min) / median."""
        return (max(self.rates) - min(self.rates)) / self.rate if len(self.rates) > 1 and self.rate else 0.0


def _cycle(loader: Iterable) -> Generator[dict, None, None]:
    """Batches of epoch after epoch: a probe longer than one epoch pays each new epoch's start, as training does."""
    while True:
        yield from loader


def time_loader(datamodule, device: torch.device, batches: int, warmup: int, repeats: int) -> tuple[list[float], float]:
    """samples/s per repeat of drawing batches onto the device, and the seconds a new epoch takes to its first batch.

    Each repeat draws ``batches`` batches, after ``warmup`` untimed ones (the first epoch's worker start among them).
    """
    loader = datamodule.train_dataloader()
    source = _cycle(loader)
    for _ in range(warmup + 1):
        next(source)
    clock = EpochClock(device, profile_window=False)
    for _ in range(repeats):
        clock.epoch_start()
        for _ in range(batches):
            clock.count(len(datamodule.to_device(next(source), device)["label"]))
        clock.epoch_end()
    source.close()
    began = time.perf_counter()
    next(iter(loader))  # a new epoch: persistent workers are already there, others start again
    return [row[SAMPLES_PER_S] for row in clock.epochs], time.perf_counter() - began


def time_step(
    model, batch: dict, device: torch.device, steps: int, warmup: int, repeats: int, precision: str = "32-true"
) -> list[float]:
    """samples/s of the training step alone (forward, loss, backward, optimizer) on one batch already on the device."""
    step = model.standalone_step(precision)
    model.train()
    for _ in range(warmup):
        step(batch)
    clock = EpochClock(device, profile_window=False)
    for _ in range(repeats):
        clock.epoch_start()
        for _ in range(steps):
            step(batch)
        clock.count(steps * len(batch["label"]))
        clock.epoch_end()
    return [row[SAMPLES_PER_S] for row in clock.epochs]


def time_training(
    model, datamodule, device: torch.device, steps: int, warmup: int, repeats: int, precision: str = "32-true"
) -> tuple[list[float], float]:
    """samples/s of loader and step together per repeat, and the share of time the host waited for a batch.

    They run as training runs them: workers and step share the CPUs.
    """
    step = model.standalone_step(precision)
    model.train()
    source = _cycle(datamodule.train_dataloader())
    clock = EpochClock(device, profile_window=False)
    for repeat in range(repeats + 1):
        clock.epoch_start()
        for index in range(warmup if repeat == 0 else steps):
            batch = datamodule.to_device(next(source), device)
            clock.step_start(index)
            step(batch)
            clock.count(len(batch["label"]))
            clock.step_end(index)
        clock.epoch_end()
    source.close()
    timed = clock.epochs[1:]  # the first pass is the warm-up
    return [row[SAMPLES_PER_S] for row in timed], median(row[HOST_WAIT_SHARE] for row in timed)
