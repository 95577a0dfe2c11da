"""Input wait: the seconds inside the ``train_dataloader_next`` action Lightning reports to the trainer's profiler.

Every hook Lightning calls goes through the profiler's ``profile(...)``, about two dozen a step: that, like all but
``start`` and ``stop``, is the wrapped profiler's own bound method, so hooks skip the clock.
"""

from __future__ import annotations

import time

from lightning.pytorch.profilers import Profiler

from mnistperf.upstream import TRAIN_FETCH_ACTION


class FetchClock(Profiler):
    """The trainer's profiler (the pass-through one, or the user's, still working), plus a clock of the fetches."""

    def __init__(self, inner: Profiler):
        super().__init__()
        self.inner = inner
        self.fetch_s = 0.0
        self._started: float | None = None
        for name in ("profile", "summary", "describe", "setup", "teardown"):
            setattr(self, name, getattr(inner, name))

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
