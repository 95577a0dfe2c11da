"""How tune searches a lab stage's loader: the step, then the cheapest loaders first, until input no longer bounds it.

A loader's predicted training rate is min(loader, step) with workers and 1 / (1/loader + 1/step) without,
less each epoch's start. Pipelines are tried in the order of their class's ``tune_rank``, each with the worker counts
and the variants around its best that ``policy`` gives. The search stops once a loader outruns the step by more than
the probes' noise; the best prediction and the input config then train side by side, and ``policy`` settles which
stays, fewer worker processes counting as cheaper. Every probe's figure is the median of 3. Why: docs/stages.md#tune.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import torch

from mnistperf.data import schema
from mnistperf.data.datamodule import MNISTDataModule
from mnistperf.data.ingest import prepare
from mnistperf.data.pipelines.registry import PIPELINES, tune_order
from mnistperf.diagnosis.measure.loader_options import SPEED_SETTINGS
from mnistperf.errors import ConfigError
from mnistperf.tune import policy
from mnistperf.tune.probes import BOTH, LOADER, STEP, Probes
from mnistperf.tune.search import (
    INTERRUPTED,
    NOISE_FLOOR,
    TIMED_OUT,
    Outcome,
    Run,
    Search,
    Stop,
    Trial,
    beats,
    describe,
)

# The lab's loader settings tune chooses: its pipeline, and the rest but the batch size (only with --tune-batch-size).
LOADER_KEYS = ("pipeline", *SPEED_SETTINGS)


def probe_note(probe: Trial) -> str:
    """What a probe's line and row add: its label, a loader's epoch start, whether it was repeated, a failed run."""
    start = f"epoch start {probe.runs[0].start_s:.2f} s" if probe.kind == LOADER and probe.rates else ""
    repeated = f"repeated ({len(probe.rates)} runs): noisy" if len(probe.rates) > len(probe.runs[0].rates) else ""
    failed = next((f"failed: {r.error}" for r in probe.runs if r.error), "")  # (stopped at the budget's end)
    return ", ".join(n for n in (probe.label, start, repeated, failed) if n)


def rate_said(probe: Trial) -> list[str]:
    """A probe's samples/s and spread, as its table's row has them; "-" for each where no run of it measured any."""
    return [f"{probe.rate:,.0f}", f"{probe.spread:.0%}"] if probe.rates else ["-", "-"]


def probe_line(search: Search, probe: Trial, run: Run) -> str:
    """A probe's line: its number, kind and settings, samples/s and spread (or not measured), note and seconds."""
    rate = f"{probe.rate:,.0f} samples/s" + (f" (spread {probe.spread:.0%})" if probe.spread else "")
    note = probe_note(probe)
    return (
        f"[probe {search.trials.index(probe) + 1}] {probe.kind:<6} {describe(probe.settings)}: "
        f"{rate if probe.rates else 'not measured'}{', ' + note if note else ''} ({probe.seconds:.1f} s)"
    )


def step_probes(outcome: Outcome) -> list[Trial]:
    """The step probes: at the config's batch size, then (where measured) at the first bigger batch."""
    return [t for t in outcome.trials if t.kind == STEP and t.rates]


def noise_warning(outcome: Outcome) -> str | None:
    """A sentence for the user when the probes were too noisy for small differences to mean anything."""
    noisy = [p for p in outcome.trials if p.spread > policy.NOISY_SPREAD]
    if not noisy:
        return None
    return (
        f"the machine was busy: {len(noisy)} of {len(outcome.trials)} probes varied by more than "
        f"{policy.NOISY_SPREAD:.0%} between repeats (up to {max(p.spread for p in noisy):.0%}) even after repeating, "
        "so differences smaller than that are noise; run tune again on an idle machine before trusting close calls"
    )


def batch_projection(outcome: Outcome) -> str | None:
    """What a bigger batch would do to the step, only where the two step probes can tell."""
    probes = step_probes(outcome)
    if len(probes) < 2:
        return None
    step, bigger = probes[:2]
    size = bigger.settings["batch_size"]
    noise = max(bigger.spread, step.spread, NOISE_FLOOR)
    if noise > policy.NOISY_SPREAD:
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
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def split_rows(datamodule: MNISTDataModule) -> int:
    """Rows of the DataModule's prepared training split, from the Parquet footers."""
    path = prepare.require_prepared(datamodule.options.dataset, datamodule.data_dir, "train")
    return sum(pq.read_metadata(f).num_rows for f in schema.parquet_files(path))


def pipelines_to_try(options: dict, device: torch.device, log: Callable[[str], None]) -> list[str]:
    """The registered pipelines tune tries with the input config's options, in order, less those that cannot run."""
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


def predicted(loader: Trial, step_rate: float, epoch_samples: int) -> float:
    """Training samples/s a loader should give beside a step of step_rate, its epoch start included."""
    rate = loader.rate
    steady = min(rate, step_rate) if loader.settings.get("num_workers") else 1 / (1 / rate + 1 / step_rate)
    return epoch_samples / (epoch_samples / steady + loader.runs[0].start_s)


def cost(settings: dict) -> tuple:
    """Fewer worker processes first, then no pinning, then less prefetching."""
    return (settings.get("num_workers", 0), bool(settings.get("pin_memory")), settings.get("prefetch_factor") or 2)


def outcome(
    probes: Probes,
    budget_s: float,
    log: Callable[[str], None],
    epoch_samples: int,
    pipelines: list[str],
    cpus: int,
    tune_batch_size: bool,
) -> Outcome:
    """Search loader settings for this step, in the order and with the stopping rule the module describes."""
    base, on_cuda = probes.options, probes.device.type == "cuda"
    search = Search(probes, budget_s, log, probe_line, noisy=policy.NOISY_SPREAD)
    step = search.trial({"batch_size": base["batch_size"]}, kind=STEP)
    margin = max(NOISE_FLOOR, step.spread)

    def rate(probe: Trial) -> float:
        return predicted(probe, step.rate, epoch_samples)

    def consider(settings: dict) -> Trial:
        probe = search.trial(settings, kind=LOADER)
        best = search.best
        if best is None or beats(rate(probe), rate(best), margin, cost(settings) < cost(best.settings)):
            search.best = probe
        if probe.rate > step.rate * (1 + margin):
            search.best = probe
            raise Stop(
                f"compute-bound: the loader ({describe(settings)}) draws {probe.rate:,.0f} samples/s, more than the "
                f"{step.rate:,.0f} samples/s the step takes, so more input speed buys nothing"
            )
        return probe

    with search.stops():
        for pipeline in pipelines:
            counts = policy.worker_counts(cpus) if PIPELINES[pipeline].uses_workers else [0]
            of_pipeline = []
            for workers in counts:  # workers kept between epochs; on CUDA their batches pinned, and so tried unpinned
                kept = {"num_workers": workers, "persistent_workers": True, "prefetch_factor": None}
                settings = {"pipeline": pipeline, **policy.without_workers(kept), "pin_memory": on_cuda and workers > 0}
                of_pipeline.append(consider(settings))
            top = max(of_pipeline, key=rate)
            for changes, _ in policy.variants_around(top.settings, on_gpu=top.settings["pin_memory"]):
                consider({**top.settings, **changes})
        search.stopped = "every setting was measured and no loader outran the step: the fastest predicted one is kept"
    if search.stopped == INTERRUPTED:  # a probe kept while it was measured again was not considered: predictions count
        search.best = max((p for p in search.trials if p.kind == LOADER), key=rate, default=search.best)
    start = {k: base[k] for k in LOADER_KEYS}
    best = {k: search.best.settings[k] for k in LOADER_KEYS} if search.best is not None else start
    found = Outcome(search.trials, best, noise=margin)
    with search.stops():
        closing_check(search, base["batch_size"], start, found, tune_batch_size)
    found.stopped = search.stopped
    input_config = {**start, "batch_size": base["batch_size"]}
    measured = any(t.rates for t in search.trials if t.kind == BOTH and t.settings == input_config)
    if start != found.best and not measured:  # the closing rule could not be followed
        budget = " (more --budget is)" if found.stopped.startswith(TIMED_OUT) else ""
        found.stopped += f"; the best predicted was not measured beside the input config's settings{budget}"
    return found


def closing_check(search: Search, size: int, start: dict, found: Outcome, tune_batch_size: bool) -> None:
    """The best and the input settings (``start``) side by side; the step at a bigger batch; bigger batches if asked."""
    found.chosen = search.trial({**found.best, "batch_size": size}, "best predicted", BOTH)
    if start != found.best:
        found.baseline = search.trial({**start, "batch_size": size}, "input config", BOTH)
        name, cheaper = "the input config's settings", cost(found.best) < cost(start)
        found.chosen, found.noise = policy.settled(search, found.chosen, found.baseline, found.noise, name, cheaper)
        if found.chosen is found.baseline:
            found.best = start
    sizes = [size * multiple for multiple in policy.BATCH_MULTIPLES]
    search.trial({"batch_size": sizes[0]}, kind=STEP)  # what a bigger batch would do to the step
    if tune_batch_size:
        for bigger in sizes:
            probe = search.trial({**found.best, "batch_size": bigger}, f"batch {bigger}", BOTH)
            if beats(probe.rate, found.chosen.rate, found.noise):
                found.chosen = probe
                found.best = {**found.best, "batch_size": bigger}
