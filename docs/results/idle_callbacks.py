"""Callbacks that see every training step and do nothing: the cost scripts' floor to set the diagnosis against.

cpu-2core-compat-cost/measure.py (its ``plain`` and ``floor`` arms) and cpu-2core-fresh-cost/pairs.py (its ``idle``
arm) import them.
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch import Callback

from mnistperf.diagnosis.callbacks.batch_hooks import skip_unused_batch_hooks


class EmptyStepHooks(Callback):
    """A callback written the usual way: its two per-step hooks do nothing; Lightning dispatches its other ones."""

    def on_train_batch_start(self, *args: Any) -> None:
        """Nothing."""

    def on_train_batch_end(self, *args: Any) -> None:
        """Nothing."""


class Floor(EmptyStepHooks):
    """The same, its unused batch hooks skipped as the diagnosis skips its own: the least a callback of a step costs."""

    def __init__(self) -> None:
        skip_unused_batch_hooks(self)
