"""EpochTimer: the Lightning callback that times every epoch of any LightningModule and says what bounds the run.

How to read it: docs/diagnose.md and docs/timing.md. Its hooks tell an EpochClock (the arithmetic) when epochs, steps
and validation begin and end. Under DDP each rank measures itself; global rank 0 alone prints, logs, writes timing.json.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import torch
from lightning.fabric.utilities.data import sized_len
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.profilers import PassThroughProfiler
from lightning.pytorch.trainer.states import TrainerFn
from typing_extensions import override

from mnistperf.diagnosis.callbacks.arguments import check, check_hints
from mnistperf.diagnosis.callbacks.batch_hooks import SampledSteps, skip_unused_batch_hooks
from mnistperf.diagnosis.callbacks.project_reader import (
    TrainerAttributes,
    audit_beside,
    bar_epoch,
    closes_stopped_epoch,
    last_epoch,
    project_hints,
    project_terms,
    steps_left,
    validation_metrics,
    why_no_profiler,
)
from mnistperf.diagnosis.callbacks.run_files import RunFiles
from mnistperf.diagnosis.callbacks.timed_steps import TimedSteps
from mnistperf.diagnosis.callbacks.timer_samples import TimerSamples
from mnistperf.diagnosis.figures import FORWARD_S, Measures, gather, scalars
from mnistperf.diagnosis.guard import Reporter
from mnistperf.diagnosis.measure.batches import fit_may_run_workers
from mnistperf.diagnosis.measure.busy_window import TRACE_LIMIT, WINDOW_STEPS
from mnistperf.diagnosis.measure.flops import FirstStep, device_peak
from mnistperf.diagnosis.measure.step_parts import FetchClock, syncs_for
from mnistperf.diagnosis.measure.window_price import WINDOW_FIT_SHARE
from mnistperf.diagnosis.record import epoch_text
from mnistperf.diagnosis.record.advice import imported_hints
from mnistperf.diagnosis.record.clock import EpochClock
from mnistperf.diagnosis.record.run import SUMMARY_FILE
from mnistperf.diagnosis.record.verdict import INPUT_BOUND_SHARE
from mnistperf.upstream import (
    fetched_by_step,
    loader_ran_out,
    restore_hook,
    skip_hook,
    step_unfinished,
    swap_profiler,
)

# The hooks an EpochTimer standing aside (:meth:`EpochTimer.setup`) has Lightning skip: every on_* hook, but the two
# Lightning calls directly rather than through the hooks' dispatch, which skips a hook set to None, and on_exception,
# which after an error brings the others back where teardown is not called
ASIDE = tuple(
    hook
    for hook in vars(Callback)
    if hook.startswith("on_") and hook not in ("on_save_checkpoint", "on_load_checkpoint", "on_exception")
)


class EpochTimer(Callback):
    """Times every epoch, logs the figures to the loggers and prints the run's summary.

    Args:
        input_bound_share: the share of train time waiting for data at which a run is input-bound.
        summary_file: the JSON summary's name in the run's log folder.
        busy_window_steps: training steps profiled for the busy share (0: none; on a CPU at most six).
        hints: per verdict, what the advice suggests, or the import path of such a dict (``mypackage.hints.HINTS``);
            by default what anyone can change, an input bound named by the DataModule's own loader options.
        trace_limit: the most recorded operations the window's trace is written with (None: any).
        window_share: on a CPU, the most of the fit's time the profiled window may cost (None: any); where that pays
            for no step, one step may cost 5 times it.
        samples_in_batch: ``batch -> int``; by default the module's own ``samples_in_batch(batch)``, else the
            leading length of the batch's first tensor.
        monitor: a validation metric (``val/acc``) whose last value the summary reports.
        flops_per_batch: one training step's FLOPs; by default torch's FLOP counter counts the fit's first step.
        log_all: hand the loggers every figure of an epoch, not the few plotted (timing.json keeps them all).
    """

    def __init__(
        self,
        input_bound_share: float = INPUT_BOUND_SHARE,
        summary_file: str = SUMMARY_FILE,
        busy_window_steps: int = WINDOW_STEPS,
        hints: dict[str, list[str]] | str | None = None,
        trace_limit: int | None = TRACE_LIMIT,
        window_share: float | None = WINDOW_FIT_SHARE,
        samples_in_batch: Callable[[Any], int] | None = None,
        monitor: str | None = None,
        flops_per_batch: float | None = None,
        log_all: bool = False,
    ):
        check("EpochTimer", locals())
        self.hints = imported_hints(hints)
        check_hints(self.hints)
        self.input_bound_share, self.busy_window_steps = input_bound_share, busy_window_steps
        self.summary_file, self.trace_limit, self.window_share = summary_file, trace_limit, window_share
        self.samples_in_batch, self.monitor, self.flops_per_batch = samples_in_batch, monitor, flops_per_batch
        self.log_all = log_all
        self.summary_path: Path | None = None  # where timing.json was written (None until it is)
        self.problems = Reporter("EpochTimer")  # what the timer says, and what went wrong inside it (timing.json)
        self.clock = EpochClock(torch.device("cpu"), input_bound_share, busy_window_steps)
        self._fetch = FetchClock(PassThroughProfiler())  # in the trainer's profiler's place from the fit's start
        self._timed_steps = TimedSteps(self._fetch, self._window_state)
        self._flops = FirstStep(flops_per_batch)
        self._sampled = SampledSteps(self, EpochTimer, torch.device("cpu"))  # on the module's device once fitting
        self._project_hints = self.hints  # the advice in the project's terms, once its loaders are read
        self._aside: list[str] = []  # the hooks it stopped where another EpochTimer times the fit
        skip_unused_batch_hooks(self)

    @property
    def epochs(self) -> list[dict[str, Any]]:
        """Every finished epoch's row, as timing.json has it."""
        return self.clock.epochs

    @property
    def busy_window(self) -> dict[str, Any] | None:
        """Where the busy share was profiled, and its value."""
        return self.clock.busy_window

    @staticmethod
    def _fitting(trainer: Trainer) -> bool:
        return not trainer.sanity_checking and trainer.state.fn == TrainerFn.FITTING

    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Stand aside from a fit, saying so, where another EpochTimer comes first: each would time the other's work."""
        self._come_back()
        callbacks = cast(TrainerAttributes, trainer).callbacks
        if stage == "fit" and next((c for c in callbacks if isinstance(c, EpochTimer)), self) is not self:
            self._aside = [hook for hook in ASIDE if callable(getattr(self, hook))]
            for hook in self._aside:
                skip_hook(self, hook)
            Reporter("EpochTimer").say_once(trainer, epoch_text.TWICE)

    def _come_back(self) -> bool:
        """Let Lightning call the hooks again that standing aside stopped; whether it had stood aside."""
        aside, self._aside = self._aside, []
        for hook in aside:
            restore_hook(self, hook)
        return bool(aside)

    @override
    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Start a new clock on the module's device and time the training fetches through the trainer's profiler."""
        self.summary_path, self._reported, self._fetch = None, False, FetchClock(PassThroughProfiler())
        self.problems = Reporter("EpochTimer")
        self.clock = EpochClock(torch.device("cpu"), self.input_bound_share, 0)
        with self.problems.guard("starting the clock"):
            busy_unavailable = why_no_profiler(trainer)
            if busy_unavailable is not None:
                self.problems.say_once(trainer, epoch_text.busy_unmeasured(busy_unavailable))
            self.clock = EpochClock(
                pl_module.device,
                self.input_bound_share,
                self.busy_window_steps,
                busy_unavailable=busy_unavailable,
                trace_limit=self.trace_limit,
                window_share=self.window_share,
                metric=self.monitor,
                peak=device_peak(pl_module.device, str(trainer.precision)),
                world_size=trainer.world_size,
                clock_calls=True,  # a Lightning step: the clock may time it where nothing was compiled
                flops_per_step=self.flops_per_batch,
                flops_reason=epoch_text.COMPILED_UNCOUNTED if self._flops.plan(pl_module) else None,
            )
            self._sampled = SampledSteps(self, EpochTimer, pl_module.device)
            self._fetch = FetchClock(cast(TrainerAttributes, trainer).profiler)
            self._timed_steps = TimedSteps(self._fetch, self._window_state, syncs_for(pl_module.device))
            swap_profiler(trainer, self._fetch)  # Lightning's fetch reports to the trainer's profiler: time it there

    def _stop_flops(self) -> None:
        """Stop a FLOP count whose step never ended (a batch the module skipped, an error)."""
        with self.problems.guard("counting the step's FLOPs"):
            self._flops.end()

    def _window_state(self) -> tuple[bool, int]:  # a method, not a lambda: the timer is pickled under ddp_spawn
        return self.clock.window_state

    @override
    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if self._come_back():  # a fit it stood aside from: its hooks back for the next
            return
        with self.problems.guard("giving back the loggers' and the module's calls timed on a step"):
            self._timed_steps.stop()
        with self.problems.guard("giving the trainer its profiler back"):
            if cast(TrainerAttributes, trainer).profiler is self._fetch:
                swap_profiler(trainer, self._fetch.inner)
        with self.problems.guard("stopping the busy window"):
            self.clock.close()
        self._stop_flops()

    @override
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Read the training loaders and name the advice in the project's terms, its loader's among them."""
        with self.problems.guard("naming the advice in the project's terms"):
            cuda = pl_module.device.type == "cuda"
            self._project_hints = project_hints(self.hints, project_terms(trainer), cuda)
        self._epoch_open = self._split_said = False
        own = self.samples_in_batch or getattr(pl_module, "samples_in_batch", None)
        self.samples = TimerSamples(self.problems, trainer, own if callable(own) else None)

    @override
    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Start timing the epoch, its fetch wait and its counts from zero."""
        self._epoch_open = True
        with self.problems.guard("timing the time between epochs"):
            self._timed_steps.between_ended(steady=len(self.clock.epochs) == 1)
        self._val_metrics: dict[str, float] = {}  # the validation's one-number metrics and monitor, for the row
        self.samples.epoch_start()
        self._fetch.reset()
        self._sampled.reset()
        self._fetches_itself = False  # a step that fetches its own batch: its samples read at its end
        with self.problems.guard("reading whether the training step fetches its own batches"):
            self._fetches_itself = fetched_by_step(trainer)[0]
        workers = True  # where the loaders cannot be read, /proc is
        with self.problems.guard("reading whether the loaders run workers"):
            workers = fit_may_run_workers(trainer)
        with self.problems.guard("starting the epoch's clock"):
            batches = float(trainer.num_training_batches)  # inf where the training loader has no length
            expected = self.clock.expected_steps(batches)
            number, last = trainer.current_epoch + 1, last_epoch(trainer, expected)
            self.clock.epoch_start(batches, number, last, steps_left(trainer, expected), loader_workers=workers)

    @override
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        """Mark the step's start and read its samples (a fit resumed inside an epoch starts that epoch here)."""
        if not self._epoch_open:  # Lightning does not call on_train_epoch_start for an epoch resumed inside
            self.on_train_epoch_start(trainer, pl_module)
        try:  # the fetch's wait so far: a profiled window's own is kept apart
            self.clock.step_start(batch_idx, self._fetch.reset())
            if self._flops.due:  # the fit's first step, if the fit can pay for counting it
                left = steps_left(trainer)
                needed = self._flops.begin(left)
                if needed is not None:
                    self.clock.flops_counted(reason=epoch_text.too_few_to_count(left, needed))
        except Exception as error:
            self.problems.note("timing a step's start", error)
        if not self._fetches_itself:  # apart from the timing: a step whose clock failed still counts
            self.samples.begin(trainer, pl_module, batch, batch_idx)
        try:  # profiled steps run slower: none of them is sampled
            self._sampled.step_start(
                batch_idx, trainer.accumulate_grad_batches, self.clock.profiling, trainer.current_epoch
            )
        except Exception as error:
            self._sampled.hooks_off()
            self.problems.note("marking a sampled step's start", error)

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        """Count the step's samples, now that it trained, and mark its end (after the epoch's last, training ends)."""
        if self._fetches_itself:  # the batch it fetched, which Lightning hands the next step's hooks
            self.samples.begin(trainer, pl_module, fetched_by_step(trainer)[1], batch_idx)
        try:
            began, samples = self.samples.end(batch_idx)
            if began:  # not for a None batch, which Lightning ends without beginning it
                self.clock.count(samples)
            self._sampled.step_end()
            if self._flops.counting:
                self.clock.flops_counted(self._flops.end())
            self.clock.step_end(batch_idx)
        except Exception as error:
            self._sampled.hooks_off()
            self.problems.note("timing a step's end", error)
        try:  # not a guard's context: this runs every step
            self._timed_steps.step_ended(trainer, pl_module, batch_idx)
        except Exception as error:
            self.problems.note("timing a step by its parts", error)

    def _mark(self, name: str) -> None:
        try:
            self._sampled.mark(name)
        except Exception as error:
            self.problems.note(f"marking a sampled step's {name}", error)

    @override
    def on_before_backward(self, trainer: Trainer, pl_module: LightningModule, loss: torch.Tensor) -> None:
        """On a sampled step: the forward is done (on a CPU, the first one's graph prices the profiled window)."""
        self._mark("backward")
        if not self.clock.priced:
            with self.problems.guard("reading the step's graph"):
                self.clock.read_graph(loss)

    @override
    def on_after_backward(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._mark("backward_end")

    @override
    def on_before_optimizer_step(self, trainer: Trainer, pl_module: LightningModule, optimizer: Any) -> None:
        self._mark("optimizer")

    @override
    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._fitting(trainer):
            with self.problems.guard("timing the validation's start"):
                self._timed_steps.validation_started()
                self.clock.eval_start()

    @override
    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Stop timing a fit's validation and keep its one-number validation metrics (and ``monitor``) for the row."""
        if not self._fitting(trainer):
            return
        with self.problems.guard("timing the validation's end"):
            self.clock.eval_end()
            self._timed_steps.validation_ended(trainer, pl_module)
        with self.problems.guard("reading the validation metrics"):
            self._val_metrics = validation_metrics(trainer.callback_metrics, self.monitor)

    @override
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Close the epoch's row over every rank; rank 0 logs its figures and prints its line."""
        if not self._epoch_open:  # none of the epoch ran in this fit (resumed after its last step): no row
            return
        self._epoch_open = False
        with self.problems.guard("timing the time between epochs"):
            self._timed_steps.epoch_ended(trainer, pl_module)
        per_loader = self.samples.epoch_end()
        self._sampled.hooks_off()  # the epoch ended inside a sample (a batch the module skipped)
        self._stop_flops()
        if not self.clock.steps and trainer.world_size == 1:  # no row, the warm-up still to come (under DDP every
            # rank reaches the gather below, whatever its own count says)
            self.problems.say(trainer, epoch_text.no_step(trainer.current_epoch + 1))
            return
        measures = Measures.unmeasured()
        with self.problems.guard("measuring the epoch"):
            self.clock.add_fetch_wait(self._fetch.reset())
            # a stream's, or a loader a step fetches its own batches from (several a step, where its steps are fewer)
            fetched = sized_len(trainer.train_dataloader) is None or fetched_by_step(trainer)[0]
            ran_out = loader_ran_out(trainer) if fetched else None
            measures = Measures.of(self.clock.read_epoch(self._sampled.phases.shares(), ran_out))
        try:  # every rank takes part in the epoch's one collective, also one whose own measures failed (NaN)
            gathered = gather(measures, trainer.strategy, per_loader)
        except Exception as error:
            self.problems.note("gathering the epoch's figures", error)
            return
        extra: dict[str, Any] = {**self._val_metrics, **self.samples.row(trainer, gathered.loader_samples)}
        with self.problems.guard("reading why the epoch has no split"):
            accumulate, forward = trainer.accumulate_grad_batches, gathered.measures[FORWARD_S]
            reason = self._sampled.split_reason(self.samples.trained, accumulate, forward, trainer.current_epoch)
            if reason is not None:
                extra["split_reason"] = reason
                if not self._split_said and reason != epoch_text.IN_WINDOW:  # once a fit; the window's, by design,
                    # only where no epoch had a split (the summary's line)
                    self._split_said = True
                    self.problems.say_once(trainer, epoch_text.unsplit(reason))
        try:
            row = self.clock.close_epoch(gathered, extra)
        except Exception as error:
            self.problems.note("closing the epoch's figures", error)
            return
        self.problems.log(trainer, scalars(row, self.log_all), "the epoch's figures")
        first = len(self.epochs) == 1  # its line says the bar's number for it (:func:`.bar_epoch`)
        self.problems.say(trainer, epoch_text.format_epoch(row, bar_epoch(trainer) if first else None))

    @override
    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        with self.problems.guard("timing the time between epochs"):
            self._timed_steps.between_ended()  # the last epoch's: until training ends

    @override
    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.epochs:
            self._report(trainer)

    @override
    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        """A fit stopped early (Ctrl-C, an error): torn down as after a fit, its finished epochs still reported.

        The epoch it stopped inside is closed as far as it trained, where :func:`.closes_stopped_epoch` and a step of it
        ended; an audit beside the timer audits it first (listed after the timer, it would do so only after the summary
        is written). A fit that stops before any epoch closed (in its sanity check, or its first step) says so.
        """
        if self._come_back():  # a fit it stood aside from, which Lightning does not tear down after an error
            return
        epoch_begun, fitting = getattr(self, "_epoch_open", False), trainer.state.fn == TrainerFn.FITTING
        closing = bool(epoch_begun and self.clock.steps and closes_stopped_epoch(trainer))
        with self.problems.guard("ending the validation the fit stopped inside"):
            self.clock.fit_stopped(closing)  # its time so far, the epoch partial; an unread window said to be cut by it
        if closing:
            with self.problems.guard("closing the epoch the fit stopped inside"):  # never in the error's place
                if self.samples.batches.pending is not None and not step_unfinished(trainer):  # trained: its end
                    self.on_train_batch_end(trainer, pl_module, None, None, self.samples.index)  # never came here
                if self.clock.steps_ended:  # no step of it trained: nothing to close
                    self.on_train_epoch_end(trainer, pl_module)
        with self.problems.guard("asking the audit beside to audit the epoch the fit stopped inside"):
            audit_stopped = getattr(audit_beside(trainer), "audit_stopped_epoch", None)
            if callable(audit_stopped):  # (once: the audit's own hook, which Lightning calls next, then does nothing)
                audit_stopped(trainer, pl_module)
        self.teardown(trainer, pl_module, trainer.state.fn or "")  # Lightning calls no teardown after an exception
        if fitting and self.epochs and not self._reported and trainer.is_global_zero:
            self._report(trainer, type(exception).__name__)
        elif fitting and not self.epochs and not getattr(self, "_reported", True) and trainer.is_global_zero:  # began
            self.problems.say(trainer, epoch_text.NOTHING_TIMED)

    def _report(self, trainer: Trainer, stopped_by: str | None = None) -> None:
        """Rank 0 prints the summary once and writes timing.json, the report beside it and the window's trace.

        ``stopped_by``: the type of the exception that stopped the fit early; None for a fit that ended.
        """
        self._reported = True
        files = RunFiles(self.summary_file, self.monitor, self.problems)
        self.summary_path = files.write(trainer, self.clock, self._figures, stopped_by)

    def _figures(self) -> dict[str, Any]:
        """The clock's figures of the run, the advice in the project's terms, where steps' and epoch ends' time goes."""
        parts = self._timed_steps.steps.parts.per_step(), self._timed_steps.between.parts.per_epoch_end()
        return self.clock.summary(self._project_hints, *parts)
