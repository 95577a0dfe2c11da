"""A window of steps the profiler records on the device: where it sits in an epoch, what it may cost, its run.

What it measures (under DDP, the ranks' talk too; on Linux, the training thread's wait for a core), where it sits and
what it may cost: docs/timing.md, "GPU busy" and "CPU in tensor operations". :mod:`.device_work` reads what it saw.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext, suppress
from pathlib import Path
from typing import Any

import torch

from mnistperf.diagnosis.figures import share
from mnistperf.diagnosis.measure.device_work import MIN_KERNELS_PER_STEP, device_reading
from mnistperf.diagnosis.measure.memory import own_proc_text
from mnistperf.diagnosis.measure.operator_clock import OperatorClock
from mnistperf.diagnosis.measure.window_reading import Talk, Unread, WindowReading
from mnistperf.upstream import profiler_running, top_function_mode

WINDOW_STEPS = 20  # enough to average over a few dozen kernels' jitter, few enough to stay cheap
CPU_WINDOW_STEPS = 6  # on a CPU, where every operator is recorded, read and kept: fewer steps say as much
PROFILER_WARMUP_STEPS = 2
TRACE_LIMIT = 20_000  # recorded operations (about 250 bytes each) past which the trace is written only if asked
CROWDED = 0.1  # the share of the window the training thread waited for a core that puts the verdict in doubt
BASE_MARGIN = 0.05  # the margin any share is read with, before the wait for a core widens it
TRACE_FILE = Path("plugins", "profile", "busy_window", "busy_window.pt.trace.json")  # where TensorBoard looks for it

_profiling: BusyWindow | None = None  # the window whose profiler is running, if any


def before_graph_capture() -> None:
    """Call just before any CUDA graph capture: a window still profiling ends without a share (not the steady state).

    No profiler starts here: on CUDA 13 an empty run before a capture was reported to kill activity collection for good.
    """
    if _profiling is not None:
        _profiling.abandon(Unread.GRAPH_CAPTURED)


FEWEST_STEPS = 4 + PROFILER_WARMUP_STEPS  # the shortest epoch :func:`window_steps` places a window in
CPU_FEWEST_STEPS = 2  # the shortest a CPU's window is placed in (:func:`short_cpu_window`)


def window_steps(batches_per_epoch: float, steps: int = WINDOW_STEPS) -> tuple[int, int] | None:
    """(first, last) batch index of the window in an epoch of ``batches_per_epoch`` steps; None where it is too short.

    Up to ``steps`` steps after one unprofiled step and the profiler's warm-up, ending two before the epoch's last,
    where a graphed step captures the remainder batch's graph (docs/timing.md).
    """
    if batches_per_epoch == float("inf"):
        return 10 + PROFILER_WARMUP_STEPS, 10 + PROFILER_WARMUP_STEPS + steps - 1
    last = int(batches_per_epoch) - 3
    first = max(1 + PROFILER_WARMUP_STEPS, last - steps + 1)
    return (first, last) if first <= last else None


def short_cpu_window(batches_per_epoch: float, steps: int = CPU_WINDOW_STEPS) -> tuple[int, int] | None:
    """On a CPU, (first, last) batch index of up to ``steps`` steps in an epoch too short for :func:`window_steps`.

    A CPU's profiler records from its first step (no warm-up) and no step captures a graph: the steps after the first
    (the loader's start) and before the last (a remainder batch), at least one; in an epoch of two, its last. None in
    an epoch of one step, which leaves no other to stand in for a profiled one in the epoch's figures.
    """
    if batches_per_epoch < CPU_FEWEST_STEPS:
        return None
    return 1, max(1, min(int(batches_per_epoch) - 2, steps))


def thread_wait_s() -> float | None:
    """The seconds the calling thread has waited for a core so far (its schedule's run-queue wait); None off Linux."""
    with suppress(OSError, ValueError, IndexError):
        return int(own_proc_text("schedstat", thread=True).split()[1]) / 1e9
    return None


@contextmanager
def profiler_lines_dropped() -> Iterator[None]:
    """Keep the lines torch's native profiler writes to stderr on start and stop from the terminal; others pass."""
    try:
        saved = os.dup(2)
    except OSError:  # no stderr to guard
        yield
        return
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            kept = b"".join(line for line in caught.read().splitlines(keepends=True) if not line.startswith(b"USDT:"))
            if kept:
                os.write(2, kept)


def cupti_tears_down_safely() -> bool:
    """Whether Kineto may detach CUPTI after profiling: from CUDA 12.6, which fixed its crashes with CUDA graphs."""
    return tuple(int(part) for part in (torch.version.cuda or "0").split(".")[:2]) >= (12, 6)


class BusyWindow:
    """Profiles the device's work over the steps ``first`` to ``last`` (batch indices of one epoch) on ``device_type``.

    Call :meth:`step_start` and :meth:`step_end` around every step of that epoch; after ``last`` :attr:`done` is true
    and :attr:`busy` holds the busy share, or None with :attr:`unread` saying why.
    """

    def __init__(
        self,
        first: int,
        last: int,
        device_type: str = "cuda",
        fewest_per_step: int = MIN_KERNELS_PER_STEP,
        warmup: int = PROFILER_WARMUP_STEPS,
    ):
        self.first, self.last, self.device_type = first, last, device_type
        self.opens = first - warmup  # the step it opens at (on CUDA, the profiler warms up from it)
        self.fewest_per_step = fewest_per_step
        self.budget: tuple[float, float] | None = None  # (a step's time, what recording may add to it): see cap()
        self.done = False
        self.busy: float | None = None
        self.unread: Unread | None = None  # why no share was read
        self.kernels = 0
        self.crowded: float | None = None  # share of the window the training thread waited for a core
        self.talked: Talk | None = None  # under DDP, the window's collectives (see communication())
        self.recorded: Any = None  # the stopped profiler, whose events export_trace writes
        self._profiler: Any = None  # Kineto's profile on CUDA, the autograd profiler on a CPU
        self.clock: OperatorClock | None = None  # set before it starts: times the torch calls in the profiler's place
        self.bounds: tuple[float, float] | None = None  # the operator clock's least and most share
        self._opened: tuple[float, float | None] = (0.0, None)  # the clock and the thread's wait where it opened
        self._recording_since = 0.0

    def cap(self, steps: int, step_s: float, allowed_s: float) -> None:
        """Before the profiler starts: record at most ``steps`` steps of ``step_s``, ending past ``allowed_s`` more."""
        self.last = min(self.last, self.first + steps - 1)
        self.budget = (step_s, allowed_s)

    def step_start(self, index: int) -> None:
        """Step ``index`` begins: the CUDA profiler starts its warm-up before ``first``, a CPU's recording at it."""
        on_cuda = self.device_type == "cuda"
        if index == self.opens and self._profiler is None and not self.done:
            self._opened = (time.perf_counter(), thread_wait_s())
            if on_cuda:
                if cupti_tears_down_safely():  # else CUPTI stays attached after the profiler and slows every launch
                    os.environ.setdefault("TEARDOWN_CUPTI", "1")
                active = self.last - self.first + 1
                plan = torch.profiler.schedule(wait=0, warmup=PROFILER_WARMUP_STEPS, active=active, repeat=1)
                self._start(torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA], schedule=plan))
        if index == self.first:
            if not on_cuda and self._opened[0] and self._profiler is None and not self.done:
                self._start(self.clock or torch.autograd.profiler.profile(use_kineto=False))  # no start-up cost
            self._recording_since = time.perf_counter()  # its start is priced apart (allowed_s)

    def _start(self, profiler: Any) -> None:
        global _profiling
        if profiler is not self.clock and profiler_running():  # ending ours would end it too
            self.abandon(Unread.PROFILER_RUNNING)
            return
        self._profiler = profiler
        with nullcontext() if profiler is self.clock else profiler_lines_dropped():
            profiler.__enter__()  # Kineto's profile: its start()
        _profiling = self

    def step_end(self, index: int) -> None:
        """Step ``index`` ends: the profiler steps, and after the window's last step its reading is taken."""
        if self._profiler is None or index < self.opens:
            return
        if self.device_type == "cuda":
            with profiler_lines_dropped():
                self._profiler.step()
        if self.clock is not None and index >= self.first and top_function_mode() is not self.clock:
            self.unread = Unread.MODE_CROSSED  # calls missed
        if index >= self.first and self.budget is not None:  # what its recorded steps took beyond their own time
            step_s, allowed_s = self.budget
            if time.perf_counter() - self._recording_since - (index - self.first + 1) * step_s > allowed_s:
                self.last = index  # the window ends early: its recorded steps have cost what it may spend
        if index == self.last:
            ended = time.perf_counter()  # the recorded steps' end, before the profiler stops and hands its events over
            stopped = self.close()  # waits for the device; the clock keeps the window out of the epoch's figures
            (opened, before), now, waited = self._opened, time.perf_counter(), thread_wait_s()
            if before is not None and waited is not None and now > opened:  # the share it waited for a core
                self.crowded = share(waited - before, now - opened)
            self.done = True
            if self.clock is not None:
                self.kernels = self.clock.calls
                if self.unread is None:  # no other mode crossed its steps
                    self.bounds = self.clock.bounds(now - self._recording_since)
                    self.unread = None if self.bounds else Unread.NO_CALLS
                self.busy = sum(self.bounds) / 2 if self.bounds else None
                return
            self.recorded, steps = stopped, self.last - self.first + 1
            # On a CPU, the share is of the steps' own span, as the operator clock's: their Python before the first
            # operator and after the last is outside tensor operations too (a step of one window's may be mostly that)
            span = None if self.device_type == "cuda" else ended - self._recording_since
            read = device_reading(stopped, self.device_type, steps, self.fewest_per_step, span)
            self.kernels, self.busy, self.unread, self.talked = read

    def abandon(self, unread: Unread) -> None:
        """End the window now, without a share, for ``unread``."""
        self.close()
        self.done, self.busy, self.unread = True, None, unread

    def result(self, epoch: int) -> WindowReading:
        """The window's reading: the share (or why there is none), where and over what."""
        spread = (self.bounds[1] - self.bounds[0]) / 2 if self.bounds else 0.0  # the operator clock's
        return WindowReading(
            self.device_type,
            share=self.busy,
            epoch=epoch,
            first_step=self.first + 1,
            last_step=self.last + 1,
            kernels=self.kernels,
            margin=BASE_MARGIN + (self.crowded or 0.0) + spread,
            waited_for_a_core=self.crowded,
            communication=self.talked,
            operator_clock=self.bounds or None,
        )

    def close(self) -> Any:
        """Stop the profiler, if it runs, and let go of it; return it (None where none ran)."""
        global _profiling
        profiler, self._profiler = self._profiler, None
        if profiler is None:
            return None
        with nullcontext() if profiler is self.clock else profiler_lines_dropped():
            if self.device_type == "cuda":
                profiler.stop()
            else:  # the autograd profiler, or the operator clock
                profiler.__exit__(None, None, None)
        if _profiling is self:
            _profiling = None
        return profiler
