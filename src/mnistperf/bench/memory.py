"""Peak memory of a run's whole process tree (main process and DataLoader workers), sampled from outside.

A worker forked from the main process shares most of its pages, so adding up RSS counts them
several times; PSS (proportional set size) charges each shared page to its sharers in
proportion, so the sum over the tree is the memory the run really holds. Both are reported.
Linux only (it reads /proc); elsewhere the figures are None.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

from mnistperf.diagnosis.measure.memory import rss_pss_mb

PROC = Path("/proc")


def _children(pid: int) -> list[int]:
    kids = []
    for task in (PROC / str(pid) / "task").glob("*/children"):
        with contextlib.suppress(OSError):
            kids += [int(p) for p in task.read_text().split()]
    return kids


def _tree(pid: int) -> list[int]:
    pids, todo = [], [pid]
    while todo:
        current = todo.pop()
        pids.append(current)
        todo += _children(current)
    return pids


class TreeMemorySampler:
    """Samples a process tree every ``interval`` seconds in a thread; keeps the peaks in MB."""

    def __init__(self, pid: int, interval: float = 0.25):
        self.pid, self.interval = pid, interval
        self.peak_rss_mb: float | None = None
        self.peak_pss_mb: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TreeMemorySampler:
        if (PROC / "self" / "smaps_rollup").exists():
            self.peak_rss_mb = self.peak_pss_mb = 0.0
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        if self.peak_rss_mb is not None:  # the tree as the block ends (a process that has ended reads nothing)
            self._sample()

    def _run(self) -> None:
        self._sample()  # at once, so that a run shorter than the interval is sampled too
        while not self._stop.wait(self.interval):
            self._sample()

    def _sample(self) -> None:
        assert self.peak_rss_mb is not None and self.peak_pss_mb is not None  # set before the thread starts
        sizes = [rss_pss_mb(p) for p in _tree(self.pid)]
        self.peak_rss_mb = max(self.peak_rss_mb, sum(r or 0.0 for r, _ in sizes))
        self.peak_pss_mb = max(self.peak_pss_mb, sum(p or 0.0 for _, p in sizes))
