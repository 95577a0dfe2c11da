"""The cycles timed by their parts: one training step in a block of EVERY, end to end, and the time between epochs.

While a cycle is timed, what hands its metrics to the loggers (a step's :data:`~mnistperf.upstream.TRAIN_STEP_LOGS`,
an epoch's :data:`~mnistperf.upstream.TRAIN_EPOCH_LOGS`) and the module's ``log`` are shadowed on their instances by a
timed call of the same; they are given back as the cycle ends or pauses, and at any end of the fit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lightning.pytorch import LightningModule, Trainer

from mnistperf.diagnosis.measure.step_parts import LOG_CALL, LOGGER, DeviceSyncs, FetchClock, StepParts, parts_timed
from mnistperf.upstream import TRAIN_EPOCH_LOGS, TRAIN_STEP_LOGS, step_logs_owner

MISSING = object()  # an instance that held no attribute of the name before it was shadowed


class TimedCycle:
    """One kind of cycle: while it is timed, ``fetch``'s actions go into :attr:`parts`, its ``logs`` call's too.

    ``syncs``: where given (CUDA), the device synchronizations each part forces are counted over the cycle.
    """

    def __init__(self, fetch: FetchClock, logs: str, syncs: DeviceSyncs | None):
        self.fetch, self.logs, self.syncs, self.parts = fetch, logs, syncs, StepParts()
        self.timing = False
        self._shadowed: list[tuple[Any, str, Any]] = []  # (instance, name, what it held before)

    def start(self, trainer: Trainer, module: LightningModule) -> None:
        """The cycle opens, or a paused one goes on."""
        self.parts.open()
        self.timing = True
        if self.syncs is not None:
            self.syncs.start()
            self.parts.syncs = self.syncs.count
        self.fetch.time_into(self.parts)
        if trainer.loggers:  # what the logging costs, the loggers' writes in
            names = "+".join(type(logger).__name__ for logger in trainer.loggers)
            self._shadow(step_logs_owner(trainer), self.logs, f"{LOGGER}{names}.{self.logs}")
        self._shadow(module, "log", LOG_CALL)

    def close(self) -> None:
        """The cycle ends, its parts kept."""
        self.parts.close()
        self._release()

    def pause(self) -> None:
        """The open cycle stops being timed until :meth:`start` (what runs meanwhile is not its)."""
        self.parts.pause()
        self._release()

    def abandon(self) -> None:
        """The cycle, open or paused, is dropped (it held other work)."""
        self.parts.abandon()
        self._release()

    def _release(self) -> None:
        """Actions no longer timed into the cycle; what was shadowed given back."""
        if not self.timing:
            return
        self.timing = False
        self.fetch.time_into(None)
        self.parts.syncs = None
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
        call, parts = getattr(owner, name), self.parts

        def timed(*args: Any, **kwargs: Any) -> Any:
            with parts.timed(action):
                return call(*args, **kwargs)

        self._shadowed.append((owner, name, vars(owner).get(name, MISSING)))
        vars(owner)[name] = timed


class TimedSteps:
    """The steps timed by their parts, and the time between epochs (its validation apart).

    A step cycle opens as the step before a timed one (:func:`.parts_timed`) ends and closes a step later; the time
    between epochs is a cycle from an epoch's last step to the next one's start (or training's end).
    ``window``: what the profiled window is doing now; a step cycle over which that changed, or that held the window,
    is dropped (its steps were not the fit's typical ones), and the epoch's first step after the window is timed in
    its place (else a short fit's one steady epoch, its window near its end, may time no step). ``syncs``: as
    :class:`TimedCycle`'s.
    """

    def __init__(self, fetch: FetchClock, window: Callable[[], Any], syncs: DeviceSyncs | None = None):
        self.window = window
        self.steps = TimedCycle(fetch, TRAIN_STEP_LOGS, syncs)
        self.between = TimedCycle(fetch, TRAIN_EPOCH_LOGS, syncs)
        self._opened_with: Any = None  # the window's state as the open step cycle began
        self._owed = False  # the window took the drawn step: the next one after it is timed instead

    def step_ended(self, trainer: Trainer, module: LightningModule, index: int) -> None:
        """A training step ended: the open step cycle closes (kept, or dropped), and the next opens if it is due."""
        if self.steps.timing:
            if self.window() == self._opened_with:
                self.steps.close()
            else:
                self.steps.abandon()
                self._owed = True
        if index + 1 == trainer.num_training_batches:  # the epoch's last step: what comes until the next is timed
            self.between.start(trainer, module)
            return
        if not (self._owed or parts_timed(index + 1, trainer.current_epoch)):
            return
        state = self.window()
        self._owed = state[0]  # a profiled window running: owed until it ends
        if not state[0]:
            self._opened_with = state
            self.steps.start(trainer, module)

    def validation_started(self) -> None:
        """A step timed by its parts holds no validation, nor is one part of the time between epochs."""
        self.steps.abandon()
        self.between.pause()

    def validation_ended(self, trainer: Trainer, module: LightningModule) -> None:
        """The time between epochs, paused for a validation, is timed again."""
        if self.between.parts.paused:
            self.between.start(trainer, module)

    def epoch_ended(self, trainer: Trainer, module: LightningModule) -> None:
        """A step timed by its parts holds no epoch's end; the time between epochs is timed from here at the latest.

        (Later than the last step where the loader has no length, or the epoch ended before its last step.)
        """
        self.steps.abandon()
        self._owed = False  # an epoch's own steps stand in for its window's
        if not self.between.timing:
            self.between.start(trainer, module)

    def between_ended(self, steady: bool = False) -> None:
        """The next epoch's training begins, or training ends: the time between epochs is kept.

        ``steady``: the fit's first steady epoch begins, so the steps timed in its warm-up epoch are let go (as every
        steady figure leaves the warm-up apart; a fit of one epoch keeps them).
        """
        self.between.close()
        if steady:
            self.steps.parts = StepParts()

    def stop(self) -> None:
        """Drop any open cycle and give back what was shadowed (the fit's end)."""
        self.steps.abandon()
        self.between.abandon()
