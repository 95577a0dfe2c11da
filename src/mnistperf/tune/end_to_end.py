"""How tune searches the loader of a project that is not the lab's, each trial a whole fit in a fresh process.

The untouched settings train ``repeats`` times: their spread is the noise, their input wait EpochTimer's ceiling on
what any setting can win (within the noise, nothing is tried). Then worker counts, fewest first, until two more in a
row buy nothing or input no longer bounds the run; then the variants around the best; then the best trains again
beside the untouched settings, and ``policy`` settles which stays. ``project_outcome`` is the one way in, under the CLI
and from Python; ``trials_table`` and ``findings`` say what it found, in the project's terms. Why:
docs/tune.md#what-is-measured.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from mnistperf.diagnosis.record.verdict import INPUT_BOUND_SHARE
from mnistperf.errors import ConfigError
from mnistperf.machine import usable_cpus
from mnistperf.tables import markdown_table
from mnistperf.tune.knobs import REBUILD, Knobs, dataloader_call, rebuilt_with
from mnistperf.tune.launcher import Launcher
from mnistperf.tune.policy import NOISY_SPREAD, settled, variants_around, without_workers, worker_counts
from mnistperf.tune.search import NOISE_FLOOR, Measure, Outcome, Run, Search, Stop, Trial, beats, describe
from mnistperf.tune.trial import TrialSpec

REPEATS = 2  # runs of the untouched settings, for the noise
IDLE_COUNTS = 2  # worker counts in a row that buy nothing before the sweep stops (one worker may only overlap the step)


def trial_line(search: Search, trial: Trial, run: Run) -> str:
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
    """Settings, by knob key, as a loader without workers takes them; a prefetch argument stays (may not take None)."""
    keys = {s: knob.key for s in ("num_workers", "persistent_workers") if (knob := knobs.by_setting(s)) is not None}
    return without_workers(settings, keys)


def workers_of(trial: Trial, knobs: Knobs) -> int:
    """The worker processes a trial's loader used (its knob's value, else what the loader held)."""
    knob = knobs.by_setting("num_workers")
    if knob is not None and isinstance(trial.settings.get(knob.key), int):
        return trial.settings[knob.key]
    loader = next((r.loader for r in trial.runs if r.loader), None)
    return int((loader or {}).get("num_workers") or 0)


def what_bounds(baseline: Trial, noise: float) -> tuple[str, bool]:
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


def candidates(knobs: Knobs, best: Trial, on_gpu: bool) -> list[tuple[dict[str, Any], str]]:
    """What is tried around the best workers, by knob key, with labels: the values asked, else the policy's variants."""
    asked = [(k, v) for k in knobs.knobs if k.setting != "num_workers" for v in k.values or ()]
    tried = [({k.key: v}, f"{k.name}={v}, as asked") for k, v in asked if v != best.settings.get(k.key)]
    own = {k.setting: k.key for k in knobs.knobs if k.setting is not None and k.values is None}
    settings = {**{s: best.settings.get(key) for s, key in own.items()}, "num_workers": workers_of(best, knobs)}
    return tried + [({own[s]: v for s, v in c.items()}, label) for c, label in variants_around(settings, on_gpu)]


def outcome(
    knobs: Knobs,
    measure: Measure,
    budget_s: float,
    log: Callable[[str], None],
    cpus: int,
    where: str,
    repeats: int = REPEATS,
    hint: str = "",
) -> Outcome:
    """Search the knobs' settings (by knob key) with whole trial fits, as the module describes.

    ``cpus`` bounds the workers tried, ``where`` names the project in errors (its config, or ``tune_loaders``), and
    ``hint`` ends the fix where the untouched settings do not train.
    """

    def measured(trial: Trial, seconds: float) -> Run:
        run = measure(trial, seconds)
        if not search.trials and run.loader:  # the untouched settings' first run: each rebuilt knob's current value
            for knob in knobs.knobs:
                if knob.via == REBUILD and knob.setting in run.loader:
                    knob.current = trial.settings[knob.key] = run.loader[knob.setting]
        return run

    search = Search(measured, budget_s, log, trial_line)
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
        fix = f"fix it so that your project trains as it is, then tune{hint}"
        raise ConfigError(f"{where}: the untouched settings do not train: {baseline.error}; {fix}")
    search.best, noise, text = baseline, NOISE_FLOOR, ""
    with search.stops():
        for _ in range(repeats - 1):
            search.again(baseline)
        noise = max(NOISE_FLOOR, baseline.spread)
        text, worth = what_bounds(baseline, noise)
        log(f"untouched: {baseline.rate:,.0f} samples/s, noise {noise:.0%}; {text}")
        if not worth:
            raise Stop("not input-bound: the current settings are kept")
        sweep_workers(search, knobs, baseline, noise, cpus)
        on_gpu = any(r.accelerator == "cuda" for r in baseline.runs)
        for changes, label in candidates(knobs, search.best, on_gpu):
            candidate = normalized(knobs, {**search.best.settings, **changes})
            if any(t.settings == candidate for t in search.trials):
                continue
            trial = search.trial(candidate, label)
            if beats(trial.rate, search.best.rate, noise):
                search.best = trial
        search.stopped = search.stopped or "every setting planned was measured"
    text = text or what_bounds(baseline, noise)[0]  # stopped before the noise was measured: said now
    chosen, best = baseline, search.best
    if best is not None and best is not baseline:
        with search.stops():  # the best again, then the untouched settings: a drift of the machine falls on both
            if len(best.runs) < 2:
                search.again(best)
            search.again(baseline)
        chosen, noise = settled(search, best, baseline, noise, "the untouched settings", cheaper=False)
    spent_s = time.perf_counter() - search.began
    return Outcome(search.trials, chosen.settings, chosen, baseline, noise, search.stopped, text, spent_s)


def sweep_workers(search: Search, knobs: Knobs, baseline: Trial, noise: float, cpus: int) -> None:
    """Worker counts, fewest first and kept between epochs, until more buy nothing or input no longer bounds the run."""
    knob = knobs.by_setting("num_workers")
    if knob is None:
        return
    best, idle, asked = search.best or baseline, 0, knob.values is not None
    persistent = knobs.by_setting("persistent_workers")
    kept = {persistent.key: True} if persistent and (persistent.values is None or True in persistent.values) else {}
    for count in knob.values if knob.values is not None else worker_counts(cpus):
        if count == baseline.settings.get(knob.key):
            continue
        settings = normalized(knobs, {**best.settings, knob.key: count, **kept})
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


def project_outcome(
    knobs: Knobs,
    spec: TrialSpec,
    made: Callable[[dict[str, Any], Path], dict[str, Any]],
    title: str,
    where: str,
    import_paths: list[str],
    modules: list[str],
    budget_s: float,
    repeats: int,
    log: Callable[[str], None],
    hint: str = "",
) -> Outcome:
    """Tune a project's loader by whole fits, each in a fresh process: the one way in, under the CLI and from Python.

    ``spec`` is every trial's fit but its folder; ``made`` gives a trial's own fields of it (a config, or the data's
    recipe) from its settings and folder. ``title`` names the project in the first line, ``where`` in errors.
    """
    log(
        f"tuning {title}: {', '.join(k.key for k in knobs.knobs)}; {usable_cpus()} usable CPUs, budget "
        f"{budget_s:g} s, each trial {spec.epochs} epochs of at most {spec.steps} steps in a fresh process"
    )
    with Launcher(import_paths, modules) as launcher, tempfile.TemporaryDirectory(prefix="mnistperf-tune-") as work:

        def measure(trial: Trial, timeout_s: float) -> Run:
            root = Path(tempfile.mkdtemp(prefix="trial-", dir=work))
            fields = made(trial.settings, root)
            trial_spec = replace(spec, root=str(root), rebuild=rebuilt_with(knobs, trial.settings), **fields)
            return launcher.measure(trial_spec, timeout_s)

        return outcome(knobs, measure, budget_s, log, usable_cpus(), where, repeats, hint)


def trials_table(outcome: Outcome) -> str:
    """Every trial as a Markdown row: settings, samples/s of each run, against the untouched, input wait, seconds."""
    header = ["#", "settings", "samples/s", "runs", "vs untouched", "input wait", "seconds", "note"]
    rows, base = [], outcome.trials[0].rate
    for index, trial in enumerate(outcome.trials, 1):
        note = trial.label + (" (chosen)" if trial is outcome.chosen else "")
        figures = ["-"] * 4  # samples/s, each run's, against the untouched, input wait: none where it failed
        if trial.error is not None:
            note += f"; failed: {trial.error}"
        else:
            runs = ", ".join(f"{r:,.0f}" for r in trial.rates)
            wait = f"{trial.wait:.0%}" if trial.wait is not None else "-"
            figures = [f"{trial.rate:,.0f}", runs, f"{trial.rate / base:.2f}x" if base else "-", wait]
        rows.append([index, describe(trial.settings), *figures, f"{trial.seconds:.1f}", note])
    return markdown_table(header, rows)


def loader_args(outcome: Outcome, knobs: Knobs) -> dict[str, object]:
    """The DataLoader arguments the chosen settings change where they were applied by rebuilding its loader."""
    return {key.rsplit(".", 1)[-1]: value for key, value in outcome.changes(knobs.keys(REBUILD)).items()}


def findings(outcome: Outcome, knobs: Knobs, where: str) -> list[str]:
    """The findings as sentences: what bounds the run, what was chosen and at what speed-up, and why it stopped."""
    base, chosen = outcome.trials[0], outcome.chosen
    assert chosen is not None  # a search of whole fits always chooses: the untouched settings at least
    lines = [
        f"untouched settings: {base.rate:,.0f} samples/s ({len(base.rates)} run(s), noise {outcome.noise:.0%})",
        outcome.bound,
    ]
    if knobs.rebuilt:
        lines.append(f"every trial rebuilt the DataLoader of {where} with the settings tried")
    lines += knobs.notes
    if outcome.kept:  # where no other was tried, the line that says why it stopped says why
        failed = "every other setting failed (the table says why)" if all(t.error for t in outcome.trials[1:]) else ""
        why = (
            failed or "nothing beat them by more than the noise" if outcome.trials[1:] else "no other setting was tried"
        )
        lines.append(f"chosen: the untouched settings, kept: {why}")
    else:
        lines.append(
            f"chosen: {describe(chosen.settings)}: {chosen.rate:,.0f} samples/s, "
            f"{outcome.speedup:.2f}x the untouched settings ({len(chosen.rates)} run(s))"
        )
    if any(k.setting == "batch_size" and k.key in outcome.changes() for k in knobs.knobs):
        lines.append("the batch size changed: that changes the training (the optimisation), not only its speed")
    if rebuilt := loader_args(outcome, knobs):
        lines.append(
            f"these are no arguments of {where}, so tune rebuilt its DataLoader; they need a code change, in "
            f"train_dataloader: {dataloader_call(rebuilt)}"
        )
    if outcome.noise > NOISY_SPREAD:
        lines.append(
            f"the noise ({outcome.noise:.0%}) hides smaller gains: more repeats or steps, or a quieter machine"
        )
    lines.append(f"stopped: {outcome.stopped}")
    return lines
