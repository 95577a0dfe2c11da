"""How tune decides for a project that is not the lab's: whole trial fits, each in a fresh process, within a budget.

1. The untouched settings train ``repeats`` times: the spread of their steady samples/s is the noise (never
   under 5 %), and the share of train time the host waited for data is EpochTimer's ceiling on what any loader
   setting can win. Where that ceiling is within the noise, nothing is tried and the settings stay.
2. Workers: 0, 1, 2, 4, ... up to the usable CPUs (or the values the user named), with workers kept between
   epochs where a knob allows, fewest first, until two more counts in a row buy nothing beyond the noise or input
   no longer bounds the run.
3. Around the best: workers not kept, a prefetch factor of 4, pinned memory the other way (on a GPU), the values
   the user named for any other knob, the batch size only when asked; each kept only where it wins by more than
   the noise.
4. The best trains once more and the untouched settings once more beside it, so that a drift of the machine during
   the search falls on both; the best replaces them only if the median of its runs still beats theirs by more than
   the noise (their spread over every run included).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from mnistperf.diagnosis.record.summary import INPUT_BOUND_SHARE
from mnistperf.errors import ConfigError
from mnistperf.tune.knobs import REBUILD, Knobs, worker_counts

NOISE_FLOOR = 0.05  # differences under 5 % are never taken as real
REPEATS = 2  # runs of the untouched settings, for the noise
IDLE_COUNTS = 2  # worker counts in a row that buy nothing before the sweep stops (one worker may only overlap the step)


@dataclass
class Run:
    """One trial fit's figures, or why it has none."""

    rate: float | None = None  # steady samples/s
    wait: float | None = None  # share of train time the host waited for data
    seconds: float = 0.0
    error: str | None = None
    timed_out: bool = False  # stopped at the end of the budget
    loader: dict[str, Any] | None = None  # the DataLoader it trained from, as it held its settings
    accelerator: str | None = None
    device: str | None = None  # the device it trained on, in words


Measure = Callable[[dict[str, Any], float], Run]  # (settings by knob key, seconds allowed) -> one run


@dataclass
class Trial:
    """One setting measured: every knob's value, and its runs' figures."""

    settings: dict[str, Any]
    runs: list[Run] = field(default_factory=list)
    label: str = ""

    @property
    def error(self) -> str | None:
        """Why the setting did not train (its first run's error), or None."""
        return self.runs[0].error if self.runs else None

    @property
    def rates(self) -> list[float]:
        """Steady samples/s of each run that has them."""
        return [r.rate for r in self.runs if r.rate is not None]

    @property
    def rate(self) -> float:
        """Median steady samples/s of the runs (0 without any)."""
        return median(self.rates) if self.rates else 0.0

    @property
    def wait(self) -> float | None:
        """Median share of train time the host waited for data."""
        waits = [r.wait for r in self.runs if r.wait is not None]
        return median(waits) if waits else None

    @property
    def spread(self) -> float:
        """Relative spread of the runs: (max - min) / median."""
        rates = self.rates
        return (max(rates) - min(rates)) / self.rate if len(rates) > 1 and self.rate else 0.0

    @property
    def seconds(self) -> float:
        """Wall seconds of all its runs."""
        return sum(r.seconds for r in self.runs)


@dataclass
class Outcome:
    """What tune found: every trial, the untouched settings' first, the chosen one, the noise and why it stopped."""

    knobs: Knobs
    trials: list[Trial]
    chosen: Trial
    noise: float
    stopped: str
    bound: str  # what bounds the run, with EpochTimer's ceiling
    spent_s: float = 0.0

    @property
    def baseline(self) -> Trial:
        """The untouched settings' trial."""
        return self.trials[0]

    @property
    def kept(self) -> bool:
        """Whether the untouched settings stay."""
        return self.chosen is self.baseline

    @property
    def speedup(self) -> float:
        """The chosen settings' steady samples/s over the untouched settings'."""
        return self.chosen.rate / self.baseline.rate if self.baseline.rate else 1.0

    def changes(self, via: str | None = None) -> dict[str, Any]:
        """The knobs the chosen settings change, by key (only those applied ``via`` one way, if given)."""
        return {
            k.key: self.chosen.settings[k.key]
            for k in self.knobs.knobs
            if (via is None or k.via == via) and self.chosen.settings.get(k.key) != self.baseline.settings.get(k.key)
        }


class _Stop(Exception):
    """The search ends here: the reason is set on the search."""


def describe(settings: dict[str, Any], knobs: Knobs) -> str:
    """Settings as ``name=value`` words, by each knob's own name."""
    return " ".join(f"{k.name}={settings.get(k.key)}" for k in knobs.knobs)


class Search:
    """Runs trials within the budget, logging each as it ends."""

    def __init__(self, knobs: Knobs, measure: Measure, budget_s: float, log: Callable[[str], None], where: str):
        self.knobs, self.measure, self.log, self.where = knobs, measure, log, where
        self.began = time.perf_counter()
        self.deadline = self.began + budget_s
        self.trials: list[Trial] = []
        self.stopped = ""

    def left(self) -> float:
        """Seconds of the budget left."""
        return self.deadline - time.perf_counter()

    def _run(self, trial: Trial, first: bool) -> Run:
        runs = [r.seconds for t in self.trials for r in t.runs if r.error is None]
        if runs and self.left() < median(runs) and not first:  # a typical trial would not finish in time
            self.stopped = "the budget is spent: the best found so far is kept"
            raise _Stop
        run = self.measure(trial.settings, max(self.left(), 1.0))
        if run.timed_out:
            if first:
                raise ConfigError(
                    f"{self.where}: the untouched settings' first trial fit did not end within the budget "
                    f"({run.seconds:.0f} s); give a larger budget or fewer steps"
                )
            self.stopped = "the budget ended during a trial, which was stopped: the best found so far is kept"
            raise _Stop
        trial.runs.append(run)
        return run

    def trial(self, settings: dict[str, Any], label: str = "") -> Trial:
        """Measure these settings once, as a new trial."""
        trial = Trial(dict(settings), label=label)
        run = self._run(trial, first=not self.trials)
        self.trials.append(trial)
        if len(self.trials) == 1:
            untouched(self.knobs, trial)
        self._say(trial, run)
        return trial

    def again(self, trial: Trial) -> None:
        """Measure a trial's settings once more."""
        self._say(trial, self._run(trial, first=False))

    def _say(self, trial: Trial, run: Run) -> None:
        index = self.trials.index(trial) + 1
        head = f"[trial {index}{'.' + str(len(trial.runs)) if len(trial.runs) > 1 else ''}] "
        head += describe(trial.settings, self.knobs)
        if run.error is not None:
            self.log(f"{head}: failed: {run.error} ({run.seconds:.1f} s)")
            return
        base = self.trials[0].rate
        versus = f" ({run.rate / base:.2f}x)" if trial is not self.trials[0] and base and run.rate else ""
        wait = f", input wait {run.wait:.0%}" if run.wait is not None else ""
        label = f" [{trial.label}]" if trial.label else ""
        self.log(f"{head}: {run.rate or 0:,.0f} samples/s{versus}{wait} ({run.seconds:.1f} s){label}")


def beats(trial: Trial, best: Trial, noise: float) -> bool:
    """Whether a trial trained and is faster than the best by more than the noise."""
    return trial.error is None and trial.rate > best.rate * (1 + noise)


def normalized(knobs: Knobs, settings: dict[str, Any]) -> dict[str, Any]:
    """Settings a loader accepts: with no workers, none kept between epochs."""
    persistent, workers = knobs.by_setting("persistent_workers"), knobs.by_setting("num_workers")
    if persistent is not None and workers is not None and settings.get(workers.key) == 0:
        settings = {**settings, persistent.key: False}
    return settings


def with_changes(knobs: Knobs, base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """``base`` with DataLoader settings (``num_workers``, ...) changed through their knobs."""
    settings = dict(base)
    for setting, value in changes.items():
        knob = knobs.by_setting(setting)
        if knob is not None:
            settings[knob.key] = value
    return normalized(knobs, settings)


def workers_of(trial: Trial, knobs: Knobs) -> int:
    """The worker processes a trial's loader used (its knob's value, else what the loader held)."""
    knob = knobs.by_setting("num_workers")
    if knob is not None and isinstance(trial.settings.get(knob.key), int):
        return trial.settings[knob.key]
    loader = next((r.loader for r in trial.runs if r.loader), None)
    return int((loader or {}).get("num_workers") or 0)


def untouched(knobs: Knobs, baseline: Trial) -> None:
    """Fill in each rebuilt knob's current value from the loader the untouched settings trained from."""
    loader = next((r.loader for r in baseline.runs if r.loader), None) or {}
    for knob in knobs.knobs:
        if knob.via == REBUILD and knob.setting in loader:
            knob.current = loader[knob.setting]
            baseline.settings[knob.key] = knob.current


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
    """Search the knobs' settings with whole trial fits, in the order and with the rules the module describes.

    Args:
        knobs: what may change, and how.
        measure: runs one trial fit of given settings (by knob key) within given seconds.
        budget_s: seconds for the whole search.
        log: where each trial's line goes as it ends.
        cpus: the CPUs this process may use (the most workers tried).
        where: the project as errors name it (its config file, or ``tune_loaders``).
        repeats: runs of the untouched settings.
        tune_batch_size: whether the batch size is tried (it changes the training).
        fix: what the user does where the untouched settings do not train.
    """
    search = Search(knobs, measure, budget_s, log, where)
    baseline = search.trial({k.key: k.current for k in knobs.knobs}, "untouched")
    if baseline.error is not None:
        own = "ConfigError: "  # tune's own (a loader it cannot rebuild): the fix is in the message
        if baseline.error.startswith(own):
            raise ConfigError(f"{where}: {baseline.error[len(own) :]}")
        raise ConfigError(f"{where}: the untouched settings do not train: {baseline.error}; {fix}")
    best, noise, text, worth = baseline, NOISE_FLOOR, "", True
    try:
        for _ in range(repeats - 1):
            search.again(baseline)
        noise = max(NOISE_FLOOR, baseline.spread)
        text, worth = bound(baseline, noise)
        log(f"untouched: {baseline.rate:,.0f} samples/s, noise {noise:.0%}; {text}")
        if not worth:
            search.stopped = "not input-bound: the current settings are kept"
            raise _Stop
        best = sweep_workers(search, knobs, baseline, noise, cpus)
        on_gpu = any(r.accelerator == "cuda" for r in baseline.runs)
        for changes, label in variants(knobs, best, on_gpu, tune_batch_size):
            candidate = normalized(knobs, {**best.settings, **changes})
            if any(t.settings == candidate for t in search.trials):
                continue
            trial = search.trial(candidate, label)
            if beats(trial, best, noise):
                best = trial
        search.stopped = search.stopped or "every setting planned was measured"
    except _Stop:
        pass
    except KeyboardInterrupt:
        search.stopped = "interrupted (Ctrl-C): the best found so far is kept"
    if not text:  # stopped before the noise was measured
        text = bound(baseline, noise)[0]
    chosen, noise = confirm(search, baseline, best, noise)
    return Outcome(knobs, search.trials, chosen, noise, search.stopped, text, time.perf_counter() - search.began)


def sweep_workers(search: Search, knobs: Knobs, baseline: Trial, noise: float, cpus: int) -> Trial:
    """Worker counts, fewest first, until one more buys nothing or input no longer bounds the run; the best trial."""
    knob = knobs.by_setting("num_workers")
    if knob is None:
        return baseline
    best, idle = baseline, 0
    asked = knob.values is not None
    persistent = knobs.by_setting("persistent_workers")
    keep = persistent is not None and (persistent.values is None or True in persistent.values)
    for count in knob.values if knob.values is not None else worker_counts(cpus):
        if count == baseline.settings.get(knob.key):
            continue
        changes: dict[str, Any] = {"num_workers": count}
        if count and keep:
            changes["persistent_workers"] = True
        trial = search.trial(with_changes(knobs, best.settings, changes), f"{count} worker{'s' if count != 1 else ''}")
        if beats(trial, best, noise):
            best, idle = trial, 0
            if trial.wait is not None and trial.wait <= noise:
                search.stopped = f"input no longer bounds the run (the host waited {trial.wait:.0%} of train time)"
                break
        elif not asked and count > workers_of(best, knobs):
            idle += 1
            if idle == IDLE_COUNTS:
                break  # more workers bought nothing, twice over
    return best


def confirm(search: Search, baseline: Trial, best: Trial, noise: float) -> tuple[Trial, float]:
    """The best trains once more, then the untouched settings beside it; the best only if it still beats them.

    It must beat the median of their runs by more than the noise, their spread over every run included. Returns the
    chosen trial and the noise it was judged by.
    """
    if best is baseline:
        return baseline, noise
    try:
        if len(best.runs) < 2 and not search.stopped.startswith("interrupted"):
            search.again(best)
        if not search.stopped.startswith("interrupted"):
            search.again(baseline)  # measured late too, so that a drift of the machine falls on both
    except _Stop:
        pass
    except KeyboardInterrupt:
        search.stopped = "interrupted (Ctrl-C): the best found so far is kept"
    noise = max(noise, baseline.spread)
    if beats(best, baseline, noise):
        return best, noise
    search.stopped += "; measured again, the best did not beat the untouched settings by more than the noise"
    return baseline, noise
