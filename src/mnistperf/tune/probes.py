"""What one of the lab's trials is: a short timed probe of the input pipeline alone, the step alone, or both together.

Every probe runs on the real data and the real device, leaves its warm-up out (worker start, first batches,
allocator and kernel warm-up), and is repeated, each repeat timed as an epoch of training is, by
:class:`~mnistperf.diagnosis.record.clock.EpochClock`: its figure is the median of the repeats.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterable
from statistics import median
from typing import Any

import torch

from mnistperf.data.datamodule import MNISTDataModule
from mnistperf.diagnosis.figures import HOST_WAIT_SHARE, SAMPLES_PER_S
from mnistperf.diagnosis.record.clock import EpochClock
from mnistperf.tune.policy import WITHOUT_WORKERS
from mnistperf.tune.search import Run, Trial

REPEATS = 3
STEP, LOADER, BOTH = "step", "loader", "both"  # what a probe times


WARMUP = 3  # untimed steps (batches) before a probe's repeats: worker start, allocator and kernel warm-up


class Overrun(Exception):
    """A probe still drawing batches when the budget ended."""


def _cycle(loader: Iterable, deadline: float) -> Generator[dict, None, None]:
    """Batches of epoch after epoch (each new epoch's start paid, as in training); :class:`Overrun` past deadline."""
    while True:
        for batch in loader:
            if time.perf_counter() > deadline:
                raise Overrun
            yield batch


def time_loader(datamodule, device: torch.device, batches: int, deadline: float) -> tuple[list[float], float]:
    """samples/s per repeat of drawing ``batches`` batches to the device, and a new epoch's time to its first batch."""
    loader = datamodule.train_dataloader()
    source = _cycle(loader, deadline)
    for _ in range(WARMUP):
        next(source)
    clock = EpochClock(device, profile_window=False)
    for _ in range(REPEATS):
        clock.epoch_start()
        for _ in range(batches):
            clock.count(len(datamodule.to_device(next(source), device)["label"]))
        clock.epoch_end()
    source.close()
    began = time.perf_counter()
    next(iter(loader))  # a new epoch: persistent workers are already there, others start again
    return [row[SAMPLES_PER_S] for row in clock.epochs], time.perf_counter() - began


def time_step(model, batch: dict, device: torch.device, precision: str, steps: int = 10) -> list[float]:
    """samples/s of the training step alone (forward, loss, backward, optimizer) on one batch already on the device."""
    step = model.standalone_step(precision)
    model.train()
    for _ in range(WARMUP):
        step(batch)
    clock = EpochClock(device, profile_window=False)
    for _ in range(REPEATS):
        clock.epoch_start()
        for _ in range(steps):
            step(batch)
        clock.count(steps * len(batch["label"]))
        clock.epoch_end()
    return [row[SAMPLES_PER_S] for row in clock.epochs]


def time_training(
    model, datamodule, device: torch.device, steps: int, precision: str, deadline: float
) -> tuple[list[float], float]:
    """samples/s of loader and step together per repeat, as training runs them, and the host's share waiting on data."""
    step = model.standalone_step(precision)
    model.train()
    source = _cycle(datamodule.train_dataloader(), deadline)
    clock = EpochClock(device, profile_window=False)
    for repeat in range(REPEATS + 1):
        clock.epoch_start()
        for index in range(WARMUP if repeat == 0 else steps):
            batch = datamodule.to_device(next(source), device)
            clock.step_start(index)
            step(batch)
            clock.count(len(batch["label"]))
            clock.step_end(index)
        clock.epoch_end()
    source.close()
    timed = clock.epochs[1:]  # the first pass is the warm-up
    return [row[SAMPLES_PER_S] for row in timed], median(row[HOST_WAIT_SHARE] for row in timed)


class Probes:
    """Measures a lab trial by its kind: the step alone, a loader alone and its epoch start, or both and the input wait.

    The DataModule takes the input config's ``options`` under the trial's settings; a pipeline's split is loaded by
    its first probe and shared by the next ones. The step runs at the ``precision`` fit runs.
    """

    batches = 20  # batches (steps) per timed repeat of a loader, or of both together

    def __init__(self, options: dict, model, device: torch.device, precision: str = "32-true"):
        self.options, self.model, self.device, self.precision = options, model, device, precision
        self.loaded: dict[str, dict[str, Any]] = {}  # pipeline -> its DataModule's loaded splits

    def datamodule(self, settings: dict) -> MNISTDataModule:
        """A DataModule built with these settings (through its checks)."""
        dm = MNISTDataModule(**{**self.options, **settings})
        dm.device = self.device
        pipeline = settings["pipeline"]
        if pipeline not in self.loaded:
            dm.prepare_data()
            dm.setup("fit")
            self.loaded[pipeline] = dm.datasets
        dm.datasets = self.loaded[pipeline]
        return dm

    def __call__(self, trial: Trial, seconds: float) -> Run:
        """One run of the trial's probe, stopped (``timed_out``) where it draws past ``seconds``."""
        began = time.perf_counter()
        try:
            run = self._probe(trial, began + seconds)
        except Overrun:
            run = Run(timed_out=True)
        run.seconds = time.perf_counter() - began
        return run

    def _probe(self, trial: Trial, deadline: float) -> Run:
        one_batch = {"pipeline": "v2", "num_workers": 0, **WITHOUT_WORKERS} if trial.kind == STEP else {}
        dm = self.datamodule({**one_batch, **trial.settings})
        if trial.kind == STEP:  # on one batch already on the device
            batch = {k: v.to(self.device) for k, v in next(iter(dm.train_dataloader())).items()}
            return Run(time_step(self.model, batch, self.device, self.precision))
        if trial.kind == LOADER:
            rates, start_s = time_loader(dm, self.device, self.batches, deadline)
            return Run(rates, start_s=start_s)
        rates, wait = time_training(self.model, dm, self.device, self.batches, self.precision, deadline)
        return Run(rates, wait=wait)
