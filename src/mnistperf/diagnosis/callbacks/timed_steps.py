"""The steps timed by their parts: one in PARTS_EVERY, end to end, the step's logging and ``self.log`` timed too.

While a step is timed, what hands its metrics to the loggers (:data:`~mnistperf.upstream.TRAIN_STEP_LOGS`) and the
module's ``log`` are shadowed on their instances by a timed call of the same; they are given back as the step ends,
and at any end of the fit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lightning.pytorch import LightningModule, Trainer

from mnistperf.diagnosis.measure.device_syncs import DeviceSyncs
from mnistperf.diagnosis.measure.fetch_clock import FetchClock
from mnistperf.diagnosis.measure.step_parts import LOG_CALL, LOGGER, PARTS_AT, PARTS_EVERY
from mnistperf.upstream import TRAIN_STEP_LOGS, step_logs_owner

MISSING = object()  # an instance that held no attribute of the name before it was shadowed


class TimedSteps:
    """Opens a cycle of ``fetch``'s parts as step PARTS_AT - 1 (of every PARTS_EVERY) ends, closes it a step later.

    ``window``: what the profiled window is doing now; a cycle over which that changed, or that held the window, is
    dropped (its steps were not the fit's typical ones). ``syncs``: where given (CUDA), the device synchronizations
    each part forces are counted over the cycle.
    """

    def __init__(self, fetch: FetchClock, window: Callable[[], Any], syncs: DeviceSyncs | None = None):
        self.fetch, self.window, self.syncs = fetch, window, syncs
        self._opened_with: Any = None  # the window's state as the open cycle began
        self._shadowed: list[tuple[Any, str, Any]] = []  # (instance, name, what it held before)

    def step_ended(self, trainer: Trainer, module: LightningModule, index: int) -> None:
        """A training step ended: the open cycle closes (kept, or dropped), and the next step's opens if it is due."""
        if self.fetch.parts.timing:
            self.stop(abandon=self.window() != self._opened_with)
        if index % PARTS_EVERY != PARTS_AT - 1:
            return
        state = self.window()
        if not state[0]:  # no profiled window running
            self._opened_with = state
            if self.syncs is not None:  # each part's synchronizations counted too
                self.syncs.start()
                self.fetch.parts.syncs = self.syncs.count
            self.fetch.time_parts(True)
            if trainer.loggers:  # what the step's logging costs, the loggers' writes in
                names = "+".join(type(logger).__name__ for logger in trainer.loggers)
                self._shadow(step_logs_owner(trainer), TRAIN_STEP_LOGS, f"{LOGGER}{names}.{TRAIN_STEP_LOGS}")
            self._shadow(module, "log", LOG_CALL)

    def stop(self, abandon: bool = True) -> None:
        """End the open cycle, if any (dropped unless ``abandon`` is False), and give back what was shadowed."""
        if abandon:
            self.fetch.parts.abandon()
        self.fetch.time_parts(False)
        self.fetch.parts.syncs = None
        if self.syncs is not None:
            self.syncs.stop()
        for owner, name, before in reversed(self._shadowed):
            if before is MISSING:
                vars(owner).pop(name, None)
            else:
                vars(owner)[name] = before
        self._shadowed = []

    def _shadow(self, owner: Any, name: str, action: str) -> None:
        """Shadow ``owner.name`` on the instance by the same call, timed as ``action`` by the open cycle."""
        call, parts = getattr(owner, name), self.fetch.parts

        def timed(*args: Any, **kwargs: Any) -> Any:
            with parts.timed(action):
                return call(*args, **kwargs)

        self._shadowed.append((owner, name, vars(owner).get(name, MISSING)))
        vars(owner)[name] = timed
