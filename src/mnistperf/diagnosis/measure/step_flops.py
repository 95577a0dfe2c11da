"""A fit's FLOPs per training step, counted on its first step where not given, and its device's peak FLOP/s."""

from __future__ import annotations

from typing import Any

import torch

from mnistperf.diagnosis.measure.flops import number_format, peak_flops

# What the FLOP counter's step costs, in the time of an unprofiled step: measured 7.9-12.6 steps of a small MLP's
# 0.8 ms step on the lab's CPU, the worst case, since most of it is the counter's own start.
COUNT_COST_STEPS = 12
COUNT_SHARE = 0.005  # the most of a fit's training steps' time the counter may cost
GIVE_FLOPS = "EpochTimer(flops_per_batch=...) gives the step's FLOPs"


def compiled(module: Any) -> bool:
    """Whether ``module`` or a module inside it runs through torch.compile."""
    step = getattr(type(module), "training_step", None)
    return hasattr(step, "_torchdynamo_orig_callable") or any(
        getattr(inner, "_compiled_call_impl", None) is not None or type(inner).__name__ == "OptimizedModule"
        for inner in module.modules()
    )


def device_peak(device: torch.device, precision: str) -> tuple[float | None, str | None]:
    """The device's peak FLOP/s for the run's number format (from Lightning's ``precision``), named; or None and why."""
    return peak_flops(device, number_format(precision, torch.get_float32_matmul_precision()))


class FirstStep:
    """Counts the FLOPs of a fit's first training step, once, unless ``given`` (one step's FLOPs) says them."""

    def __init__(self, given: float | None):
        self.given = given
        self.due = False  # the fit's first step is to be counted
        self.counting: Any = None  # the FlopCounterMode counting it, while it runs

    def plan(self, module: Any) -> str | None:
        """A fit begins: count its first step, unless given or ``module`` is compiled (then say why not)."""
        self.due, self.counting = self.given is None and not compiled(module), None
        if self.given is None and not self.due:
            return f"the module runs through torch.compile, whose graphs a FLOP counter would change; {GIVE_FLOPS}"
        return None

    def begin(self, steps_left: float) -> str | None:
        """The first step begins: counted, unless the fit's ``steps_left`` are known (not NaN) and too few (why not)."""
        self.due = False
        needed = COUNT_COST_STEPS / COUNT_SHARE
        if steps_left < needed:  # False for NaN
            return (
                f"the fit's {steps_left:,.0f} training steps are too few for the FLOP counter (about "
                f"{COUNT_COST_STEPS} steps' time) to cost under {COUNT_SHARE:.1%} of them (it needs {needed:,.0f}); "
                f"{GIVE_FLOPS}"
            )
        from torch.utils.flop_counter import FlopCounterMode

        self.counting = FlopCounterMode(display=False)
        self.counting.__enter__()
        return None

    def end(self) -> float | None:
        """The counted step's FLOPs (it ended, or was cut short: a skipped batch, an error)."""
        mode, self.counting = self.counting, None
        if mode is None:
            return None
        mode.__exit__(None, None, None)
        return float(mode.get_total_flops())
