"""One clock for every timed loop: host timestamps and the device's profiled window, turned into an epoch's figures.

Train and eval time are synchronized at their ends; the once-a-fit window's steps are kept out of their epoch's
figures. What each figure means: docs/timing.md, "What each figure measures".
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import torch

from mnistperf.diagnosis.figures import BUSY, FLOPS, TRAIN_S, Gathered, Measures
from mnistperf.diagnosis.measure import busy_window, window_price
from mnistperf.diagnosis.measure.cores import EpochCores
from mnistperf.diagnosis.measure.epoch_reading import EpochReading
from mnistperf.diagnosis.measure.flops import Peak, StepFlops
from mnistperf.diagnosis.measure.memory import EpochMemory, device_peaks_mb, reset_device_peaks
from mnistperf.diagnosis.measure.stalls import StepStats, step_stats
from mnistperf.diagnosis.measure.window_reading import WindowReading
from mnistperf.diagnosis.record import epoch_text
from mnistperf.diagnosis.record.advice import Hints
from mnistperf.diagnosis.record.summary import aggregate, epoch_row, ranks_apart
from mnistperf.diagnosis.record.verdict import INPUT_BOUND_SHARE
from mnistperf.diagnosis.record.window_keeper import WindowKeeper


class EpochClock:
    """Times the epochs of one run, the fit taken to start when the clock is made, and keeps their rows.

    Settings as :class:`~mnistperf.diagnosis.EpochTimer`'s (``metric``: its ``monitor``); ``profile_window``: whether
    a window's busy share is read (False: no step runs, or the loop hides it), ``busy_unavailable`` why it cannot be;
    ``clock_calls``: whether the operator clock may stand in for a profiler (a Lightning step, nothing compiled).
    """

    def __init__(
        self,
        device: torch.device,
        input_bound_share: float = INPUT_BOUND_SHARE,
        busy_window_steps: int = busy_window.WINDOW_STEPS,
        profile_window: bool = True,
        busy_unavailable: str | None = None,
        trace_limit: int | None = busy_window.TRACE_LIMIT,
        window_share: float | None = window_price.WINDOW_FIT_SHARE,
        metric: str | None = None,
        peak: Peak | None = None,
        world_size: int = 1,
        clock_calls: bool = False,
        flops_per_step: float | None = None,
        flops_reason: str | None = None,
    ):
        self.device, self.metric = device, metric
        self.flops = StepFlops(peak, world_size, flops_per_step, flops_reason)
        self.input_bound_share = input_bound_share
        self._fit_start = time.perf_counter()
        self._stopped = False  # whether the fit stopped (an error, Ctrl-C)
        if device.type != "cuda":
            busy_window_steps = min(busy_window_steps, busy_window.CPU_WINDOW_STEPS)
        if busy_unavailable is None and busy_window_steps <= 0:
            busy_unavailable = "the profiled window is off (busy_window_steps 0)"
        wanted = device.type in BUSY and profile_window
        self.windows = WindowKeeper(
            device.type, busy_window_steps, wanted, busy_unavailable, trace_limit, window_share, clock_calls
        )
        self.epochs: list[dict[str, Any]] = []
        self._last_length: int | None = None  # the training steps of the last whole epoch whose loader had no length
        self._per_step: tuple[float, float, float] | None = None  # the last steady epoch's figures a step
        self._epoch_began: float | None = None  # as the last epoch began
        self._epoch_s: float | None = None  # from the epoch before's start to the last's
        self._reset()

    def _synced_now(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        elif self.device.type == "mps":
            torch.mps.synchronize()
        return time.perf_counter()

    def _reset(self, batches: float = math.inf, number: int | None = None, loader_workers: bool = True) -> None:
        self._train_s = self._eval_s = self._host_wait_s = self._input_wait_s = 0.0
        self._samples: int | None = 0
        self._train_start: float | None = None
        self._eval_start: float | None = None
        self._last_step_end = 0.0
        self._batches = batches
        self._length = int(batches) if math.isfinite(batches) else None  # the epoch's whole length, where known
        self._number = number if number is not None else len(self.epochs) + 1
        self.steps = 0  # the training steps begun in the epoch so far
        self._first_index: int | None = None
        self.windows.epoch_reset()
        self._intervals: list[float] = []  # each step's host interval (NaN: left out), reduced at the epoch's end
        self._waits_s: list[tuple[float, float]] = []  # each step's wait for its batch and the host's, by its interval
        self._step_wait_s = self._step_gap_s = 0.0  # the step begun last's
        self._stats: StepStats | None = None
        # loader_workers: whether the fit's loaders may run workers (False: none is looked for)
        self._memory = EpochMemory(batches, loader_workers, self._number - 1)
        self._cores = EpochCores(loader_workers)
        self._ended = math.nan  # the clock's last read at the end of train or eval time
        self._evaluating = self._eval_cut = False  # whether an evaluation runs; whether the fit stopped inside one

    def expected_steps(self, batches: float) -> float:
        """The epoch's training steps: ``batches``, or where that is inf (no length) the last whole epoch's, if any."""
        if math.isfinite(batches) or self._last_length is None:
            return batches
        return float(self._last_length)

    def epoch_start(
        self,
        batches: float = math.inf,
        number: int | None = None,
        last: bool = False,
        steps_left: float = math.inf,
        loader_workers: bool = True,
    ) -> None:
        """Start epoch ``number`` (by default the next) of ``batches`` training steps (inf: no length); synchronizes.

        The busy window opens in the first steady epoch that has not read it (the first epoch if it is the ``last``);
        on a CPU, ``steps_left`` (this epoch's included; NaN: not known) weighs its cost (:meth:`_weigh_window`).
        """
        self._reset(batches, number, loader_workers)
        self._steps_left = steps_left
        reset_device_peaks(self.device)
        stand_in = self._per_step is not None
        self.windows.place(self._number, batches, self.expected_steps(batches), not (self.epochs or last), stand_in)
        self._train_start = self._last_step_end = self._synced_now()
        if self._epoch_began is not None:  # the last epoch's whole period: train, eval and what lies between epochs
            self._epoch_s = self._train_start - self._epoch_began
        self._epoch_began = self._train_start
        self._cores.start(self._train_start)

    def _weigh_window(self) -> bool:
        """On a CPU, as the window opens: fit it to what the whole fit can pay for (docs/timing.md), or decline it."""
        if not self.windows.needs_weighing or self._train_start is None:
            return True
        now = time.perf_counter()
        steady = None if self._per_step is None else (self._per_step[0], self._epoch_s)
        ran = (self.steps - 1, self._train_s + now - self._train_start, now - self._fit_start)
        estimate = window_price.fit_estimate(ran, steady, self._steps_left, self.expected_steps(self._batches))
        return estimate is None or self.windows.weigh(*estimate)

    @property
    def priced(self) -> bool:
        """Whether the window needs no price, or has the step's graph to price it by (:meth:`read_graph`)."""
        return self.windows.priced

    def read_graph(self, loss: Any) -> None:
        """Where not :attr:`priced`: the nodes of a training step's graph, from its ``loss`` before the backward."""
        self.windows.nodes = window_price.graph_nodes(loss)

    @property
    def profiling(self) -> bool:
        """Whether the busy window's profiler runs now (its steps are not the epoch's typical ones)."""
        return self.windows.profiling

    @property
    def window_state(self) -> tuple[bool, int]:
        """Whether the busy window's profiler runs now, and which window is pending (its identity; None's if none)."""
        return self.windows.profiling, id(self.windows.window)

    @property
    def steps_ended(self) -> int:
        """The epoch's steps that ended so far (one begun and stopped by an error, or declined, did not)."""
        return len(self._intervals)

    @property
    def reading(self) -> WindowReading | None:
        """Where the busy share was profiled, and its value (None while not measured, with the reason)."""
        return self.windows.reading

    @property
    def busy_window(self) -> dict[str, Any] | None:
        """The profiled window's reading as timing.json keeps it, this process's own (None where none is wanted)."""
        return None if self.reading is None else self.reading.as_json()

    def step_start(self, index: int, fetch_wait_s: float = 0.0) -> None:
        """Training step ``index`` begins (its batch on the device), after ``fetch_wait_s`` more wait for it."""
        now = time.perf_counter()  # called every step: kept to the fewest calls
        self._input_wait_s += fetch_wait_s
        self._step_wait_s = fetch_wait_s
        gap = 0.0  # since the step before ended: this step's wait for its batch, and the host's
        if self._train_start is None:  # resuming after an evaluation inside the epoch
            self._train_start = self._last_step_end = now
            self._cores.train_resumed()
        else:
            gap = now - self._last_step_end
            self._host_wait_s += gap
        self._step_gap_s = gap
        self.steps += 1
        if self.steps == self._memory.mid_step:
            self._memory.read()
        if now >= self._cores.due or index + 2 == self._batches:  # the step before the last: workers still run
            self._cores.read_workers(now)
        if self._first_index is None:
            self._first_index = index
        window = self.windows.window
        if window is not None and index == window.opens and self._weigh_window():
            train, fetch, host = self._waits()  # from the step before's end: the window's steps whole, waits in
            self.windows.opened = (train - gap, fetch - fetch_wait_s, host - gap)
        if self.windows.window is not None:  # unless declined as it opened
            self.windows.window.step_start(index)

    def _waits(self) -> tuple[float, float, float]:
        """The epoch's train time (synchronized), input and host waits so far: what the window's cost is read from.

        Train time, not the wall's: an evaluation inside the window is no part of its steps.
        """
        now = self._synced_now()
        train = self._train_s + (now - self._train_start if self._train_start is not None else 0.0)
        return train, self._input_wait_s, self._host_wait_s

    def step_end(self, index: int) -> None:
        """Step ``index`` was launched: its host interval is kept (NaN if profiled); the last step ends train time."""
        now = time.perf_counter()
        self._intervals.append(math.nan if self.profiling else now - self._last_step_end)
        self._waits_s.append((self._step_wait_s, self._step_gap_s))
        self._step_wait_s = self._step_gap_s = 0.0  # (a None batch's end comes without a start)
        if self.windows.window is not None:
            self.windows.step_end(index, self._number, not self.epochs, self._waits)
            now = time.perf_counter()
        self._last_step_end = now
        if index + 1 == self._batches:
            self.train_end()

    def count(self, samples: int | None) -> None:
        """Add a training batch's samples; None where they could not be counted (the epoch then has no count)."""
        self._samples = None if samples is None or self._samples is None else self._samples + samples

    def add_fetch_wait(self, seconds: float) -> None:
        """Add host seconds spent waiting for a training batch."""
        self._input_wait_s += seconds

    def train_end(self) -> None:
        """Training stops (the last step, or an evaluation begins); synchronizes. Idempotent."""
        if self._train_start is not None:
            now = self._synced_now()
            self._train_s += now - self._train_start
            self._train_start = None
            self._eval_start = self._ended = now
            self._cores.train_paused()
        self._memory.settle()  # before a validation's workers start

    def eval_start(self) -> None:
        """An evaluation inside the epoch begins: train time pauses."""
        self.train_end()
        self._evaluating = True
        if self._eval_start is None:
            self._eval_start = self._synced_now()

    def eval_end(self) -> None:
        """The evaluation ends; synchronizes."""
        self._evaluating = False
        if self._eval_start is not None:
            self._ended = self._synced_now()
            self._eval_s += self._ended - self._eval_start
            self._eval_start = None

    def fit_stopped(self, closing: bool) -> None:
        """The fit stopped (an error, Ctrl-C): a window it leaves unread is said to be cut by it.

        ``closing``: the epoch is closed as far as it trained, so an evaluation it stopped inside ends now
        (synchronizes: never under DDP, where a peer's collective may never come), its validation cut.
        """
        self._stopped = True
        if closing and self._evaluating:
            self.eval_end()
            self._eval_cut = True

    def close(self) -> None:
        """Stop a busy window the run did not finish (an interrupted or shortened epoch), saying why it was not read."""
        self.windows.close(self._number, self._first_index, self.steps_ended, self._stopped)

    def export_trace(self, folder: Path) -> Path | None:
        """Save the busy window's trace under ``folder``: its path, or None (:meth:`.WindowKeeper.export_trace`)."""
        return self.windows.export_trace(folder)

    def _measured(
        self,
    ) -> tuple[
        tuple[float, float, float], int, tuple[float, float, float] | None, list[float], list[tuple[float, float]]
    ]:
        """The epoch's train time, input wait and host wait, its steps, what stands in where profiled whole.

        Then each step's interval (NaN where profiled), and its wait for its batch and the host's before it.
        """
        per, steps = self._per_step, self.steps
        stand_in = None if per is None else (per[0] * steps, per[1] * steps, per[2] * steps)
        return (self._train_s, self._input_wait_s, self._host_wait_s), steps, stand_in, self._intervals, self._waits_s

    def epoch_end(self, metrics: dict[str, float] | None = None) -> dict[str, Any]:
        """End the epoch of a loop on one process (synchronizes) and return its row, with ``metrics`` in it."""
        return self.close_epoch(Gathered(Measures.of(self.read_epoch()), []), metrics or {})

    def read_epoch(self, phase_shares: dict[str, float] | None = None, ran_out: bool | None = None) -> EpochReading:
        """End the epoch's timing (synchronizes); what this process read of it, ``phase_shares`` splitting its steps.

        ``ran_out``: whether a training loader of no length ran out (None: not known, or a loader with a length, where
        max_steps alone tells a loader of no length cut short); an epoch begun at its start whose loader ran out is
        whole, whatever was due (a limit past a stream's end).
        """
        self.train_end()
        self.close()  # the epoch ended before the window did (a limit on batches)
        whole = ran_out if ran_out is not None else self.steps < self._steps_left or math.isnan(self._steps_left)
        if ran_out and self._first_index == 0:  # (a limit past a stream's end: its steps were all there were)
            self._length = None
        if not math.isfinite(self._batches) and self._first_index == 0 and self.steps:
            if whole:  # its loader ran out
                self._last_length = self.steps  # what the next epoch of a loader without a length is taken to run
            elif self._last_length is not None:  # max_steps or a stop ended it: as long as the last whole one, at most
                self._length = self._last_length
        window = self.reading or WindowReading(self.device.type)
        talk = window.communication
        shares = phase_shares or {}
        train_s, input_wait_s, host_wait_s = self.windows.without(*self._measured())  # the profiled steps apart
        if self.epochs and self.steps:  # a steady epoch: what stands in for one profiled whole
            self._per_step = (train_s / self.steps, input_wait_s / self.steps, host_wait_s / self.steps)
        in_steps = max(train_s - host_wait_s, 0.0)
        stats = self._stats = step_stats(self._intervals, self._first_index or 0)
        self._memory.read()
        rss, workers = self._memory.largest()  # each the larger of its readings, mid-epoch and now
        allocated, reserved = device_peaks_mb(self.device)
        # Over the epoch's whole train time and its end (the profiled window's steps in: its waits are theirs too).
        core_wait, workers_cpu = self._cores.shares(self._train_s, self._ended)
        return EpochReading(
            device=self.device.type,
            steps=self.steps,
            train_s=train_s,
            eval_s=self._eval_s,
            input_wait_s=input_wait_s,
            host_wait_s=host_wait_s,
            samples=math.nan if self._samples is None else float(self._samples),
            busy_share=math.nan if window.share is None else window.share,
            forward_s=shares.get("forward", math.nan) * in_steps,
            backward_s=shares.get("backward", math.nan) * in_steps,
            optimizer_s=shares.get("optimizer", math.nan) * in_steps,
            step_median_s=stats.median_s,
            step_p90_s=stats.p90_s,
            step_max_s=stats.max_s,
            first_step_s=stats.first_s,
            spikes=float(stats.spikes),
            spikes_s=stats.excess_s,
            rss_mb=rss,
            workers_pss_mb=workers,
            device_allocated_mb=allocated,
            device_reserved_mb=reserved,
            flops=self.flops.of_steps(self.steps),
            comm_share=math.nan if talk is None else talk.share,
            comm_exposed_share=math.nan if talk is None else talk.exposed_share,
            core_wait_share=core_wait,
            workers_cpu_share=workers_cpu,
        )

    def close_epoch(self, gathered: Gathered, extra: dict[str, Any]) -> dict[str, Any]:
        """The epoch's row (:func:`.epoch_row`) from its measures over every rank (:func:`.gather`), with ``extra``."""
        merged = gathered.measures
        ended = self.steps_ended
        if self._length is not None and ended < self._length:  # a fit stopped or resumed inside the epoch
            extra["partial"] = {"steps": ended, "batches": self._length}
        if self._eval_cut:  # trained whole, stopped inside its validation
            extra["partial"] = {"steps": ended, "batches": self._length or ended, **extra.get("partial", {})}
            extra["partial"]["validation"] = "interrupted"
        extra = {**extra, **self.flops.epoch(merged[FLOPS], merged[TRAIN_S])}
        if gathered.per_rank is not None:
            extra.update(ranks_apart(gathered.per_rank))
        profiled = self.windows.profiled(*self._measured())
        if profiled is not None:  # a window read in this epoch
            extra["profiled"] = profiled
        row = epoch_row(self._number, merged, self._stats, self.reading, extra, self.input_bound_share)
        self.epochs.append(row)
        return row

    def flops_counted(self, per_step: float | None = None, reason: str | None = None) -> None:
        """One training step's FLOPs, counted; or why they were not (``reason``)."""
        self.flops.counted(per_step, reason)

    def summary(
        self,
        hints: Hints | None = None,
        step_parts: dict[str, Any] | None = None,
        between_epochs: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The run's figures (:func:`.aggregate`) and its FLOPs' utilization."""
        found = aggregate(
            self.epochs, self.input_bound_share, self.reading, hints, self.metric, step_parts, between_epochs
        )
        found.update(self.flops.run(found["epochs"], found["steady_epochs"], epoch_text.peak_said(self.flops.peak)))
        return found
