"""Input wait, timed where the host waits for the next training batch: around Lightning's fetch.

Lightning's training loop brackets every ``next()`` on the training data with
``trainer.profiler.start/stop("[_TrainingEpochLoop].train_dataloader_next")``: the one place
where the host waits for data (a worker's queue, a pandas row, a Parquet read). :class:`FetchClock`
is a Lightning profiler that wraps the trainer's own (the pass-through one by default, or the
user's, which keeps working) and adds up the seconds spent inside that action. Nothing is
inferred from gaps between steps, which also hold the copy to the device and Lightning's own work.

Lightning reports its fetches through ``start``/``stop`` and every hook it calls through
``profile(...)``, about two dozen a step: ``profile`` is the wrapped profiler's own bound method, so
hooks cost what they cost without the clock.
"""

from __future__ import annotations

import time
from typing import Any

from lightning.pytorch.profilers import Profiler

from mnistperf.upstream import TRAIN_FETCH_ACTION


class FetchClock(Profiler):
    """The trainer's profiler, plus a clock of the training fetches."""

    def __init__(self, inner: Profiler):
        super().__init__()
        self.inner = inner
        self.fetch_s = 0.0
        self._started: float | None = None
        self.profile = inner.profile  # type: ignore[method-assign]  # hooks skip the clock: see the module's doc

    def reset(self) -> float:
        """The seconds counted since the last reset, and a new count."""
        counted, self.fetch_s = self.fetch_s, 0.0
        return counted

    def start(self, action_name: str) -> None:
        """Start ``action_name`` in the wrapped profiler, and the clock where it is a training fetch."""
        if action_name.endswith(TRAIN_FETCH_ACTION):
            self._started = time.perf_counter()
        self.inner.start(action_name)

    def stop(self, action_name: str) -> None:
        """Stop ``action_name`` in the wrapped profiler, and add a training fetch's seconds to the count."""
        self.inner.stop(action_name)
        if action_name.endswith(TRAIN_FETCH_ACTION) and self._started is not None:
            self.fetch_s += time.perf_counter() - self._started
            self._started = None

    # Everything else is the wrapped profiler's.
    def summary(self) -> str:
        """The wrapped profiler's summary."""
        return self.inner.summary()

    def describe(self) -> None:
        """The wrapped profiler's description."""
        self.inner.describe()

    def setup(self, *args: Any, **kwargs: Any) -> None:
        """Set up the wrapped profiler."""
        self.inner.setup(*args, **kwargs)

    def teardown(self, stage: str | None) -> None:
        """Tear down the wrapped profiler."""
        self.inner.teardown(stage)
