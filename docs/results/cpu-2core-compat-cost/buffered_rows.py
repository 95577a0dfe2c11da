"""Holding each step's rows as read, against copying them into a buffer kept for the fit: which costs the fit less.

SampleAudit holds each step's sample rows as the loader collated them until it hashes them, which leaves the loader
fresh memory to fill each step (``held`` in measure.py). This asks whether copying the rows into one buffer, made at
the first step and reused (so the batch's own memory goes back to the allocator at once), costs the small MLP's fit
less. Four arms alternate in one process, their order drawn anew each round: no callback; ``held`` (idle_callbacks'
LeastAudit: read the step, hold its rows until 4,096 are held); ``buffered`` (read the step, copy its rows into the
buffer); ``cloned`` (read the step, hold a copy of its rows, as the audit did before it kept them as read).

    .venv/bin/python docs/results/cpu-2core-compat-cost/buffered_rows.py [ROUNDS]

Prints each arm's median fit and its median ratio to the plain fit of the same round, and writes buffered-rows.json
beside this file; run it with nothing else running.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 40
HERE = Path(__file__).resolve().parent
sys.argv = [sys.argv[0], "small", "1", "3", "least-audit"]  # measure.py's small fit of 3 epochs
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import measure  # noqa: E402
from bootstrap import median_interval  # noqa: E402
from idle_callbacks import Floor, LeastAudit  # noqa: E402

from mnistperf.diagnosis.measure.batches import READINGS  # noqa: E402
from mnistperf.diagnosis.measure.held_steps import HASH_SAMPLES  # noqa: E402


class BufferedRows(Floor):
    """Reads each step and copies its rows into one buffer of HASH_SAMPLES rows, made once, refilled from its start."""

    def __init__(self) -> None:
        super().__init__()
        self.buffers: list[torch.Tensor] = []
        self.filled = 0

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, index: int) -> None:
        """The step's rows copied into the buffer."""
        reading = READINGS.read(batch)
        samples = reading.samples or 0
        if not self.buffers:
            self.buffers = [torch.empty((HASH_SAMPLES, *t.shape[1:]), dtype=t.dtype) for t in reading.rows]
        if self.filled + samples > HASH_SAMPLES:
            self.filled = 0
        for buffer, rows in zip(self.buffers, reading.rows, strict=True):
            buffer[self.filled : self.filled + samples].copy_(rows)
        self.filled += samples


class ClonedRows(Floor):
    """Reads each step and holds a copy of its rows, let go once HASH_SAMPLES are held."""

    def __init__(self) -> None:
        super().__init__()
        self.held: list[list[torch.Tensor]] = []
        self.samples = 0

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, index: int) -> None:
        """A copy of the step's rows held."""
        reading = READINGS.read(batch)
        self.held.append([rows.clone() for rows in reading.rows])
        self.samples += reading.samples or 0
        if self.samples >= HASH_SAMPLES:
            self.held, self.samples = [], 0


ARMS: dict[str, Callable[[], list[Any]]] = {
    "none": list,
    "held": lambda: [LeastAudit()],
    "buffered": lambda: [BufferedRows()],
    "cloned": lambda: [ClonedRows()],
}


def fit_seconds(root: Path, arm: str) -> float:
    """Wall seconds of one small-MLP fit with the arm's callback, its output discarded."""
    module, loader, _ = measure.small_mlp(False, 30)
    with contextlib.redirect_stdout(io.StringIO()):
        start = time.perf_counter()
        measure.cpu_fit(root, ARMS[arm](), module, loader, logger=False)
        return time.perf_counter() - start


def main() -> None:
    """Warm each arm up once, run the rounds, print and write the figures."""
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    seconds: dict[str, list[float]] = {arm: [] for arm in ARMS}
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as scratch:
        for arm in ARMS:
            fit_seconds(Path(scratch) / f"warm-up-{arm}", arm)
        for round_ in range(ROUNDS):
            order = list(ARMS)
            random.Random(round_).shuffle(order)
            for arm in order:
                seconds[arm].append(fit_seconds(Path(scratch) / f"{round_}-{arm}", arm))
            load.append(os.getloadavg()[0])
    plain = statistics.median(seconds["none"])
    arms = {}
    for arm, values in seconds.items():
        ratios = [fit / alone for fit, alone in zip(values, seconds["none"], strict=True)]
        arms[arm] = {
            "median_fit_s": statistics.median(values),
            "added_ms": (statistics.median(values) - plain) * 1e3,
            "median_pair_ratio": statistics.median(ratios),
            "median_pair_ratio_95": median_interval(ratios),
        }
        low, high = arms[arm]["median_pair_ratio_95"]
        print(
            f"{arm:9s} median fit {arms[arm]['median_fit_s'] * 1e3:6.1f} ms, added {arms[arm]['added_ms']:+5.2f} ms, "
            f"median pair ratio {arms[arm]['median_pair_ratio']:.3f}x (95 % {low:.3f}-{high:.3f}x)"
        )
    print(f"one-minute load {min(load):.2f}-{max(load):.2f}")
    result = {
        "what": "the small MLP's 3-epoch fit with a callback holding each step's rows, copying them into a kept "
        "buffer, or holding copies; arms alternating in one process",
        "rounds": ROUNDS,
        "load_average_1min": load,
        "fit_s": seconds,
        "arms": arms,
        "environment": {
            "machine": platform.machine(),
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "python": platform.python_version(),
        },
    }
    (HERE / "buffered-rows.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
