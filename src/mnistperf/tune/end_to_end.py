"""How tune searches the loader of a project that is not the lab's, each trial a whole fit in a fresh process.

The untouched settings train ``repeats`` times: their spread is the noise, their input wait EpochTimer's ceiling on
what any setting can win (within the noise, nothing is tried). Then worker counts, fewest first, until two more in
a row buy nothing or input no longer bounds the run; then the other knobs around the best; then the best trains
again beside the untouched settings, and replaces them only where it still beats them by more than the noise.
Why: docs/tune.md#what-is-measured.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from mnistperf.diagnosis.record.verdict import INPUT_BOUND_SHARE
from mnistperf.errors import ConfigError
from mnistperf.tune.knobs import REBUILD, Knobs, worker_counts
from mnistperf.tune.search import INTERRUPTED, NOISE_FLOOR, Measure, Outcome, Run, Search, Stop, Trial, beats, describe

REPEATS = 2  # runs of the untouched settings, for the noise
IDLE_COUNTS = 2  # worker counts in a row that buy nothing before the sweep stops (one worker may only overlap the step)


def say(search: Search, trial: Trial, run: Run) -> str:
    """A trial's line as each of its runs ends: settings, samples/s against the untouched settings', input wait."""
    head = f"[trial {search.trials.index(trial) + 1}{'.' + str(len(trial.runs)) if len(trial.runs) > 1 else ''}] "
    head += describe(trial.settings)
    if run.error is not None:
        return f"{head}: failed: {run.error} ({run.seconds:.1f} s)"
    rate, base = run.rates[0], search.trials[0].rate
    versus = f" ({rate / base:.2f}x)" if trial is not search.trials[0] and base and rate else ""
    wait = f", input wait {run.wait:.0%}" if run.wait is not None else ""
    label = f" [{trial.label}]" if trial.label else ""
    return f"{head}: {rate:,.0f} samples/s{versus}{wait} ({run.seconds:.1f} s){label}"


def normalized(knobs: Knobs, settings: dict[str, Any]) -> dict[str, Any]:
    """Settings a loader accepts: with no workers, none kept between epochs."""
    persistent, workers = knobs.by_setting("persistent_workers"), knobs.by_setting("num_workers")
    if persistent is not None and workers is not None and settings.get(workers.key) == 0:
        settings = {**settings, persistent.key: False}
    return settings


def workers_of(trial: Trial, knobs: Knobs) -> int:
    """The worker processes a trial's loader used (its knob's value, else what the loader held)."""
    knob = knobs.by_setting("num_workers")
    if knob is not None and isinstance(trial.settings.get(knob.key), int):
        return trial.settings[knob.key]
    loader = next((r.loader for r in trial.runs if r.loader), None)
    return int((loader or {}).get("num_workers") or 0)


def bound(baseline: Trial, noise: float) -> tuple[str, bool]:
    """What bounds the run, with EpochTimer's ceiling, and whether a loader setting could win more than the noise."""
    wait = baseline.wait
    if wait is None:
        return "the input wait was not measured", True
    ceiling = (
        f"the host waited for data {wait:.0%} of train time, so with input free an epoch's training would take at "
        f"most {wait:.0%} less (EpochTimer's ceiling)"
    )
    if wait >= INPUT_BOUND_SHARE:
        return f"input-bound: {ceiling}", True
    if wait <= noise:
        return (
            f"not input-bound: {ceiling}, within the noise of these measurements ({noise:.0%}); no loader setting "
            "can win more, so none was tried and the current settings are kept",
            False,
        )
    return f"not input-bound: {ceiling}; about that much, at most, is what a loader setting can win", True


def variants(knobs: Knobs, best: Trial, on_gpu: bool, tune_batch_size: bool) -> list[tuple[dict[str, Any], str]]:
    """The settings tried around the best workers: each as (changes by knob key, label)."""
    tried: list[tuple[dict[str, Any], str]] = []
    workers = workers_of(best, knobs)
    for knob in knobs.knobs:
        value = best.settings.get(knob.key)
        if knob.values is not None and knob.setting != "num_workers":  # the user's own values, each tried
            tried += [({knob.key: v}, f"{knob.name}={v}, as asked") for v in knob.values if v != value]
        elif knob.setting == "persistent_workers" and workers > 0:
            tried.append(({knob.key: not value}, "workers kept between epochs" if not value else "workers not kept"))
        elif knob.setting == "prefetch_factor" and workers > 0:
            factor = 2 if value == 4 else 4
            tried.append(({knob.key: factor}, f"prefetch factor {factor}"))
        elif knob.setting == "pin_memory" and on_gpu:
            tried.append(({knob.key: not value}, "pinned memory" if not value else "memory not pinned"))
        elif knob.setting == "batch_size" and tune_batch_size and isinstance(value, int):
            tried += [({knob.key: value * f}, f"batch {value * f}: changes the training") for f in (2, 4)]
    return tried


# What the user does where the untouched settings do not train.
UNTOUCHED_FIX = "fix it so that your project trains as it is, then tune"


def run(
    knobs: Knobs,
    measure: Measure,
    budget_s: float,
    log: Callable[[str], None],
    cpus: int,
    where: str,
    repeats: int = REPEATS,
    tune_batch_size: bool = False,
    fix: str = UNTOUCHED_FIX,
) -> Outcome:
    """Search the knobs' settings (by knob key) with whole trial fits, as the module describes.

    ``cpus`` bounds the workers tried, ``where`` names the project in errors (its config, or ``tune_loaders``), and
    ``fix`` says what to do where the untouched settings do not train.
    """

    def measured(trial: Trial, seconds: float) -> Run:
        run = measure(trial, seconds)
        if not search.trials and run.loader:  # the untouched settings' first run: each rebuilt knob's current value
            for knob in knobs.knobs:
                if knob.via == REBUILD and knob.setting in run.loader:
                    knob.current = trial.settings[knob.key] = run.loader[knob.setting]
        return run

    search = Search(measured, budget_s, log, say)
    try:
        baseline = search.trial({k.key: k.current for k in knobs.knobs}, "untouched")
    except Stop:  # stopped at the end of the budget
        raise ConfigError(
            f"{where}: the untouched settings' first trial fit did not end within the budget ({budget_s:.0f} s); "
            "give a larger budget or fewer steps"
        ) from None
    if baseline.error is not None:
        own = "ConfigError: "  # tune's own (a loader it cannot rebuild): the fix is in the message
        if baseline.error.startswith(own):
            raise ConfigError(f"{where}: {baseline.error[len(own) :]}")
        raise ConfigError(f"{where}: the untouched settings do not train: {baseline.error}; {fix}")
    search.best, noise, text = baseline, NOISE_FLOOR, ""
    with search.stops():
        for _ in range(repeats - 1):
            search.again(baseline)
        noise = max(NOISE_FLOOR, baseline.spread)
        text, worth = bound(baseline, noise)
        log(f"untouched: {baseline.rate:,.0f} samples/s, noise {noise:.0%}; {text}")
        if not worth:
            raise Stop("not input-bound: the current settings are kept")
        sweep_workers(search, knobs, baseline, noise, cpus)
        on_gpu = any(r.accelerator == "cuda" for r in baseline.runs)
        for changes, label in variants(knobs, search.best, on_gpu, tune_batch_size):
            candidate = normalized(knobs, {**search.best.settings, **changes})
            if any(t.settings == candidate for t in search.trials):
                continue
            trial = search.trial(candidate, label)
            if beats(trial.rate, search.best.rate, noise):
                search.best = trial
        search.stopped = search.stopped or "every setting planned was measured"
    if not text:  # stopped before the noise was measured
        text = bound(baseline, noise)[0]
    chosen, noise = confirm(search, baseline, noise)
    spent_s = time.perf_counter() - search.began
    return Outcome(search.trials, chosen.settings, chosen, baseline, noise, search.stopped, text, spent_s)


def sweep_workers(search: Search, knobs: Knobs, baseline: Trial, noise: float, cpus: int) -> None:
    """Worker counts, fewest first, until one more buys nothing or input no longer bounds the run."""
    knob = knobs.by_setting("num_workers")
    if knob is None:
        return
    best, idle, asked = search.best or baseline, 0, knob.values is not None
    persistent = knobs.by_setting("persistent_workers")
    keep = persistent is not None and (persistent.values is None or True in persistent.values)
    for count in knob.values if knob.values is not None else worker_counts(cpus):
        if count == baseline.settings.get(knob.key):
            continue
        changes: dict[str, Any] = {knob.key: count}
        if count and keep and persistent is not None:
            changes[persistent.key] = True
        settings = normalized(knobs, {**best.settings, **changes})
        trial = search.trial(settings, f"{count} worker{'s' if count != 1 else ''}")
        if beats(trial.rate, best.rate, noise):
            search.best = best = trial
            idle = 0
            if trial.wait is not None and trial.wait <= noise:
                search.stopped = f"input no longer bounds the run (the host waited {trial.wait:.0%} of train time)"
                return
        elif not asked and count > workers_of(best, knobs):
            idle += 1
            if idle == IDLE_COUNTS:
                return  # more workers bought nothing, twice over


def confirm(search: Search, baseline: Trial, noise: float) -> tuple[Trial, float]:
    """The best trains again, then the untouched settings beside it; the chosen trial and the noise it was judged by.

    The best is chosen only if it still beats the median of their runs by more than the noise, their spread included.
    """
    best = search.best
    if best is baseline or best is None:
        return baseline, noise
    if search.stopped != INTERRUPTED:
        with search.stops():
            if len(best.runs) < 2:
                search.again(best)
            search.again(baseline)  # measured late too, so that a drift of the machine falls on both
    noise = max(noise, baseline.spread)
    if beats(best.rate, baseline.rate, noise):
        return best, noise
    search.stopped += "; measured again, the best did not beat the untouched settings by more than the noise"
    return baseline, noise
