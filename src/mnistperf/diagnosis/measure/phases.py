"""Where a training step's time goes: forward, backward and the optimizer's update (docs/timing.md, "the split").

A sample is one optimizer step's training steps (with ``accumulate_grad_batches=N``, the N whose gradients it adds up,
so that the split weighs the update as often as the fit makes it). One missing a mark (a graphed step's own backward,
a step skipped by returning None, an epoch that ended inside it) is left out.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from mnistperf.diagnosis.measure.drawn_steps import SPLIT, drawn

STEP_MARKS = {"start", "backward", "backward_end", "end"}  # every step of a sample's; its last has "optimizer" too


def sampled(index: int, steps: int = 1, epoch: int = 0) -> bool:
    """Whether training step ``index`` of epoch ``epoch`` (from 0) begins a sample of ``steps`` (an optimizer step's).

    The epoch's second optimizer step, then one in each block of EVERY at a drawn place (:mod:`.drawn_steps`).
    """
    return index % steps == 0 and drawn(index // steps, epoch, SPLIT, first=1)


def any_sampled(first: int | None, last: int | None, steps: int, epoch: int = 0) -> bool:
    """Whether a step of ``first``..``last`` (None: none trained) of epoch ``epoch`` begins a sample of ``steps``."""
    # every whole block of optimizer steps holds a sample: the search is short either way
    return first is not None and last is not None and any(sampled(i, steps, epoch) for i in range(first, last + 1))


class StepPhases:
    """The phase marks of an epoch's sampled steps: the host clock on a CPU ``device``, on CUDA its stream's events."""

    def __init__(self, device: torch.device):
        self.on_cuda = device.type == "cuda"
        self._pool: list[Any] = []  # CUDA events, reused from epoch to epoch
        self.reset()

    def reset(self) -> None:
        """Forget the epoch's marks (a new epoch)."""
        self._samples: list[list[dict[str, Any]]] = []
        self._open: list[dict[str, Any]] | None = None  # the steps of the sample being stamped
        self._steps = 1  # the open sample's steps at most
        self._current: dict[str, Any] | None = None
        self._used = 0

    @property
    def started(self) -> bool:
        """Whether any step of the epoch was stamped."""
        return bool(self._samples) or self._open is not None

    def _stamp(self) -> Any:
        if not self.on_cuda:
            return time.perf_counter()
        if self._used == len(self._pool):
            self._pool.append(torch.cuda.Event(enable_timing=True))
        event = self._pool[self._used]
        self._used += 1
        event.record()
        return event

    def start(self, steps: int = 1) -> None:
        """A sampled step begins: the first of a sample of up to ``steps`` steps, or the next of the one open."""
        if self._open is None:
            self._open, self._steps = [], steps
        self._current = {"start": self._stamp()}

    def mark(self, name: str) -> None:
        """``backward`` (the forward is done; the first one counts), ``backward_end`` or ``optimizer``."""
        if self._current is not None and not (name == "backward" and name in self._current):
            self._current[name] = self._stamp()

    def end(self) -> bool:
        """The sampled step ends; True when its sample is done (it reached the update, or holds its steps)."""
        if self._current is None or self._open is None:
            return True
        step, self._current = self._current, None
        step["end"] = self._stamp()
        self._open.append(step)
        if "optimizer" in step or len(self._open) >= self._steps:
            self._samples.append(self._open)
            self._open = None
        return self._open is None

    def _seconds(self, first: Any, last: Any) -> float:
        return first.elapsed_time(last) / 1e3 if self.on_cuda else last - first

    def shares(self) -> dict[str, float] | None:
        """Each phase's share of the sampled steps' time (on CUDA once synchronized); None where no sample was whole."""
        complete = [
            sample
            for sample in self._samples
            if "optimizer" in sample[-1] and all(step.keys() >= STEP_MARKS for step in sample)
        ]
        steps = [step for sample in complete for step in sample]
        whole = sum(self._seconds(s["start"], s["end"]) for s in steps)
        if whole <= 0:
            return None
        return {
            "forward": sum(self._seconds(s["start"], s["backward"]) for s in steps) / whole,
            "backward": sum(self._seconds(s["backward"], s["backward_end"]) for s in steps) / whole,
            "optimizer": sum(self._seconds(sample[-1]["optimizer"], sample[-1]["end"]) for sample in complete) / whole,
        }
