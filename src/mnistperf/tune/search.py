"""How ``mnistperf tune`` decides: the step, then the cheapest loaders first, until input is no longer the bound.

A loader's predicted training rate is min(loader, step) with workers and 1 / (1/loader + 1/step) without,
less each epoch's start. Pipelines are tried in the order of their class's ``tune_rank``. The search stops once a
loader outruns the step by more than the probes' noise; the best prediction and the input config then train side
by side, and within the noise the one with fewer worker processes wins. Every probe's figure is the median of 3.
Why: docs/stages.md#tune.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch
from lightning.fabric.utilities.data import AttributeDict

from mnistperf.data.datamodule import MNISTDataModule
from mnistperf.data.ingest import prepare
from mnistperf.data.pipelines.registry import PIPELINES, tune_order
from mnistperf.errors import ConfigError
from mnistperf.tune.knobs import LOADER_SETTINGS, worker_counts
from mnistperf.tune.probes import Probe, time_loader, time_step, time_training

# The lab's loader settings tune chooses: its pipeline, and every loader setting but the batch size (--tune-batch-size).
LOADER_KEYS = ("pipeline", *(setting for setting in LOADER_SETTINGS if setting != "batch_size"))
REPEATS = 3
NOISE_FLOOR = 0.05  # differences under 5 % are never taken as real
NOISY_SPREAD = 0.25  # repeats further apart than this: the machine is busy; the probe is repeated once more


@dataclass
class Outcome:
    """What the search found, and why it stopped."""

    best: dict[str, Any]
    step: Probe
    probes: list[Probe] = field(default_factory=list)
    stopped: str = ""
    baseline: Probe | None = None  # the input config's settings measured together: what tune's choice must beat
    chosen: Probe | None = None
    bigger_batch: Probe | None = None

    @property
    def noise(self) -> float:
        """The largest spread of any probe: differences smaller than this are not to be trusted."""
        return max((p.spread for p in self.probes), default=0.0)

    def noise_warning(self) -> str | None:
        """A sentence for the user when the probes were too noisy for small differences to mean anything."""
        noisy = [p for p in self.probes if p.spread > NOISY_SPREAD]
        if not noisy:
            return None
        return (
            f"the machine was busy: {len(noisy)} of {len(self.probes)} probes varied by more than "
            f"{NOISY_SPREAD:.0%} between repeats (up to {self.noise:.0%}) even after repeating, so differences "
            "smaller than that are noise; run tune again on an idle machine before trusting close calls"
        )

    def batch_projection(self) -> str | None:
        """What a bigger batch would do to the step, only where the two step probes can tell."""
        bigger, step = self.bigger_batch, self.step
        if bigger is None:
            return None
        size = bigger.settings["batch_size"]
        noise = max(bigger.spread, step.spread, NOISE_FLOOR)
        if noise > NOISY_SPREAD:
            return (
                f"a batch of {size} could not be measured reliably here (its step probes varied by up to "
                f"{noise:.0%}); no projection is made"
            )
        gain = bigger.rate / step.rate - 1
        if abs(gain) <= noise:
            return f"a batch of {size} steps no faster or slower than the probes' noise ({noise:.0%}) can show"
        return (
            f"a batch of {size} would step at {bigger.rate:,.0f} samples/s ({gain:+.0%}); it changes the "
            "optimisation, so it is only tried with --tune-batch-size"
        )


def free_memory_bytes(device: torch.device) -> int:
    """Free memory on the device (the host's available memory for the CPU); 0 when unknown."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def split_rows(datamodule: MNISTDataModule) -> int:
    """Rows of the DataModule's prepared training split, from the Parquet footers."""
    import pyarrow.parquet as pq

    from mnistperf.data import schema

    path = prepare.require_prepared(cast(AttributeDict, datamodule.hparams).dataset, datamodule.data_dir, "train")
    return sum(pq.read_metadata(f).num_rows for f in schema.parquet_files(path))


def pipelines_to_try(options: dict, device: torch.device, log: Callable[[str], None]) -> list[str]:
    """The registered pipelines tune tries, in order, less those that cannot run here (each said in the log).

    Args:
        options: the DataModule's options from the input config.
        device: the training device.
        log: where the reasons go.
    """
    names = []
    for name in tune_order():
        try:  # the pipeline's own checks: a package it needs, a batch size it cannot take, ...
            datamodule = MNISTDataModule(**{**options, "pipeline": name})
        except ConfigError as exc:
            log(f"{name}: left out: {exc}")
            continue
        if PIPELINES[name].holds_split_on_device:
            needed = split_rows(datamodule) * (28 * 28 + 8) * 2  # uint8 pixels, int64 labels, room for a batch's copies
            if needed > free_memory_bytes(device) // 2:
                log(
                    f"{name}: the training split needs about {needed / 2**20:,.0f} MB on {device.type}, more than "
                    "half the free memory: left out."
                )
                continue
        names.append(name)
    return names


class Search:
    """Runs the probes within a time budget; every probe is kept for the report."""

    batches = 20  # batches (steps) per timed repeat of a probe

    def __init__(
        self,
        options: dict,
        model,
        device: torch.device,
        budget_s: float,
        log: Callable[[str], None],
        precision: str = "32-true",
    ):
        self.options, self.model, self.device, self.log = options, model, device, log
        self.precision = precision  # the trainer precision fit runs (bf16-mixed only where the GPU has it)
        self.deadline = time.perf_counter() + budget_s
        self.loaded: dict[str, dict[str, Any]] = {}  # pipeline -> its DataModule's loaded splits
        self.probes: list[Probe] = []

    # ---------------------------------------------------------------- plumbing
    def out_of_time(self) -> bool:
        """Whether the budget is spent."""
        return time.perf_counter() > self.deadline

    def datamodule(self, settings: dict) -> MNISTDataModule:
        """A DataModule built with these settings (through its checks).

        A pipeline's split is loaded by its first probe and shared by the DataModules of the next ones, whose loader
        settings differ.
        """
        dm = MNISTDataModule(**{**self.options, **settings})
        dm.device = self.device
        pipeline = settings["pipeline"]
        if pipeline not in self.loaded:
            dm.prepare_data()
            dm.setup("fit")
            self.loaded[pipeline] = dm.datasets
        dm.datasets = self.loaded[pipeline]
        return dm

    def _record(self, probe: Probe, began: float, measure: Callable[[], list[float]]) -> Probe:
        """Keep a probe; one whose repeats disagree by more than NOISY_SPREAD is measured once more."""
        if probe.spread > NOISY_SPREAD and not self.out_of_time():
            try:
                probe.rates += measure()
            except KeyboardInterrupt:  # Ctrl-C during the second measurement: keep the first
                self._keep(probe, began)
                raise
            probe.note = ", ".join(n for n in (probe.note, f"repeated ({len(probe.rates)} runs): noisy") if n)
        return self._keep(probe, began)

    def _keep(self, probe: Probe, began: float) -> Probe:
        probe.seconds = time.perf_counter() - began
        self.probes.append(probe)
        spread = f" (spread {probe.spread:.0%})" if probe.spread else ""
        self.log(
            f"[probe {len(self.probes)}] {probe.kind:<6} {describe(probe.settings)}: {probe.rate:,.0f} samples/s"
            f"{spread}{', ' + probe.note if probe.note else ''} ({probe.seconds:.1f} s)"
        )
        return probe

    # ---------------------------------------------------------------- probes
    def step(self, batch_size: int) -> Probe:
        """Probe the training step alone, on one batch of ``batch_size`` already on the device."""
        began = time.perf_counter()
        batch = next(
            iter(
                self.datamodule(
                    {
                        "pipeline": "v2",
                        "num_workers": 0,
                        "persistent_workers": False,
                        "prefetch_factor": None,
                        "batch_size": batch_size,
                    }
                ).train_dataloader()
            )
        )
        batch = {k: v.to(self.device) for k, v in batch.items()}

        def measure() -> list[float]:
            return time_step(
                self.model, batch, self.device, steps=10, warmup=3, repeats=REPEATS, precision=self.precision
            )

        return self._record(Probe("step", {"batch_size": batch_size}, measure()), began, measure)

    def loader(self, settings: dict) -> Probe:
        """Probe a loader alone with these data settings, its epoch start timed apart."""
        began = time.perf_counter()
        dm = self.datamodule(settings)

        def measure_with_start() -> tuple[list[float], float]:
            return time_loader(dm, self.device, self.batches, warmup=2, repeats=REPEATS)

        rates, start_s = measure_with_start()
        return self._record(
            Probe("loader", dict(settings), rates, note=f"epoch start {start_s:.2f} s", start_s=start_s),
            began,
            lambda: measure_with_start()[0],
        )

    def together(self, settings: dict, label: str = "") -> Probe:
        """Probe training with these data settings, the loader and the step together, and the host's input wait."""
        began = time.perf_counter()
        dm = self.datamodule(settings)

        def measure_with_wait() -> tuple[list[float], float]:
            return time_training(
                self.model, dm, self.device, steps=self.batches, warmup=3, repeats=REPEATS, precision=self.precision
            )

        rates, wait = measure_with_wait()
        probe = Probe("both", dict(settings), rates, wait_share=wait, note=label)
        return self._record(probe, began, lambda: measure_with_wait()[0])


def describe(settings: dict) -> str:
    """Settings as ``key=value`` words."""
    return " ".join(f"{k}={v}" for k, v in settings.items())


def predicted(loader: Probe, step_rate: float, epoch_samples: int) -> float:
    """Training samples/s a loader should give beside a step of step_rate, its epoch start included."""
    rate = loader.rate
    steady = min(rate, step_rate) if loader.settings.get("num_workers") else 1 / (1 / rate + 1 / step_rate)
    return epoch_samples / (epoch_samples / steady + loader.start_s)


def cost(settings: dict) -> tuple:
    """Fewer worker processes first, then no pinning, then less prefetching."""
    return (settings.get("num_workers", 0), bool(settings.get("pin_memory")), settings.get("prefetch_factor") or 2)


class _Stop(Exception):
    pass


def run(
    search: Search, base: dict, epoch_samples: int, pipelines: list[str], cpus: int, tune_batch_size: bool
) -> Outcome:
    """Search loader settings for this step, in the order and with the stopping rule the module describes."""
    on_cuda = search.device.type == "cuda"
    step = search.step(base["batch_size"])
    outcome = Outcome(best={k: base[k] for k in LOADER_KEYS}, step=step, probes=search.probes)
    margin = max(NOISE_FLOOR, step.spread)
    best: tuple[Probe, float] | None = None

    def consider(settings: dict) -> Probe:
        nonlocal best
        if search.out_of_time():
            outcome.stopped = "the time budget is spent: the best found so far is kept"
            raise _Stop
        probe = search.loader(settings)
        rate = predicted(probe, step.rate, epoch_samples)
        if (
            best is None
            or rate > best[1] * (1 + margin)
            or (rate >= best[1] * (1 - margin) and cost(settings) < cost(best[0].settings))
        ):
            best = (probe, rate)
        if probe.rate >= step.rate * (1 + margin):
            outcome.stopped = (
                f"compute-bound: the loader ({describe(settings)}) draws {probe.rate:,.0f} samples/s, "
                f"more than the {step.rate:,.0f} samples/s the step takes, so more input speed buys "
                "nothing"
            )
            best = (probe, rate)
            raise _Stop
        return probe

    try:
        for pipeline in pipelines:
            counts = worker_counts(cpus) if PIPELINES[pipeline].uses_workers else [0]
            of_pipeline = []
            for workers in counts:
                settings = {
                    "pipeline": pipeline,
                    "num_workers": workers,
                    "persistent_workers": workers > 0,
                    "prefetch_factor": None,
                    "pin_memory": on_cuda and workers > 0,
                }
                of_pipeline.append(consider(settings))
            top = max(of_pipeline, key=lambda p: predicted(p, step.rate, epoch_samples))
            if top.settings["num_workers"]:
                variants: list[dict[str, Any]] = [{"persistent_workers": False}, {"prefetch_factor": 4}]
                if on_cuda:
                    variants.append({"pin_memory": False})
                for variant in variants:
                    consider({**top.settings, **variant})
        outcome.stopped = "every setting was measured and no loader outran the step: the fastest predicted one is kept"
    except _Stop:
        pass
    except KeyboardInterrupt:
        outcome.stopped = "interrupted (Ctrl-C): the best found so far is kept"
        for probe in search.probes:  # a probe kept while its second measurement was interrupted counts too
            if probe.kind == "loader":
                rate = predicted(probe, step.rate, epoch_samples)
                if best is None or rate > best[1]:
                    best = (probe, rate)
    if best is not None:
        outcome.best = {k: best[0].settings[k] for k in LOADER_KEYS}
    if outcome.stopped.startswith("interrupted"):
        return outcome
    try:
        verify(search, base, outcome, margin, tune_batch_size)
    except KeyboardInterrupt:
        outcome.stopped += "; the final check was interrupted (Ctrl-C)"
    return outcome


def verify(search: Search, base: dict, outcome: Outcome, margin: float, tune_batch_size: bool) -> None:
    """Train a few steps with the best settings and with the input config's, loader and step together."""
    if search.out_of_time():
        return
    chosen = search.together({**outcome.best, "batch_size": base["batch_size"]}, "best predicted")
    start = {k: base[k] for k in LOADER_KEYS}
    if start != outcome.best and not search.out_of_time():
        outcome.baseline = search.together({**start, "batch_size": base["batch_size"]}, "input config")
        if outcome.baseline.rate >= chosen.rate * (1 + margin) or (
            outcome.baseline.rate >= chosen.rate * (1 - margin) and cost(start) < cost(outcome.best)
        ):
            outcome.best, chosen = start, outcome.baseline
            outcome.stopped += "; measured together, the input config's settings were as fast, and cheaper"
    outcome.chosen = chosen
    if search.out_of_time():
        return
    bigger = base["batch_size"] * 2
    outcome.bigger_batch = search.step(bigger)
    if tune_batch_size:
        for size in (bigger, bigger * 2):
            if search.out_of_time():
                break
            probe = search.together({**outcome.best, "batch_size": size}, f"batch {size}")
            if probe.rate > outcome.chosen.rate * (1 + margin):
                outcome.chosen = probe
                outcome.best = {**outcome.best, "batch_size": size}
