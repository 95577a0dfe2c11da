"""The diagnosis's figures, each defined once: its name, its unit, what it means and how the ranks' values combine.

Three records, in the order an epoch's end makes them:

* :class:`Measures`: what one process measured of an epoch, each field with how every rank's value combines
  under DDP (:func:`gather`: the slowest rank's time, the sum of samples, the mean of shares);
* :data:`EPOCH_FIGURES`: the epoch's row derived from the gathered measures (timing.json's ``epochs``, and
  the loggers' ``timing/<name>`` scalars);
* :data:`RUN_FIGURES`: the run's figures over its steady epochs (timing.json's top level, the bench's columns).

Adding a figure is one entry here and the arithmetic that makes it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import astuple, dataclass, field, fields
from typing import Any

import torch

from mnistperf.diagnosis.ranks import every_rank


@dataclass(frozen=True)
class Figure:
    """One figure: its name (in timing.json and after ``timing/`` in the loggers), its unit and what it means."""

    name: str
    unit: str
    meaning: str


def measure(unit: str, ranks: str, meaning: str, per_rank: bool = False) -> Any:
    """A field of :class:`Measures`: its unit, how ranks combine (``max``, ``sum`` or ``mean``), what it means.

    ``per_rank``: every rank's own value is kept too (what tells the ranks apart).
    """
    return field(metadata={"unit": unit, "ranks": ranks, "meaning": meaning, "per_rank": per_rank})


@dataclass(frozen=True)
class Measures:
    """What one process measured of an epoch; NaN where it measured nothing."""

    train_s: float = measure("s", "max", "training time, evaluation inside the epoch paused out", per_rank=True)
    eval_s: float = measure("s", "max", "evaluation time inside the epoch")
    fetch_wait_s: float = measure("s", "max", "host time waiting for training batches", per_rank=True)
    host_wait_s: float = measure("s", "max", "host time between one step's end and the next one's start")
    samples: float = measure("samples", "sum", "training samples")
    busy_share: float = measure("share", "mean", "the profiled window's busy share (device or CPU)")
    forward_s: float = measure("s", "mean", "the forward's time, from the sampled steps", per_rank=True)
    backward_s: float = measure("s", "mean", "the backward's time, from the sampled steps")
    optimizer_s: float = measure("s", "mean", "the optimizer's update, from the sampled steps")
    step_median_s: float = measure("s", "max", "median host interval of a step, the first step apart")
    step_p90_s: float = measure("s", "max", "90th percentile of the host's step intervals, the first step apart")
    step_max_s: float = measure("s", "max", "longest host interval of a step, the first step apart")
    first_step_s: float = measure("s", "max", "the epoch's first step's host interval (the loader's start)")
    spikes: float = measure("steps", "max", "steps at least SPIKE_FACTOR times the epoch's median")
    rss_mb: float = measure("MB", "max", "the training process's resident memory, mid-epoch and at its end")
    workers_rss_mb: float = measure("MB", "max", "its loader workers' resident memory, mid-epoch and at its end")
    device_allocated_mb: float = measure("MB", "max", "the epoch's peak GPU memory allocated by tensors")
    device_reserved_mb: float = measure("MB", "max", "the epoch's peak GPU memory reserved by the allocator")
    flops: float = measure("FLOP", "sum", "the FLOPs of the epoch's training steps, one step's count times its steps")
    comm_share: float = measure("share", "mean", "the profiled window's time inside collectives", per_rank=True)
    comm_exposed_share: float = measure(
        "share", "mean", "the profiled window's time inside collectives with no work beside them", per_rank=True
    )

    @classmethod
    def unmeasured(cls) -> Measures:
        """Every figure NaN: what a rank whose own figures failed sends to the gather."""
        return cls(*(math.nan for _ in fields(cls)))


REDUCERS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "max": lambda ranks: ranks.max(),
    "sum": lambda ranks: ranks.sum(),
    "mean": lambda ranks: ranks.nanmean(),
}


@dataclass(frozen=True)
class Gathered:
    """An epoch's measures over every rank, its samples per training loader, and each rank's own where several."""

    measures: Measures
    loader_samples: list[float]
    per_rank: dict[str, list[float]] | None = None


def gather(local: Measures, strategy: Any, loader_samples: list[float] | None = None) -> Gathered:
    """Combine one epoch's measures over every rank by each field's ``ranks`` (identity on one process).

    NaN (not measured) is skipped by the mean and poisons the sum and the max. ``loader_samples``: the rank's
    samples per training loader, summed over the ranks (every rank sends as many). ``strategy``: the trainer's,
    whose ``all_gather`` is the one collective of the epoch's end.
    """
    spec = fields(Measures)
    per_loader = list(loader_samples or [])
    values = torch.tensor([*astuple(local), *per_loader], dtype=torch.float64, device=strategy.root_device)
    rows = every_rank(strategy, values).cpu()
    merged = Measures(*(REDUCERS[f.metadata["ranks"]](rows[:, i]).item() for i, f in enumerate(spec)))
    per_rank = {f.name: rows[:, i].tolist() for i, f in enumerate(spec) if f.metadata["per_rank"]}
    return Gathered(merged, rows[:, len(spec) :].sum(dim=0).tolist(), per_rank if len(rows) > 1 else None)


SPLIT = (
    Figure("input_wait_s", "s", "train time waiting for data"),
    Figure("forward_s", "s", "train time in the forward"),
    Figure("backward_s", "s", "train time in the backward"),
    Figure("optimizer_s", "s", "train time in the optimizer's update"),
    Figure("rest_s", "s", "the rest of train time: hooks, logging, Python between them"),
)
# The profiled window's share, by the device it profiled.
BUSY = {
    "cuda": Figure("device_busy_share", "share", "time the GPU executed kernels or copies in the profiled window"),
    "cpu": Figure("cpu_busy_share", "share", "time inside tensor operations in the profiled window"),
}
# The epoch's step times (mnistperf.diagnosis.stalls): host intervals, no step synchronized.
STEPS = (
    Figure("step_median_s", "s", "median host interval of a training step, the first step apart"),
    Figure("step_p90_s", "s", "90th percentile of the training steps' host intervals, the first step apart"),
    Figure("step_max_s", "s", "longest host interval of a training step, the first step apart"),
    Figure("first_step_s", "s", "the epoch's first training step's host interval, its fetch included"),
    Figure("spikes", "steps", "training steps at least 3x the epoch's median step"),
)
# The epoch's memory (mnistperf.diagnosis.memory): resident on Linux, the GPU's peaks on CUDA.
MEMORY = (
    Figure("rss_mb", "MB", "the training process's resident memory (the larger of mid-epoch and the epoch's end)"),
    Figure("workers_rss_mb", "MB", "its DataLoader workers' resident memory, summed, while they run"),
    Figure("device_allocated_mb", "MB", "the epoch's peak GPU memory allocated by tensors"),
    Figure("device_reserved_mb", "MB", "the epoch's peak GPU memory reserved by the caching allocator"),
)
# The epoch's utilization (mnistperf.diagnosis.flops).
UTILIZATION = (
    Figure("achieved_flops_per_s", "FLOP/s", "the training steps' FLOPs over train time, every rank's"),
    Figure("mfu", "share", "achieved FLOP/s over the device's peak for the run's number format, times the ranks"),
)
# Under DDP, the ranks' talk (mnistperf.diagnosis.busy_window.communication), from the profiled window.
COMMUNICATION = (
    Figure("comm_share", "share", "time inside collectives (NCCL kernels, gloo's ranges) in the profiled window"),
    Figure("comm_exposed_share", "share", "time inside collectives with no other work beside them in that window"),
)
EPOCH_FIGURES = (
    Figure("train_s", "s", "training time of the epoch"),
    Figure("eval_s", "s", "evaluation time inside the epoch"),
    Figure("samples_per_s", "samples/s", "training samples over train time"),
    Figure("input_wait_share", "share", "share of train time the host waited for the next batch"),
    Figure("host_wait_share", "share", "share of train time between one step's end and the next one's start"),
    *BUSY.values(),
    *SPLIT,
    *STEPS,
    *MEMORY,
    *UTILIZATION,
    *COMMUNICATION,
)
AVG_TRAIN_S = Figure("avg_train_s", "s", "train time per steady epoch")
AVG_EVAL_S = Figure("avg_eval_s", "s", "evaluation time per steady epoch")
SAMPLES_PER_S = Figure("samples_per_s", "samples/s", "training samples over the steady epochs' train time")
INPUT_WAIT_SHARE = Figure("input_wait_share", "share", "share of the steady epochs' train time waiting for data")
RUN_FIGURES = (
    AVG_TRAIN_S,
    AVG_EVAL_S,
    Figure("total_train_s", "s", "train time of every epoch, the warm-up's included"),
    Figure("total_eval_s", "s", "evaluation time of every epoch"),
    SAMPLES_PER_S,
    INPUT_WAIT_SHARE,
    Figure("host_wait_share", "share", "share of the steady epochs' train time between steps"),
    *BUSY.values(),
    *COMMUNICATION,
    Figure("step_median_s", "s", "the steady epochs' median step interval, averaged"),
)
# The figures a loop that does not time the waits cannot give (not measured, not 0).
WAITS = ("input_wait_share", "host_wait_share")


def scalars(row: dict[str, Any]) -> dict[str, float]:
    """An epoch row's figures as the loggers' scalars, ``timing/<name>`` (those measured)."""
    return {f"timing/{f.name}": row[f.name] for f in EPOCH_FIGURES if row.get(f.name) is not None}
