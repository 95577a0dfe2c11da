"""The diagnosis's figures, each declared once (:data:`FIGURES` holds all), and what one process measured of an epoch.

What each process measures, its gather over the ranks, the epoch rows, the ranks apart, the loggers' scalars, the
run's figures, ``compare`` and the HTML report iterate the registry: adding a figure is declaring it here, with how the
ranks combine it (``ranks``) and the one function that reads it (``read``), or with ``derive`` from the row.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import KW_ONLY, InitVar, dataclass, field
from operator import methodcaller
from typing import Any

import torch

# How a run reads a figure from its steady epochs (``Figure.run``): their values ``weighted`` by their train time, the
# ``mean`` of those that measured it, the largest (``max``), the profiled ``window``'s one reading, the mean under the
# run's ``split`` of train time, or computed by the run itself (``own``: averages, totals, utilization, peak memory).
RUN_RULES = ("weighted", "mean", "max", "window", "split", "own")

# How the ranks' values of an epoch combine (``Figure.ranks``): NaN, not measured, poisons the max and the sum and is
# left out of the mean.
RANKS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"max": torch.max, "sum": torch.sum, "mean": torch.nanmean}

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
    ranks: str | None = None  # measured by each process, its ranks' values combined so (a key of :data:`RANKS`)
    per_rank: bool = False  # each rank's value kept beside (the epoch's and the run's ``ranks``, the printed ranks)
    # A process's value from what it read of the epoch (an EpochReading; by default its attribute of the key)
    read: Callable[[Any], float] | None = None
    whole: bool = False  # a count: kept as an integer
    nan_kept: bool = False  # a clock's reading, kept as read where not measured (NaN), not as None
    # The epoch figure whose spread over the steady epochs is its noise (default: itself, where an epoch row holds it
    # and it is neither the window's one reading nor memory, whose change is growth, not noise; ``""``: none).
    per_epoch: str | None = None
    scale: float = field(init=False)

    def __new__(cls, key: str, *args: Any, **options: Any) -> Figure:
        """The figure is its key; :meth:`__init__` sets what it is."""
        return super().__new__(cls, key)

    def __post_init__(self, key: str) -> None:
        for option, value, allowed in (("run", self.run, RUN_RULES), ("ranks", self.ranks, RANKS)):
            if value is not None and value not in allowed:
                raise ValueError(f"Figure {key!r}: {option}={value!r} is not one of {', '.join(allowed)}")
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


def measured() -> list[Figure]:
    """The figures each process measures of an epoch, in the registry's order (read at each use: a test may add one)."""
    return [figure for figure in FIGURES if figure.ranks is not None]


class Measures(dict[str, float]):
    """What one process measured of an epoch, by figure (NaN: nothing): each of :func:`measured`."""

    @classmethod
    def of(cls, reading: Any) -> Measures:
        """Each measured figure's value from what a process read of its epoch (a figure's ``read``, or its key)."""
        return cls({f: float(f.read(reading) if f.read else getattr(reading, f.name)) for f in measured()})

    @classmethod
    def unmeasured(cls) -> Measures:
        """Every figure NaN: what a rank whose own figures failed sends to the gather."""
        return cls({figure: math.nan for figure in measured()})


@dataclass(frozen=True)
class Gathered:
    """An epoch's measures over every rank, its samples per training loader, and each rank's own where several."""

    measures: Measures
    loader_samples: list[float]
    per_rank: dict[str, list[float]] | None = None


def gather(local: Measures, strategy: Any, loader_samples: list[float]) -> Gathered:
    """Combine one epoch's measures over every rank, each figure by its ``ranks`` (identity on one process).

    ``loader_samples`` (the rank's per training loader) are summed. ``strategy``: the trainer's, its ``all_gather``
    the epoch end's one collective.
    """
    spec = measured()
    if getattr(strategy, "world_size", None) == 1:  # one rank's row reduced is that row: no tensor, no collective
        own = Measures({f: float(local.get(f, math.nan)) for f in spec})
        return Gathered(own, [float(n) for n in loader_samples])
    sent = [*(local.get(f, math.nan) for f in spec), *loader_samples]
    values = torch.tensor(sent, dtype=torch.float64, device=strategy.root_device)
    rows = strategy.all_gather(values).reshape(-1, values.numel()).cpu()  # [ranks, values], one process too
    merged = Measures({f: RANKS[f.ranks or "max"](rows[:, i]).item() for i, f in enumerate(spec)})
    per_rank = {f.name: rows[:, i].tolist() for i, f in enumerate(spec) if f.per_rank}
    return Gathered(merged, rows[:, len(spec) :].sum(dim=0).tolist(), per_rank if len(rows) > 1 else None)


# An epoch's time and pace.
TRAIN_S = Figure(
    "train_s",
    "s",
    "training time of the epoch, evaluation inside it paused out",
    plotted=True,
    ranks="max",
    per_rank=True,
    nan_kept=True,
)
EVAL_S = Figure("eval_s", "s", "evaluation time inside the epoch", plotted=True, ranks="max", nan_kept=True)
SAMPLES = Figure("samples", "samples", "training samples of the epoch, every rank's", ranks="sum", whole=True)
HOST_WAIT_S = Figure(
    "host_wait_s", "s", "train time between one step's end and the next one's start", ranks="max", nan_kept=True
)
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
    "samples_per_s",
    "samples/s",
    "training samples over train time",
    label="throughput",
    run="weighted",
    plotted=True,
    derive=lambda row: None if row[SAMPLES] is None else row[SAMPLES] / row[TRAIN_S] if row[TRAIN_S] > 0 else math.nan,
)


# Train time, split: these add up to it (mnistperf.diagnosis.measure.phases); a run keeps their means under "split".
def rest_s(row: dict[str, Any]) -> float | None:
    """Train time outside the wait for data and the step's phases, where every phase was timed."""
    phases = [row[figure] for figure in (FORWARD_S, BACKWARD_S, OPTIMIZER_S)]
    return None if None in phases else max(row[TRAIN_S] - row[INPUT_WAIT_S] - sum(phases), 0.0)


SPLIT = tuple(
    Figure(name, "s", meaning, label=f"  {label}", run="split", where=f"split.{name}", **how)
    for name, label, meaning, how in (
        ("input_wait_s", "input wait", "train time waiting for data", dict(ranks="max", per_rank=True, nan_kept=True)),
        ("forward_s", "forward", "train time in the forward", dict(ranks="mean", per_rank=True)),
        ("backward_s", "backward", "train time in the backward", {"ranks": "mean"}),
        (
            "optimizer_s",
            "optimizer",
            "train time from the optimizer's update to the step's end, batch-end hooks in",
            {"ranks": "mean"},
        ),
        ("rest_s", "rest", "the rest of train time: hooks, logging, Python between them", {"derive": rest_s}),
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
    ranks="max",  # every rank's slowest, as each step figure
)
STEP_P90_S = Figure(
    "step_p90_s", "s", "90th percentile of the training steps' host intervals, the first step apart", ranks="max"
)
STEP_MAX_S = Figure("step_max_s", "s", "longest host interval of a training step, the first step apart", ranks="max")
FIRST_STEP_S = Figure(
    "first_step_s", "s", "the epoch's first training step's host interval, its fetch included", ranks="max"
)
SPIKES = Figure("spikes", "steps", "training steps at least 3x the epoch's median step", ranks="max", whole=True)
SPIKES_S = Figure("spikes_s", "s", "the time those steps took past the epoch's median step", ranks="max")
STEPS = (STEP_MEDIAN_S, STEP_P90_S, STEP_MAX_S, FIRST_STEP_S, SPIKES, SPIKES_S)


# Shares of train time, read weighted by it: what the epoch waited on, and who held the cores
# (mnistperf.diagnosis.measure.cores: read from Linux's /proc, a few times an epoch).
def share(part: float, whole: float) -> float:
    """``part`` of ``whole``, held between 0 and 1 (0 where there is no whole)."""
    return min(max(part / whole, 0.0), 1.0) if whole > 0 else 0.0


INPUT_WAIT_SHARE, HOST_WAIT_SHARE, CORE_WAIT_SHARE, WORKERS_CPU_SHARE = (
    Figure(name, "share", meaning, label=label, run="weighted", plotted=name == "input_wait_share", **how)
    for name, label, meaning, how in (
        (
            "input_wait_share",
            "waiting for data",
            "share of train time the host waited for the next batch",
            {"derive": lambda row: share(row[INPUT_WAIT_S], row[TRAIN_S])},
        ),
        (
            "host_wait_share",
            "between steps",
            "share of train time between one step's end and the next one's start",
            {"derive": lambda row: share(row[HOST_WAIT_S], row[TRAIN_S])},
        ),
        (
            "core_wait_share",
            "waiting for a core",
            "share of train time the training thread was ready to run but waited for a core (Linux)",
            {"ranks": "mean"},
        ),
        (
            "workers_cpu_share",
            "workers' CPU, of the cores",
            "its DataLoader workers' CPU time (and any child's it joined) over the epoch's wall time times the cores "
            "the process may use (Linux)",
            {"ranks": "mean"},
        ),
    )
)
WAITS = (INPUT_WAIT_SHARE, HOST_WAIT_SHARE)  # what a loop that does not time the waits cannot give
CORES = (CORE_WAIT_SHARE, WORKERS_CPU_SHARE)
# The profiled window's busy share, by the device it profiled: one reading for the run.
DEVICE_BUSY_SHARE, CPU_BUSY_SHARE = (
    Figure(name, "share", meaning, label=label, run="window", ranks="mean", read=methodcaller("busy", device))
    for name, label, meaning, device in (
        ("device_busy_share", "GPU busy", "time the GPU executed kernels or copies in the profiled window", "cuda"),
        ("cpu_busy_share", "inside tensor operations", "time inside tensor operations in the profiled window", "cpu"),
    )
)
BUSY = {"cuda": DEVICE_BUSY_SHARE, "cpu": CPU_BUSY_SHARE}
# The epoch's utilization (mnistperf.diagnosis.measure.flops).
FLOPS = Figure(
    "flops", "FLOP", "the FLOPs of the epoch's training steps, one step's count times its steps", ranks="sum"
)
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
# Under DDP, the ranks' talk (mnistperf.diagnosis.measure.device_work.communication), from the profiled window.
COMM_SHARE, COMM_EXPOSED_SHARE = COMMUNICATION = tuple(
    Figure(name, "share", f"time inside collectives {which}", label=label, run="window", ranks="mean", per_rank=True)
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
    ranks="max",
)
RSS_MB = Figure(
    "rss_mb",
    "MB",
    "the training process's resident memory (the larger of mid-epoch and the epoch's end)",
    run="max",
    ranks="max",
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
DEVICE_ALLOCATED_MB = Figure(
    "device_allocated_mb", "MB", "the epoch's peak GPU memory allocated by tensors", run="max", ranks="max"
)
DEVICE_RESERVED_MB = Figure(
    "device_reserved_mb", "MB", "the epoch's peak GPU memory reserved by the caching allocator", run="max", ranks="max"
)
MEMORY = (RSS_MB, WORKERS_PSS_MB, DEVICE_ALLOCATED_MB, DEVICE_RESERVED_MB)

# Every figure, in the order they stand side by side; read as figures.FIGURES at each use, so that a test can add one.
FIGURES: tuple[Figure, ...] = tuple(value for value in globals().values() if isinstance(value, Figure))


def kept(figure: Figure, value: float) -> float | None:
    """A measured value as a row keeps it: NaN as None (unless the figure keeps NaN), a count as an integer."""
    if math.isnan(value):
        return value if figure.nan_kept else None
    return int(value) if figure.whole else value


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
    """An epoch row's measured figures as the loggers' scalars, ``timing/<name>``: the plotted few, or ``every`` one."""
    return {f"timing/{f.name}": row[f] for f in FIGURES if f.epoch and (every or f.plotted) and row.get(f) is not None}
