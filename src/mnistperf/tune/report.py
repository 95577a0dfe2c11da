"""What tune says about a project that is not the lab's: the table of trials and the findings, in its own terms."""

from __future__ import annotations

from mnistperf.tune.end_to_end import Outcome, describe
from mnistperf.tune.knobs import REBUILD
from mnistperf.tune.rebuild import dataloader_call


def trials_table(outcome: Outcome) -> str:
    """Every trial as a Markdown row: settings, samples/s of each run, against the untouched, input wait, seconds."""
    rows = [
        "| # | settings | samples/s | runs | vs untouched | input wait | seconds | note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    base = outcome.baseline.rate
    for index, trial in enumerate(outcome.trials, 1):
        note = trial.label + (" (chosen)" if trial is outcome.chosen else "")
        if trial.error is not None:
            rows.append(
                f"| {index} | {describe(trial.settings, outcome.knobs)} | - | - | - | - | {trial.seconds:.1f} | "
                f"{note}; failed: {trial.error} |"
            )
            continue
        runs = ", ".join(f"{r:,.0f}" for r in trial.rates)
        wait = f"{trial.wait:.0%}" if trial.wait is not None else "-"
        versus = f"{trial.rate / base:.2f}x" if base else "-"
        rows.append(
            f"| {index} | {describe(trial.settings, outcome.knobs)} | {trial.rate:,.0f} | {runs} | {versus} | {wait} | "
            f"{trial.seconds:.1f} | {note} |"
        )
    return "\n".join(rows)


def code_change(outcome: Outcome, where: str) -> str | None:
    """The DataLoader arguments the chosen settings need where they were applied by rebuilding its loader."""
    rebuilt = outcome.changes(REBUILD)
    if not rebuilt:
        return None
    call = dataloader_call({key.rsplit(".", 1)[-1]: value for key, value in rebuilt.items()})
    return (
        f"{where} takes no argument for these, so tune rebuilt its DataLoader; they need a code change, in "
        f"train_dataloader: {call}"
    )


def findings(outcome: Outcome, where: str) -> list[str]:
    """The findings as sentences: what bounds the run, what was chosen and at what speed-up, and why it stopped."""
    base = outcome.baseline
    lines = [
        f"untouched settings: {base.rate:,.0f} samples/s ({len(base.rates)} run(s), noise {outcome.noise:.0%})",
        outcome.bound,
    ]
    if outcome.knobs.rebuilt:
        lines.append(f"{where} exposes no loader setting: every trial rebuilt its DataLoader with the settings tried")
    lines += outcome.knobs.notes
    if outcome.kept:
        lines.append("chosen: the untouched settings, kept: nothing beat them by more than the noise")
    else:
        lines.append(
            f"chosen: {describe(outcome.chosen.settings, outcome.knobs)}: {outcome.chosen.rate:,.0f} samples/s, "
            f"{outcome.speedup:.2f}x the untouched settings ({len(outcome.chosen.rates)} run(s))"
        )
    if any(k.setting == "batch_size" and k.key in outcome.changes() for k in outcome.knobs.knobs):
        lines.append("the batch size changed: that changes the training (the optimisation), not only its speed")
    change = code_change(outcome, where)
    if change:
        lines.append(change)
    lines.append(f"stopped: {outcome.stopped}")
    return lines
