"""What EpochTimer and SampleAudit together cost a published library's fit: its fits with and without them.

The fits are the compatibility tier's (tests/compat): pytorch-forecasting's N-BEATS as its tutorial trains it, or
chemprop's MPNN as its training notebook trains it, on the tier's small data, each built afresh (data, loaders,
model, trainer) for every fit. A pair is one fit with both callbacks and one without; the order within a pair
alternates from pair to pair, so drift of the machine falls on both arms. The whole ``trainer.fit`` is timed,
so the callbacks' work at the ends of the fit (the summary, timing.json) is inside, in wall seconds and in
this process's CPU seconds (all its threads): on a machine other jobs share, the CPU seconds move far less
with their load than the wall seconds do. Both arms print to a discarded buffer. Run in the library's
environment, which .ci/run builds:

    .venv-compat-forecasting/bin/python docs/results/cpu-2core-compat-cost/measure.py forecasting [PAIRS] [EPOCHS]
    .venv-compat-chemprop/bin/python docs/results/cpu-2core-compat-cost/measure.py chemprop [PAIRS] [EPOCHS]
    .venv/bin/python docs/results/cpu-2core-compat-cost/measure.py newcomer [PAIRS] [EPOCHS] [both|timer|plain|floor]
    .venv-compat-forecasting/bin/python docs/results/cpu-2core-compat-cost/measure.py forecasting 10 3 8 [TAG]

The last runs ``forecasting``'s fit in batches of 8 (21 steps an epoch); a TAG ends the results file's name.

``newcomer`` is no library: examples/diagnose_your_run.py's MLP on 4,096 random rows in batches of 64, with both
callbacks or the timer alone, in the project's own environment; ``unlogged`` is the same fit with no logger (where
TensorBoard's is the newcomer's); nor is ``small``, a smaller MLP of 30 steps an epoch and no logger
(``measure.py small PAIRS EPOCHS [both|timer|plain|floor]``), or ``defaults``, the same MLP under Lightning's
default Trainer (progress bar, model summary, a checkpoint every epoch, its default logger), as users meet it, or
``longer``, the same MLP with 300 steps an epoch.

Prints and writes results-LIBRARY.json beside this file: every fit's seconds and, for wall and CPU seconds
each, the median of each arm, the ratio of the medians and the median of the pairs' ratios, each with a 95 %
interval (pairs resampled with replacement).
"""

from __future__ import annotations

import contextlib
import importlib
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

import lightning
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "tests" / "compat"))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parents[2] / "examples"))
sys.path.insert(0, str(HERE.parent / "cpu-2core-operator-clock"))
from bootstrap import median_interval  # noqa: E402  # docs/results/bootstrap.py

LIBRARY = sys.argv[1] if len(sys.argv) > 1 else "forecasting"
PAIRS = int(sys.argv[2]) if len(sys.argv) > 2 else 8
EPOCHS = int(sys.argv[3]) if len(sys.argv) > 3 else 3
# newcomer, small: "both" callbacks, the "timer" alone, or "plain" ones (arm_callbacks); forecasting: a batch size
# (the tier's 32 by default)
ARM = sys.argv[4] if len(sys.argv) > 4 else "both"
# A name the results file ends with, so a later run keeps an earlier one's file
TAG = f"-{sys.argv[5]}" if len(sys.argv) > 5 else ""
ARMS = ("without", "with")


def forecasting_fit(root: Path, diagnose: bool) -> None:
    """One N-BEATS fit of the tier's pytorch-forecasting test."""
    case = importlib.import_module("test_pytorch_forecasting")
    training, validation = case.datasets()
    batch = int(ARM) if ARM.isdigit() else case.BATCH
    train_loader = training.to_dataloader(train=True, batch_size=batch, num_workers=0)
    val_loader = validation.to_dataloader(train=False, batch_size=batch, num_workers=0)
    case.fit_nbeats(root, training, train_loader, val_loader, epochs=EPOCHS, diagnose=diagnose)


def chemprop_fit(root: Path, diagnose: bool) -> None:
    """One MPNN fit of the tier's chemprop test."""
    case = importlib.import_module("test_chemprop")
    train_loader, val_loader, scaler = case.loaders()
    case.fit(root, case.mpnn(scaler), train_loader, val_loader, epochs=EPOCHS, diagnose=diagnose)


def cpu_fit(root: Path, callbacks: list[Any], module: Any, loader: Any, **options: Any) -> None:
    """One CPU fit of EPOCHS epochs with ``callbacks``: no progress bar, model summary or checkpoint."""
    from lightning.pytorch import Trainer

    trainer = Trainer(
        accelerator="cpu",
        max_epochs=EPOCHS,
        default_root_dir=root,
        callbacks=callbacks,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        **options,
    )
    trainer.fit(module, loader)


def newcomer(root: Path, callbacks: list[Any], logged: bool = True) -> None:
    """One fit of a newcomer's first model: examples/diagnose_your_run.py's MLP, 4,096 rows in batches of 64."""
    from lightning.pytorch import seed_everything
    from torch.utils.data import DataLoader

    example = importlib.import_module("diagnose_your_run")
    seed_everything(0, verbose=False)  # before the model's weights and the loader's shuffle are drawn
    loader = DataLoader(example.Points(4096), batch_size=64, shuffle=True)
    logger_options = {"log_every_n_steps": 10} if logged else {"logger": False}  # TensorBoard's logger, or none
    cpu_fit(root, callbacks, example.Classifier(), loader, devices=1, **logger_options)


def arm_callbacks() -> list[Any]:
    """The arm's callbacks: ``both``, the ``timer`` alone, or ``plain`` or ``floor`` callbacks, for scale.

    The plain ones are two callbacks written the usual way: each overrides the two per-step hooks with a body that does
    nothing, and Lightning dispatches its other per-batch hooks as well. The floor ones are the same with those others
    skipped, as the diagnosis skips them: the least two callbacks that see every step cost. ``lightning``: Lightning's
    own per-step monitor, ThroughputMonitor, counting each batch by Lightning's ``extract_batch_size``. ``audit``: the
    audit alone; ``least-audit`` and ``held``: a callback that only holds each step's rows, or as much fresh memory.
    """
    from idle_callbacks import EmptyStepHooks, Floor, HeldAllocations, LeastAudit  # docs/results/idle_callbacks.py
    from lightning.pytorch.callbacks import ThroughputMonitor
    from lightning.pytorch.utilities.data import extract_batch_size

    from mnistperf.diagnosis import EpochTimer, SampleAudit

    if ARM.endswith("unparted"):  # both, no step timed by its parts: what that part of the timer costs, by difference
        from mnistperf.diagnosis.callbacks import timed_steps

        timed_steps.parts_timed = lambda index, epoch=0: False  # type: ignore[assignment]
    arms: dict[str, Callable[[], list[Any]]] = {  # made when chosen: only the arm's own callbacks are built
        "both": lambda: [EpochTimer(), SampleAudit()],
        "unparted": lambda: [EpochTimer(), SampleAudit()],
        # without the profiled window, whose steps are chosen by timing and so move even instruction counts
        "unwindowed": lambda: [EpochTimer(busy_window_steps=0), SampleAudit()],
        "unwindowed-unparted": lambda: [EpochTimer(busy_window_steps=0), SampleAudit()],
        "timer": lambda: [EpochTimer()],
        "audit": lambda: [SampleAudit()],
        "least-audit": lambda: [LeastAudit()],  # its steps' rows held until hashed, and nothing else
        "held": lambda: [HeldAllocations()],  # a batch's worth of memory held each step, untouched
        "plain": lambda: [EmptyStepHooks(), EmptyStepHooks()],
        "floor": lambda: [Floor(), Floor()],
        "lightning": lambda: [ThroughputMonitor(batch_size_fn=extract_batch_size)],  # Lightning's own, for scale
    }
    return arms[ARM]()


def newcomer_fit(root: Path, diagnose: bool) -> None:
    """:func:`newcomer` with the arm's callbacks, or none."""
    newcomer(root, arm_callbacks() if diagnose else [])


def unlogged_fit(root: Path, diagnose: bool) -> None:
    """:func:`newcomer_fit` with no logger: what handing the figures to TensorBoard costs, by difference."""
    newcomer(root, arm_callbacks() if diagnose else [], logged=False)


def small_mlp(diagnose: bool, steps: int, kind: str = "mlp") -> tuple[Any, Any, list[Any]]:
    """The small MLP of ../cpu-2core-operator-clock/short_fits.py and its loader, seeded, and the arm's callbacks.

    The loader gives ``steps`` batches of 64 random rows an epoch; the callbacks are the audit first, or none.
    ``kind="cnn"``: its SimpleCNN on 64 random 28x28 images a batch instead.
    """
    from lightning.pytorch import seed_everything

    short = importlib.import_module("short_fits")
    callbacks = arm_callbacks()[::-1] if diagnose else []
    seed_everything(0, verbose=False)
    return short.Small(kind), short.rows((1, 28, 28) if kind == "cnn" else (32,), steps), callbacks


def small_fit(root: Path, diagnose: bool) -> None:
    """One fit of the small MLP: 30 batches of 64 random rows an epoch, no logger."""
    module, loader, callbacks = small_mlp(diagnose, 30)
    cpu_fit(root, callbacks, module, loader, logger=False)


def cnn_fit(root: Path, diagnose: bool) -> None:
    """The lab's SimpleCNN, 200 batches of 64 random images an epoch of about 11 ms (../cpu-2core-fresh-cost's cnn)."""
    module, loader, callbacks = small_mlp(diagnose, 200, kind="cnn")
    cpu_fit(root, callbacks, module, loader, logger=False)


def longer_fit(root: Path, diagnose: bool) -> None:
    """:func:`small_fit` with epochs ten times as long: 300 batches of 64 rows."""
    module, loader, callbacks = small_mlp(diagnose, 300)
    cpu_fit(root, callbacks, module, loader, logger=False)


def defaults_fit(root: Path, diagnose: bool) -> None:
    """:func:`small_fit` under Lightning's default Trainer, as users meet it.

    Its progress bar (drawn to a discarded buffer), model summary, checkpoint every epoch and default logger.
    """
    from lightning.pytorch import Trainer

    module, loader, callbacks = small_mlp(diagnose, 30)
    trainer = Trainer(accelerator="cpu", max_epochs=EPOCHS, default_root_dir=root, callbacks=callbacks)
    with contextlib.redirect_stderr(io.StringIO()):
        trainer.fit(module, loader)


# What each fit imports beyond this file's imports, with the diagnosis: count.py imports them in every arm, so that a
# fit's count holds the fit, not the first import of its modules.
MODULES = {
    "forecasting": "test_pytorch_forecasting",
    "chemprop": "test_chemprop",
    "newcomer": "diagnose_your_run",
    "unlogged": "diagnose_your_run",
}


def load() -> None:
    """Import the diagnosis and every module the fit of LIBRARY imports (short_fits for ``small``).

    ../idle_callbacks.py too, which :func:`arm_callbacks` imports for every diagnosed arm: count.py's ``imports`` arm
    then holds its import, which no user's fit makes (compiled from its source where no bytecode is cached).
    """
    importlib.import_module("mnistperf.diagnosis")
    importlib.import_module("idle_callbacks")
    importlib.import_module(MODULES.get(LIBRARY, "short_fits"))


FITS = {
    "forecasting": forecasting_fit,
    "chemprop": chemprop_fit,
    "newcomer": newcomer_fit,
    "unlogged": unlogged_fit,
    "small": small_fit,
    "defaults": defaults_fit,
    "longer": longer_fit,
    "cnn": cnn_fit,
}
PACKAGES = {"forecasting": "pytorch_forecasting", "chemprop": "chemprop"}
FIT_WHAT = {
    "forecasting": "the compatibility tier's pytorch-forecasting test (N-BEATS)",
    "chemprop": "the compatibility tier's chemprop test (MPNN)",
    "newcomer": "the newcomer's MLP (examples/diagnose_your_run.py)",
    "unlogged": "the newcomer's MLP with no logger",
    "small": "a small MLP of 30 steps an epoch",
    "defaults": "a small MLP of 30 steps an epoch under Lightning's default Trainer",
    "longer": "a small MLP of 300 steps an epoch",
    "cnn": "the SimpleCNN, 200 steps of 64 images an epoch",
}
# What the diagnosed arm adds; a library's ARM is its batch size, and its arm both callbacks.
ARM_WHAT = {
    "both": "EpochTimer and SampleAudit",
    "timer": "EpochTimer alone",
    "plain": "two callbacks whose per-step hooks do nothing",
    "floor": "two callbacks whose per-step hooks do nothing, their other per-batch hooks skipped",
}


def timed(root: Path, diagnose: bool) -> dict[str, float]:
    """Wall and CPU seconds of one fresh fit, its output discarded."""
    with contextlib.redirect_stdout(io.StringIO()):
        wall, cpu = time.perf_counter(), time.process_time()
        FITS[LIBRARY](root, diagnose)
        return {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}


def interval(seconds: dict[str, list[float]], draws: int = 2000) -> tuple[float, float]:
    """2.5th and 97.5th percentiles of the ratio of medians over pairs resampled with replacement."""
    draw = random.Random(0)
    pairs = range(len(seconds["with"]))
    ratios = []
    for _ in range(draws):
        picked = [draw.choice(pairs) for _ in pairs]
        ratios.append(
            statistics.median(seconds["with"][i] for i in picked)
            / statistics.median(seconds["without"][i] for i in picked)
        )
    cuts = statistics.quantiles(ratios, n=40)
    return cuts[0], cuts[-1]


def figures(seconds: dict[str, list[float]]) -> dict[str, Any]:
    """The medians, their ratio, and the median of the pairs' ratios, each with its 95 % interval."""
    median = {arm: statistics.median(values) for arm, values in seconds.items()}
    ratios = [a / b for a, b in zip(seconds["with"], seconds["without"], strict=True)]
    return {
        "fit_s": seconds,
        "median_fit_s": median,
        "ratio_of_medians": median["with"] / median["without"],
        "ratio_of_medians_95": interval(seconds),
        "median_pair_ratio": statistics.median(ratios),
        "median_pair_ratio_95": median_interval(ratios),
    }


def main() -> None:
    """Warm up once, run the pairs, print and write the figures."""
    logging.getLogger("lightning").setLevel(logging.ERROR)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    seconds: dict[str, dict[str, list[float]]] = {clock: {arm: [] for arm in ARMS} for clock in ("wall", "cpu")}
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as scratch:
        timed(Path(scratch) / "warm-up", diagnose=True)  # imports and first-call costs, in neither arm
        for pair in range(PAIRS):
            order = ARMS if pair % 2 == 0 else ARMS[::-1]
            for arm in order:
                for clock, value in timed(Path(scratch) / f"{pair}-{arm}", diagnose=arm == "with").items():
                    seconds[clock][arm].append(value)
            load.append(os.getloadavg()[0])
            print(
                f"pair {pair + 1}/{PAIRS}: "
                + ", ".join(
                    f"{arm} {seconds['wall'][arm][-1]:.2f} s ({seconds['cpu'][arm][-1]:.2f} s CPU)" for arm in ARMS
                )
            )
    package = importlib.import_module(PACKAGES.get(LIBRARY, "lightning"))
    result: dict[str, Any] = {
        "what": f"whole fits of {FIT_WHAT[LIBRARY]}, with and without {ARM_WHAT.get(ARM, ARM_WHAT['both'])}",
        "library": f"{PACKAGES.get(LIBRARY, 'lightning')} {package.__version__}",
        "epochs_per_fit": EPOCHS,
        "pairs": PAIRS,
        "load_average_1min": load,
        **{clock: figures(values) for clock, values in seconds.items()},
        "environment": {
            "machine": platform.machine(),
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "lightning": lightning.__version__,
            "python": platform.python_version(),
        },
    }
    name = f"{LIBRARY}-{ARM}-{EPOCHS}" if LIBRARY not in PACKAGES else LIBRARY
    name = f"forecasting-batch-{ARM}" if LIBRARY == "forecasting" else name
    name = LIBRARY if name.endswith("-both") and LIBRARY == "forecasting" else name
    result["arm"] = ARM
    (HERE / f"results-{name}{TAG}.json").write_text(json.dumps(result, indent=1) + "\n")
    for clock in ("wall", "cpu"):
        row = result[clock]
        low, high = row["ratio_of_medians_95"]
        pair_low, pair_high = row["median_pair_ratio_95"]
        print(
            f"{result['library']}, {clock} seconds: median fit {row['median_fit_s']['without']:.2f} s without, "
            f"{row['median_fit_s']['with']:.2f} s with; ratio of medians {row['ratio_of_medians']:.3f}x "
            f"(95 % {low:.3f}-{high:.3f}x), median pair ratio {row['median_pair_ratio']:.3f}x "
            f"(95 % {pair_low:.3f}-{pair_high:.3f}x)"
        )


if __name__ == "__main__":
    main()
