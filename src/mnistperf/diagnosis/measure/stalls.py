"""Stalls over time: an epoch's host step times, their spikes, and drift across epochs (docs/timing.md)."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from mnistperf.diagnosis.figures import FIRST_STEP_S, SPIKES, SPIKES_S, STEP_MEDIAN_S, TRAIN_S
from mnistperf.diagnosis.measure.trend import trend

SPIKE_FACTOR = 3.0  # a step at least this many times the epoch's median is a spike
SLOW_FIRST_FACTOR = 3.0  # an epoch's first step at least this many times the median stands out (the loader's start)
DRIFT_SHARE = 0.2  # step time moving one way by this share of the first steady epoch's median drifts
WORST_KEPT = 3  # the longest spikes an epoch's row keeps, and the run's line names
SPIKES_WORTH = 0.05  # spikes are worth a line where the time they took past the median is this share of train time


class StepStats(NamedTuple):
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
    """One epoch's step intervals (NaN: a step left out), its first apart; ``first_index``: that step's batch index."""
    first = intervals[0] if intervals else math.nan
    rest = [(i, s) for i, s in enumerate(intervals) if i > 0 and not math.isnan(s)]
    ordered = sorted(s for _, s in rest)
    median = percentile(ordered, 0.5)
    spiked = [(first_index + i + 1, s) for i, s in rest if s >= SPIKE_FACTOR * median]  # by step, counted from 1
    return StepStats(
        median_s=median,
        p90_s=percentile(ordered, 0.9),
        max_s=percentile(ordered, 1.0),
        first_s=first,
        spikes=len(spiked),
        excess_s=sum(s - median for _, s in spiked),
        worst=sorted(spiked, key=lambda spike: -spike[1])[:WORST_KEPT],
    )


def typical_step(
    intervals: list[float], waits: list[tuple[float, float]], stood_in: int
) -> tuple[float, float, float] | None:
    """The mean interval, wait for its batch and host wait of an epoch's steps past its first timed (NaN: not).

    ``waits``: each step's wait for its batch and the host's, by its interval. Where ``stood_in`` steps at that rate
    would hold under half a spike, the spikes are left out: a one-off stall is its own step's, not each step's a
    profiled window's steps stand in for (spikes that recur, an accumulation's optimizer step, are kept in the mean).
    None where no step is left.
    """
    timed = [(s, *w) for i, (s, w) in enumerate(zip(intervals, waits, strict=True)) if i > 0 and not math.isnan(s)]
    median = percentile(sorted(step[0] for step in timed), 0.5)
    typical = [step for step in timed if step[0] < SPIKE_FACTOR * median]
    if not typical or (len(timed) - len(typical)) * stood_in >= len(timed) / 2:  # (all alike at 0; spikes recur)
        typical = timed
    if not typical:
        return None
    interval, wait, host = (math.fsum(column) / len(typical) for column in zip(*typical, strict=True))
    return interval, wait, host


def drift(epochs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The steady epochs' median step drifting: :func:`~.trend.trend`'s reading, with ``per_epoch_share``; else None."""
    moved = trend(epochs, STEP_MEDIAN_S, "s")
    if moved is None or moved["from_s"] <= 0 or abs(moved["to_s"] - moved["from_s"]) < DRIFT_SHARE * moved["from_s"]:
        return None
    return {**moved, "per_epoch_share": moved["per_epoch_s"] / moved["from_s"]}


def slow_first_steps(epochs: list[dict[str, Any]]) -> dict[str, Any]:
    """The epochs past the warm-up whose first step took 3x their median or more, and what those steps cost."""
    steady = epochs[1:]  # the warm-up's first step holds one-off work (its loader started before it)
    slow = [e for e in steady if (e.get(FIRST_STEP_S) or 0) >= SLOW_FIRST_FACTOR * (e.get(STEP_MEDIAN_S) or 0) > 0]
    train = sum(e.get(TRAIN_S) or 0.0 for e in steady)
    return {
        "slow_first_step": [e["epoch"] for e in slow],
        # what those first steps took past their median, as a share of the steady epochs' train time
        "slow_first_share": sum(e[FIRST_STEP_S] - e[STEP_MEDIAN_S] for e in slow) / train if slow and train else None,
        "slowest_first_s": max((e[FIRST_STEP_S] for e in slow), default=None),
    }


def stalls(epochs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run's stalls, from every epoch's row: spikes, the share of train time they cost, slow first steps, drift."""
    measured = [e for e in epochs if e.get(SPIKES_S) is not None]
    train = sum(e[TRAIN_S] for e in measured)
    worst = [{"epoch": e["epoch"], "step": step, "s": s} for e in epochs for step, s in e.get("worst_spikes", [])]
    return {
        SPIKES: sum(e.get(SPIKES) or 0 for e in epochs),
        "spikes_share": sum(e[SPIKES_S] for e in measured) / train if measured and train > 0 else None,
        "worst_spikes": sorted(worst, key=lambda spike: -spike["s"])[:WORST_KEPT],
        **slow_first_steps(epochs),
        "drift": drift(epochs[1:] or epochs),  # the steady epochs: the warm-up apart, where there are others
    }
