"""Utilization: a step's FLOPs, counted once, the device's dense peak, the achieved FLOP/s and MFU (docs/timing.md)."""

from __future__ import annotations

import math
import re
import warnings
from statistics import mean
from typing import Any, NamedTuple

import torch
from lightning.fabric.utilities.throughput import get_available_flops

from mnistperf.diagnosis.figures import ACHIEVED_FLOPS_PER_S, MFU

# Dense peak FLOP/s from the vendors' data sheets, for the GPUs Lightning's table lacks or states otherwise than MFU
# needs (docs/timing.md, Utilization): fp32 without tensor cores, tf32, bf16 and fp16 on them; the first name found.
OWN_PEAKS: tuple[tuple[str, dict[str, float]], ...] = (
    ("H[12]00 NVL", {"fp32": 60e12, "tf32": 417.5e12, "bf16": 835e12, "fp16": 835e12}),
    ("(G?H200|H100(?!.*(HBM3|HBM2e|PCIe)))", {"fp32": 67e12, "tf32": 494.7e12, "bf16": 989.4e12, "fp16": 989.4e12}),
    ("L40S", {"fp32": 91.6e12, "tf32": 183e12, "bf16": 362e12, "fp16": 362e12}),
    ("L40", {"fp32": 90.5e12, "tf32": 90.5e12, "bf16": 181e12, "fp16": 181e12}),
    ("A10", {"fp32": 31.2e12, "tf32": 62.5e12, "bf16": 125e12, "fp16": 125e12}),
    ("A6000", {"fp32": 38.7e12, "tf32": 77.4e12, "bf16": 154.8e12, "fp16": 154.8e12}),
    ("A40", {"fp32": 37.4e12, "tf32": 74.8e12, "bf16": 149.7e12, "fp16": 149.7e12}),
    ("RTX 4090", {"fp32": 82.6e12, "tf32": 82.6e12, "bf16": 165.2e12, "fp16": 165.2e12}),
)
LIGHTNING_DTYPES: dict[str, torch.dtype | str] = {  # Lightning's name for each number format
    "fp64": torch.float64,
    "fp32": torch.float32,
    "tf32": "tfloat32",
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}
# What the FLOP counter's step costs, in the time of an unprofiled step: measured 7.9-12.6 steps of a small MLP's
# 0.8 ms step on the lab's CPU, the worst case, since most of it is the counter's own start.
COUNT_COST_STEPS = 12
COUNT_SHARE = 0.005  # the most of a fit's training steps' time the counter may cost


def number_format(precision: str, matmul_precision: str) -> str:
    """The number format a run's matrix products use: from Lightning's precision and float32's matmul precision."""
    for part, fmt in (("bf16", "bf16"), ("16", "fp16"), ("64", "fp64")):  # bf16 before the 16 in it
        if part in precision:
            return fmt
    return "tf32" if matmul_precision in ("high", "medium") else "fp32"


def first_named(table: tuple[tuple[str, Any], ...], name: str) -> Any:
    """The value of ``table``'s first entry whose pattern is found in the device ``name`` as words; None if none is."""
    return next((value for key, value in table if re.search(rf"\b{key}\b", name)), None)


class Peak(NamedTuple):
    """A device's dense peak FLOP/s for a number format: None where not known (off CUDA, or a GPU no table names)."""

    flops_per_s: float | None
    fmt: str
    device_type: str
    name: str | None = None  # the GPU's


def peak_flops(device: torch.device, fmt: str) -> Peak:
    """The device's dense peak FLOP/s for ``fmt``: OWN_PEAKS' where it names the GPU, else Lightning's table's."""
    if device.type != "cuda":
        return Peak(None, fmt, device.type)
    name = torch.cuda.get_device_name(device)
    own = first_named(OWN_PEAKS, name)
    with warnings.catch_warnings():  # Lightning warns where it knows no peak; the summary says so once
        warnings.simplefilter("ignore")
        peak = own.get(fmt) if own is not None else get_available_flops(device, LIGHTNING_DTYPES[fmt])
    return Peak(None if peak is None else float(peak), fmt, device.type, name)


def device_peak(device: torch.device, precision: str) -> Peak:
    """The device's peak FLOP/s for the run's number format (from Lightning's ``precision``)."""
    return peak_flops(device, number_format(precision, torch.get_float32_matmul_precision()))


def compiled(module: Any) -> bool:
    """Whether ``module`` or a module inside it runs through torch.compile."""
    step = getattr(type(module), "training_step", None)
    return hasattr(step, "_torchdynamo_orig_callable") or any(
        getattr(inner, "_compiled_call_impl", None) is not None or type(inner).__name__ == "OptimizedModule"
        for inner in module.modules()
    )


class FirstStep:
    """Counts the FLOPs of a fit's first training step, once, unless ``given`` (one step's FLOPs) says them."""

    def __init__(self, given: float | None):
        self.given = given
        self.due = False  # the fit's first step is to be counted
        self.counting: Any = None  # the FlopCounterMode counting it, while it runs

    def plan(self, module: Any) -> bool:
        """A fit begins: count its first step, unless given or ``module`` is compiled (then True: not counted)."""
        self.due, self.counting = self.given is None and not compiled(module), None
        return self.given is None and not self.due

    def begin(self, steps_left: float) -> float | None:
        """The first step begins: counted, unless the fit's ``steps_left`` are known (not NaN) and too few.

        Then the steps the counter needs, about COUNT_COST_STEPS steps' time being at most COUNT_SHARE of them.
        """
        self.due = False
        needed = COUNT_COST_STEPS / COUNT_SHARE
        if steps_left < needed:  # False for NaN
            return needed
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


class StepFlops:
    """A run's FLOP accounting: one training step's FLOPs (or why none) and the device's peak, over ``ranks``."""

    def __init__(self, peak: Peak | None, ranks: int, per_step: float | None = None, reason: str | None = None):
        self.peak, self.ranks, self.per_step = peak, ranks, per_step
        self.peak_flops_per_s = peak.flops_per_s if peak is not None else None  # None: not known, or not looked up
        self.reason = reason or "the step's FLOPs were not counted"

    def counted(self, per_step: float | None = None, reason: str | None = None) -> None:
        """One training step's FLOPs, counted; or why they were not (``reason``)."""
        if reason is None:
            self.per_step = per_step
        else:
            self.reason = reason

    def of_steps(self, steps: int) -> float:
        """The FLOPs of ``steps`` training steps (NaN: not counted)."""
        return self.per_step * steps if self.per_step else math.nan

    def epoch(self, flops: float, train_s: float) -> dict[str, float | None]:
        """An epoch's achieved FLOP/s (every rank's FLOPs over its train time) and its MFU where the peak is known."""
        if math.isnan(flops) or train_s <= 0:
            return {ACHIEVED_FLOPS_PER_S: None, MFU: None}
        achieved, peak = flops / train_s, self.peak_flops_per_s
        return {ACHIEVED_FLOPS_PER_S: achieved, MFU: achieved / (peak * self.ranks) if peak else None}

    def run(self, epochs: list[dict[str, Any]], steady: list[int], peak_said: str) -> dict[str, Any]:
        """The run's utilization over its ``steady`` epochs (the first and last): the step's FLOPs, FLOP/s, MFU.

        ``peak_said``: the peak in words, or why none is known; without an MFU, ``mfu_reason`` says why.
        """
        rows = [e for e in epochs if steady[0] <= e["epoch"] <= steady[1] and e.get(ACHIEVED_FLOPS_PER_S) is not None]
        achieved = mean(e[ACHIEVED_FLOPS_PER_S] for e in rows) if rows else None
        found: dict[str, Any] = {"flops_per_step": self.per_step, ACHIEVED_FLOPS_PER_S: achieved}
        peak = self.peak_flops_per_s
        if peak is not None and achieved is not None:
            found.update({MFU: mean(e[MFU] for e in rows), "peak": peak_said, "peak_flops_per_s": peak})
        else:
            found.update({MFU: None, "mfu_reason": self.reason if self.per_step is None else peak_said})
        return found
