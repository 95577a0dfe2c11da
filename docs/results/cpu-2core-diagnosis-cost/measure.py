"""What EpochTimer and SampleAudit cost a Lightning project that is not the lab's: epochs with and without them.

The module and data are examples/diagnose_your_run.py's (an MLP, ``(x, y)`` tuple batches from a plain
DataLoader, a ``self.log`` every step), at the example's own settings. Runs on this machine differ by more
than the timer costs, so the arms alternate epoch by epoch inside each fit, where consecutive epochs are
a second apart: the timer is in the trainer's callbacks (and its fetch clock is the trainer's profiler) in
"with" epochs only; "without" epochs are the plain run; two more arms tell Lightning's share apart: an
empty ``Callback`` ("empty": what Lightning charges for any callback) and one that overrides the timer's
hooks with bodies that do nothing ("hooks": what it charges for those hooks). The order of the arms
rotates from fit to fit, and each fit's first epoch, with the timer, is warm-up and left out.

An epoch is timed from its ``on_train_epoch_start`` to the next one's, so the callbacks' own work at the
ends of the epoch (rows, scalars, lines, the audit's count) is inside. Prints and writes to results.json
beside this file, for each arm against the plain run:

* the ratio of the arms' median epochs, with a 95 % interval (rounds resampled with replacement);
* the median of the round-by-round ratios, each of an arm's epoch to the plain epoch of the same round
  (seconds apart, so the machine's drift between fits and within a fit cancels), with its interval;
* the ratio of typical epochs: an epoch's time is split into its steps (from one step's start to the
  next's) and its ends, and the typical epoch sums each position's median over the arm's epochs, which
  keeps work done once an epoch or one step in a few while a burst of slowness that hits a minority of
  epochs at a position moves nothing; with its interval, and the typical epoch's parts;
* the difference per training step of the medians and of the typical epochs, and the one-minute load
  average after each fit.

    python docs/results/cpu-2core-diagnosis-cost/measure.py [FITS] [ROUNDS] [--samples=N]

``--audit`` measures both callbacks instead, on the same module with dict batches of 8 (``{"x", "y"}``):
the arms are the plain run, the timer ("with"), SampleAudit ("audit") and both together ("both"), written
to results-audit.json. ``--samples=N`` sets the samples per epoch (default 16,384, or 4,096 with
``--audit``) and adds ``-N`` to the file's name.

    python docs/results/cpu-2core-diagnosis-cost/measure.py --audit [FITS] [ROUNDS] [--samples=N]
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import lightning
import numpy as np
import torch
from lightning.pytorch import Callback, Trainer, seed_everything
from torch.utils.data import DataLoader

from mnistperf.diagnosis import EpochTimer, SampleAudit
from mnistperf.diagnosis.callbacks.batch_hooks import PHASE_HOOKS, skip_unused_batch_hooks
from mnistperf.upstream import skip_hook

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from bootstrap import median_interval  # noqa: E402  # docs/results/bootstrap.py

spec = importlib.util.spec_from_file_location("example", HERE.parents[2] / "examples" / "diagnose_your_run.py")
assert spec is not None and spec.loader is not None
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)

AUDIT = "--audit" in sys.argv
GIVEN = next((int(arg.removeprefix("--samples=")) for arg in sys.argv if arg.startswith("--samples=")), None)
NUMBERS = [arg for arg in sys.argv[1:] if arg.isdigit()]  # other arguments are a script's that imports this one
FITS = int(NUMBERS[0]) if NUMBERS else 6
ROUNDS = int(NUMBERS[1]) if len(NUMBERS) > 1 else 12
SAMPLES, BATCH = (GIVEN or 4096, 8) if AUDIT else (GIVEN or 16384, 64)
ARMS = ("without", "with", "audit", "both") if AUDIT else ("without", "empty", "hooks", "with")
COMPARED = ARMS[1:]
RESULTS = HERE / (("results-audit" if AUDIT else "results") + (f"-{GIVEN}" if GIVEN else "") + ".json")


class DictPoints(example.Points):
    """The example's points as dict batches, ``{"x": features, "y": label}``."""

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:  # type: ignore[override]
        x, y = super().__getitem__(index)
        return {"x": x, "y": y}


class DictClassifier(example.Classifier):
    """The example's MLP on dict batches."""

    def training_step(self, batch, batch_idx):  # type: ignore[override]
        """The example's step on the batch's features and labels."""
        return super().training_step((batch["x"], batch["y"]), batch_idx)


class SameHooks(Callback):
    """The timer's hooks with bodies that do nothing, dispatched as the timer's are on a step it does not sample.

    Like the timer, it has its unused per-batch hooks skipped, and its phase hooks too (the timer has them
    dispatched on one step in sixteen only).
    """

    def __init__(self) -> None:
        skip_unused_batch_hooks(self)
        for hook in PHASE_HOOKS:
            skip_hook(self, hook)


for _name in vars(EpochTimer):
    if _name.startswith(("on_", "teardown")):
        setattr(SameHooks, _name, lambda self, *args, **kwargs: None)


class EpochMarks(Callback):
    """Marks each training step's start; an epoch, from :meth:`start` to :meth:`close`, is its seconds and profile.

    The profile is the time from the epoch's start to its first step's, from each step's start to the next's, and
    from the last step's start to the close: the steps, with the epoch's ends around them.
    """

    def __init__(self) -> None:
        self.started: float | None = None
        self.marks: list[float] = []

    def on_train_batch_start(self, trainer: Trainer, pl_module: lightning.LightningModule, batch, batch_idx) -> None:
        """Mark the step's start."""
        self.marks.append(time.perf_counter())

    def start(self) -> None:
        """Start an epoch's time."""
        self.started = time.perf_counter()

    def close(self) -> tuple[float, list[float]] | None:
        """The epoch started last, ending now: its seconds and profile (None where none was started); new marks."""
        now = time.perf_counter()
        closed = None
        if self.started is not None:
            closed = (now - self.started, np.diff([self.started, *self.marks, now]).tolist())
        self.started, self.marks = None, []
        return closed


class Alternate(EpochMarks):
    """First in the trainer's callbacks: puts each epoch's arm in place and times the epoch.

    Args:
        timer: the fit's EpochTimer, in place from the fit's start so that it installs its fetch clock.
        order: the arms in the order this fit runs them, round after round.
    """

    def __init__(self, timer: EpochTimer, order: tuple[str, ...]):
        super().__init__()
        self.timer, self.order = timer, order
        self.stand_ins = arm_callbacks(timer, SampleAudit())
        self.seconds: dict[str, list[float]] = {arm: [] for arm in ARMS}
        self.profiles: dict[str, list[list[float]]] = {arm: [] for arm in ARMS}
        self.arm: str | None = None

    def on_train_epoch_start(self, trainer: Trainer, pl_module: lightning.LightningModule) -> None:
        """Close the last epoch's time, then put this epoch's arm in place and start its time."""
        closed = self.close()
        if self.arm is not None and closed is not None:
            self.seconds[self.arm].append(closed[0])
            self.profiles[self.arm].append(closed[1])
        if trainer.current_epoch == 0:  # warm-up, with the timer, not counted
            return
        self.arm = self.order[(trainer.current_epoch - 1) % len(self.order)]
        fetch = self.timer._fetch
        assert fetch is not None
        # Appended while Lightning walks this list, an arm's callback gets this very epoch-start hook.
        for callbacks in self.stand_ins.values():
            for callback in callbacks:
                if callback in trainer.callbacks:
                    trainer.callbacks.remove(callback)
        trainer.profiler = fetch if self.arm in ("with", "both") else fetch.inner  # type: ignore[misc]
        trainer.callbacks.extend(self.stand_ins[self.arm])
        self.start()


def arm_callbacks(timer: EpochTimer, audit: SampleAudit) -> dict[str, list[Callback]]:
    """The callbacks of each arm, the measured ones and Lightning's stand-ins (``timer`` and ``audit`` shared)."""
    return {
        "without": [],
        "empty": [Callback()],
        "hooks": [SameHooks()],
        "with": [timer],
        "audit": [audit],
        "both": [timer, audit],
    }


def train(callbacks: list[Callback], epochs: int, root: Path) -> None:
    """A fresh fit of the example's module (dict batches with ``--audit``) with ``callbacks``, its lines discarded."""
    trainer = Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=epochs,
        default_root_dir=root,
        callbacks=callbacks,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        log_every_n_steps=10,
    )
    points, module = (DictPoints, DictClassifier) if AUDIT else (example.Points, example.Classifier)
    loader = DataLoader(points(SAMPLES), batch_size=BATCH, shuffle=True)
    with contextlib.redirect_stdout(io.StringIO()):  # the callbacks' lines
        trainer.fit(module(), loader)


def fit(order: tuple[str, ...], root: Path) -> Alternate:
    """One fresh fit of ROUNDS rounds; its Alternate holds each arm's epoch seconds and step profiles."""
    seed_everything(0, verbose=False)
    timer = EpochTimer()
    alternate = Alternate(timer, order)
    train([alternate, timer], 1 + ROUNDS * len(ARMS) + 1, root)  # warm-up, the rounds, one epoch closing the last
    assert len(timer.epochs) >= 1 + ROUNDS, "the timer missed epochs of its arm"
    return alternate


def interval(arm: str, seconds: dict[str, list[float]], draws: int = 2000) -> tuple[float, float]:
    """2.5th and 97.5th percentiles of ``arm``'s ratio of medians over rounds resampled with replacement."""
    draw = random.Random(0)
    rounds = range(len(seconds["without"]))
    ratios = []
    for _ in range(draws):
        picked = [draw.choice(rounds) for _ in rounds]
        median = {name: statistics.median(seconds[name][i] for i in picked) for name in (arm, "without")}
        ratios.append(median[arm] / median["without"])
    cuts = statistics.quantiles(ratios, n=40)
    return cuts[0], cuts[-1]


def typical_epoch(profiles: np.ndarray) -> float:
    """The sum over an epoch's positions (each step, and the epoch's ends) of that position's median over epochs.

    The machine's slowdowns come in bursts that lengthen some epochs by up to half: a burst moves the median of
    a position only where it hits most epochs there, while the work of every step, also one step in a few or
    once an epoch, stays in the sum.
    """
    return float(np.median(profiles, axis=0).sum())


def typical_parts(profiles: np.ndarray) -> dict[str, float]:
    """The typical epoch's milliseconds in three parts: its start, its steps, and its last step with its end.

    The start runs to the first step's start; each step, from its start to the next one's; the last step and the
    epoch's end, to the next epoch's start.
    """
    medians = np.median(profiles, axis=0) * 1e3
    return {"start": float(medians[0]), "steps": float(medians[1:-1].sum()), "last_step_and_end": float(medians[-1])}


def typical_interval(arm: str, profiles: dict[str, np.ndarray], draws: int = 400) -> tuple[float, float]:
    """2.5th and 97.5th percentiles of ``arm``'s ratio of typical epochs over rounds resampled with replacement."""
    generator = np.random.default_rng(0)
    rounds = len(profiles["without"])
    ratios = []
    for _ in range(draws):
        picked = generator.integers(0, rounds, rounds)
        ratios.append(typical_epoch(profiles[arm][picked]) / typical_epoch(profiles["without"][picked]))
    low, high = np.quantile(ratios, [0.025, 0.975])
    return float(low), float(high)


def summarize(
    what: str, seconds: dict[str, list[float]], steps_of: dict[str, list[list[float]]], loads: list[float]
) -> dict:
    """The figures of a measurement: the arms' epochs (``seconds``, round by round) and step profiles."""
    median = {arm: statistics.median(values) for arm, values in seconds.items()}
    profiles = {arm: np.array(values) for arm, values in steps_of.items()}
    typical = {arm: typical_epoch(values) for arm, values in profiles.items()}
    steps = SAMPLES // BATCH
    within_round = {arm: [a / b for a, b in zip(seconds[arm], seconds["without"], strict=True)] for arm in COMPARED}
    return {
        "what": what,
        "samples_per_epoch": SAMPLES,
        "batch_size": BATCH,
        "steps_per_epoch": steps,
        "fits": FITS,
        "rounds_per_fit": ROUNDS,
        "epoch_s": seconds,
        "median_epoch_s": median,
        "ratio_of_medians": {arm: median[arm] / median["without"] for arm in COMPARED},
        "ratio_of_medians_95": {arm: interval(arm, seconds) for arm in COMPARED},
        "median_round_ratio": {arm: statistics.median(r) for arm, r in within_round.items()},
        "median_round_ratio_95": {arm: median_interval(r) for arm, r in within_round.items()},
        "us_per_step": {arm: (median[arm] - median["without"]) / steps * 1e6 for arm in COMPARED},
        "typical_epoch_s": typical,
        "typical_ratio": {arm: typical[arm] / typical["without"] for arm in COMPARED},
        "typical_ratio_95": {arm: typical_interval(arm, profiles) for arm in COMPARED},
        "typical_us_per_step": {arm: (typical[arm] - typical["without"]) / steps * 1e6 for arm in COMPARED},
        "typical_parts_ms": {arm: typical_parts(values) for arm, values in profiles.items()},
        "step_ms_without": median["without"] / steps * 1e3,
        "load_after_fit": loads,
        "environment": {
            "machine": platform.machine(),
            "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "lightning": lightning.__version__,
            "python": platform.python_version(),
        },
    }


def report(result: dict, path: Path) -> None:
    """Write ``result`` to ``path`` and print each arm's ratios."""
    path.write_text(json.dumps(result, indent=1) + "\n")
    for arm in COMPARED:
        print(
            f"{arm} / without: ratio of medians {result['ratio_of_medians'][arm]:.4f}x "
            f"(95 % {result['ratio_of_medians_95'][arm][0]:.4f}-{result['ratio_of_medians_95'][arm][1]:.4f}), "
            f"median round ratio {result['median_round_ratio'][arm]:.4f}x "
            f"(95 % {result['median_round_ratio_95'][arm][0]:.4f}-{result['median_round_ratio_95'][arm][1]:.4f}), "
            f"{result['us_per_step'][arm]:+.1f} us per step of {result['step_ms_without']:.2f} ms; "
            f"typical epochs {result['typical_ratio'][arm]:.4f}x (95 % {result['typical_ratio_95'][arm][0]:.4f}-"
            f"{result['typical_ratio_95'][arm][1]:.4f}), {result['typical_us_per_step'][arm]:+.1f} us per step"
        )


def main() -> None:
    """Run the fits, print and write the medians and ratios."""
    seconds: dict[str, list[float]] = {arm: [] for arm in ARMS}
    steps_of: dict[str, list[list[float]]] = {arm: [] for arm in ARMS}
    loads: list[float] = []  # the one-minute load average after each fit: how much else the machine ran
    with tempfile.TemporaryDirectory() as scratch:
        for number in range(FITS):
            order = ARMS[number % len(ARMS) :] + ARMS[: number % len(ARMS)]
            alternate = fit(order, Path(scratch) / str(number))
            for arm in ARMS:
                seconds[arm].extend(alternate.seconds[arm])
                steps_of[arm].extend(alternate.profiles[arm])
            loads.append(os.getloadavg()[0])
            print(
                f"fit {number + 1}/{FITS}: " + ", ".join(f"{a} {statistics.median(seconds[a]):.3f} s" for a in ARMS),
                f"(load {loads[-1]:.2f})",
            )
    what = (
        "training epochs of examples/diagnose_your_run.py's module"
        + (" on dict batches" if AUDIT else "")
        + "; the arms alternate epoch by epoch"
    )
    report(summarize(what, seconds, steps_of, loads), RESULTS)


if __name__ == "__main__":
    main()
