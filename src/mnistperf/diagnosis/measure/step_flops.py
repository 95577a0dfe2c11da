"""A fit's FLOPs per training step, counted on its first step where not given, and its device's peak FLOP/s."""

from __future__ import annotations

import math
from typing import Any

import torch

from mnistperf.diagnosis.measure.flops import StepCounter, compiled, number_format, peak_flops, too_short_to_count

COMPILED = (
    "the module runs through torch.compile, whose graphs a FLOP counter would change; "
    "EpochTimer(flops_per_batch=...) gives the step's FLOPs"
)


def device_peak(device: torch.device, precision: str) -> tuple[float | None, str | None]:
    """The device's peak FLOP/s for the run's number format (from Lightning's ``precision``), named; or None and why."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    fmt = number_format(precision, torch.get_float32_matmul_precision())
    peak, reason = peak_flops(device, fmt)
    return peak, f"{name}'s {fmt} peak ({peak / 1e12:,.0f} TFLOP/s)" if peak is not None else reason


class FirstStep:
    """Counts the FLOPs of a fit's first training step, once, unless ``given`` (one step's FLOPs) says them."""

    def __init__(self, given: float | None):
        self.given = given
        self.counter = StepCounter()
        self.due = self.counting = False  # the fit's first step is to be counted, or is being

    def plan(self, module: Any) -> str | None:
        """A fit begins: count its first step, unless given or ``module`` is compiled (then say why not)."""
        self.due, self.counting = self.given is None and not compiled(module), False
        return COMPILED if self.given is None and not self.due else None

    def begin(self, steps_left: float) -> str | None:
        """The first step begins: counted, unless the fit's ``steps_left`` are known (not NaN) and too few (why not)."""
        self.due = False
        short = None if math.isnan(steps_left) else too_short_to_count(steps_left)
        if short is None:
            self.counting = True
            self.counter.start()
        return short

    def end(self) -> float | None:
        """The counted step's FLOPs (it ended, or was cut short: a skipped batch, an error)."""
        self.counting = False
        return self.counter.stop()
