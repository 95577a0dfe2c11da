"""An epoch's row: its figures as the ranks combined them, its split of train time, its verdict, the ranks apart."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from mnistperf.diagnosis import figures
from mnistperf.diagnosis.measure.stalls import StepStats
from mnistperf.diagnosis.measure.window_reading import WindowReading
from mnistperf.diagnosis.record.verdict import (
    BUSY_MARGIN,
    FIT_ENDED,
    NOT_MEASURED,
    ONE_STEP_ENDED,
    ONE_STEP_PENDING,
    WAITED_FOR_A_CORE,
    WINDOW_PENDING,
    classify,
    deciding,
)

# What a verdict reads of the profiled window, in the epoch's row and the run's figures.
WINDOW_KEYS = (*figures.BUSY.values(), *figures.COMMUNICATION, BUSY_MARGIN, WAITED_FOR_A_CORE)
RANKS_APART = 0.1  # the share of train time by which the ranks' own work differs where they are apart


def epoch_row(
    epoch: int,
    merged: figures.Measures,
    local: StepStats | None,
    reading: WindowReading | None,
    extra: dict[str, Any],
    threshold: float,
) -> dict[str, Any]:
    """One epoch's row as timing.json has it: every figure measured, the window's, ``extra``, the derived, the verdict.

    ``merged``: over every rank; ``local``: this process's step times, where its spikes fell; ``extra``: what else the
    row holds (the validation's metrics, the utilization, the samples per loader), which a derived figure may read.
    """
    row: dict[str, Any] = {"epoch": epoch}
    row.update({f: figures.kept(f, merged[f]) for f in figures.measured() if f.epoch and f.run != "window"})
    row.update(window_figures(reading, merged))
    row["worst_spikes"] = [list(spike) for spike in local.worst] if local is not None else []
    row.update(extra)
    figures.derive(row)  # a derived figure reads any other
    row["verdict"], row["verdict_reason"] = classify(row, threshold, not_measured(reading))
    row["verdict_figure"] = deciding(row, row["verdict"], threshold)  # what the epoch's line says of it
    return row


def ranks_apart(per_rank: Mapping[str, list[float]]) -> dict[str, Any]:
    """Each rank's own figures (every per-rank figure given); where the ranks are apart, the slowest.

    Under DDP the all-reduce makes the ranks' train times agree; what a rank does alone tells them apart: its wait
    for data and its forward (NaN: not measured). The slowest is held by ``data`` or its ``step``, whichever it spent
    more time on than the quickest rank.
    """
    train_s, input_wait_s = per_rank[figures.TRAIN_S], per_rank[figures.INPUT_WAIT_S]
    own = [f for f in figures.FIGURES if f.per_rank and f in per_rank]
    ranks = [{"rank": rank, **{f: figures.kept(f, per_rank[f][rank]) for f in own}} for rank in range(len(train_s))]
    forward = [0.0 if math.isnan(f) else f for f in per_rank.get(figures.FORWARD_S, [math.nan] * len(train_s))]
    alone = [wait + f for wait, f in zip(input_wait_s, forward, strict=True)]
    slowest, quickest = alone.index(max(alone)), alone.index(min(alone))
    behind = alone[slowest] - alone[quickest]
    if behind <= RANKS_APART * max(train_s):
        return {"ranks": ranks}
    more_wait = input_wait_s[slowest] - input_wait_s[quickest]
    held_by = "data" if more_wait >= forward[slowest] - forward[quickest] else "step"
    return {"ranks": ranks, "slowest_rank": {"rank": slowest, "held_by": held_by, "behind_s": behind}}


def window_figures(reading: WindowReading | None, merged: figures.Measures) -> dict[str, Any]:
    """What a verdict reads of the profiled window: its share over the ranks, its margin, the wait for a core."""
    if reading is None:
        return {}
    busy = figures.BUSY[reading.device]
    found: dict[str, Any] = {busy: figures.kept(busy, merged[busy])}
    if reading.margin is not None:
        found[BUSY_MARGIN] = reading.margin
    if reading.waited_for_a_core is not None:
        found[WAITED_FOR_A_CORE] = reading.waited_for_a_core
    if reading.communication is not None:
        found.update({figure: figures.kept(figure, merged[figure]) for figure in figures.COMMUNICATION})
    return found


def not_measured(reading: WindowReading | None, ended: bool = False) -> str:
    """Why the profiled window has no share (:data:`NOT_MEASURED` where it gives none); ``ended``: as the fit ends."""
    reason = (reading.reason if reading is not None else None) or NOT_MEASURED
    return {WINDOW_PENDING: FIT_ENDED, ONE_STEP_PENDING: ONE_STEP_ENDED}.get(reason, reason) if ended else reason
