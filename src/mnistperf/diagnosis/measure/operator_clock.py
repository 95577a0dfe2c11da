"""Time inside tensor operations as Python sees it: every top-level torch call of a few steps timed, as two bounds.

For a CPU fit that cannot pay for the profiled window; its bounds and its cost: docs/timing.md, "The operator clock".
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

# Calls that run a whole backward pass: its graph's nodes each cost at least a bare call's dispatch.
BACKWARD = (torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad)


class OperatorClock(TorchFunctionMode):
    """Times each top-level torch call made while it is entered, calls inside a call left to their caller.

    ``floor_s``: a bare tiny operator's time (:func:`.window_price.operator_s`); ``nodes``: a training step's
    autograd graph nodes, the calls its backward runs (inf: not counted). :attr:`inside` is every call's time;
    :attr:`beyond` what each took past its floor, so the time tensor operations ran lies between them.
    """

    def __init__(self, floor_s: float = 0.0, nodes: float = 1) -> None:
        super().__init__()
        self.floor_s, self.backward_floor_s = floor_s, floor_s * nodes
        self.inside = self.beyond = 0.0
        self.calls = 0

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        start = time.perf_counter()
        try:
            return func(*args, **(kwargs or {}))
        finally:
            took = time.perf_counter() - start
            self.inside += took
            self.beyond += max(took - (self.backward_floor_s if func in BACKWARD else self.floor_s), 0.0)
            self.calls += 1

    def bounds(self, span_s: float) -> tuple[float, float] | None:
        """(least, most) share of ``span_s`` spent inside tensor operations; None where nothing was timed."""
        if self.calls == 0 or span_s <= 0:
            return None
        return min(self.beyond / span_s, 1.0), min(self.inside / span_s, 1.0)
