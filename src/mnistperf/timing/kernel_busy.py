"""How much of the time the GPU was executing work, from the kernels themselves.

CUDA events around a step cannot say it: the device reaches a step's end marker only when the
host has enqueued it, so for a launch-bound step the span between two markers is the host's time,
with every idle gap between the step's small kernels counted as busy. The kernels' own start
and end times can: :class:`KernelWindow` records them with the PyTorch profiler (CUPTI through
Kineto, CUDA activity only: no CPU operators, no stacks, no host sync per step) over a short window
of steps, and :func:`busy_share` takes the union of the kernel, memcpy and memset intervals over
the window's span, from its first device activity to its last.

The profiler costs host time per kernel launch, so the profiled steps run slower than the others:
the window sits in the warm-up epoch (epoch 1, reported apart), never in the headline epochs,
and its busy share, a property of the step, is reported beside them. A profiler warm-up of two
steps comes before the recorded ones, as the profiler's documentation advises.
"""

from __future__ import annotations

import os
from typing import Iterable, Optional

import torch

# Steps of the window: enough to average over a few dozen kernels' jitter, few enough to stay cheap.
WINDOW_STEPS = 20
PROFILER_WARMUP_STEPS = 2


def busy_share(intervals: Iterable[tuple[float, float]]) -> Optional[float]:
    """The share of [first start, last end] covered by at least one interval (overlaps counted once)."""
    spans = sorted((start, end) for start, end in intervals if end > start)
    if not spans:
        return None
    covered = 0.0
    current_start, current_end = spans[0]
    for start, end in spans[1:]:
        if start > current_end:
            covered += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    covered += current_end - current_start
    whole = max(end for _, end in spans) - spans[0][0]
    return min(covered / whole, 1.0) if whole > 0 else None


def window_steps(batches_per_epoch: float, steps: int = WINDOW_STEPS) -> Optional[tuple[int, int]]:
    """(first, last) batch index of the window in the first epoch: the ``steps`` steps before its last one
    (after the profiler's warm-up and at least one unprofiled step), or None when the epoch is too short.

    The epoch's last step is left out: its batch is often the smaller remainder (60,000 = 117 x 512 + 96),
    and a graphed step (``model.cuda_graph``) captures that shape's graph there, eager warm-up included,
    which is not the steady state the share describes.
    """
    if batches_per_epoch == float("inf"):
        return 10 + PROFILER_WARMUP_STEPS, 10 + PROFILER_WARMUP_STEPS + steps - 1
    last = int(batches_per_epoch) - 2
    first = max(1 + PROFILER_WARMUP_STEPS, last - steps + 1)
    return (first, last) if first <= last else None


def cupti_tears_down_safely() -> bool:
    """Whether Kineto may detach CUPTI after profiling: crashes with CUDA graphs were fixed in CUDA 12.6
    (pytorch PR #146604); older runtimes keep Kineto's default (attached, slower afterwards)."""
    version = tuple(int(part) for part in (torch.version.cuda or "0").split(".")[:2])
    return version >= (12, 6)


class KernelWindow:
    """Profiles the CUDA activity of the steps from ``first`` to ``last`` (batch indices of one epoch).

    Call :meth:`step_start` and :meth:`step_end` around every step of that epoch; after ``last``
    :attr:`done` is true and :attr:`busy` holds the busy share (None if nothing ran on the device).
    """

    def __init__(self, first: int, last: int):
        self.first, self.last = first, last
        self.done = False
        self.busy: Optional[float] = None
        self.kernels = 0
        self._profiler = None

    def step_start(self, index: int) -> None:
        if index == self.first - PROFILER_WARMUP_STEPS and self._profiler is None:
            # Without it, CUPTI stays attached after the profiler stops and slows every later launch.
            if cupti_tears_down_safely():
                os.environ.setdefault("TEARDOWN_CUPTI", "1")
            from torch.profiler import ProfilerActivity, profile, schedule

            self._profiler = profile(activities=[ProfilerActivity.CUDA],
                                     schedule=schedule(wait=0, warmup=PROFILER_WARMUP_STEPS,
                                                       active=self.last - self.first + 1, repeat=1))
            self._profiler.start()

    def step_end(self, index: int) -> None:
        if self._profiler is None or index < self.first - PROFILER_WARMUP_STEPS:
            return
        self._profiler.step()
        if index == self.last:
            self._profiler.stop()  # waits for the device: this is the warm-up epoch, outside the headline
            intervals = device_intervals(self._profiler)
            self.kernels = len(intervals)
            self.busy = busy_share(intervals)
            self._profiler = None
            self.done = True

    def result(self, epoch: int) -> dict:
        """What timing.json records as ``busy_window``: the share, and where and over what it was measured."""
        return {"share": self.busy, "epoch": epoch, "first_step": self.first + 1, "last_step": self.last + 1,
                "kernels": self.kernels}

    def close(self) -> None:
        """Stop a window the epoch did not finish (an interrupted or shortened epoch)."""
        if self._profiler is not None:
            self._profiler.stop()
            self._profiler = None


def device_intervals(profiler) -> list[tuple[float, float]]:
    """(start, end) in microseconds of every kernel, memcpy and memset the profiler saw on the GPU.

    Read from Kineto's raw events (each has its device and its own start and end); the processed
    ``events()`` list, which nests device events under the operators that launched them, is the
    fallback.
    """
    cuda = torch.autograd.DeviceType.CUDA
    results = getattr(getattr(profiler, "profiler", None), "kineto_results", None)
    if results is not None:
        return [(e.start_ns() / 1e3, e.end_ns() / 1e3) for e in results.events() if e.device_type() == cuda]
    return [(e.time_range.start, e.time_range.end) for e in profiler.events() if e.device_type == cuda]
