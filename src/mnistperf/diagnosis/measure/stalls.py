"""Stalls over time: an epoch's step-time distribution from host timestamps, its spikes, and drift across epochs.

A step's time is the host's interval from the end of the step before it (the epoch's start for the first) to
the end of its own: the fetch of its batch, the copy, the step itself and the loop's work between steps. On
CUDA a step that only launches work ends on the host before the device has run it, so these are the host's
step intervals, not the device's step times; no step is synchronized for them. The first step of an epoch
(where a loader without persistent workers starts them) is kept apart from the distribution, and steps inside
the profiled window are left out (they run slower under the profiler).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from mnistperf.diagnosis.figures import FIRST_STEP_S, SPIKES, SPIKES_S, STEP_MEDIAN_S, TRAIN_S
from mnistperf.diagnosis.measure.trend import slope

# A step at least this many times the epoch's median is a spike.
SPIKE_FACTOR = 3.0
# The first step of an epoch at least this many times the median stands out (the loader's start-up).
SLOW_FIRST_FACTOR = 3.0
# Step time that moves by at least this share of the first steady epoch's median, in one direction, drifts.
DRIFT_SHARE = 0.2
# The fewest steady epochs drift is read over.
DRIFT_EPOCHS = 3
# The longest spikes an epoch's row keeps, and the run's line names.
WORST_KEPT = 3
# Spikes are worth a line where the time they took past the median step is at least this share of train time.
SPIKES_WORTH = 0.05


@dataclass(frozen=True)
class StepStats:
    """An epoch's step times: the distribution past the first step, the first step, and the spikes."""

    median_s: float
    p90_s: float
    max_s: float
    first_s: float
    spikes: int
    excess_s: float  # the time the spikes took past the median step
    worst: list[tuple[int, float]]  # the longest spikes: (step, seconds), longest first


def percentile(ordered: list[float], share: float) -> float:
    """The nearest-rank percentile ``share`` (0..1) of values already sorted (NaN where none)."""
    if not ordered:
        return math.nan
    rank = max(math.ceil(share * len(ordered)), 1)
    return ordered[rank - 1]


def step_stats(intervals: list[float], first_index: int) -> StepStats:
    """The distribution of one epoch's step intervals (NaN marks a step left out), its first step apart.

    ``first_index``: the batch index of the epoch's first step; spikes are named by their step number, counted from 1
    as the batch index plus one. A spike's cost is the time it took past the median step.
    """
    first = intervals[0] if intervals else math.nan
    rest = [(i, s) for i, s in enumerate(intervals) if i > 0 and not math.isnan(s)]
    ordered = sorted(s for _, s in rest)
    median = percentile(ordered, 0.5)
    spiked = [(first_index + i + 1, s) for i, s in rest if s >= SPIKE_FACTOR * median] if ordered else []
    return StepStats(
        median_s=median,
        p90_s=percentile(ordered, 0.9),
        max_s=ordered[-1] if ordered else math.nan,
        first_s=first,
        spikes=len(spiked),
        excess_s=sum(s - median for _, s in spiked),
        worst=sorted(spiked, key=lambda spike: -spike[1])[:WORST_KEPT],
    )


def drift(epochs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The steady epochs' median step time moving one way by at least ``DRIFT_SHARE`` of the first's; else None.

    Returns ``{"per_epoch_s", "per_epoch_share", "from_s", "to_s", "epochs": [first, last]}``: the least-squares
    slope of the median per epoch, in seconds and as a share of the first epoch's median.
    """
    medians = [(e["epoch"], e.get(STEP_MEDIAN_S)) for e in epochs]
    points = [(n, m) for n, m in medians if m is not None and not math.isnan(m)]
    if len(points) < DRIFT_EPOCHS:
        return None
    values = [m for _, m in points]
    steps = [b - a for a, b in zip(values, values[1:], strict=False)]
    one_way = all(s > 0 for s in steps) or all(s < 0 for s in steps)
    if not one_way or values[0] <= 0 or abs(values[-1] - values[0]) < DRIFT_SHARE * values[0]:
        return None
    per_epoch = slope(points)
    return {
        "per_epoch_s": per_epoch,
        "per_epoch_share": per_epoch / values[0],
        "from_s": values[0],
        "to_s": values[-1],
        "epochs": [points[0][0], points[-1][0]],
    }


def stalls(epochs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run's stalls: the spikes, the share of train time they cost and the longest, slow first steps, drift.

    ``epochs``: every epoch's row; spikes are read in all, slow first steps past the warm-up.
    """
    steady = epochs[1:] if len(epochs) > 1 else epochs
    measured = [e for e in epochs if e.get(SPIKES_S) is not None]
    train = sum(e[TRAIN_S] for e in measured)
    worst = sorted(
        (
            {"epoch": e["epoch"], "step": step, "s": seconds}
            for e in epochs
            for step, seconds in e.get("worst_spikes", [])
        ),
        key=lambda spike: -spike["s"],
    )
    slow_first = [
        e["epoch"]
        for e in epochs[1:]  # the warm-up's first step holds one-off work (its loader started before it)
        if e.get(FIRST_STEP_S) is not None
        and e.get(STEP_MEDIAN_S) is not None
        and e[FIRST_STEP_S] >= SLOW_FIRST_FACTOR * e[STEP_MEDIAN_S] > 0
    ]
    return {
        SPIKES: sum(e.get(SPIKES) or 0 for e in epochs),
        "spikes_share": sum(e[SPIKES_S] for e in measured) / train if measured and train > 0 else None,
        "worst_spikes": worst[:WORST_KEPT],
        "slow_first_step": slow_first,
        "drift": drift(steady),
    }


def format_stalls(found: dict[str, Any], median: float | None) -> str | None:
    """The stalls' one line where something cost enough to act on; None where nothing did.

    Spikes are named where the time they took past the median step is at least ``SPIKES_WORTH`` of train time, with
    that share, the longest and what usually makes them; a slow first step and drift where they stood out.
    ``median``: the steady epochs' median step time, which the line starts with.
    """
    parts = []
    share = found.get("spikes_share")
    if share is not None and share >= SPIKES_WORTH:
        worst = ", ".join(f"epoch {w['epoch']} step {w['step']} {w['s'] * 1e3:,.0f} ms" for w in found["worst_spikes"])
        parts.append(
            f"{found[SPIKES]} steps over {SPIKE_FACTOR:.0f}x the median took {share:.0%} of train time past it "
            f"(the longest: {worst}); such spikes usually come from a loader whose workers fall behind in bursts "
            "(slow items, workers restarting each epoch), periodic work in the loop (logging, checkpoints), or "
            "other work on this machine"
        )
    if found.get("slow_first_step"):
        epochs = ", ".join(map(str, found["slow_first_step"]))
        parts.append(f"a first step over {SLOW_FIRST_FACTOR:.0f}x the median in epoch(s) {epochs} (the loader's start)")
    moved = found.get("drift")
    if moved:
        parts.append(
            f"step time drifts {moved['per_epoch_share']:+.0%} per epoch ({moved['from_s'] * 1e3:.1f} ms to "
            f"{moved['to_s'] * 1e3:.1f} ms, epochs {moved['epochs'][0]}-{moved['epochs'][1]})"
        )
    if not parts:
        return None
    head = f"Stalls (median step {median * 1e3:.1f} ms): " if median is not None else "Stalls: "
    return head + "; ".join(parts)
