"""From the epochs' rows to the run's summary: its figures, verdict and what a fix could buy, as timing.json keeps it.

The first epoch is the warm-up, reported apart; averages, shares and the verdict read the steady epochs (those that
ran whole, where any did), totals every epoch (docs/timing.md, "What each figure measures").
"""

from __future__ import annotations

import math
from statistics import mean
from typing import Any

from mnistperf.diagnosis import figures
from mnistperf.diagnosis.measure.cores import cores_held_by
from mnistperf.diagnosis.measure.memory import growth, measured
from mnistperf.diagnosis.measure.stalls import stalls
from mnistperf.diagnosis.measure.window_reading import WindowReading
from mnistperf.diagnosis.record.advice import Hints, advice
from mnistperf.diagnosis.record.rows import WINDOW_KEYS, not_measured, ranks_apart
from mnistperf.diagnosis.record.verdict import classify, deciding


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
    values = [e.get(key) for e in epochs]
    return [float(v) for v in values if isinstance(v, (int, float)) and not math.isnan(v)]


# How a run reads a figure from its steady epochs, by the figure's rule (figures.RUN_RULES).
RUN_READERS = {
    "weighted": _weighted,
    "mean": lambda epochs, key: mean(values) if (values := _measured_values(epochs, key)) else None,
    "max": lambda epochs, key: max(_measured_values(epochs, key), default=None),
    "split": lambda epochs, key: None if any(e.get(key) is None for e in epochs) else mean(e[key] for e in epochs),
}


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
    read: dict[str, Any] = {f: RUN_READERS[f.run](steady, f) for f in figures.FIGURES if f.run in RUN_READERS}
    read["split"] = {f: read.pop(f) for f in figures.FIGURES if f.run == "split"}
    read.update({key: epochs[-1][key] for key in WINDOW_KEYS if key in epochs[-1]})  # over the ranks, as last read
    verdict, reason = classify(read, input_bound_share, not_measured(reading, ended=True))
    figure = deciding(read, verdict, input_bound_share)
    if reading is not None and reading.in_warmup and reading.share is not None:
        reason += "; it rests on the warm-up epoch, the only one of this run"
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
        **_ranks_over(steady),
        **read,
        **({"busy_window": window_record(reading, read)} if reading is not None else {}),
        "input_bound_share": input_bound_share,
        "verdict": verdict,
        "verdict_figure": figure,  # the one figure that decided it, as the headline says it
        "verdict_reason": reason,
        **({"cores_held": taken} if (taken := cores_held_by(read)) is not None else {}),
        "metric": metric,
        "final_metric": epochs[-1].get(metric) if metric else None,
        **({"step_parts": step_parts} if step_parts else {}),
        **({"between_epochs": between_epochs} if between_epochs else {}),
    }
    found["advice"] = advice(found, hints)
    return found
