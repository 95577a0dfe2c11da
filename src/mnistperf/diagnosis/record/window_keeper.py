"""The fit's one profiled window as the clock keeps it: placed in an epoch, weighed on a CPU, read, kept out of it.

Where it sits, what it may cost and what it reads: docs/timing.md, "GPU busy" and "What the window may cost".
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mnistperf.atomic import atomic_write
from mnistperf.diagnosis.measure import busy_window, window_price
from mnistperf.diagnosis.measure.busy_window import BusyWindow
from mnistperf.diagnosis.measure.device_work import world
from mnistperf.diagnosis.measure.operator_clock import OperatorClock
from mnistperf.diagnosis.measure.stalls import typical_step
from mnistperf.diagnosis.measure.window_reading import Unread, WindowReading
from mnistperf.diagnosis.record.verdict import ONE_STEP_PENDING, WINDOW_PENDING
from mnistperf.upstream import dynamo_compiled

PROFILE_ANYWAY = (
    "EpochTimer(window_share=None) profiles it anyway (with LightningCLI: "
    "--trainer.callbacks.init_args.window_share=null, EpochTimer being the config's last callback)"
)
UNREAD = {  # why a window read no share, in words
    Unread.GRAPH_CAPTURED: "a CUDA graph was captured inside the profiled window",
    Unread.PROFILER_RUNNING: "another torch profiler was running, and only one can run at a time",
    Unread.MODE_CROSSED: "another torch function mode was entered or left across the window's steps",
    Unread.NO_CALLS: "the operator clock timed no torch call",
    Unread.NO_KERNELS: "the profiler saw no kernels on the device",
    Unread.FEW_KERNELS: (
        "the profiler saw {kernels} kernels in {steps} steps, fewer than a training step launches: "
        "it missed part of the device's work"
    ),
    Unread.IDLE: "nothing ran on the device in the profiled window",
}
# (train seconds, input wait, host wait) so far, synchronized, as the clock reads them
Waits = tuple[float, float, float]


def unread_said(unread: Unread, kernels: int = 0, steps: int = 0) -> str:
    """Why a window of ``steps`` steps that recorded ``kernels`` read no share, in words."""
    return UNREAD[unread].format(kernels=kernels, steps=steps)


class WindowKeeper:
    """The window of up to ``steps`` steps a fit profiles once (0: none), on ``device_type``, and its reading.

    ``reading`` is None where no window is wanted, else it says the share or why none was read (``unavailable``).
    ``trace_limit``, ``window_share`` and ``clock_calls`` as :class:`~mnistperf.diagnosis.record.clock.EpochClock`'s.
    """

    def __init__(
        self,
        device_type: str,
        steps: int,
        wanted: bool,
        unavailable: str | None,
        trace_limit: int | None,
        window_share: float | None,
        clock_calls: bool,
    ):
        self.device_type, self.trace_limit, self.window_share = device_type, trace_limit, window_share
        self.clock_calls = clock_calls
        self.reading = WindowReading(device_type, reason=unavailable) if wanted else None
        self.steps = 0 if unavailable or not wanted else steps  # 0: none (left) to open
        self.window: BusyWindow | None = None
        self.recorded: Any = None  # the window's stopped profiler, until its trace is exported
        self.nodes: int | None = None  # on a CPU, the nodes of a training step's autograd graph, read once
        self.op_s = 0.0  # on a CPU, a bare tiny operator's least time (operator_s) at the epochs' starts (0: not yet)
        self._placed_by = ""  # what placed the window, where not its epoch's length
        self.epoch_reset()

    def epoch_reset(self) -> None:
        """A new epoch: no window opened or read in it yet."""
        self.opened: Waits | None = None  # the clock's figures as the window opened
        self.cost: tuple[float, float, float, int] | None = None  # the window's seconds of each figure, its steps

    @property
    def profiling(self) -> bool:
        """Whether the window's profiler runs now (its steps are not the epoch's typical ones)."""
        return self.window is not None and self.opened is not None

    @property
    def needs_weighing(self) -> bool:
        """Whether a window still to open is fitted to what the fit can pay for (on a CPU, under a window_share)."""
        return self.device_type != "cuda" and self.window_share is not None and self.steps > 0

    @property
    def priced(self) -> bool:
        """Whether the window needs no price, or has the step's graph to price it by (:attr:`nodes`)."""
        return not self.needs_weighing or self.nodes is not None

    def missed(self, reason: str) -> None:
        """Say why no share was read."""
        assert self.reading is not None  # only where a window is wanted
        self.reading.reason = reason

    def place(self, number: int, batches: float, expected: float, pending: bool, stand_in: bool = False) -> None:
        """Epoch ``number`` starts, of ``batches`` steps (``expected``: as the clock takes them): place the window.

        ``pending``: the window waits for a steady epoch. ``stand_in``: an earlier steady epoch's figures may stand in
        for an epoch profiled whole (on a CPU, an epoch of one step; until then its window waits).
        """
        if self.needs_weighing:
            # the window's price's other part, before train time starts: a snapshot varies 2x, so the least of the
            # epochs' until the window opens
            self.op_s = min(self.op_s or math.inf, window_price.operator_s())
        if self.steps > 0 and pending:
            self.missed(WINDOW_PENDING)
        elif self.steps > 0:
            length = f"an epoch taken as the last one's {expected:,.0f} steps: the training loader has no length"
            self._placed_by = length if expected != batches else ""
            steps, warmup = busy_window.window_steps(expected, self.steps), busy_window.PROFILER_WARMUP_STEPS
            on_cpu = self.device_type != "cuda"
            if steps is None and on_cpu:  # a CPU's profiler needs no warm-up: a shorter epoch holds a window
                steps, warmup = busy_window.short_cpu_window(expected, self.steps), 0
            if steps is None and on_cpu and expected == 1:  # its one step, once a steady epoch can stand in for it
                if not stand_in:
                    self.missed(ONE_STEP_PENDING)
                    return
                steps = (0, 0)
            if steps is None:
                placed = f" ({self._placed_by})" if self._placed_by else ""
                plural = "" if expected == 1 else "s"
                fewest = busy_window.CPU_FEWEST_STEPS if on_cpu else busy_window.FEWEST_STEPS
                self.missed(
                    f"epoch {number} has {expected:.0f} training step{plural}{placed}, too few for the window, "
                    f"which needs {fewest} or more"
                )
            else:
                self.window = BusyWindow(*steps, device_type=self.device_type, warmup=warmup)

    def weigh(self, step_s: float, fit_s: float, unknown: bool) -> bool:
        """On a CPU, as the window opens, after steps of ``step_s``: fit it to what a ``fit_s`` fit pays for.

        False where it is declined (``unknown``: the fit's length was not known ahead).
        """
        window = self.window
        assert window is not None and self.window_share is not None
        clock_may = self.clock_calls and world() is None and not dynamo_compiled()  # docs/timing.md
        weighed = window_price.weigh(fit_s, step_s, self.window_share, self.nodes, self.op_s, clock_may)
        affordable, share = weighed.steps, weighed.share
        if not affordable >= 1:  # NaN too
            self.steps, self.window = 0, None  # declined: no window again this fit
            length = "of a length not known ahead (its training loader has no length and max_steps does not bound it), "
            self.missed(
                f"the fit, {length if unknown else ''}some {fit_s:,.1f} s in all as far as known, is too short for one "
                f"profiled step ({step_s * 1e3:,.1f} ms, {weighed.price:.2g} times that to record"
                f"{', its torch calls timed' if clock_may else ''}) to cost under {share:.1%} of its time; "
                f"{PROFILE_ANYWAY}"
            )
            return False
        if weighed.clocked:
            nodes = self.nodes if self.nodes and self.nodes < window_price.GRAPH_LIMIT else math.inf
            window.clock = OperatorClock(self.op_s, nodes)  # a graph not counted: its backward at the least 0
        if math.isfinite(affordable):  # a fit no limit ends (max_epochs -1, max_time) pays for any window
            window.cap(int(affordable), step_s, share * fit_s - weighed.start_s)
        return True

    def step_end(self, index: int, number: int, warm_up: bool, now: Callable[[], Waits]) -> None:
        """Step ``index`` of epoch ``number`` ended; after the window's last, its reading, and its cost from ``now``."""
        window = self.window
        assert window is not None
        window.step_end(index)
        if window.done:
            self.window, self.reading = None, window.result(number)
            if window.unread is not None:
                self.missed(unread_said(window.unread, window.kernels, window.last - window.first + 1))
            self.reading.in_warmup = warm_up
            self.recorded = window.recorded
            self.steps = 0  # read: no window again this fit
            if self.opened is not None:
                ended = now()
                seconds, fetch, host = (end - start for end, start in zip(ended, self.opened, strict=True))
                self.cost = (seconds, fetch, host, window.last - window.opens + 1)

    def close(self, number: int, first_index: int | None, steps: int, stopped: bool = False) -> None:
        """Stop a window epoch ``number`` did not finish (its ``steps`` from ``first_index``), saying why not read.

        ``stopped``: the fit was, by an error or Ctrl-C.
        """
        if self.window is None:
            return
        window, self.window = self.window, None
        window.close()
        if window.unread is not None:  # abandoned for a reason of its own (a graph captured inside it)
            self.missed(unread_said(window.unread))
        elif first_index is not None and first_index > window.opens:
            self.missed(
                f"epoch {number} began at step {first_index + 1} (a fit resumed mid-epoch), past "
                f"the window's start at step {window.opens + 1}"
            )
        elif (first_index or 0) + steps > window.last:  # the epoch ran past it, unrecorded
            self.missed(
                f"the profiler did not record steps {window.first + 1}-{window.last + 1} of epoch {number} "
                "(the timer's problems say why)"
            )
        else:
            placed = f"; {self._placed_by}" if self._placed_by else ""
            why = (
                "the fit stopped (an error or Ctrl-C)"
                if stopped
                else "max_steps, limit_train_batches, a stop (trainer.should_stop) or the module ended it early"
            )
            self.missed(
                f"epoch {number} ended after {steps} of its steps, before the window's last (step "
                f"{window.last + 1}{placed}): {why}"
            )

    def without(
        self,
        figures: tuple[float, float, float],
        steps: int,
        stand_in: tuple[float, float, float] | None = None,
        intervals: list[float] | None = None,
        waits: list[tuple[float, float]] | None = None,
    ) -> tuple[float, float, float]:
        """An epoch's train time, input wait and host wait over ``steps``, each profiled step as a typical other.

        The typical step: :func:`.typical_step` of the epoch's step ``intervals`` and their ``waits`` for their batch
        and the host's (where given): its first step apart, whose one-off work (a loader's workers starting, a cache
        filled) would stand in for each profiled one, and its spikes. Else the others' share scaled up. An epoch
        profiled whole has ``stand_in``'s figures where given (an earlier steady epoch's, as many steps).
        """
        if self.cost is None:
            return figures
        *inside, profiled = self.cost
        if steps <= profiled:  # profiled whole: no step of its own stands in for the profiled ones
            return stand_in or figures
        scale = steps / (steps - profiled)
        train, fetch, host = (max(whole - part, 0.0) * scale for whole, part in zip(figures, inside, strict=True))
        typical = typical_step(intervals, waits, profiled) if intervals is not None and waits is not None else None
        if typical is not None:
            train, fetch, host = (
                max(whole - part, 0.0) + profiled * each
                for whole, part, each in zip(figures, inside, typical, strict=True)
            )
        # the profiler only adds time: no figure is more than measured; each wait lies inside train time
        train, fetch, host = (
            min(estimate, measured) for estimate, measured in zip((train, fetch, host), figures, strict=True)
        )
        return train, min(fetch, train), min(host, train)

    def profiled(
        self,
        figures: tuple[float, float, float],
        steps: int,
        stand_in: tuple[float, float, float] | None = None,
        intervals: list[float] | None = None,
        waits: list[tuple[float, float]] | None = None,
    ) -> dict[str, Any] | None:
        """What a window read in this epoch added to it (None: none was), kept in its reading too.

        Its steps' seconds beyond what :meth:`without` stands in for them: the time it took out of the epoch's.
        """
        if self.cost is None or self.reading is None:
            return None
        seconds, _, _, profiled = self.cost
        stood_in = self.without(figures, steps, stand_in, intervals, waits)[0] - max(figures[0] - seconds, 0.0)
        cost = self.reading.cost_s = max(seconds - stood_in, 0.0)
        return dict(steps=profiled, seconds=seconds, of_steps=steps, extrapolated=True, cost_s=cost)

    def export_trace(self, folder: Path) -> Path | None:
        """Save the window's trace under ``folder`` (:data:`.busy_window.TRACE_FILE`): its path, or None."""
        profiler, self.recorded = self.recorded, None
        if profiler is None or self.reading is None:
            return None
        recorded = self.reading.kernels or 0
        if self.trace_limit is not None and recorded > self.trace_limit:
            self.reading.trace_skipped = (
                f"{recorded:,} recorded operations, over the limit of {self.trace_limit:,}; "
                "EpochTimer(trace_limit=None) writes it"
            )
            return None
        path = folder / busy_window.TRACE_FILE
        atomic_write(path, lambda tmp: profiler.export_chrome_trace(str(tmp)))
        self.reading.trace = busy_window.TRACE_FILE.as_posix()
        return path
