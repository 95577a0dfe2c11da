"""Figures a test adds to the registry: a derived one, a measured one and one kept per rank, each declared once here
with the one function that reads it (a fit in another process adds them through with_added_figures/)."""

from __future__ import annotations

from mnistperf.diagnosis import figures
from mnistperf.diagnosis.figures import EVAL_S, TRAIN_S, Figure

EVAL_OVER_TRAIN = Figure(
    "eval_over_train",
    "share",
    "evaluation time over train time",
    label="evaluation over training",
    shown="%",
    run="mean",
    derive=lambda row: row[EVAL_S] / row[TRAIN_S] if row[TRAIN_S] > 0 else None,
)
STEPS_RUN = Figure(
    "steps_run",
    "steps",
    "training steps the epoch ran, every rank's",
    label="steps run",
    run="mean",
    ranks="sum",
    whole=True,
    read=lambda epoch: epoch.steps,
)
WAIT_PER_STEP_S = Figure(
    "wait_per_step_s",
    "s",
    "wait for data per training step, the slowest rank's",
    label="wait per step",
    shown="ms",
    run="mean",
    ranks="max",
    per_rank=True,
    read=lambda epoch: epoch.input_wait_s / max(epoch.steps, 1),
)
ADDED = (EVAL_OVER_TRAIN, STEPS_RUN, WAIT_PER_STEP_S)


def add() -> tuple[Figure, ...]:
    """The registry with the added figures (every reader reads ``figures.FIGURES`` at each use)."""
    figures.FIGURES = (*figures.FIGURES, *ADDED)
    return figures.FIGURES
