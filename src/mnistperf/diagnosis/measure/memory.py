"""Memory per epoch: the training process's and its DataLoader workers' resident memory, the GPU's peaks, and growth.

Resident memory is read from Linux's ``/proc``: this process's ``VmRSS``, and of its child processes while they
run (a loader's workers; under DDP another rank this process launched is told apart by its ``LOCAL_RANK`` and left
out) their PSS, the proportional set size: a worker forked from the training process shares most of its pages with
it, and PSS charges each shared page to its sharers in proportion, so the workers' sum counts no page the
training process already holds (their RSS would count those again, once per worker). Off Linux it is not
measured. On CUDA the epoch's peaks of memory allocated by tensors and reserved by the caching allocator are read
at its end, the peak counters reset at its start.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import torch

from mnistperf.diagnosis.figures import DEVICE_ALLOCATED_MB, DEVICE_RESERVED_MB, RSS_MB, WORKERS_PSS_MB
from mnistperf.diagnosis.measure.trend import slope

PROC = Path("/proc")
MB = 2**20
# Memory that rises every steady epoch by at least this much a epoch on average grows.
GROWTH_MB = 4.0
# The fewest steady epochs growth is read over.
GROWTH_EPOCHS = 3
# The row's memory figures that growth is read on, and what each is called in the summary's line.
GROWING = {
    RSS_MB: "the training process",
    WORKERS_PSS_MB: "its DataLoader workers",
    DEVICE_ALLOCATED_MB: "GPU memory allocated",
    DEVICE_RESERVED_MB: "GPU memory reserved",
}


def measured() -> bool:
    """Whether this system shows processes' resident memory in ``/proc`` (Linux)."""
    return (PROC / "self" / "status").exists()


def rss_mb(pid: int | str = "self") -> float | None:
    """Process ``pid``'s resident memory in MB (None where it cannot be read: gone, or no ``/proc``)."""
    try:
        for line in (PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024 / MB
    except (OSError, ValueError, IndexError):
        return None
    return None


def children(pid: int | None = None) -> list[int]:
    """The child processes of process ``pid`` (this one by default) started by its main thread, from ``/proc``.

    Empty where none or not readable. Only the main thread's are read (a DataLoader starts its workers from the
    thread that iterates it, the training loop's): reading every thread's list costs a file per thread, and a
    training process runs dozens of threads.
    """
    pid = os.getpid() if pid is None else pid
    try:
        return [int(child) for child in (PROC / str(pid) / "task" / str(pid) / "children").read_text().split()]
    except (OSError, ValueError):
        return []


def local_rank(pid: int | str) -> str | None:
    """The ``LOCAL_RANK`` process ``pid`` started with (None where it had none or it cannot be read)."""
    try:
        for entry in (PROC / str(pid) / "environ").read_bytes().split(b"\0"):
            if entry.startswith(b"LOCAL_RANK="):
                return entry.split(b"=", 1)[1].decode()
    except OSError:
        return None
    return None


def rss_pss_mb(pid: int | str = "self") -> tuple[float | None, float | None]:
    """Process ``pid``'s resident and proportional set sizes in MB, from ``smaps_rollup`` (None where unreadable)."""
    found: dict[str, float] = {}
    try:
        for line in (PROC / str(pid) / "smaps_rollup").read_text().splitlines():
            key = line.split(":", 1)[0]
            if key in ("Rss", "Pss"):
                found[key] = int(line.split()[1]) * 1024 / MB
    except (OSError, ValueError, IndexError):
        return None, None
    return found.get("Rss"), found.get("Pss")


def workers() -> list[int]:
    """This process's child processes now (its loader's workers), from ``/proc``; empty off Linux.

    A child started as another rank (a ``LOCAL_RANK`` neither this process's nor the one it started with) is
    left out.
    """
    own = {os.environ.get("LOCAL_RANK"), local_rank("self")}
    ranks = {child: local_rank(child) for child in children()}
    return [child for child, rank in ranks.items() if rank is None or rank in own]


def workers_pss_mb() -> float | None:
    """The PSS of this process's loader workers now (:func:`workers`), summed, in MB; None off Linux."""
    if not measured():
        return None
    return sum(rss_pss_mb(child)[1] or 0.0 for child in workers())


def reset_device_peaks(device: torch.device) -> None:
    """Start the device's peak memory counters from now (CUDA; nothing elsewhere)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def device_peaks_mb(device: torch.device) -> tuple[float, float]:
    """Peak memory allocated by tensors and reserved by the caching allocator since the reset, in MB (NaN off CUDA)."""
    if device.type != "cuda":
        return math.nan, math.nan
    return torch.cuda.max_memory_allocated(device) / MB, torch.cuda.max_memory_reserved(device) / MB


def growth(epochs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each memory figure that rose every steady epoch by at least ``GROWTH_MB`` a epoch on average.

    Returns ``[{"figure", "what", "per_epoch_mb", "from_mb", "to_mb", "epochs": [first, last]}]``.
    """
    found = []
    for key, what in GROWING.items():
        points: list[tuple[int, float]] = [
            (e["epoch"], e[key]) for e in epochs if e.get(key) is not None and not math.isnan(e[key])
        ]
        if len(points) < GROWTH_EPOCHS:
            continue
        values = [v for _, v in points]
        if not all(b > a for a, b in zip(values, values[1:], strict=False)):
            continue
        per_epoch = slope(points)
        if per_epoch >= GROWTH_MB:
            found.append(
                {
                    "figure": key,
                    "what": what,
                    "per_epoch_mb": per_epoch,
                    "from_mb": values[0],
                    "to_mb": values[-1],
                    "epochs": [points[0][0], points[-1][0]],
                }
            )
    return found


def format_growth(grown: list[dict[str, Any]]) -> str | None:
    """The memory line where memory grows epoch after epoch; None where none does."""
    if not grown:
        return None
    parts = [
        f"{g['what']} +{g['per_epoch_mb']:,.0f} MB per epoch ({g['from_mb']:,.0f} MB to {g['to_mb']:,.0f} MB, "
        f"epochs {g['epochs'][0]}-{g['epochs'][1]})"
        for g in grown
    ]
    return "Memory grows: " + "; ".join(parts)
