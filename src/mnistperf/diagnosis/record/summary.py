"""From per-epoch figures to the verdict, the run's summary and ``timing.json``.

Shared by every timed loop through :class:`~mnistperf.diagnosis.record.clock.EpochClock`, so all report the
same figures computed the same way. The first epoch carries one-off costs (compilation, worker
start, allocator and cache warm-up): it is reported on its own as ``warmup``, and the headline
averages, throughput, shares and verdict use the steady-state epochs (2..N; epoch 1 alone
when the run has a single epoch). Totals cover every epoch, as in the reference.
"""

from __future__ import annotations

import json
import math
import os
import platform
import resource
import sys
from collections.abc import Iterable
from pathlib import Path
from statistics import mean
from typing import Any

import lightning
import torch

from mnistperf.atomic import atomic_write
from mnistperf.diagnosis.figures import (
    AVG_EVAL_S,
    AVG_TRAIN_S,
    BUSY,
    COMM_EXPOSED_SHARE,
    COMM_SHARE,
    CPU_BUSY_SHARE,
    DEVICE_ALLOCATED_MB,
    DEVICE_BUSY_SHARE,
    DEVICE_RESERVED_MB,
    EVAL_S,
    FORWARD_S,
    HOST_WAIT_SHARE,
    INPUT_WAIT_S,
    INPUT_WAIT_SHARE,
    PEAK_DEVICE_MB,
    PEAK_RSS_MB,
    REST_S,
    SAMPLES_PER_S,
    SPIKES,
    SPLIT,
    STEP_MEDIAN_S,
    STEPS,
    TOTAL_EVAL_S,
    TOTAL_TRAIN_S,
    TRAIN_S,
    Figure,
    Measures,
    registry,
)
from mnistperf.diagnosis.guard import jsonable
from mnistperf.diagnosis.measure.busy_window import CROWDED
from mnistperf.diagnosis.measure.cores import clause, held
from mnistperf.diagnosis.measure.flops import format_utilization
from mnistperf.diagnosis.measure.memory import format_growth, growth, measured
from mnistperf.diagnosis.measure.stalls import StepStats, format_stalls, stalls
from mnistperf.diagnosis.record.advice import Hints, advice, format_advice
from mnistperf.machine import describe_device, usable_cpus

SUMMARY_FILE = "timing.json"
# The host waiting for data at least this share of train time: the input sets the pace (unless a run says otherwise).
INPUT_BOUND_SHARE = 0.5
# The GPU executing work at least this share of the time: the GPU sets the pace.
COMPUTE_BOUND_BUSY = 0.8
# Ranks waiting in collectives, with nothing else running, at least this share of the window: the summary says what
# that wait bounds.
COMM_EXPOSED = 0.2


NOT_MEASURED = "too few steps for the profiled window"
# Why the warm-up epoch has no busy share yet; where the fit ends there, the summary says so instead.
WINDOW_PENDING = "read in the first steady epoch, after the warm-up"
FIT_ENDED = "the fit ended after its warm-up epoch, before the window in a steady epoch"
# Ranks whose own work (the wait for data, the forward) differs by more than this share of train time are apart.
RANKS_APART = 0.1
# The figure a profiled window gives, by the device it profiled.
BUSY_KEYS = {device: figure.name for device, figure in BUSY.items()}
SPLIT_KEYS = tuple(figure.name for figure in SPLIT)  # train time, split: these add up to it
PHASE_KEYS = SPLIT_KEYS[1:-1]  # the step's own phases: forward, backward, optimizer


def classify(figures: dict[str, Any], threshold: float, not_measured: str = NOT_MEASURED) -> tuple[str, str]:
    """(verdict, reason) for one epoch's or one run's figures: the bound (:func:`bound`), then who held the cores.

    Where the training thread waited for a core a large share of train time (``core_wait_share``), the reason ends
    with one clause naming who held them (:func:`~mnistperf.diagnosis.measure.cores.held`): the run's own loader's
    workers, with what usually helps and what it could buy, or other work on the machine. It is a clause, not a
    verdict of its own: the bound is still the step's (a step slowed by its workers is still overhead- or
    compute-bound in what it does once it runs), and the clause says why that step ran slower than it could.
    """
    verdict, reason = bound(figures, threshold, not_measured)
    return verdict, reason + clause(held(figures))


def bound(figures: dict[str, Any], threshold: float, not_measured: str = NOT_MEASURED) -> tuple[str, str]:
    """(verdict, reason) from the wait for data and the profiled window's busy share.

    Input-bound when the host waited for the next batch (timed around the fetch) for at least
    ``threshold`` of train time. Otherwise from the profiled window's busy share: on CUDA
    (``device_busy_share``) the kernels' own, on a CPU (``cpu_busy_share``) the share of the time inside
    tensor operations. Compute-bound at ``COMPUTE_BOUND_BUSY`` or more, else overhead-bound (the device
    waits for the host's launches and loop, or on a CPU the step is Python, framework and dispatch).
    Undetermined where no share was measured, with the reason (``not_measured``), never compute-bound by
    default. A share within its margin (``busy_margin``) of the line says so, with what each side would
    mean; a window during which the training thread waited for a core (``waited_for_a_core``) at least
    ``CROWDED`` of the time says the verdict is in doubt.
    """
    wait = figures[INPUT_WAIT_SHARE]
    waited = f"host waited for the next batch {wait:.0%} of train time"
    on_cuda = DEVICE_BUSY_SHARE in figures
    if wait >= threshold and not on_cuda:
        return "input-bound", waited
    if not on_cuda and CPU_BUSY_SHARE not in figures:
        return "undetermined", f"{waited}; time inside tensor operations not measured on this device"
    busy = figures[DEVICE_BUSY_SHARE if on_cuda else CPU_BUSY_SHARE]
    label = "GPU busy time" if on_cuda else "time inside tensor operations"
    if busy is None:
        verdict = "input-bound" if wait >= threshold else "undetermined"
        return verdict, f"{waited}; {label} not measured ({not_measured})"
    detail = (
        f"GPU busy {busy:.0%} of the time, {waited}"
        if on_cuda
        else f"CPU inside tensor operations {busy:.0%} of the time, {waited}"
    )
    if wait >= threshold:
        return "input-bound", detail
    verdict = "compute-bound" if busy >= COMPUTE_BOUND_BUSY else "overhead-bound"
    if verdict == "overhead-bound":
        detail += (
            " (the GPU waits for the host to launch work)"
            if on_cuda
            else " (the rest is Python, the framework and dispatch around them)"
        )
    return verdict, detail + doubt(figures, busy)


def doubt(figures: dict[str, Any], busy: float) -> str:
    """What the verdict's reason adds where the share is near the line or the machine was crowded ('' if neither).

    Where the epochs' own reading names who held the cores, the clause that follows the reason says who, not this.
    """
    margin = figures.get("busy_margin")
    crowded = figures.get("waited_for_a_core")
    if crowded is not None and crowded >= CROWDED:
        doubted = f"; in doubt: the training thread waited for a core {crowded:.0%} of the profiled window"
        if held(figures) is not None:
            return doubted + ", which moved the share"
        return doubted + ", so other work on this machine moved the share; measure again on a quieter machine"
    if margin is None or abs(busy - COMPUTE_BOUND_BUSY) >= margin:
        return ""
    return (
        f"; near the line: {busy:.0%} is within {margin:.0%} of {COMPUTE_BOUND_BUSY:.0%}, so the step may be "
        "either compute-bound (its own arithmetic sets the pace) or overhead-bound (the launches and the loop "
        "around it do)"
    )


def epoch_row(
    epoch: int,
    train_s: float,
    eval_s: float,
    samples: int | None,
    input_wait_s: float,
    host_wait_s: float,
    busy_window: dict[str, Any] | None,
    metrics: dict,
    threshold: float,
    phases: dict[str, float | None] | None = None,
    cores: dict[str, float | None] | None = None,
) -> dict[str, Any]:
    """One epoch's figures, as they appear in timing.json.

    ``samples``: None where they could not be counted. ``busy_window``: the run's profiled window,
    ``{"device": ..., "share": ..., ...}``, or with ``"share": None`` (and a ``reason`` where one is known)
    while not measured. ``phases``: the epoch's seconds of forward, backward and optimizer (None where not
    measured); the rest of train time, past the wait for data, is ``rest_s``. ``cores``: who held the cores
    (:func:`measured_figures` of ``CORES``), which the verdict reads.
    """
    row: dict[str, Any] = {
        "epoch": epoch,
        TRAIN_S: train_s,
        EVAL_S: eval_s,
        "samples": samples,
        SAMPLES_PER_S: _rate(samples, train_s),
        INPUT_WAIT_SHARE: _share(input_wait_s, train_s),
        HOST_WAIT_SHARE: _share(host_wait_s, train_s),
    }
    row.update(window_figures(busy_window))
    row.update(split(train_s, input_wait_s, phases or {}))
    row.update(cores or {})
    row["verdict"], row["verdict_reason"] = classify(row, threshold, _not_measured(busy_window))
    row.update(metrics)
    return row


def ranks_apart(
    train_s: list[float],
    input_wait_s: list[float],
    forward_s: list[float],
    comm_share: list[float] | None = None,
    comm_exposed_share: list[float] | None = None,
) -> dict[str, Any]:
    """Each rank's train time, input wait and share in collectives; where the ranks are apart, the slowest.

    Ranks are apart when their own work differs by more than ``RANKS_APART`` of train time. Under DDP every
    rank waits for the slowest in the gradients' all-reduce, so their train times agree; what a rank does alone
    tells them apart: its wait for data and its forward (NaN where not measured). The slowest is the rank with
    the most of both, held by ``data`` or by its ``step``, whichever it spent more time on than the quickest rank.
    """
    unmeasured = [math.nan] * len(train_s)
    talk = zip(comm_share or unmeasured, comm_exposed_share or unmeasured, strict=True)
    ranks = [
        {
            "rank": rank,
            TRAIN_S: train,
            INPUT_WAIT_S: wait,
            FORWARD_S: _measured(f),
            COMM_SHARE: _measured(share),
            COMM_EXPOSED_SHARE: _measured(exposed),
        }
        for rank, (train, wait, f, (share, exposed)) in enumerate(
            zip(train_s, input_wait_s, forward_s, talk, strict=True)
        )
    ]
    forward = [0.0 if math.isnan(f) else f for f in forward_s]
    alone = [wait + f for wait, f in zip(input_wait_s, forward, strict=True)]
    slowest, quickest = alone.index(max(alone)), alone.index(min(alone))
    if alone[slowest] - alone[quickest] <= RANKS_APART * max(train_s):
        return {"ranks": ranks}
    more_wait = input_wait_s[slowest] - input_wait_s[quickest]
    more_step = forward[slowest] - forward[quickest]
    held_by = "data" if more_wait >= more_step else "step"
    return {
        "ranks": ranks,
        "slowest_rank": {"rank": slowest, "held_by": held_by, "behind_s": alone[slowest] - alone[quickest]},
    }


def _measured(value: float) -> float | None:
    return None if math.isnan(value) else value


def measured_figures(merged: Measures, figures: Iterable[Figure]) -> dict[str, Any]:
    """Those figures of an epoch's gathered measures, as the ranks combined them (None where not measured)."""
    return {figure: _measured(getattr(merged, figure.name)) for figure in figures}


def step_figures(merged: Measures, local: StepStats | None) -> dict[str, Any]:
    """The epoch's step times (every rank's slowest) and where this process's spikes fell (None: not measured)."""
    found = measured_figures(merged, STEPS)
    if found[SPIKES] is not None:
        found[SPIKES] = int(found[SPIKES])
    found["worst_spikes"] = [list(spike) for spike in local.worst] if local is not None else []
    return found


def split(train_s: float, wait_s: float, phases: dict[str, float | None]) -> dict[str, float | None]:
    """Train time split: the wait for data, forward, backward, optimizer and the rest (None where not measured)."""
    parts = [phases.get(key) for key in PHASE_KEYS]
    known = [part for part in parts if part is not None]
    rest = max(train_s - wait_s - sum(known), 0.0) if len(known) == len(parts) else None
    return {INPUT_WAIT_S: wait_s, **dict(zip(PHASE_KEYS, parts, strict=True)), REST_S: rest}


def _rate(samples: int | None, seconds: float) -> float | None:
    if samples is None:
        return None
    return samples / seconds if seconds > 0 else float("nan")


def window_figures(busy_window: dict[str, Any] | None) -> dict[str, Any]:
    """What a verdict reads of the profiled window: its share, the margin it is read with, the wait for a core."""
    if busy_window is None:
        return {}
    found = {BUSY_KEYS[busy_window["device"]]: busy_window.get("share")}
    for key, name in (("margin", "busy_margin"), ("waited_for_a_core", "waited_for_a_core")):
        if busy_window.get(key) is not None:
            found[name] = busy_window[key]
    talked = busy_window.get("communication")
    if talked is not None:
        found.update({COMM_SHARE: talked["share"], COMM_EXPOSED_SHARE: talked["exposed_share"]})
    return found


def _not_measured(busy_window: dict[str, Any] | None) -> str:
    return (busy_window or {}).get("reason") or NOT_MEASURED


def _share(part: float, whole: float) -> float:
    return min(max(part / whole, 0.0), 1.0) if whole > 0 else 0.0


def _ranks_over(epochs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each rank's figures averaged over ``epochs``, and whether the ranks are apart (nothing on one process)."""
    if not all("ranks" in e for e in epochs):
        return {}
    count = len(epochs[0]["ranks"])

    def averaged(key: str) -> list[float]:  # over the epochs that measured it (a window's reading: from its epoch on)
        found = []
        for rank in range(count):
            values = [v for v in (e["ranks"][rank].get(key) for e in epochs) if v is not None]
            found.append(mean(values) if values else math.nan)
        return found

    keys = (TRAIN_S, INPUT_WAIT_S, FORWARD_S, COMM_SHARE, COMM_EXPOSED_SHARE)
    return ranks_apart(*(averaged(key) for key in keys))


def _mean_or_none(epochs: list[dict[str, Any]], key: str) -> float | None:
    """The epochs' mean, where every epoch measured it."""
    values = [e.get(key) for e in epochs]
    return mean(v for v in values if v is not None) if all(v is not None for v in values) else None


def _weighted(epochs: list[dict[str, Any]], key: str) -> float | None:
    """A share or rate averaged over epochs, weighted by their train time (where every epoch measured it)."""
    if any(e.get(key) is None for e in epochs):
        return None
    return sum(e[key] * e[TRAIN_S] for e in epochs) / max(sum(e[TRAIN_S] for e in epochs), 1e-12)


def _measured_values(epochs: list[dict[str, Any]], key: str) -> list[float]:
    values = [e.get(key) for e in epochs]
    return [float(v) for v in values if isinstance(v, (int, float)) and not math.isnan(v)]


# How a run reads a figure from its steady epochs, by the figure's rule (figures.RUN_RULES).
RUN_READERS = {
    "weighted": _weighted,
    "mean": lambda epochs, key: mean(values) if (values := _measured_values(epochs, key)) else None,
    "max": lambda epochs, key: max(_measured_values(epochs, key), default=None),
}


def run_figures(steady: list[dict[str, Any]]) -> dict[str, Any]:
    """Every registered figure a run reads from its steady epochs by a rule: top-level ones, then its split."""
    found: dict[str, Any] = {
        figure: RUN_READERS[figure.run](steady, figure) for figure in registry() if figure.run in RUN_READERS
    }
    found["split"] = {figure: _mean_or_none(steady, figure) for figure in registry() if figure.run == "split"}
    return found


def aggregate(
    epochs: list[dict[str, Any]],
    input_bound_share: float,
    busy_window: dict[str, Any] | None = None,
    hints: Hints | None = None,
    metric: str | None = None,
) -> dict[str, Any]:
    """The per-epoch rows, warm-up apart, the steady-state averages, totals, the verdict and what a fix could buy.

    ``metric``: a validation metric of the rows whose last value is reported as ``final_metric``.

    What a fix of the run's bound could buy is :func:`~mnistperf.diagnosis.record.advice.advice`'s, with ``hints``.

    ``busy_window``: where the device's busy share was profiled and what it read; the same share stands for
    every epoch, since it is a property of the step. ``split`` averages the epochs' split of train time.
    """
    steady = epochs[1:] if len(epochs) > 1 else epochs
    figures = run_figures(steady)
    figures.update(window_figures(busy_window))
    not_measured = _not_measured(busy_window)
    if not_measured == WINDOW_PENDING:
        not_measured = FIT_ENDED
    verdict, reason = classify(figures, input_bound_share, not_measured)
    if busy_window is not None and busy_window.get("in_warmup") and busy_window.get("share") is not None:
        reason += "; it rests on the warm-up epoch, the only one of this run"
    found = {
        "epochs": epochs,
        "steady_epochs": [steady[0]["epoch"], steady[-1]["epoch"]],
        "warmup": {k: epochs[0][k] for k in ("epoch", TRAIN_S, EVAL_S)} if len(epochs) > 1 else None,
        AVG_TRAIN_S: mean(e[TRAIN_S] for e in steady),
        AVG_EVAL_S: mean(e[EVAL_S] for e in steady),
        TOTAL_TRAIN_S: sum(e[TRAIN_S] for e in epochs),
        TOTAL_EVAL_S: sum(e[EVAL_S] for e in epochs),
        "stalls": stalls(epochs),
        PEAK_DEVICE_MB: peak_device_mb(epochs),
        "memory": {
            "growth": growth(steady),
            **({} if measured() else {"resident": "not measured: no /proc on this system (Linux only)"}),
        },
        **_ranks_over(steady),
        **figures,
        **({"busy_window": busy_window} if busy_window is not None else {}),
        "input_bound_share": input_bound_share,
        "verdict": verdict,
        "verdict_reason": reason,
        **({"cores_held": taken} if (taken := held(figures)) is not None else {}),
        "metric": metric,
        "final_metric": epochs[-1].get(metric) if metric else None,
    }
    found["advice"] = advice(found, hints)
    return found


def peak_rss_mb() -> dict[str, float]:
    """Peak resident memory of this process and of its largest finished child (workers), in MB."""
    scale = 1 / 1024 if sys.platform != "darwin" else 1 / 2**20  # ru_maxrss: KiB on Linux, bytes on macOS
    return {
        "main_process": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale,
        "largest_child": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * scale,
    }


def peak_device_mb(epochs: list[dict[str, Any]]) -> dict[str, float] | None:
    """The fit's peak GPU memory allocated by tensors and reserved by the allocator, in MB: its epochs' largest.

    The clock reads each epoch's peaks and resets the counters at the next epoch's start, so the epochs hold the
    only reading (None off CUDA, where no epoch has one).
    """
    allocated = [e[DEVICE_ALLOCATED_MB] for e in epochs if e.get(DEVICE_ALLOCATED_MB) is not None]
    reserved = [e[DEVICE_RESERVED_MB] for e in epochs if e.get(DEVICE_RESERVED_MB) is not None]
    if not allocated:
        return None
    return {"allocated": max(allocated), "reserved": max(reserved, default=math.nan)}


def environment(device: torch.device) -> dict[str, Any]:
    """What ran: device, CPU count, versions and the host's peak memory (the GPU's is the epochs', in the run)."""
    versions: dict[str, str | None] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "lightning": lightning.__version__,
    }
    if device.type == "cuda":
        versions["cuda"] = torch.version.cuda
    return {
        "device": describe_device(device),
        "accelerator": device.type,
        "cpu_count": os.cpu_count(),
        "cpu_affinity": usable_cpus(),
        "versions": versions,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        PEAK_RSS_MB: peak_rss_mb(),
    }


def write_summary(summary: dict[str, Any], path: Path) -> None:
    """Write ``summary`` to ``path`` as indented JSON, atomically (a value JSON cannot hold as its repr)."""
    text = json.dumps(jsonable(summary), indent=2)
    atomic_write(path, lambda tmp: tmp.write_text(text))


def throughput(samples_per_s: float | None) -> str:
    """samples/s as printed, or why there is no figure."""
    return "not measured (samples not counted)" if samples_per_s is None else f"{samples_per_s:,.0f} samples/s"


def _epochs_label(summary: dict[str, Any]) -> str:
    first, last = summary["steady_epochs"]
    return f"epoch {first}" if first == last else f"epochs {first}-{last}"


def format_split(split: dict[str, float | None] | None, epochs: str, reason: str | None = None) -> str | None:
    """The steady-state epochs' train time split in one line (None where the run has no split).

    ``reason``: why an epoch had no sampled step, where its row says so.
    """
    if not split:
        return None
    head = f"Train time per epoch ({epochs}): waiting for data {split[INPUT_WAIT_S]:.2f} s"
    if split[REST_S] is None:
        why = reason or "no sampled step reached Lightning's hooks"
        return head + f"; forward, backward and optimizer not measured ({why})"
    parts = ", ".join(f"{key.removesuffix('_s')} {split[key]:.2f} s" for key in SPLIT_KEYS[1:])
    return head + f", {parts} (the rest: hooks, logging, Python between them)"


def format_ranks(summary: dict[str, Any], epochs: str) -> str:
    """Each rank's train time, input wait and time in collectives, and the slowest rank with what held it.

    The slowest is named where the ranks are apart; where they waited long in collectives, what that wait bounds.
    """

    def talk(rank: dict[str, Any]) -> str:
        share = rank.get(COMM_SHARE)
        return f", in collectives {share:.0%}" if share is not None else ""

    each = "; ".join(
        f"rank {r['rank']} train {r[TRAIN_S]:.2f} s, waiting for data {r[INPUT_WAIT_S]:.2f} s{talk(r)}"
        for r in summary["ranks"]
    )
    slowest = summary.get("slowest_rank")
    verdict = (
        f"slowest: rank {slowest['rank']}, held by {'the data' if slowest['held_by'] == 'data' else 'its step'} "
        f"({slowest['behind_s']:.2f} s behind)"
        if slowest
        else f"within {RANKS_APART:.0%} of each other"
    )
    return f"Ranks ({epochs}, per epoch): {each}; {verdict}{format_communication(summary)}"


def format_communication(summary: dict[str, Any]) -> str:
    """The profiled window's collectives: their share, that with no work beside them, and what removing it could buy."""
    talked = (summary.get("busy_window") or {}).get("communication")
    if talked is None:
        return ""
    exposed = talked["exposed_share"]
    line = (
        f"; {talked['backend']} collectives {talked['share']:.0%} of the profiled window, "
        f"{exposed:.0%} with no work beside them"
    )
    if not COMM_EXPOSED <= exposed < 1:
        return line
    return line + (
        f" (a step up to {1 / (1 - exposed):.1f}x faster without that wait: fewer all-reduces with a larger batch "
        "per rank or accumulate_grad_batches, smaller ones with DDPStrategy(ddp_comm_hook=...), or the slowest "
        "rank's own work evened out)"
    )


def format_window(window: dict[str, Any]) -> str:
    """The busy window's line: its share, where it was profiled and its trace, or why there is none."""
    on_cuda = window["device"] == "cuda"
    label = "GPU busy" if on_cuda else "CPU inside tensor operations"
    if window.get("share") is None:
        reason = window.get("reason") or NOT_MEASURED
        return f"{label}: not measured ({FIT_ENDED if reason == WINDOW_PENDING else reason}); no trace written"
    trace = f"; trace {window['trace']}" if window.get("trace") else "; no trace written"
    if window.get("trace_skipped"):
        trace += f": {window['trace_skipped']}"
    where = "the warm-up epoch, the run's only" if window.get("in_warmup") else "a steady epoch, kept out of its timing"
    waited = window.get("waited_for_a_core")
    crowd = f", the training thread waiting for a core {waited:.0%} of it" if waited is not None else ""
    return (
        f"{label}: {window['share']:.0%} of the time (read within {window.get('margin', 0):.0%}) over training "
        f"steps {window['first_step']}-{window['last_step']} of epoch {window['epoch']} ({window['kernels']:,} "
        f"{'kernels' if on_cuda else 'operators'}, profiled in {where}{crowd}{trace})"
    )


def format_summary(summary: dict[str, Any]) -> str:
    """Train and validation time, averaged over the steady epochs and in total, then throughput, device and verdict."""
    steady = _epochs_label(summary)
    warmup = summary.get("warmup")
    first = f"; epoch {warmup['epoch']} (warm-up): {warmup[TRAIN_S]:.2f} s" if warmup else ""
    first_eval = f"; epoch {warmup['epoch']}: {warmup[EVAL_S]:.2f} s" if warmup else ""
    lines = [
        f"Average Train Time per Epoch: {summary[AVG_TRAIN_S]:.2f} s ({steady}{first})",
        f"Average Validation Time per Epoch: {summary[AVG_EVAL_S]:.2f} s ({steady}{first_eval})",
        f"Total Train Time: {summary[TOTAL_TRAIN_S]:.2f} s",
        f"Total Validation Time: {summary[TOTAL_EVAL_S]:.2f} s",
        f"Train throughput: {throughput(summary[SAMPLES_PER_S])} ({steady})",
        f"Device: {summary.get('device', 'not known')}, precision {summary.get('precision', '32-true')}",
        f"Verdict: {summary['verdict']} ({summary['verdict_reason']})",
    ]
    reasons = [e["split_reason"] for e in summary.get("epochs", []) if e.get("split_reason")]
    split_line = format_split(summary.get("split"), steady, reasons[-1] if reasons else None)
    if split_line:
        lines.append(split_line)
    stalled = format_stalls(summary["stalls"], summary.get(STEP_MEDIAN_S)) if summary.get("stalls") else None
    if stalled:
        lines.append(stalled)
    used = format_utilization(summary)
    if used:
        lines.append(used)
    grown = format_growth(summary["memory"]["growth"]) if summary.get("memory") else None
    if grown:
        lines.append(grown)
    if summary.get("ranks"):
        lines.append(format_ranks(summary, steady))
    window = summary.get("busy_window")
    if window:
        lines.append(format_window(window))
    if summary.get("advice"):
        lines.append(format_advice(summary["advice"]))
    if summary.get("final_metric") is not None:
        lines.append(f"Final {summary['metric']}: {summary['final_metric']:.4f}")
    return "\n".join(lines)
