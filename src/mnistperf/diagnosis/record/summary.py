"""An epoch's row, and from the rows the run's summary: its figures, verdict and what a fix could buy, in timing.json.

An epoch's row holds its figures as the ranks combined them, its split of train time, its verdict and the ranks apart.
The first epoch is the warm-up, reported apart; the run's averages, shares and verdict read the steady epochs (those
that ran whole, where any did), totals every epoch (docs/timing.md, "What each figure measures").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from statistics import mean
from typing import Any

from mnistperf.diagnosis import figures
from mnistperf.diagnosis.measure.cores import cores_held_by
from mnistperf.diagnosis.measure.memory import growth, measured
from mnistperf.diagnosis.measure.stalls import StepStats, stalls
from mnistperf.diagnosis.measure.window_reading import WindowReading
from mnistperf.diagnosis.record.advice import Hints, advice
from mnistperf.diagnosis.record.run import number
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

IN_WARMUP = "it rests on the warm-up epoch"  # a verdict read in the only epoch, said in its reason and headline


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


def _ranks_over(epochs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each rank's figures averaged over ``epochs``, and whether the ranks are apart (nothing on one process)."""
    if not all("ranks" in e for e in epochs):
        return {}
    ranks = [[e["ranks"][rank] for e in epochs] for rank in range(len(epochs[0]["ranks"]))]  # each rank's rows
    averaged: dict[str, list[float]] = {}
    for figure in (f for f in figures.FIGURES if f.per_rank):  # each over the epochs that measured it
        measured = [_measured_values(rows, figure) for rows in ranks]
        averaged[figure] = [mean(values) if values else math.nan for values in measured]
    return ranks_apart(averaged)


def window_record(reading: WindowReading, read: dict[str, Any]) -> dict[str, Any]:
    """The window as timing.json keeps it: this process's reading, its shares the run's, over every rank."""
    found = {**reading.as_json(), "share": read.get(figures.BUSY[reading.device])}
    if reading.reason is not None:  # as the fit ends: a window still pending was never read
        found["reason"] = not_measured(reading, ended=True)
    if reading.communication is not None:
        shares = {"share": read.get(figures.COMM_SHARE), "exposed_share": read.get(figures.COMM_EXPOSED_SHARE)}
        found["communication"] = {**found["communication"], **shares}
    return found


def _weighted(epochs: list[dict[str, Any]], key: str) -> float | None:
    """A share or rate averaged over epochs, weighted by their train time (where every epoch measured it)."""
    if any(e.get(key) is None for e in epochs):
        return None
    return sum(e[key] * e[figures.TRAIN_S] for e in epochs) / max(sum(e[figures.TRAIN_S] for e in epochs), 1e-12)


def _measured_values(epochs: list[dict[str, Any]], key: str) -> list[float]:
    values = [number(e.get(key)) for e in epochs]  # None: not measured
    return [v for v in values if v is not None and not math.isnan(v)]


# How a run reads a figure from its steady epochs, by the figure's rule (figures.RUN_RULES).
RUN_READERS = {
    "weighted": _weighted,
    "mean": lambda epochs, key: mean(values) if (values := _measured_values(epochs, key)) else None,
    "max": lambda epochs, key: max(_measured_values(epochs, key), default=None),
    "split": lambda epochs, key: _split(epochs, key),
}


def split_epochs(epochs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Those of ``epochs`` whose train time is split whole (an epoch whose sampled steps were profiled has none)."""
    return [e for e in epochs if all(e.get(part) is not None for part in figures.SPLIT)]


def _split(epochs: list[dict[str, Any]], key: str) -> float | None:
    """A part of the steady epochs' split: over those split whole, where any is, so that the parts add up."""
    rows = split_epochs(epochs) or epochs
    return None if any(e.get(key) is None for e in rows) else mean(e[key] for e in rows)


def aggregate(
    epochs: list[dict[str, Any]],
    input_bound_share: float,
    reading: WindowReading | None = None,
    hints: Hints | None = None,
    metric: str | None = None,
    step_parts: dict[str, Any] | None = None,
    between_epochs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The per-epoch rows, warm-up apart, the steady-state averages, totals, the verdict and what a fix could buy.

    ``reading``: the profiled window, whose share (a property of the step) stands for every epoch from its own on.
    ``hints``: the advice's per verdict. ``metric``: a validation metric of the rows, its last value ``final_metric``.
    ``step_parts``, ``between_epochs``: where a step's time and the time between epochs go (:class:`.StepParts`).
    """
    steady = [e for e in epochs[1:] if "partial" not in e] or epochs[1:] or epochs  # whole epochs, where any
    ranks = _ranks_over(steady)  # (read with the figures: who held the cores reads them)
    read: dict[str, Any] = {f: RUN_READERS[f.run](steady, f) for f in figures.FIGURES if f.run in RUN_READERS}
    read.update({"ranks": ranks["ranks"]} if "ranks" in ranks else {})
    read["split"] = {f: read.pop(f) for f in figures.FIGURES if f.run == "split"}
    read.update({key: epochs[-1][key] for key in WINDOW_KEYS if key in epochs[-1]})  # over the ranks, as last read
    verdict, reason = classify(read, input_bound_share, not_measured(reading, ended=True))
    figure = deciding(read, verdict, input_bound_share)
    if reading is not None and reading.in_warmup and reading.share is not None:
        only = "the only one of this run" if len(epochs) == 1 else "the only whole one of this run"
        reason += f"; {IN_WARMUP}, {only}"
    allocated = max(_measured_values(epochs, figures.DEVICE_ALLOCATED_MB), default=None)  # over every epoch
    reserved = max(_measured_values(epochs, figures.DEVICE_RESERVED_MB), default=math.nan)
    found = {
        "epochs": epochs,
        "steady_epochs": [steady[0]["epoch"], steady[-1]["epoch"]],
        "warmup": {k: epochs[0][k] for k in ("epoch", figures.TRAIN_S, figures.EVAL_S)} if len(epochs) > 1 else None,
        figures.AVG_TRAIN_S: mean(e[figures.TRAIN_S] for e in steady),
        figures.AVG_EVAL_S: mean(e[figures.EVAL_S] for e in steady),
        figures.TOTAL_TRAIN_S: sum(e[figures.TRAIN_S] for e in epochs),
        figures.TOTAL_EVAL_S: sum(e[figures.EVAL_S] for e in epochs),
        "stalls": stalls(epochs),
        figures.PEAK_DEVICE_MB: None if allocated is None else {"allocated": allocated, "reserved": reserved},
        "memory": {
            "growth": growth(steady),
            **({} if measured() else {"resident": "not measured: no /proc on this system (Linux only)"}),
        },
        **ranks,
        **read,
        **({"busy_window": window_record(reading, read)} if reading is not None else {}),
        "input_bound_share": input_bound_share,
        "verdict": verdict,
        "verdict_figure": figure,  # the one figure that decided it, as the headline says it
        "verdict_reason": reason,
        **({"cores_held": taken} if (taken := cores_held_by(read)) is not None else {}),
        "metric": metric,
        # the last validation's: an epoch interrupted or not validated (check_val_every_n_epoch) has none of its own
        "final_metric": next((e[metric] for e in reversed(epochs) if e.get(metric) is not None), None)
        if metric
        else None,
        **({"step_parts": step_parts} if step_parts else {}),
        **({"between_epochs": between_epochs} if between_epochs else {}),
    }
    found["advice"] = advice(found, hints)
    return found
