"""Memory per epoch, from Linux's ``/proc`` and CUDA's allocator, and its growth (docs/timing.md, Memory per epoch)."""

from __future__ import annotations

import contextlib
import errno
import functools
import math
import os
import threading
from pathlib import Path
from typing import Any

import torch

from mnistperf.diagnosis.figures import MEMORY
from mnistperf.diagnosis.measure.phases import sampled
from mnistperf.diagnosis.measure.step_parts import parts_timed
from mnistperf.diagnosis.measure.trend import trend

PROC = Path("/proc")
_KEPT: dict[tuple[str, int, int, str], int] = {}  # the descriptors own_proc_text reads, by process, thread and file
_KEPT_LOCK = threading.Lock()
KEPT_MOST = 32  # descriptors kept at most: an ended thread's stays kept until then
LINE_BYTES = 4096  # more than a one-line /proc file holds
MB = 2**20
GROWTH_MB = 4.0  # an epoch on average, rising every steady epoch: memory that grows


def measured() -> bool:
    """Whether this system shows processes' resident memory in ``/proc`` (Linux), looked for once."""
    return _shows_memory(str(PROC))


@functools.cache
def _shows_memory(proc: str) -> bool:
    return os.path.exists(f"{proc}/self/status")


def proc_text(pid: int | str, file: str) -> str:
    """``/proc/<pid>/<file>``'s text, read through a bare file descriptor (read every epoch).

    A Python file object costs more than the read itself: 16 against 6 us for ``statm`` on the lab's CPU, apart from any
    fit.
    """
    descriptor = os.open(f"{PROC}/{pid}/{file}", os.O_RDONLY)
    try:
        chunks = []
        while chunk := os.read(descriptor, 1 << 16):
            chunks.append(chunk)
    finally:
        os.close(descriptor)
    return b"".join(chunks).decode()


def own_proc_text(file: str, thread: bool = False) -> str:
    """This process's one-line ``/proc`` ``file`` now (``thread``: the calling thread's), from a descriptor kept open.

    One system call a reading where :func:`proc_text` makes four: inside a fit on the lab's CPU, where each call into
    the kernel comes cold, 28-36 us a reading against 60-110. A thread's descriptor fails once the thread ended: it is
    closed, and the file opened again (a thread of the same id reads its own).
    """
    key = (str(PROC), os.getpid(), threading.get_native_id() if thread else 0, file)  # a forked child opens its own
    with _KEPT_LOCK:
        descriptor = _KEPT.get(key)
        if descriptor is not None:
            try:
                return os.pread(descriptor, LINE_BYTES, 0).decode()
            except OSError as error:
                del _KEPT[key]
                if error.errno != errno.EBADF:  # closed by someone else: its number may be another file's by now
                    os.close(descriptor)
        if len(_KEPT) >= KEPT_MOST:  # threads come and go: their descriptors are not kept for ever
            for kept in _KEPT.values():
                with contextlib.suppress(OSError):
                    os.close(kept)
            _KEPT.clear()
        descriptor = os.open(f"{PROC}/{'thread-self' if thread else 'self'}/{file}", os.O_RDONLY | os.O_CLOEXEC)
        _KEPT[key] = descriptor
        return os.pread(descriptor, LINE_BYTES, 0).decode()


def rss_mb() -> float | None:
    """This process's resident memory in MB: ``statm``'s resident pages (``status``'s VmRSS, in one short line)."""
    try:
        return int(own_proc_text("statm").split()[1]) * os.sysconf("SC_PAGE_SIZE") / MB
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def rss_pss_mb(pid: int) -> list[float | None]:
    """Process ``pid``'s resident and proportional set sizes in MB, from ``smaps_rollup`` (None where absent)."""
    try:
        lines = proc_text(pid, "smaps_rollup").splitlines()
        found = {line[:3]: int(line.split()[1]) * 1024 / MB for line in lines if line.startswith(("Rss:", "Pss:"))}
    except (OSError, ValueError, IndexError):  # gone, or no /proc
        return [None, None]
    return [found.get("Rss"), found.get("Pss")]


def _local_rank(pid: int | str) -> str | None:
    try:
        environ = (PROC / str(pid) / "environ").read_bytes().split(b"\0")
    except OSError:
        return None
    return next((entry.split(b"=", 1)[1].decode() for entry in environ if entry.startswith(b"LOCAL_RANK=")), None)


@functools.cache
def _own_start_rank() -> str | None:
    return _local_rank("self")  # the environment this process started with does not change: read once


def workers() -> list[int]:
    """This process's children now (its loader's workers), but those started with another ``LOCAL_RANK`` (a rank).

    Only the main thread's are read (a DataLoader starts its workers from the thread that iterates it, the training
    loop's): reading every thread's list costs a file per thread, and a training process runs dozens of threads.
    """
    pid = os.getpid()
    try:
        found = [int(child) for child in proc_text(pid, f"task/{pid}/children").split()]
    except (OSError, ValueError):
        return []
    own = {os.environ.get("LOCAL_RANK"), _own_start_rank()}
    return [child for child in found if (rank := _local_rank(child)) is None or rank in own]


def workers_pss_mb() -> float | None:
    """The PSS of this process's loader workers now, summed, in MB; None off Linux."""
    return sum(rss_pss_mb(child)[1] or 0.0 for child in workers()) if measured() else None


def reset_device_peaks(device: torch.device) -> None:
    """Start the device's peak memory counters from now (CUDA; nothing elsewhere)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def device_peaks_mb(device: torch.device) -> tuple[float, float]:
    """Peak memory allocated by tensors and reserved by the caching allocator since the reset, in MB (NaN off CUDA)."""
    if device.type != "cuda":
        return math.nan, math.nan
    return torch.cuda.max_memory_allocated(device) / MB, torch.cuda.max_memory_reserved(device) / MB


class EpochMemory:
    """An epoch's resident memory, read at step :attr:`mid_step` (while its loader's workers run) and at its end.

    The workers' PSS is read once, at the first reading, by a thread of its own: the kernel walks each worker's pages
    to sum it, tens of milliseconds a worker, which the training thread does not wait for.
    ``loader_workers``: whether the fit's loaders may run workers (False: none is looked for); ``epoch``: its number,
    from 0.
    """

    def __init__(self, batches: float, loader_workers: bool, epoch: int = 0):
        middle = max(1, int(batches // 2)) if math.isfinite(batches) else 2
        # not a step timed by its parts or its phases: the reading's thread would slow it
        while parts_timed(middle - 1, epoch) or sampled(middle - 1, 1, epoch):
            middle += 1
        self.mid_step = middle
        self._loader_workers = loader_workers
        self._own: list[float | None] = []  # MB resident, this process's, a reading each
        self._workers: list[float | None] = []  # MB, the workers' PSS, once read
        self._reader: threading.Thread | None = None

    def read(self) -> None:
        """This process's resident memory now; at the first reading, its loader's workers' PSS too (if any)."""
        self._own.append(rss_mb())
        if self._reader is not None or self._workers:
            return
        if not self._loader_workers:
            self._workers.append(0.0 if measured() else None)
            return
        self._reader = threading.Thread(target=self._read_workers, name="mnistperf workers' memory", daemon=True)
        self._reader.start()

    def _read_workers(self) -> None:
        try:
            self._workers.append(workers_pss_mb())
        except Exception:  # a diagnostic's thread: whatever fails, the epoch has no reading of it
            self._workers.append(None)

    def settle(self) -> None:
        """Wait for the workers' reading to finish (as training pauses: no worker starts or ends meanwhile)."""
        if self._reader is not None:
            self._reader.join()

    def largest(self) -> tuple[float, float]:
        """Each figure's largest reading, this process's and its workers', in MB (NaN: none readable)."""
        self.settle()
        own, workers = (
            max((mb for mb in read if mb is not None), default=math.nan) for read in (self._own, self._workers)
        )
        return own, workers


def growth(epochs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each memory figure that grows: ``[{"figure"}]`` with :func:`~.trend.trend`'s reading in MB."""
    read = {key: trend(epochs, key, "mb") for key in MEMORY}  # the row's figures growth is read on
    return [{"figure": key, **grown} for key, grown in read.items() if grown and grown["per_epoch_mb"] >= GROWTH_MB]
