"""Where a training step's time goes: forward, backward and the optimizer's update, sampled one step in a few.

Lightning calls ``on_before_backward`` when the forward (``training_step``, the loss) is done,
``on_after_backward`` when the backward is, and ``on_before_optimizer_step`` just before the update.
:class:`StepPhases` stamps those points on one training step in :data:`SAMPLE_EVERY` (a callback
dispatches the three hooks on those steps only, so the others pay nothing for them) and gives the
epoch's share of step time in each phase. Stamps are host clock readings on a CPU and CUDA events on
the GPU (recorded in stream order, read once, at the epoch's end, after its synchronization): no
step waits for the device.

A step's phases: *forward* from the step's start to its first ``on_before_backward``, *backward* from
there to its last ``on_after_backward``, *optimizer* from its last ``on_before_optimizer_step`` to the
step's end. A step missing one of them (a graphed step's own backward, a step skipped by returning
None) is left out of the sample.
"""

from __future__ import annotations

import time
from typing import Any

import torch

SAMPLE_EVERY = 16  # one training step in this many is stamped: batch indices 1, 17, 33, ...
PHASES = ("forward", "backward", "optimizer")
# The marks of a sampled step, in order; each phase lies between two of them.
SPANS = {"forward": ("start", "backward"), "backward": ("backward", "backward_end"), "optimizer": ("optimizer", "end")}


def sampled(index: int) -> bool:
    """Whether training step ``index`` of an epoch is one whose phases are stamped."""
    return index % SAMPLE_EVERY == 1


class StepPhases:
    """The phase marks of an epoch's sampled steps, on a CPU's clock or as CUDA events.

    Args:
        device: the training device; on CUDA the marks are events recorded on its current stream.
    """

    def __init__(self, device: torch.device):
        self.on_cuda = device.type == "cuda"
        self._pool: list[Any] = []  # CUDA events, reused from epoch to epoch
        self.reset()

    def reset(self) -> None:
        """Forget the epoch's marks (a new epoch)."""
        self._steps: list[dict[str, Any]] = []
        self._current: dict[str, Any] | None = None
        self._used = 0

    def _stamp(self) -> Any:
        if not self.on_cuda:
            return time.perf_counter()
        if self._used == len(self._pool):
            self._pool.append(torch.cuda.Event(enable_timing=True))
        event = self._pool[self._used]
        self._used += 1
        event.record()
        return event

    def start(self) -> None:
        """A sampled step begins."""
        self._current = {"start": self._stamp()}

    def mark(self, name: str) -> None:
        """``backward`` (the forward is done; the first one counts), ``backward_end`` or ``optimizer``."""
        if self._current is not None and not (name == "backward" and name in self._current):
            self._current[name] = self._stamp()

    def end(self) -> None:
        """The sampled step ends."""
        if self._current is not None:
            self._current["end"] = self._stamp()
            self._steps.append(self._current)
            self._current = None

    def _seconds(self, first: Any, last: Any) -> float:
        return first.elapsed_time(last) / 1e3 if self.on_cuda else last - first

    def shares(self) -> dict[str, float] | None:
        """Each phase's share of the sampled steps' time; None where no sampled step had every mark.

        On CUDA, call it after the device has been synchronized (the epoch's end).
        """
        complete = [marks for marks in self._steps if len(marks) == 5]
        if not complete:
            return None
        whole = sum(self._seconds(marks["start"], marks["end"]) for marks in complete)
        if whole <= 0:
            return None
        return {
            phase: sum(self._seconds(marks[a], marks[b]) for marks in complete) / whole
            for phase, (a, b) in SPANS.items()
        }
