"""Who held the cores over an epoch, from Linux's ``/proc`` (docs/timing.md)."""

from __future__ import annotations

import math
import os
from typing import Any

from mnistperf.diagnosis.figures import CORE_WAIT_SHARE, WORKERS_CPU_SHARE, share
from mnistperf.diagnosis.measure.busy_window import CROWDED, thread_wait_s
from mnistperf.diagnosis.measure.memory import measured, proc_text, workers
from mnistperf.machine import usable_cpus

# Workers are read at the first step this long after the last read: a worker gone since loses that much CPU at most.
READ_EVERY_S = 1.0
# Workers using this share of the usable cores' time held cores the step needed: beside its thread per core they take
# their number's share, so a quarter keeps a third of each core busy all epoch (docs/timing.md, "The verdict").
WORKERS_HOLD = 0.25


def cpu_s(pid: int) -> float | None:
    """Process ``pid``'s user and system CPU time so far, in seconds; None where it cannot be read (gone, no /proc)."""
    try:
        text = proc_text(pid, "stat")
        after_name = text[text.rindex(")") + 2 :].split()  # the name, in parentheses, may hold spaces
        return (int(after_name[11]) + int(after_name[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def reaped_cpu_s() -> float:
    """The CPU time of this process's children that ended and were waited for (workers joined), in seconds, so far."""
    times = os.times()
    return times.children_user + times.children_system


class EpochCores:
    """One epoch's readings, each method called from the thread that runs the training steps (whose schedule it is)."""

    def __init__(self, workers: bool = True) -> None:
        self.workers = workers  # whether the loaders may have workers to read (False: none, none read)
        self.started: float | None = None  # the epoch's start, on the caller's clock
        self.waited = 0.0  # seconds the training thread waited for a core in train time so far (NaN: a read failed)
        self._from: float | None = None  # the thread's wait where train time last started
        self.first: dict[int, float] = {}  # each worker's CPU seconds at the epoch's start (absent: started since)
        self.last: dict[int, float] = {}  # each worker's CPU seconds at its last read (a worker gone keeps it)
        self.alive: set[int] = set()  # the workers found at the last read
        self.reaped = 0.0  # the ended children's CPU seconds at the epoch's start
        self.due = math.inf  # the clock time of the next read of the workers

    def start(self, now: float) -> None:
        """The epoch starts at ``now``: its workers' CPU so far and the thread's wait for a core are read."""
        self.started, self.reaped = now, reaped_cpu_s()
        self.read_workers(now)
        self.first = dict(self.last)
        self.train_resumed()

    def train_resumed(self) -> None:
        """Train time starts (the epoch's start, or after an evaluation inside it)."""
        self._from = thread_wait_s()

    def train_paused(self) -> None:
        """Train time stops (the last step, or an evaluation begins): the wait since it started is added."""
        now, before, self._from = thread_wait_s(), self._from, None
        self.waited += math.nan if now is None or before is None else max(now - before, 0.0)

    def read_workers(self, now: float) -> None:
        """Read the workers' CPU time now; the next read is due :data:`READ_EVERY_S` later."""
        if not self.workers:  # no loader runs workers: none to read, now or later
            return
        self.due = now + READ_EVERY_S
        found = {pid: used for pid in workers() if (used := cpu_s(pid)) is not None}
        self.last.update(found)
        self.alive = set(found)

    def shares(self, train_s: float, now: float) -> tuple[float, float]:
        """(``core_wait_share``, ``workers_cpu_share``) since the start, read once more; NaN where not measured."""
        wait = math.nan if math.isnan(self.waited) or train_s <= 0 else share(self.waited, train_s)
        if self.started is None or not measured() or not now > self.started:
            return wait, math.nan
        self.read_workers(now)
        used = {pid: cpu - self.first.get(pid, 0.0) for pid, cpu in self.last.items()}
        gone = [pid for pid in used if pid not in self.alive]
        # a worker gone was joined: its CPU is among the ended children's, whether or not a read caught it alive (an
        # epoch shorter than READ_EVERY_S on a loader of no known length: none did)
        ended = reaped_cpu_s() - self.reaped - sum(self.first.get(pid, 0.0) for pid in gone) if self.workers else 0.0
        total = sum(used[pid] for pid in self.alive) + max(sum(used[pid] for pid in gone), ended)
        return wait, share(total, (now - self.started) * usable_cpus())


def cores_held_by(figures: dict[str, Any]) -> dict[str, Any] | None:
    """Who held the cores (``by`` its workers, its ranks or other work) where the training thread waited for one.

    Its workers where they used WORKERS_HOLD of the cores' time, or as large a share of it as the thread waited; under
    DDP (``ranks``: each rank's figures) its ranks, each with torch's threads, beside other work maybe. None where the
    thread did not wait.
    """
    wait, used = figures.get(CORE_WAIT_SHARE), figures.get(WORKERS_CPU_SHARE)
    if wait is None or math.isnan(wait) or wait < CROWDED:
        return None
    found: dict[str, Any] = {CORE_WAIT_SHARE: wait, WORKERS_CPU_SHARE: used}
    if used is not None and not math.isnan(used) and used >= min(WORKERS_HOLD, wait):  # or all the wait could be theirs
        return {"by": "workers", **found, "speed_up_at_most": 1 / (1 - wait) if wait < 1 else math.inf}
    ranks = len(figures.get("ranks") or ())
    return {"by": "its ranks", **found, "ranks": ranks} if ranks > 1 else {"by": "other work", **found}
