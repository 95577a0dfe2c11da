"""Callbacks that see every training step and do nothing, or the least a timer and an audit must: the cost floors.

cpu-2core-compat-cost/measure.py (its ``plain`` and ``floor`` arms) and cpu-2core-fresh-cost/pairs.py (its ``idle`` and
``least`` arms) import them.
"""

from __future__ import annotations

from time import perf_counter
from typing import Any

from lightning.pytorch import Callback

from mnistperf.diagnosis.callbacks.batch_hooks import skip_unused_batch_hooks
from mnistperf.diagnosis.measure.batches import READINGS
from mnistperf.diagnosis.measure.held_steps import HASH_SAMPLES


class EmptyStepHooks(Callback):
    """A callback written the usual way: its two per-step hooks do nothing; Lightning dispatches its other ones."""

    def on_train_batch_start(self, *args: Any) -> None:
        """Nothing."""

    def on_train_batch_end(self, *args: Any) -> None:
        """Nothing."""


class Floor(EmptyStepHooks):
    """The same, its unused batch hooks skipped as the diagnosis skips its own: the least a callback of a step costs."""

    def __init__(self) -> None:
        skip_unused_batch_hooks(self)


class LeastTimer(Floor):
    """The least a timer must do each step: stamp its start and end, and count its samples by the shared reader."""

    def __init__(self) -> None:
        super().__init__()
        self.stamps: list[float] = []
        self.samples = 0

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, index: int) -> None:
        """The step's start."""
        self.stamps.append(perf_counter())

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, index: int) -> None:
        """The step's end and its samples."""
        self.stamps.append(perf_counter())
        self.samples += READINGS.read(batch).samples or 0

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        """The epoch's stamps let go."""
        self.stamps = []


class LeastAudit(Floor):
    """The least an audit must do each step: hold the step's sample rows, let go (not hashed) every HASH_SAMPLES."""

    def __init__(self) -> None:
        super().__init__()
        self.held: list[Any] = []
        self.samples = 0

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, index: int) -> None:
        """The step's rows held."""
        reading = READINGS.read(batch)
        self.held.append(reading.rows)
        self.samples += reading.samples or 0
        if self.samples >= HASH_SAMPLES:
            self.held, self.samples = [], 0


class HeldAllocations(Floor):
    """Holds a fresh, untouched allocation the size of the small MLP's batch each step, as the audit holds its rows.

    64 rows of 34 floats a step, let go once HASH_SAMPLES rows are held: the least that keeping them does to memory.
    """

    def __init__(self) -> None:
        super().__init__()
        self.held: list[Any] = []

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, index: int) -> None:
        """A batch's worth of memory held."""
        import torch

        self.held.append(torch.empty(64, 34))
        if len(self.held) >= HASH_SAMPLES // 64:
            self.held = []
