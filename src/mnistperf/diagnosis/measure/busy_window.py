"""How much of the time the device was executing work, from its operations' own intervals.

On CUDA, events around a step cannot say it: the device reaches a step's end marker only when the
host has enqueued it, so for a launch-bound step the span between two markers is the host's time,
with every idle gap between the step's small kernels counted as busy. The kernels' own start
and end times can: :class:`BusyWindow` records them with the PyTorch profiler (CUPTI through
Kineto, CUDA activity only: no CPU operators, no stacks, no host sync per step) over a short window
of steps, and :func:`busy_share` takes the union of the kernel, memcpy and memset intervals over
the window's span, from its first device activity to its last.

On a CPU, host and device are one processor, and the same window tells arithmetic from overhead: it
records the CPU operators (tensor operations and autograd's nodes, each from its dispatch to its
return) and the busy share is the union of their intervals over the window's span. What lies outside
them is Python, Lightning's loop and hooks, logging and the wait for data: a small step whose
operators fill a fifth of its time is overhead-bound, a large convolution's fill nearly all of it.

The share describes the steady state, so the window sits in the first steady epoch (epoch 2; epoch 1
only in a one-epoch run, which says so). The profiler costs host time per operation, so the clock
keeps the window's steps out of that epoch's timed figures (:class:`~mnistperf.diagnosis.record.clock.EpochClock`).
On CUDA a profiler warm-up of two steps comes before the recorded ones, as the profiler's documentation advises.
On a CPU the autograd profiler records the operators without Kineto, which costs nothing to start; every operator is
recorded and read, so a recorded step costs up to :data:`CPU_WINDOW_COST` steps' time besides its own, and the window
may cost at most :data:`WINDOW_FIT_SHARE` of the whole fit's time (its time so far and its steps left at their pace):
it records fewer steps where the fit is short, and none where even one could cost more (:func:`affordable_steps`,
decided at the window's opening from the epoch's own pace); a trace of more than :data:`TRACE_LIMIT` operations is
not written unless asked for.

Other work on the machine stretches the intervals the share is read from. On Linux the window also
reads how long the training thread waited for a core (``/proc/thread-self/schedstat``): that share of the
window widens the margin the verdict states, and above :data:`CROWDED` the verdict says it is in doubt.

Under DDP the same window tells how long the ranks talked (:func:`communication`): the share of its span
inside collectives, and the share inside them with no work beside them (what the step waited for). On CUDA
a collective is an NCCL kernel (its time on the GPU, the wait for the other ranks included), on a CPU gloo's
own range (``gloo:all_reduce``, recorded on gloo's thread from the collective's start to its end); gloo on a
GPU runs on the host, outside the GPU's window, and gets no reading. A collective is not the device working:
the busy share leaves it out.

CUDA graphs: a window attached after a graph was captured sees its replays' kernels (measured on CUDA 13.0, in
docs/results/cuda-h200/probe/probe.md). No empty profiler runs before a capture: on CUDA 13 such a run has been
reported to leave activity collection dead for the rest of the process. :func:`before_graph_capture` only ends a window
still profiling (a capture inside the window is not the steady state it measures). A window that counts no
kernels, or fewer than its steps must have launched, reports the share as not measured and says so, without
guessing a cause.
"""

from __future__ import annotations

import math
import os
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from mnistperf.atomic import atomic_write
from mnistperf.upstream import kineto_results

# Steps of the window: enough to average over a few dozen kernels' jitter, few enough to stay cheap.
WINDOW_STEPS = 20
# On a CPU every operator is recorded, read and kept for the trace: fewer steps say as much.
CPU_WINDOW_STEPS = 6
PROFILER_WARMUP_STEPS = 2
# A trace of more recorded operations than this (about 250 bytes each) is not written unless asked for.
TRACE_LIMIT = 20_000
# The training thread waiting for a core at least this share of the window: the verdict is in doubt.
CROWDED = 0.1
# On a CPU the window may cost this share of the whole fit's time (None: no limit): with the callbacks' other work, a
# cost users do not notice (docs/results/cpu-2core-compat-cost).
WINDOW_FIT_SHARE = 0.015
# What one recorded step costs a CPU fit besides its own time, in unprofiled steps, at its worst: recording its
# operators and reading them. Measured 2.5-3.6 on steps of thousands of small operators, the worst case for a
# profiler; a step of a few large operators costs a few hundredths of a step (docs/results/cpu-2core-window-agreement).
CPU_WINDOW_COST = 4.0
# The margin any share is read with, before the wait for a core widens it.
BASE_MARGIN = 0.05
# A training step (forward, loss, backward, update) launches about ten kernels at the very least (a graphed
# SimpleCNN step some fifty); a step whose graph the profiler cannot see shows only its batch's preparation.
MIN_KERNELS_PER_STEP = 8
# Where the profiled window's trace goes, under the run's log folder: TensorBoard's profile plugin reads
# <logdir>/plugins/profile/<run>/*.pt.trace.json, and Perfetto (ui.perfetto.dev) opens the file itself.
TRACE_FILE = Path("plugins", "profile", "busy_window", "busy_window.pt.trace.json")
# What the busy share counts as the device working (user annotations, which span whole steps, are not work).
DEVICE_WORK = {"cuda": ("kernel", "gpu_memcpy", "gpu_memset"), "cpu": ("cpu_op",)}
# A collective among the profiled events, by the device profiled: (the backend whose collectives the window sees
# there, their activity kind, their name's start in lower case). gloo's on a GPU run on the host, out of its view.
COLLECTIVES = {"cuda": ("nccl", "kernel", "nccl"), "cpu": ("gloo", "user_annotation", "gloo:")}

Activity = tuple[str, float, float]  # (kind, start, end) of the device's work, as work_of reads it
Event = tuple[str, str, float, float, bool]  # (kind, name, start, end, a user annotation), as profiled_events reads it
Talks = tuple[str, int, list[tuple[float, float]]]  # (the backend, the world's size, the window's collectives)

_profiling: BusyWindow | None = None  # the window whose profiler is running, if any


def before_graph_capture() -> None:
    """Call just before a CUDA graph capture begins (any capture: the graphs of this project's step, a user's).

    A window still profiling is ended and reports its share as not measured: a capture is not the steady state the
    share describes.
    """
    if _profiling is not None:
        _profiling.abandon("a CUDA graph was captured inside the profiled window")


def covered(intervals: Iterable[tuple[float, float]]) -> tuple[float, float]:
    """(time covered by at least one interval, overlaps counted once; the span from first start to last end)."""
    spans = sorted((start, end) for start, end in intervals if end > start)
    if not spans:
        return 0.0, 0.0
    inside = 0.0
    current_start, current_end = spans[0]
    for start, end in spans[1:]:
        if start > current_end:
            inside += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    inside += current_end - current_start
    return inside, max(end for _, end in spans) - spans[0][0]


def busy_share(intervals: Iterable[tuple[float, float]]) -> float | None:
    """The share of [first start, last end] covered by at least one interval (overlaps counted once)."""
    inside, whole = covered(intervals)
    return min(inside / whole, 1.0) if whole > 0 else None


def communication(work: list[tuple[float, float]], collectives: list[tuple[float, float]]) -> dict[str, float] | None:
    """How much of a window the collectives took (None where nothing ran).

    ``share``: of its span, the time inside a collective; ``exposed_share``: inside one with no ``work`` beside it.
    The span runs from the first interval of either to the last.
    """
    both, span = covered([*work, *collectives])
    if span <= 0:
        return None
    talking, _ = covered(collectives)
    working, _ = covered(work)
    return {"share": min(talking / span, 1.0), "exposed_share": min(max(both - working, 0.0) / span, 1.0)}


def world() -> tuple[str, int] | None:
    """(the process group's backend, its size) where this process is one of several ranks; None on its own."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None
    return str(dist.get_backend()), dist.get_world_size()


def window_steps(batches_per_epoch: float, steps: int = WINDOW_STEPS) -> tuple[int, int] | None:
    """(first, last) batch index of the window in the first epoch, or None when the epoch is too short.

    Up to ``steps`` steps ending two before the epoch's last, after the profiler's warm-up and at least one
    unprofiled step.

    The epoch's last step is left out: its batch is often the smaller remainder (60,000 = 117 x 512 + 96),
    and a graphed step (``model.cuda_graph``) captures that shape's graph there, eager warm-up included,
    which is not the steady state the share describes. One unprofiled step stands between the window and
    that capture, so the profiler has stopped and let go of the device well before it.
    """
    if batches_per_epoch == float("inf"):
        return 10 + PROFILER_WARMUP_STEPS, 10 + PROFILER_WARMUP_STEPS + steps - 1
    last = int(batches_per_epoch) - 3
    first = max(1 + PROFILER_WARMUP_STEPS, last - steps + 1)
    return (first, last) if first <= last else None


def affordable_steps(fit_s: float, step_s: float, share: float | None = WINDOW_FIT_SHARE) -> float:
    """How many steps of ``step_s`` a CPU window may record in a fit of some ``fit_s`` seconds in all.

    At most ``share`` of the fit's time, each recorded step at :data:`CPU_WINDOW_COST` steps' time; infinite where
    ``share`` is None.
    """
    if share is None:
        return math.inf
    return share * fit_s / (CPU_WINDOW_COST * step_s)


def thread_schedule() -> tuple[float, float] | None:
    """(seconds on a core, seconds waiting for one) of the calling thread so far; None off Linux."""
    try:
        with open("/proc/thread-self/schedstat") as stat:
            on_core, waiting = stat.read().split()[:2]
        return int(on_core) / 1e9, int(waiting) / 1e9
    except (OSError, ValueError):
        return None


@contextmanager
def profiler_lines_dropped(prefix: bytes = b"USDT:") -> Iterator[None]:
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
            kept = b"".join(line for line in caught.read().splitlines(keepends=True) if not line.startswith(prefix))
            if kept:
                os.write(2, kept)


def cupti_tears_down_safely() -> bool:
    """Whether Kineto may detach CUPTI after profiling.

    Crashes with CUDA graphs were fixed in CUDA 12.6 (pytorch PR #146604); older runtimes keep Kineto's default
    (attached, slower afterwards).
    """
    version = tuple(int(part) for part in (torch.version.cuda or "0").split(".")[:2])
    return version >= (12, 6)


def kernel_count(activities: list[Activity]) -> int:
    """The kernels (CUDA) or operators (CPU) among a window's device activities (copies and memsets left out)."""
    return sum(1 for kind, _, _ in activities if kind in ("kernel", "cpu_op"))


def window_reading(
    activities: list[tuple[str, float, float]], steps: int, min_kernels_per_step: int = MIN_KERNELS_PER_STEP
) -> tuple[float | None, str | None]:
    """(busy share, None), or (None, why not) from a window's device activities over ``steps`` steps.

    ``activities``: (kind, start, end) as :func:`device_activities` reads them. A window with fewer kernels than
    ``min_kernels_per_step`` per step did not see the GPU's work, and gets no share.
    """
    kernels = kernel_count(activities)
    if kernels == 0:
        return None, "the profiler saw no kernels on the device"
    if kernels < min_kernels_per_step * steps:
        return None, (
            f"the profiler saw {kernels} kernels in {steps} steps, fewer than a training step launches: "
            "it missed part of the device's work"
        )
    share = busy_share((start, end) for _, start, end in activities)
    return (share, None) if share is not None else (None, "nothing ran on the device in the profiled window")


def cuda_profiler(steps: int) -> torch.profiler.profile:
    """Kineto's CUDA activity over ``steps`` recorded steps, after :data:`PROFILER_WARMUP_STEPS` of warm-up."""
    from torch.profiler import ProfilerActivity, profile, schedule

    # Without it, CUPTI stays attached after the profiler stops and slows every later launch.
    if cupti_tears_down_safely():
        os.environ.setdefault("TEARDOWN_CUPTI", "1")
    return profile(
        activities=[ProfilerActivity.CUDA],
        schedule=schedule(wait=0, warmup=PROFILER_WARMUP_STEPS, active=steps, repeat=1),
    )


def cpu_profiler() -> torch.autograd.profiler.profile:
    """The autograd profiler recording CPU operators without Kineto: the same operator events, and no start-up cost."""
    return torch.autograd.profiler.profile(use_kineto=False)


class BusyWindow:
    """Profiles the device activity of the steps from ``first`` to ``last`` (batch indices of one epoch).

    Call :meth:`step_start` and :meth:`step_end` around every step of that epoch; after ``last``
    :attr:`done` is true and :attr:`busy` holds the busy share, or None with :attr:`reason` saying why.

    Args:
        first, last: the window's first and last profiled step (batch indices).
        device_type: ``cuda`` (the GPU's kernels) or ``cpu`` (the CPU's operators).
        min_kernels_per_step: fewer kernels than this per step and the window is not trusted
            (see :func:`window_reading`).
    """

    def __init__(
        self,
        first: int,
        last: int,
        device_type: str = "cuda",
        min_kernels_per_step: int = MIN_KERNELS_PER_STEP,
    ):
        self.first, self.last = first, last
        self.budget_s: float | None = None  # see cap()
        self.device_type = device_type
        self.min_kernels_per_step = min_kernels_per_step
        self.done = False
        self.busy: float | None = None
        self.reason: str | None = None
        self.kernels = 0
        self.crowded: float | None = None  # share of the window the training thread waited for a core
        self.talked: dict[str, Any] | None = None  # under DDP, the window's collectives (see communication())
        self.recorded: Any = None  # the stopped profiler, whose events export_trace writes
        self._profiler: Any = None  # Kineto's profile on CUDA, the autograd profiler on a CPU
        self._opened: tuple[float, tuple[float, float] | None] = (0.0, None)
        self._recording_since = 0.0

    def cap(self, steps: int, budget_s: float) -> None:
        """Record at most ``steps`` steps, ending at the step in hand once they have taken ``budget_s`` (one at least).

        Called before the profiler starts.
        """
        self.last = min(self.last, self.first + steps - 1)
        self.budget_s = budget_s

    def step_start(self, index: int) -> None:
        """Step ``index`` begins: the window opens :data:`PROFILER_WARMUP_STEPS` before its first step.

        On CUDA the profiler starts its warm-up there; on a CPU, which needs none, the recording starts at the first.
        """
        on_cuda = self.device_type == "cuda"
        if index == self.first - PROFILER_WARMUP_STEPS and self._profiler is None and not self.done:
            self._opened = (time.perf_counter(), thread_schedule())
            if on_cuda:
                self._start(cuda_profiler(self.last - self.first + 1))
        if index == self.first:
            self._recording_since = time.perf_counter()
            if not on_cuda and self._opened[0] and self._profiler is None and not self.done:
                self._start(cpu_profiler())

    def _start(self, profiler: Any) -> None:
        global _profiling
        self._profiler = profiler
        with profiler_lines_dropped():
            if self.device_type == "cuda":
                profiler.start()
            else:
                profiler.__enter__()
        _profiling = self

    def step_end(self, index: int) -> None:
        """Step ``index`` ends: the profiler steps, and after the window's last step its reading is taken."""
        if self._profiler is None or index < self.first - PROFILER_WARMUP_STEPS:
            return
        if self.device_type == "cuda":
            with profiler_lines_dropped():
                self._profiler.step()
        spent = self.budget_s is not None and time.perf_counter() - self._recording_since > self.budget_s
        if index >= self.first and spent:
            self.last = index  # the window ends early: its recorded steps have cost what it may spend
        if index == self.last:
            self._stop()  # waits for the device; the clock keeps the window out of the epoch's figures
            self.crowded = waited_share(self._opened, time.perf_counter(), thread_schedule())
            events = profiled_events(self._profiler, self.device_type)
            talks = self._collectives(events)
            apart = COLLECTIVES[self.device_type][2] if talks is not None else None
            activities = work_of(events, self.device_type, apart)
            self.kernels = kernel_count(activities)
            self.busy, self.reason = window_reading(activities, self.last - self.first + 1, self.min_kernels_per_step)
            # A window that missed the device's work cannot say what the talk left idle.
            self.talked = self._talk(talks, activities) if self.busy is not None else None
            self.recorded, self._profiler = self._profiler, None
            self.done = True

    def _collectives(self, events: list[Event]) -> Talks | None:
        """Under DDP, the backend, the world's size and the window's collectives.

        None on one process, for a backend whose collectives the window cannot see, or where they cannot be read.
        """
        try:
            ranks = world()
            if ranks is None or COLLECTIVES[self.device_type][0] not in ranks[0]:
                return None
            return (*ranks, collective_intervals(events, self.device_type))
        except Exception:  # a reading that fails leaves the window's share, and the fit, as they are
            return None

    @staticmethod
    def _talk(talks: Talks | None, work: list[Activity]) -> dict[str, Any] | None:
        """:func:`communication`'s shares of the collectives beside the device's ``work``, with what else they are.

        None where there are none to read.
        """
        if talks is None:
            return None
        backend, size, intervals = talks
        shares = communication([(start, end) for _, start, end in work], intervals)
        if shares is None:
            return None
        return {"backend": backend, "world_size": size, "collectives": len(intervals), **shares}

    def _stop(self) -> None:
        global _profiling
        assert self._profiler is not None  # stopped only while profiling
        with profiler_lines_dropped():
            if self.device_type == "cuda":
                self._profiler.stop()
            else:
                self._profiler.__exit__(None, None, None)
        if _profiling is self:
            _profiling = None

    def abandon(self, reason: str) -> None:
        """End the window now, without a share, for ``reason``."""
        self.close()
        self.done, self.busy, self.reason = True, None, reason

    def result(self, epoch: int) -> dict:
        """What timing.json records as ``busy_window``: the share (or why there is none), where and over what."""
        found = {
            "share": self.busy,
            "epoch": epoch,
            "first_step": self.first + 1,
            "last_step": self.last + 1,
            "kernels": self.kernels,
            "margin": BASE_MARGIN + (self.crowded or 0.0),
            "waited_for_a_core": self.crowded,
            **({"communication": dict(self.talked)} if self.talked is not None else {}),
        }
        return {**found, "reason": self.reason} if self.reason else found

    def close(self) -> None:
        """Stop a window the epoch did not finish (an interrupted or shortened epoch)."""
        if self._profiler is not None:
            self._stop()
            self._profiler = None


def collective_intervals(events: list[Event], device_type: str = "cuda") -> list[tuple[float, float]]:
    """(start, end), in microseconds, of every collective among a window's events (see :data:`COLLECTIVES`)."""
    _, kind, prefix = COLLECTIVES[device_type]
    return [(start, end) for what, name, start, end, _ in events if what == kind and name.lower().startswith(prefix)]


def waited_share(
    opened: tuple[float, tuple[float, float] | None], now: float, schedule: tuple[float, float] | None
) -> float | None:
    """The share of the time since ``opened`` (wall clock, thread schedule) the thread waited for a core."""
    start, before = opened
    wall = now - start
    if before is None or schedule is None or wall <= 0:
        return None
    return min(max((schedule[1] - before[1]) / wall, 0.0), 1.0)


def export_trace(profiler: Any, path: Path) -> None:
    """Write a stopped profiler's events to ``path`` as a Chrome trace (JSON with ``traceEvents``), atomically."""
    atomic_write(path, lambda tmp: profiler.export_chrome_trace(str(tmp)))


def profiled_events(profiler: Any, device_type: str = "cuda") -> list[Event]:
    """Every event the profiler saw on the device: (kind, name, start, end in microseconds, a user annotation).

    Read from Kineto's raw events (each has its device, its activity type and its own start and end); the
    processed ``events()`` list, which nests device events under the operators that launched them, is the
    fallback (also where a raw event has no ``activity_type()``, as in torch 2.11).
    """
    device = torch.autograd.DeviceType.CUDA if device_type == "cuda" else torch.autograd.DeviceType.CPU
    results = kineto_results(profiler)
    if results is not None:
        try:
            return [
                (e.activity_type(), e.name(), e.start_ns() / 1e3, e.end_ns() / 1e3, e.is_user_annotation())
                for e in results.events()
                if e.device_type() == device
            ]
        except AttributeError:  # a raw event without activity_type() (torch 2.11): the processed list
            pass
    found = []
    for e in profiler.events():
        if e.device_type != device:
            continue
        annotation = bool(getattr(e, "is_user_annotation", False))
        kind = getattr(e, "activity_type", None) or ("user_annotation" if annotation else DEVICE_WORK[device_type][0])
        found.append((str(kind), str(getattr(e, "name", "")), e.time_range.start, e.time_range.end, annotation))
    return found


def work_of(events: list[Event], device_type: str = "cuda", apart: str | None = None) -> list[Activity]:
    """(kind, start, end) of the device's work among a window's events.

    On CUDA every kernel, memcpy and memset; on a CPU every operator. User annotations (each ``record_function``
    range, which Kineto also projects onto the GPU's timeline, spanning its gaps) are left out: they are not work;
    so is every event whose name starts with ``apart`` (a collective's kernel).
    """
    work = DEVICE_WORK[device_type]
    return [
        (kind, start, end)
        for kind, name, start, end, annotation in events
        if not annotation and kind in work and not (apart and name.lower().startswith(apart))
    ]


def device_activities(profiler: Any, device_type: str = "cuda") -> list[Activity]:
    """(kind, start, end), times in microseconds, of the work the profiler saw on the device (:func:`work_of`)."""
    return work_of(profiled_events(profiler, device_type), device_type)
