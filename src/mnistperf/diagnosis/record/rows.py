"""An epoch's row: its figures as the ranks combined them, its split of train time, its verdict, the ranks apart."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from mnistperf.diagnosis import figures
from mnistperf.diagnosis.measure.stalls import StepStats
from mnistperf.diagnosis.record.verdict import FIT_ENDED, NOT_MEASURED, WINDOW_PENDING, classify, deciding

RANKS_APART = 0.1  # the share of train time by which the ranks' own work differs where they are apart


def epoch_row(
    epoch: int,
    merged: figures.Measures,
    local: StepStats | None,
    busy_window: dict[str, Any] | None,
    metrics: dict,
    threshold: float,
) -> dict[str, Any]:
    """One epoch's figures from its measures over every rank, as they appear in timing.json.

    ``local``: this process's step times, where its spikes fell. ``busy_window``: the run's profiled window, its
    share None while not measured.
    """
    train_s, input_wait_s = merged.train_s, merged.input_wait_s
    samples = None if math.isnan(merged.samples) else int(merged.samples)
    row: dict[str, Any] = {
        "epoch": epoch,
        figures.TRAIN_S: train_s,
        figures.EVAL_S: merged.eval_s,
        "samples": samples,
        figures.SAMPLES_PER_S: None if samples is None else samples / train_s if train_s > 0 else math.nan,
        figures.INPUT_WAIT_SHARE: _share(input_wait_s, train_s),
        figures.HOST_WAIT_SHARE: _share(merged.host_wait_s, train_s),
    }
    row.update(window_figures(busy_window))
    # Train time's split: the step's own phases (forward, backward, optimizer), its rest where all were timed
    phases = measured_figures(merged, figures.SPLIT[1:-1])
    known = [part for part in phases.values() if part is not None]
    row.update({figures.INPUT_WAIT_S: input_wait_s, **phases})
    row[figures.REST_S] = max(train_s - input_wait_s - sum(known), 0.0) if len(known) == len(phases) else None
    row.update(measured_figures(merged, figures.CORES))
    row["verdict"], row["verdict_reason"] = classify(row, threshold, not_measured(busy_window))
    row["verdict_figure"] = deciding(row, row["verdict"], threshold)  # what the epoch's line says of it
    row.update(metrics)
    row.update(measured_figures(merged, figures.STEPS))  # every rank's slowest
    if row[figures.SPIKES] is not None:
        row[figures.SPIKES] = int(row[figures.SPIKES])
    row["worst_spikes"] = [list(spike) for spike in local.worst] if local is not None else []
    row.update(measured_figures(merged, figures.MEMORY))
    return row


def ranks_apart(
    train_s: list[float],
    input_wait_s: list[float],
    forward_s: list[float],
    comm_share: list[float] | None = None,
    comm_exposed_share: list[float] | None = None,
) -> dict[str, Any]:
    """Each rank's train time, input wait and share in collectives; where the ranks are apart, the slowest.

    Under DDP the all-reduce makes the ranks' train times agree; what a rank does alone tells them apart: its wait
    for data and its forward (NaN: not measured). The slowest is held by ``data`` or its ``step``, whichever it spent
    more time on than the quickest rank.
    """
    optional = {
        figures.FORWARD_S: forward_s,
        figures.COMM_SHARE: comm_share,
        figures.COMM_EXPOSED_SHARE: comm_exposed_share,
    }
    ranks = [
        {
            "rank": rank,
            figures.TRAIN_S: train_s[rank],
            figures.INPUT_WAIT_S: input_wait_s[rank],
            **{key: _measured(values[rank]) if values else None for key, values in optional.items()},
        }
        for rank in range(len(train_s))
    ]
    forward = [0.0 if math.isnan(f) else f for f in forward_s]
    alone = [wait + f for wait, f in zip(input_wait_s, forward, strict=True)]
    slowest, quickest = alone.index(max(alone)), alone.index(min(alone))
    behind = alone[slowest] - alone[quickest]
    if behind <= RANKS_APART * max(train_s):
        return {"ranks": ranks}
    more_wait = input_wait_s[slowest] - input_wait_s[quickest]
    held_by = "data" if more_wait >= forward[slowest] - forward[quickest] else "step"
    return {"ranks": ranks, "slowest_rank": {"rank": slowest, "held_by": held_by, "behind_s": behind}}


def _measured(value: float) -> float | None:
    return None if math.isnan(value) else value


def measured_figures(merged: figures.Measures, chosen: Iterable[figures.Figure]) -> dict[str, Any]:
    """Those figures of an epoch's gathered measures, as the ranks combined them (None where not measured)."""
    return {figure: _measured(getattr(merged, figure.name)) for figure in chosen}


def window_figures(busy_window: dict[str, Any] | None) -> dict[str, Any]:
    """What a verdict reads of the profiled window: its share, the margin it is read with, the wait for a core."""
    if busy_window is None:
        return {}
    found: dict[str, Any] = {figures.BUSY[busy_window["device"]]: busy_window.get("share")}
    for key, name in (("margin", "busy_margin"), ("waited_for_a_core", "waited_for_a_core")):
        if busy_window.get(key) is not None:
            found[name] = busy_window[key]
    talked = busy_window.get("communication")
    if talked is not None:
        found.update({figures.COMM_SHARE: talked["share"], figures.COMM_EXPOSED_SHARE: talked["exposed_share"]})
    return found


def not_measured(busy_window: dict[str, Any] | None, ended: bool = False) -> str:
    """Why the profiled window has no share (:data:`NOT_MEASURED` where it gives none); ``ended``: as the fit ends."""
    reason = (busy_window or {}).get("reason") or NOT_MEASURED
    return FIT_ENDED if ended and reason == WINDOW_PENDING else reason


def _share(part: float, whole: float) -> float:
    return min(max(part / whole, 0.0), 1.0) if whole > 0 else 0.0
