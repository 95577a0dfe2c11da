"""What EpochTimer costs a Lightning project that is not the lab's: the same epochs with and without it.

The module and data are examples/diagnose_your_run.py's (an MLP, ``(x, y)`` tuple batches from a plain
DataLoader, a ``self.log`` every step). Each run is a fresh Trainer in this process, runs alternate
(without, with, without, with, ...), and an outside clock callback, the same in both, times every training
epoch; epoch 1 is warm-up and left out. Runs on this machine differ by more than the timer costs, so the
"with" runs also add up the host time spent inside the timer itself (its hooks and its wrapper around the
trainer's profiler), per steady-state epoch: the cost measured directly. Prints each run's median
steady-state epoch, the ratio of the two medians, the median of the pair-by-pair ratios and the timer's own
share, and writes them to results.json beside this file.

    python docs/results/cpu-2core-diagnosis-cost/measure.py [PAIRS] [EPOCHS]
"""

from __future__ import annotations

import importlib.util
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import lightning
import torch
from lightning.pytorch import Callback, Trainer, seed_everything
from torch.utils.data import DataLoader

from mnistperf.timing import EpochTimer
from mnistperf.timing.fetch_clock import FetchClock

HERE = Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location("example", HERE.parents[2] / "examples" / "diagnose_your_run.py")
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)

PAIRS = int(sys.argv[1]) if len(sys.argv) > 1 else 7
EPOCHS = int(sys.argv[2]) if len(sys.argv) > 2 else 4
SAMPLES, BATCH = 16384, 64


class Clock(Callback):
    """Host seconds of every training epoch."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    def on_train_epoch_start(self, trainer, module) -> None:
        """Note the epoch's start."""
        self.started = time.perf_counter()

    def on_train_epoch_end(self, trainer, module) -> None:
        """Keep the epoch's seconds."""
        self.seconds.append(time.perf_counter() - self.started)


class Inside:
    """Host seconds spent inside the wrapped methods, per training epoch."""

    def __init__(self) -> None:
        self.seconds: list[float] = [0.0]

    def wrap(self, owner: object, name: str) -> None:
        """Replace ``owner.name`` with the same method, its host time added to this epoch's tally."""
        method = getattr(owner, name)

        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.seconds[-1] += time.perf_counter() - started

        setattr(owner, name, timed)


INSIDE = Inside()
TIMER_HOOKS = (
    "on_train_epoch_start",
    "on_train_batch_start",
    "on_train_batch_end",
    "on_train_epoch_end",
    "on_validation_start",
    "on_validation_end",
)


class EpochMark(Callback):
    """Starts a new tally of the timer's own seconds with each training epoch (runs before the timer's hooks)."""

    def on_train_epoch_start(self, trainer, module) -> None:
        """Open this epoch's tally."""
        INSIDE.seconds.append(0.0)


def steady_epoch(with_timer: bool, root: Path) -> tuple[float, float | None]:
    """Median training seconds of epochs 2..EPOCHS of one fresh run, and of the seconds inside the timer."""
    seed_everything(0, verbose=False)
    clock = Clock()
    INSIDE.seconds = [0.0]  # before the first epoch: setup, sanity check
    timers = []
    if with_timer:
        timer = EpochTimer()
        for hook in TIMER_HOOKS:
            INSIDE.wrap(timer, hook)
        timers = [EpochMark(), timer]
    loader = DataLoader(example.Points(SAMPLES), batch_size=BATCH, shuffle=True)
    trainer = Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=EPOCHS,
        default_root_dir=root,
        callbacks=[clock, *timers],
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        log_every_n_steps=10,
    )
    trainer.fit(example.Classifier(), loader)
    inside = statistics.median(INSIDE.seconds[2:]) if with_timer else None  # epochs 2..EPOCHS
    return statistics.median(clock.seconds[1:]), inside


def main() -> None:
    """Run the pairs, print and write the medians and ratios."""
    runs: dict[str, list[float]] = {"without": [], "with": []}
    inside: list[float] = []
    for name in ("start", "stop"):  # the profiler wrapper's share of every hook Lightning reports to a profiler
        INSIDE.wrap(FetchClock, name)
    with tempfile.TemporaryDirectory() as scratch:
        for pair in range(PAIRS):
            for name in ("without", "with"):
                epoch_s, inside_s = steady_epoch(name == "with", Path(scratch) / f"{name}{pair}")
                runs[name].append(epoch_s)
                if inside_s is not None:
                    inside.append(inside_s / epoch_s)
                print(f"pair {pair + 1}: {name} EpochTimer {epoch_s * 1000:.1f} ms per epoch", flush=True)
    pair_ratios = [w / wo for w, wo in zip(runs["with"], runs["without"], strict=True)]
    result = {
        "what": "steady-state training epoch of examples/diagnose_your_run.py's module, with and without EpochTimer",
        "samples_per_epoch": SAMPLES,
        "batch_size": BATCH,
        "steps_per_epoch": SAMPLES // BATCH,
        "epochs_per_run": EPOCHS,
        "pairs": PAIRS,
        "epoch_s": runs,
        "median_epoch_s": {name: statistics.median(values) for name, values in runs.items()},
        "ratio_of_medians": statistics.median(runs["with"]) / statistics.median(runs["without"]),
        "median_pair_ratio": statistics.median(pair_ratios),
        "pair_ratios": pair_ratios,
        "timer_share_of_epoch": inside,
        "median_timer_share_of_epoch": statistics.median(inside),
        "environment": {
            "machine": platform.machine(),
            "cpus": torch.get_num_threads(),
            "torch": torch.__version__,
            "lightning": lightning.__version__,
            "python": platform.python_version(),
        },
    }
    (HERE / "results.json").write_text(json.dumps(result, indent=1) + "\n")
    print(
        f"with/without EpochTimer: ratio of medians {result['ratio_of_medians']:.3f}x, "
        f"median pair ratio {result['median_pair_ratio']:.3f}x over {PAIRS} alternating pairs; "
        f"host time inside the timer {result['median_timer_share_of_epoch']:.2%} of an epoch (median)"
    )


if __name__ == "__main__":
    main()
