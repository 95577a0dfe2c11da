"""The diagnosis's figures, each declared once (:data:`FIGURES` holds all), and what one process measured of an epoch.

The epoch rows, the loggers' scalars, the run's figures, ``compare``, the HTML report and the bench iterate the
registry: adding a figure is declaring it here (with ``derive`` where the epoch row does not hold it).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import KW_ONLY, InitVar, astuple, dataclass, field, fields
from typing import Any

import torch

# How a run reads a figure from its steady epochs (``Figure.run``): their values ``weighted`` by their train time, the
# ``mean`` of those that measured it, the largest (``max``), the profiled ``window``'s one reading, the mean under the
# run's ``split`` of train time, or computed by the run itself (``own``: averages, totals, utilization, peak memory).
RUN_RULES = ("weighted", "mean", "max", "window", "split", "own")

# What a kept value is multiplied by to be shown in another unit: (kept unit, shown unit).
SHOWN = {("s", "ms"): 1e3, ("share", "%"): 100.0, ("FLOP/s", "TFLOP/s"): 1e-12}


@dataclass(eq=False, repr=False)  # a figure compares, hashes and prints as its key
class Figure(str):
    """One figure: its key (the string itself, in timing.json and after ``timing/`` in the loggers) and what it is.

    Code names a figure by its constant, never by a string.
    """

    key: InitVar[str]  # the string the figure is
    unit: str  # the unit it is kept in (``s``, ``share``, ``samples/s``, ``MB``, ...)
    meaning: str  # what it means, in one phrase
    _: KW_ONLY
    label: str | None = None  # its name where figures stand side by side (compare, the report); None: not shown there
    shown: str = ""  # the unit it is shown in (default: % for a share, else ``unit``), times ``scale`` (:data:`SHOWN`)
    run: str | None = None  # how a run reads it from its steady epochs (a key of :data:`RUN_RULES`); None: an epoch's
    epoch: bool = True  # an epoch row holds it (and the loggers' scalars); False for the run's own figures
    plotted: bool = False  # among the few an epoch hands the loggers by default (the rest with ``log_all``)
    where: str = ""  # where a run's summary keeps it, a dotted path (default: its key at the top level)
    derive: Callable[[dict[str, Any]], float | None] | None = None  # the epoch's value from the row's other figures
    # The epoch figure whose spread over the steady epochs is its noise (default: itself, where an epoch row holds it
    # and it is neither the window's one reading nor memory, whose change is growth, not noise; ``""``: none).
    per_epoch: str | None = None
    scale: float = field(init=False)

    def __new__(cls, key: str, *args: Any, **options: Any) -> Figure:
        """The figure is its key; :meth:`__init__` sets what it is."""
        return super().__new__(cls, key)

    def __post_init__(self, key: str) -> None:
        if self.run is not None and self.run not in RUN_RULES:
            raise ValueError(f"Figure {key!r}: run={self.run!r} is not one of {', '.join(RUN_RULES)}")
        self.shown = self.shown or ("%" if self.unit == "share" else self.unit)
        if self.shown != self.unit and (self.unit, self.shown) not in SHOWN:
            raise ValueError(f"Figure {key!r}: no scale from {self.unit} to {self.shown} in SHOWN")
        self.scale, self.where = SHOWN.get((self.unit, self.shown), 1.0), self.where or key
        if self.per_epoch is None:
            self.per_epoch = key if self.epoch and self.run != "window" and self.unit != "MB" else ""
        self.per_epoch = self.per_epoch or None

    @property
    def name(self) -> str:
        """The key, as a plain string."""
        return str.__str__(self)

    def __reduce__(self) -> tuple[type, tuple[str]]:
        """Copied or pickled (a checkpoint, another process), a figure's key travels as the plain string it is."""
        return str, (self.name,)


def measure(ranks: Callable[[torch.Tensor], torch.Tensor], per_rank: bool = False) -> Any:
    """A :class:`Measures` field: what combines the ranks' values (a tensor of them), and if each is kept."""
    return field(metadata={"ranks": ranks, "per_rank": per_rank})


@dataclass(frozen=True)
class Measures:
    """What one process measured of an epoch (NaN: nothing); a field is the figure of its name, where one is."""

    train_s: float = measure(torch.max, per_rank=True)
    eval_s: float = measure(torch.max)
    input_wait_s: float = measure(torch.max, per_rank=True)
    host_wait_s: float = measure(torch.max)  # host seconds between one step's end and the next one's start
    samples: float = measure(torch.sum)  # training samples
    busy_share: float = measure(torch.nanmean)  # the profiled window's busy share (device or CPU)
    forward_s: float = measure(torch.nanmean, per_rank=True)
    backward_s: float = measure(torch.nanmean)
    optimizer_s: float = measure(torch.nanmean)
    step_median_s: float = measure(torch.max)
    step_p90_s: float = measure(torch.max)
    step_max_s: float = measure(torch.max)
    first_step_s: float = measure(torch.max)
    spikes: float = measure(torch.max)
    spikes_s: float = measure(torch.max)
    rss_mb: float = measure(torch.max)
    workers_pss_mb: float = measure(torch.max)
    device_allocated_mb: float = measure(torch.max)
    device_reserved_mb: float = measure(torch.max)
    flops: float = measure(torch.sum)  # the FLOPs of the epoch's training steps, one step's count times its steps
    comm_share: float = measure(torch.nanmean, per_rank=True)
    comm_exposed_share: float = measure(torch.nanmean, per_rank=True)
    core_wait_share: float = measure(torch.nanmean)
    workers_cpu_share: float = measure(torch.nanmean)

    @classmethod
    def unmeasured(cls) -> Measures:
        """Every figure NaN: what a rank whose own figures failed sends to the gather."""
        return cls(*(math.nan for _ in fields(cls)))


@dataclass(frozen=True)
class Gathered:
    """An epoch's measures over every rank, its samples per training loader, and each rank's own where several."""

    measures: Measures
    loader_samples: list[float]
    per_rank: dict[str, list[float]] | None = None


def gather(local: Measures, strategy: Any, loader_samples: list[float]) -> Gathered:
    """Combine one epoch's measures over every rank by each field's ``ranks`` (identity on one process).

    NaN (not measured) is skipped by the mean and poisons the sum and the max; ``loader_samples`` (the rank's per
    training loader) are summed. ``strategy``: the trainer's, its ``all_gather`` the epoch end's one collective.
    """
    spec = fields(Measures)
    if getattr(strategy, "world_size", None) == 1:  # one rank's row reduced is that row: no tensor, no collective
        return Gathered(Measures(*(float(getattr(local, f.name)) for f in spec)), [float(n) for n in loader_samples])
    values = torch.tensor([*astuple(local), *loader_samples], dtype=torch.float64, device=strategy.root_device)
    rows = strategy.all_gather(values).reshape(-1, values.numel()).cpu()  # [ranks, values], one process too
    merged = Measures(*(f.metadata["ranks"](rows[:, i]).item() for i, f in enumerate(spec)))
    per_rank = {f.name: rows[:, i].tolist() for i, f in enumerate(spec) if f.metadata["per_rank"]}
    return Gathered(merged, rows[:, len(spec) :].sum(dim=0).tolist(), per_rank if len(rows) > 1 else None)


# An epoch's time and pace.
TRAIN_S = Figure("train_s", "s", "training time of the epoch, evaluation inside it paused out", plotted=True)
EVAL_S = Figure("eval_s", "s", "evaluation time inside the epoch", plotted=True)
# The run's own figures, over its steady epochs (warm-up apart) or every epoch (totals).
AVG_TRAIN_S, AVG_EVAL_S, TOTAL_TRAIN_S, TOTAL_EVAL_S = (
    Figure(name, "s", meaning, label=label, run="own", epoch=False, per_epoch=per_epoch)
    for name, label, per_epoch, meaning in (
        ("avg_train_s", "steady train time per epoch", TRAIN_S, "train time per steady epoch"),
        ("avg_eval_s", None, EVAL_S, "evaluation time per steady epoch"),
        ("total_train_s", None, None, "train time of every epoch, the warm-up's included"),
        ("total_eval_s", None, None, "evaluation time of every epoch"),
    )
)
SAMPLES_PER_S = Figure(
    "samples_per_s", "samples/s", "training samples over train time", label="throughput", run="weighted", plotted=True
)
# Train time, split: these add up to it (mnistperf.diagnosis.measure.phases); a run keeps their means under "split".
SPLIT = tuple(
    Figure(name, "s", meaning, label=f"  {label}", run="split", where=f"split.{name}")
    for name, label, meaning in (
        ("input_wait_s", "input wait", "train time waiting for data"),
        ("forward_s", "forward", "train time in the forward"),
        ("backward_s", "backward", "train time in the backward"),
        ("optimizer_s", "optimizer", "train time in the optimizer's update"),
        ("rest_s", "rest", "the rest of train time: hooks, logging, Python between them"),
    )
)
INPUT_WAIT_S, FORWARD_S, BACKWARD_S, OPTIMIZER_S, REST_S = SPLIT
# The epoch's step times (mnistperf.diagnosis.measure.stalls): host intervals, no step synchronized.
STEP_MEDIAN_S = Figure(
    "step_median_s",
    "s",
    "median host interval of a training step, the first step apart",
    label="median step",
    shown="ms",
    run="mean",
    plotted=True,
)
STEP_P90_S = Figure("step_p90_s", "s", "90th percentile of the training steps' host intervals, the first step apart")
STEP_MAX_S = Figure("step_max_s", "s", "longest host interval of a training step, the first step apart")
FIRST_STEP_S = Figure("first_step_s", "s", "the epoch's first training step's host interval, its fetch included")
SPIKES = Figure("spikes", "steps", "training steps at least 3x the epoch's median step")
SPIKES_S = Figure("spikes_s", "s", "the time those steps took past the epoch's median step")
STEPS = (STEP_MEDIAN_S, STEP_P90_S, STEP_MAX_S, FIRST_STEP_S, SPIKES, SPIKES_S)
# Shares of train time, read weighted by it: what the epoch waited on, and who held the cores
# (mnistperf.diagnosis.measure.cores: read from Linux's /proc, a few times an epoch).
INPUT_WAIT_SHARE, HOST_WAIT_SHARE, CORE_WAIT_SHARE, WORKERS_CPU_SHARE = (
    Figure(name, "share", meaning, label=label, run="weighted", plotted=name == "input_wait_share")
    for name, label, meaning in (
        ("input_wait_share", "waiting for data", "share of train time the host waited for the next batch"),
        ("host_wait_share", "between steps", "share of train time between one step's end and the next one's start"),
        (
            "core_wait_share",
            "waiting for a core",
            "share of train time the training thread was ready to run but waited for a core (Linux)",
        ),
        (
            "workers_cpu_share",
            "workers' CPU, of the cores",
            "its DataLoader workers' CPU time over the epoch's wall time times the cores the process may use (Linux)",
        ),
    )
)
WAITS = (INPUT_WAIT_SHARE, HOST_WAIT_SHARE)  # what a loop that does not time the waits cannot give
CORES = (CORE_WAIT_SHARE, WORKERS_CPU_SHARE)
# The profiled window's busy share, by the device it profiled: one reading for the run.
DEVICE_BUSY_SHARE, CPU_BUSY_SHARE = (
    Figure(name, "share", meaning, label=label, run="window")
    for name, label, meaning in (
        ("device_busy_share", "GPU busy", "time the GPU executed kernels or copies in the profiled window"),
        ("cpu_busy_share", "inside tensor operations", "time inside tensor operations in the profiled window"),
    )
)
BUSY = {"cuda": DEVICE_BUSY_SHARE, "cpu": CPU_BUSY_SHARE}
# The epoch's utilization (mnistperf.diagnosis.measure.flops).
ACHIEVED_FLOPS_PER_S = Figure(
    "achieved_flops_per_s",
    "FLOP/s",
    "the training steps' FLOPs over train time, every rank's",
    label="achieved",
    shown="TFLOP/s",
    run="own",
)
MFU = Figure(
    "mfu",
    "share",
    "achieved FLOP/s over the device's peak for the run's number format, times the ranks",
    label="model FLOPs utilization",
    run="own",
)
UTILIZATION = (ACHIEVED_FLOPS_PER_S, MFU)
# Under DDP, the ranks' talk (mnistperf.diagnosis.measure.busy_window.communication), from the profiled window.
COMM_SHARE, COMM_EXPOSED_SHARE = COMMUNICATION = tuple(
    Figure(name, "share", f"time inside collectives {which}", label=label, run="window")
    for name, label, which in (
        ("comm_share", "in collectives (DDP)", "(NCCL kernels, gloo's ranges) in the profiled window"),
        ("comm_exposed_share", "  with no work beside them", "with no other work beside them in that window"),
    )
)
# The epoch's memory (mnistperf.diagnosis.measure.memory): resident on Linux, the GPU's peaks on CUDA; the fit's peaks.
PEAK_RSS_MB = Figure(
    "peak_rss_mb",
    "MB",
    "the training process's peak resident memory over the fit",
    label="peak resident memory",
    run="own",
    epoch=False,
    where="peak_rss_mb.main_process",
)
WORKERS_PSS_MB = Figure(
    "workers_pss_mb",
    "MB",
    "its DataLoader workers' proportional set size (pages shared with the training process counted once), summed",
    label="workers' memory (PSS)",
    run="max",
)
RSS_MB = Figure(
    "rss_mb", "MB", "the training process's resident memory (the larger of mid-epoch and the epoch's end)", run="max"
)
PEAK_DEVICE_MB = Figure(
    "peak_device_mb",
    "MB",
    "peak GPU memory allocated by tensors over the fit",
    label="peak GPU memory allocated",
    run="own",
    epoch=False,
    where="peak_device_mb.allocated",
)
DEVICE_ALLOCATED_MB = Figure("device_allocated_mb", "MB", "the epoch's peak GPU memory allocated by tensors", run="max")
DEVICE_RESERVED_MB = Figure(
    "device_reserved_mb", "MB", "the epoch's peak GPU memory reserved by the caching allocator", run="max"
)
MEMORY = (RSS_MB, WORKERS_PSS_MB, DEVICE_ALLOCATED_MB, DEVICE_RESERVED_MB)

# Every figure, in the order they stand side by side; read as figures.FIGURES at each use, so that a test can add one.
FIGURES: tuple[Figure, ...] = tuple(value for value in globals().values() if isinstance(value, Figure))


def derive(row: dict[str, Any]) -> dict[str, Any]:
    """The row with every derived figure the registry declares that it does not already hold (None where one fails)."""
    for figure in FIGURES:
        if figure.epoch and figure.derive is not None and figure not in row:
            try:
                row[figure] = figure.derive(row)
            except (ArithmeticError, KeyError, TypeError, ValueError):  # a figure it reads was not measured
                row[figure] = None
    return row


def scalars(row: dict[str, Any], every: bool = False) -> dict[str, float]:
    """An epoch row's figures as the loggers' scalars, ``timing/<name>`` (those measured).

    The few :attr:`Figure.plotted`, or ``every`` one.
    """
    return {f"timing/{f.name}": row[f] for f in FIGURES if f.epoch and (every or f.plotted) and row.get(f) is not None}
