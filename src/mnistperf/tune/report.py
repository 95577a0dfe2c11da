"""What tune says about a project that is not the lab's: the table of trials and the findings, in its own terms."""

from __future__ import annotations

from mnistperf.tune.knobs import REBUILD, Knobs, dataloader_call
from mnistperf.tune.search import Outcome, describe


def trials_table(outcome: Outcome) -> str:
    """Every trial as a Markdown row: settings, samples/s of each run, against the untouched, input wait, seconds."""
    rows = [
        "| # | settings | samples/s | runs | vs untouched | input wait | seconds | note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    base = outcome.trials[0].rate
    for index, trial in enumerate(outcome.trials, 1):
        note = trial.label + (" (chosen)" if trial is outcome.chosen else "")
        if trial.error is not None:
            rows.append(
                f"| {index} | {describe(trial.settings)} | - | - | - | - | {trial.seconds:.1f} | "
                f"{note}; failed: {trial.error} |"
            )
            continue
        runs = ", ".join(f"{r:,.0f}" for r in trial.rates)
        wait = f"{trial.wait:.0%}" if trial.wait is not None else "-"
        versus = f"{trial.rate / base:.2f}x" if base else "-"
        rows.append(
            f"| {index} | {describe(trial.settings)} | {trial.rate:,.0f} | {runs} | {versus} | {wait} | "
            f"{trial.seconds:.1f} | {note} |"
        )
    return "\n".join(rows)


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
        lines.append(f"{where} exposes no loader setting: every trial rebuilt its DataLoader with the settings tried")
    lines += knobs.notes
    if outcome.kept:
        lines.append("chosen: the untouched settings, kept: nothing beat them by more than the noise")
    else:
        lines.append(
            f"chosen: {describe(chosen.settings)}: {chosen.rate:,.0f} samples/s, "
            f"{outcome.speedup:.2f}x the untouched settings ({len(chosen.rates)} run(s))"
        )
    if any(k.setting == "batch_size" and k.key in outcome.changes() for k in knobs.knobs):
        lines.append("the batch size changed: that changes the training (the optimisation), not only its speed")
    rebuilt = loader_args(outcome, knobs)
    if rebuilt:
        lines.append(
            f"{where} takes no argument for these, so tune rebuilt its DataLoader; they need a code change, in "
            f"train_dataloader: {dataloader_call(rebuilt)}"
        )
    lines.append(f"stopped: {outcome.stopped}")
    return lines
