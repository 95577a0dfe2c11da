"""Where a training step's time goes: each action Lightning reports to the trainer's profiler, timed by its own time.

Which steps, what each part holds and what no action holds (Lightning's loop): docs/timing.md, "Where a step goes".
The actions reach the parts through :class:`FetchClock`, in the trainer's profiler's place, which counts the input
wait too: the seconds inside the ``train_dataloader_next`` action. Every hook Lightning calls goes through the
profiler's ``profile(...)``, about two dozen a step: that, like all but ``start`` and ``stop``, is the wrapped
profiler's own bound method, so hooks skip the clock, except while a cycle is timed by its parts
(:meth:`FetchClock.time_into`), where each action goes through ``start`` and ``stop`` by a context manager without a
generator: about as cheap as the pass-through profiler's own. :class:`DeviceSyncs` counts the device synchronizations
each part forces, as torch's sync debug mode reports them (CUDA only).
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from time import perf_counter
from typing import Any

import torch
from lightning.pytorch.profilers import Profiler

from mnistperf.diagnosis.measure.drawn_steps import PARTS, drawn
from mnistperf.upstream import TRAIN_FETCH_ACTION

now = perf_counter  # the clock the parts are read by (a test's own clock stands in here)

LOOP = "Lightning's loop"  # what no action holds: the loops' own Python between the actions
FETCH = "fetch"  # the training thread's wait for the next batch
# The step's own work, as Lightning's actions name it; every other part is around the step.
# The timer's own hooks: what measuring costs, which a fit without the timer does not pay; named, never a culprit
TIMER = "callback EpochTimer"
STEP_WORK = (FETCH, "copy to the device", "training_step", "backward", "optimizer step")
# The LightningModule's hooks that are the step's own work: its update and its batch's way to the device.
MODULE_PARTS = {
    **dict.fromkeys(("optimizer_step", "optimizer_zero_grad", "configure_gradient_clipping"), "optimizer step"),
    **dict.fromkeys(
        ("transfer_batch_to_device", "on_before_batch_transfer", "on_after_batch_transfer"), "copy to the device"
    ),
}
LOGGER = "[Logger]"  # the action of a step's logging, the loggers' writes in, timed here (no profiler action holds it)
LOG_CALL = "[LightningModule]self.log"  # the module's self.log calls, timed here
SAVE_CHECKPOINT = "save_checkpoint"  # the action of Trainer.save_checkpoint, wherever it is called from
MANUAL_STEP = "optimizer_step"  # the action of an optimizer's step under manual optimization (``opt.step()``)
CHECKPOINT_SAVES = "checkpoint saves"  # its part
ACTION_PARTS = {LOG_CALL: "self.log", SAVE_CHECKPOINT: CHECKPOINT_SAVES, MANUAL_STEP: "optimizer step"}  # by their name
SYNC_WARNING = "called a synchronizing CUDA operation"  # what torch says of each, its sync debug mode on "warn"


def parts_timed(index: int, epoch: int = 0) -> bool:
    """Whether training step ``index`` of epoch ``epoch`` (from 0) is timed by its parts, from the step before's end."""
    return drawn(index, epoch, PARTS)


def part_of(action: str) -> str:
    """The part of the step an action of Lightning's profiler (or a logger's or ``self.log``'s) belongs to."""
    if action.endswith(TRAIN_FETCH_ACTION):
        return FETCH
    if action in ACTION_PARTS:
        return ACTION_PARTS[action]
    kind, _, rest = action.partition("]")
    held_by, _, hook = rest.rpartition(".")
    owner = held_by.split("{")[0].rpartition(".")[2]  # a class's name, its qualname's last, its arguments apart
    if kind == "[Callback":
        return f"callback {owner}"
    if kind == "[Logger":
        return f"logger {owner}"
    if kind == "[LightningModule":
        return MODULE_PARTS.get(hook, "module hooks")
    if kind == "[Strategy":
        named = {"training_step": "training_step", "backward": "backward", "batch_to_device": "copy to the device"}
        return named.get(hook, "strategy hooks")
    return LOOP


class StepParts:
    """Each part's own seconds over the timed cycles (:meth:`open` to :meth:`close`), from :meth:`timed` actions.

    A cycle is a training step, or the time between two epochs' training, which :meth:`pause` stops timing meanwhile.
    """

    def __init__(self) -> None:
        self.own: dict[str, float] = {}  # each action's own seconds over the closed cycles
        self.cycles = 0
        self.cycle_s = 0.0  # the closed cycles' seconds, end to end
        self.synced: dict[str, int] | None = None  # each action's own device synchronizations, where counted
        self.syncs: Callable[[], int] | None = None  # the synchronizations so far, where they are counted
        self._pending: dict[str, float] = {}  # the open cycle's
        self._pending_syncs: dict[str, int] = {}
        self._pending_s = 0.0  # the open cycle's seconds before it was paused
        self.paused = False  # a cycle paused: opening it again goes on with it
        self._stack: list[list[Any]] = []  # [action, its start, the seconds inside it, syncs so far, syncs inside]
        self._opened: float | None = None

    def open(self) -> None:
        """A timed cycle begins (a training step, or an epoch's training, just ended), or a paused one goes on."""
        if not self.paused:
            self._pending, self._pending_syncs, self._pending_s = {}, {}, 0.0
        self._stack, self._opened, self.paused = [], now(), False

    def pause(self) -> None:
        """Stop timing the open cycle until it is opened again (what runs meanwhile is not its: a validation)."""
        if self._opened is not None:
            self._pending_s += now() - self._opened
            self._stack, self._opened, self.paused = [], None, True

    def close(self) -> None:
        """The timed cycle ends (the next training step ended, the next epoch began): its actions' seconds are kept."""
        if self._opened is None:
            return
        self.cycle_s += self._pending_s + now() - self._opened
        self.cycles += 1
        for action, seconds in self._pending.items():
            self.own[action] = self.own.get(action, 0.0) + seconds
        if self.syncs is not None:  # counted over this cycle (CUDA)
            self.synced = self.synced or {}
            for action, syncs in self._pending_syncs.items():
                self.synced[action] = self.synced.get(action, 0) + syncs
        self.abandon()

    def abandon(self) -> None:
        """Drop the open cycle (it held other work: a validation, the epoch's end, the profiled window)."""
        self._pending, self._pending_syncs, self._stack, self._opened, self.paused = {}, {}, [], None, False

    def enter(self, action: str) -> None:
        """``action`` begins (inside the one begun before, if that has not ended)."""
        if self._opened is not None:
            self._stack.append([action, now(), 0.0, self.syncs() if self.syncs else 0, 0])

    def exit(self) -> None:
        """The action begun last ends: its own seconds are what it took less what ran inside it."""
        if self._opened is None or not self._stack:
            return
        action, start, inside, synced_before, synced_inside = self._stack.pop()
        took, synced = now() - start, (self.syncs() if self.syncs else 0) - synced_before
        self._pending[action] = self._pending.get(action, 0.0) + took - inside
        if synced > synced_inside:
            self._pending_syncs[action] = self._pending_syncs.get(action, 0) + synced - synced_inside
        if self._stack:
            self._stack[-1][2] += took
            self._stack[-1][4] += synced

    @contextmanager
    def timed(self, action: str) -> Iterator[None]:
        """Time ``action`` while a cycle is open (nothing otherwise)."""
        self.enter(action)
        try:
            yield
        finally:
            self.exit()

    def per_step(self) -> dict[str, Any] | None:
        """The timed steps, their mean seconds end to end and each part's own seconds a step, the largest first.

        None where no cycle closed. What no action held is :data:`LOOP`'s.
        """
        return self._per_cycle("steps", "step_s")

    def per_epoch_end(self) -> dict[str, Any] | None:
        """As :meth:`per_step`, over the times between epochs timed: ``epochs``, ``epoch_s`` and ``parts``."""
        return self._per_cycle("epochs", "epoch_s")

    def _per_cycle(self, cycles: str, cycle_s: str) -> dict[str, Any] | None:
        if not self.cycles:
            return None
        parts = self._per_part(self.own)
        mean_s = self.cycle_s / self.cycles
        parts[LOOP] = max(mean_s - sum(s for part, s in parts.items() if part != LOOP), 0.0)  # its actions' too
        found: dict[str, Any] = {cycles: self.cycles, cycle_s: mean_s, "parts": largest_first(parts)}
        if self.synced is not None:  # each part's device synchronizations a step, where counted (CUDA)
            found["syncs"] = largest_first(self._per_part(self.synced))
        return found

    def _per_part(self, per_action: dict[str, float] | dict[str, int]) -> dict[str, float]:
        """Each part's share a step of what ``per_action`` holds over the closed cycles."""
        parts: defaultdict[str, float] = defaultdict(float)
        for action, value in per_action.items():
            parts[part_of(action)] += value / self.cycles
        return parts


def largest_first(parts: dict[str, float]) -> dict[str, float]:
    """``parts`` ordered by their values, the largest first."""
    return dict(sorted(parts.items(), key=lambda item: -item[1]))


class DeviceSyncs:
    """Counts the synchronizations torch reports between :meth:`start` and :meth:`stop`; other warnings pass on."""

    def __init__(self) -> None:
        self._caught: list[warnings.WarningMessage] = []  # the warnings caught since start
        self._catching: Any = None
        self._mode = 0
        self._read = self._syncs = 0  # the warnings caught so far that count has read, and the syncs among them

    def start(self) -> None:
        """Have torch warn of each synchronization, and catch those warnings."""
        self._catching = warnings.catch_warnings(record=True)
        self._caught = self._catching.__enter__()
        self._read = self._syncs = 0
        warnings.filterwarnings("always", message=f".*{SYNC_WARNING}")
        self._mode = self.debug_mode()
        self.set_debug_mode(1)  # "warn"

    def count(self) -> int:
        """The synchronizations reported since :meth:`start` (0 where it is not started), each warning read once.

        Called as every action of a timed step begins and ends: only the warnings caught since the last call are read.
        """
        self._syncs += sum(SYNC_WARNING in str(warning.message) for warning in self._caught[self._read :])
        self._read = len(self._caught)
        return self._syncs if self._catching is not None else 0

    def stop(self) -> None:
        """Torch's sync debug mode as it was; the other warnings caught meanwhile shown as they would have been."""
        if self._catching is None:
            return
        self.set_debug_mode(self._mode)
        caught, self._caught = self._caught, []
        self._catching.__exit__(None, None, None)
        self._catching = None
        for other in caught:
            if SYNC_WARNING not in str(other.message):
                warnings.warn_explicit(other.message, other.category, other.filename, other.lineno)

    def debug_mode(self) -> int:
        """Torch's sync debug mode now."""
        return torch.cuda.get_sync_debug_mode()

    def set_debug_mode(self, mode: int) -> None:
        """Set torch's sync debug mode (0: off, 1: warn)."""
        torch.cuda.set_sync_debug_mode(mode)


def syncs_for(device: torch.device) -> DeviceSyncs | None:
    """A counter of the device's synchronizations where torch reports them (CUDA); None elsewhere."""
    return DeviceSyncs() if device.type == "cuda" else None


UNTIMED = StepParts()  # parts never opened: what actions are timed into while no cycle is


class FetchClock(Profiler):
    """The trainer's profiler (the pass-through one, or the user's, still working), plus a clock of the fetches."""

    def __init__(self, inner: Profiler):
        super().__init__()
        self.inner = inner
        self.fetch_s = 0.0
        self._started: float | None = None
        self.into = UNTIMED  # the parts whose open cycle each action is timed into (the untimed: none)
        for name in ("profile", "summary", "describe", "setup", "teardown"):
            setattr(self, name, getattr(inner, name))

    def __getattr__(self, name: str) -> Any:
        """What the wrapped profiler holds of its own (SimpleProfiler's ``recorded_durations``): read through."""
        if name.startswith("__") or name == "inner":  # (a copy's lookups, and before __init__ set it)
            raise AttributeError(name)
        return getattr(self.inner, name)

    def time_into(self, parts: StepParts | None) -> None:
        """Time each action into ``parts``'s open cycle from now on, or (None) no longer."""
        self.into = parts or UNTIMED
        if parts is not None:
            own = getattr(self.inner.profile, "__func__", None) is not Profiler.profile  # its own profile() kept
            setattr(self, "profile", self._timed if own else partial(_Action, self))  # noqa: B010  (Lightning calls it)
        else:
            setattr(self, "profile", self.inner.profile)  # noqa: B010

    @contextmanager
    def _timed(self, action_name: str) -> Iterator[None]:
        with self.into.timed(action_name), self.inner.profile(action_name):
            yield

    def reset(self) -> float:
        """The seconds counted since the last reset, and a new count."""
        counted, self.fetch_s = self.fetch_s, 0.0
        return counted

    def start(self, action_name: str) -> None:
        """Start ``action_name`` in the wrapped profiler, and the clock where it is a training fetch."""
        self.into.enter(action_name)
        if action_name.endswith(TRAIN_FETCH_ACTION):
            self._started = perf_counter()
        self.inner.start(action_name)

    def stop(self, action_name: str) -> None:
        """Stop ``action_name`` in the wrapped profiler, and add a training fetch's seconds to the count."""
        try:
            self.inner.stop(action_name)
        finally:  # the action ends here even where the wrapped profiler's stop fails
            if action_name.endswith(TRAIN_FETCH_ACTION) and self._started is not None:
                self.fetch_s += perf_counter() - self._started
                self._started = None
            self.into.exit()


class _Action:
    """``with profiler.profile(name)`` as :class:`Profiler`'s does it (``start``, then ``stop`` whatever happens)."""

    __slots__ = ("clock", "name")

    def __init__(self, clock: Profiler, name: str):
        self.clock, self.name = clock, name

    def __enter__(self) -> str:
        try:
            self.clock.start(self.name)
        except BaseException:
            self.clock.stop(self.name)
            raise
        return self.name

    def __exit__(self, *exception: object) -> None:
        self.clock.stop(self.name)
