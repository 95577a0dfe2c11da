"""The one search under ``mnistperf tune``: settings measured one trial at a time within a budget, each said as it ends.

A tuner gives what one trial is (``measure``) and what to try next (its plan). Here every trial is kept, a trial
is not started where a typical one so far would not finish in the budget left, a plan ends at its stop or at
Ctrl-C with the best found so far, and a setting beats another only by more than the noise, never under NOISE_FLOOR.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from statistics import median
from typing import Any

NOISE_FLOOR = 0.05  # differences under 5 % are never taken as real
INTERRUPTED = "interrupted (Ctrl-C): the best found so far is kept"
TIMED_OUT = "the budget ended during a trial, which was stopped: the best found so far is kept"


@dataclass
class Run:
    """One measurement of a setting: samples/s of each of its repeats, or why it has none."""

    rates: list[float] = field(default_factory=list)
    wait: float | None = None  # share of train time the host waited for data
    seconds: float = 0.0
    error: str | None = None
    timed_out: bool = False  # stopped at the end of the budget
    start_s: float = 0.0  # a new epoch's time to its first batch (the lab's loader probes)
    loader: dict[str, Any] | None = None  # the DataLoader a trial fit trained from, as it held its settings
    accelerator: str | None = None
    device: str | None = None  # the device it trained on, in words


@dataclass
class Trial:
    """One setting measured: its settings and every run of them."""

    settings: dict[str, Any]
    label: str = ""
    kind: str = ""  # what a lab probe times: "step", "loader" or "both"
    runs: list[Run] = field(default_factory=list)

    @property
    def error(self) -> str | None:
        """Why the setting did not train (its first run's error), or None."""
        return self.runs[0].error if self.runs else None

    @property
    def rates(self) -> list[float]:
        """Samples/s of every repeat of every run."""
        return [rate for run in self.runs for rate in run.rates]

    @property
    def rate(self) -> float:
        """Median samples/s (0 without any)."""
        return median(self.rates) if self.rates else 0.0

    @property
    def wait(self) -> float | None:
        """Median share of train time the host waited for data."""
        waits = [r.wait for r in self.runs if r.wait is not None]
        return median(waits) if waits else None

    @property
    def spread(self) -> float:
        """Relative spread of the rates: (max - min) / median."""
        rates = self.rates
        return (max(rates) - min(rates)) / self.rate if len(rates) > 1 and self.rate else 0.0

    @property
    def seconds(self) -> float:
        """Wall seconds of all its runs."""
        return sum(r.seconds for r in self.runs)


@dataclass
class Outcome:
    """What a search found: every trial, the settings chosen, the noise they were judged by and why it stopped."""

    trials: list[Trial]
    best: dict[str, Any]  # the settings chosen
    chosen: Trial | None = None  # the trial that trained them (None where the budget ended first)
    baseline: Trial | None = None  # the settings started from, measured the same way (None where not measured)
    noise: float = NOISE_FLOOR
    stopped: str = ""
    bound: str = ""  # what bounds the run, where the search measured it
    spent_s: float = 0.0

    @property
    def kept(self) -> bool:
        """Whether the settings started from stay."""
        return self.chosen is self.baseline

    @property
    def speedup(self) -> float:
        """The chosen settings' samples/s over those started from."""
        if self.chosen is None or self.baseline is None or not self.baseline.rate:
            return 1.0
        return self.chosen.rate / self.baseline.rate

    def changes(self, keys: list[str] | None = None) -> dict[str, Any]:
        """The settings the chosen change from those started from, by key (only ``keys``, if given)."""
        started = self.baseline.settings if self.baseline is not None else {}
        return {k: v for k, v in self.best.items() if (keys is None or k in keys) and v != started.get(k)}


class Stop(Exception):
    """The plan ends here, for the reason given."""


Measure = Callable[[Trial, float], Run]  # (the trial, seconds allowed) -> one run of its settings
LineOf = Callable[["Search", Trial, Run], str]  # a trial's line, as its latest run ends


def describe(settings: dict[str, Any]) -> str:
    """Settings as ``name=value`` words, each by its key's last part."""
    return " ".join(f"{key.rsplit('.', 1)[-1]}={value}" for key, value in settings.items())


def beats(rate: float, other: float, noise: float, cheaper: bool = False) -> bool:
    """Whether ``rate`` beats ``other``: faster by more than the noise, or, being ``cheaper``, as fast within it."""
    return rate > other * (1 + noise) or (cheaper and rate >= other * (1 - noise))


class Search:
    """Runs a plan's trials within ``budget_s``, each one's line (``line_of``) going to ``log``; the best is kept here.

    A trial whose repeats disagree by more than ``noisy`` is measured once more before it is said.
    """

    def __init__(
        self, measure: Measure, budget_s: float, log: Callable[[str], None], line_of: LineOf, noisy: float = 0.0
    ):
        self.measure, self.log, self.line_of, self.noisy = measure, log, line_of, noisy
        self.began = time.perf_counter()
        self.deadline = self.began + budget_s
        self.trials: list[Trial] = []
        self.best: Trial | None = None
        self.stopped = ""

    def seconds_left(self) -> float:
        """Seconds of the budget left."""
        return self.deadline - time.perf_counter()

    def spent(self) -> bool:
        """Whether a typical trial so far (the median of the runs that trained) would not finish in what is left."""
        seconds = [r.seconds for t in self.trials for r in t.runs if r.error is None]
        return bool(seconds) and self.seconds_left() < median(seconds)

    def trial(self, settings: dict[str, Any], label: str = "", kind: str = "") -> Trial:
        """Measure these settings as a new trial, and say it."""
        trial = Trial(dict(settings), label, kind)
        run = self._run(trial)
        self.trials.append(trial)
        try:
            if self.noisy and trial.spread > self.noisy and not self.spent():
                run = self._run(trial)
        finally:  # Ctrl-C while it is measured again: its first run stands (a run the budget stopped: said as it was)
            if trial.runs[-1].error is None or trial.runs[-1] is run:
                self.log(self.line_of(self, trial, run))
        return trial

    def again(self, trial: Trial) -> None:
        """Measure a trial's settings once more, and say it."""
        self.log(self.line_of(self, trial, self._run(trial)))

    def _run(self, trial: Trial) -> Run:
        if self.stopped == INTERRUPTED:  # nothing more is measured after Ctrl-C, not even a closing check
            raise Stop(INTERRUPTED)
        if self.spent():
            raise Stop("the budget is spent: the best found so far is kept")
        run = self.measure(trial, max(self.seconds_left(), 1.0))
        if run.timed_out:  # kept and said, so a setting that hangs is seen
            trial.runs.append(Run(seconds=run.seconds, error=f"stopped after {run.seconds:.0f} s: the budget ended"))
            self.trials += [] if any(t is trial for t in self.trials) else [trial]
            self.log(self.line_of(self, trial, trial.runs[-1]))
            raise Stop(TIMED_OUT)
        trial.runs.append(run)
        return run

    @contextmanager
    def stops(self) -> Iterator[None]:
        """Where a plan ends at a stop or at Ctrl-C, with the reason kept."""
        try:
            yield
        except Stop as stop:  # (a trial stopped at the budget's end: that said, not the closing check's spent budget)
            self.stopped = self.stopped if self.stopped == TIMED_OUT else str(stop)
        except KeyboardInterrupt:
            self.stopped = INTERRUPTED
