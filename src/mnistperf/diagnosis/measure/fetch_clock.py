"""Input wait: the seconds inside the ``train_dataloader_next`` action Lightning reports to the trainer's profiler.

Every hook Lightning calls goes through the profiler's ``profile(...)``, about two dozen a step: that, like all but
``start`` and ``stop``, is the wrapped profiler's own bound method, so hooks skip the clock, except while a cycle is
timed by its parts (:meth:`FetchClock.time_into`), where each action goes through ``start`` and ``stop`` by a context
manager without a generator: about as cheap as the pass-through profiler's own.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

from lightning.pytorch.profilers import Profiler

from mnistperf.diagnosis.measure.step_parts import StepParts
from mnistperf.upstream import TRAIN_FETCH_ACTION

UNTIMED = StepParts()  # parts never opened: what actions are timed into while no cycle is


class FetchClock(Profiler):
    """The trainer's profiler (the pass-through one, or the user's, still working), plus a clock of the fetches."""

    def __init__(self, inner: Profiler):
        super().__init__()
        self.inner = inner
        self.fetch_s = 0.0
        self._started: float | None = None
        self.into = UNTIMED  # the parts whose open cycle each action is timed into (the untimed: none)
        for name in ("profile", "summary", "describe", "setup", "teardown"):
            setattr(self, name, getattr(inner, name))

    def time_into(self, parts: StepParts | None) -> None:
        """Time each action into ``parts``'s open cycle from now on, or (None) no longer."""
        self.into = parts or UNTIMED
        if parts is not None:
            own = getattr(self.inner.profile, "__func__", None) is not Profiler.profile  # its own profile() kept
            setattr(self, "profile", self._timed if own else partial(_Action, self))  # noqa: B010  (Lightning calls it)
        else:
            setattr(self, "profile", self.inner.profile)  # noqa: B010

    @contextmanager
    def _timed(self, action_name: str) -> Iterator[None]:
        with self.into.timed(action_name), self.inner.profile(action_name):
            yield

    def reset(self) -> float:
        """The seconds counted since the last reset, and a new count."""
        counted, self.fetch_s = self.fetch_s, 0.0
        return counted

    def start(self, action_name: str) -> None:
        """Start ``action_name`` in the wrapped profiler, and the clock where it is a training fetch."""
        self.into.enter(action_name)
        if action_name.endswith(TRAIN_FETCH_ACTION):
            self._started = time.perf_counter()
        self.inner.start(action_name)

    def stop(self, action_name: str) -> None:
        """Stop ``action_name`` in the wrapped profiler, and add a training fetch's seconds to the count."""
        try:
            self.inner.stop(action_name)
        finally:  # the action ends here even where the wrapped profiler's stop fails
            if action_name.endswith(TRAIN_FETCH_ACTION) and self._started is not None:
                self.fetch_s += time.perf_counter() - self._started
                self._started = None
            self.into.exit()


class _Action:
    """``with profiler.profile(name)`` as :class:`Profiler`'s does it (``start``, then ``stop`` whatever happens)."""

    __slots__ = ("clock", "name")

    def __init__(self, clock: Profiler, name: str):
        self.clock, self.name = clock, name

    def __enter__(self) -> str:
        try:
            self.clock.start(self.name)
        except BaseException:
            self.clock.stop(self.name)
            raise
        return self.name

    def __exit__(self, *exception: object) -> None:
        self.clock.stop(self.name)
