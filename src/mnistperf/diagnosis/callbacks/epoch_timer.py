"""EpochTimer: the Lightning callback that times every epoch of any LightningModule and says what bounds the run.

``Trainer(callbacks=[EpochTimer()])``, or one line under ``trainer.callbacks`` of a LightningCLI
config (``- class_path: mnistperf.diagnosis.EpochTimer``). Automatic or manual optimization, with or
without a DataModule, on CPU or CUDA, under DDP; the trainer's own profiler keeps working.

Samples are counted from each training batch: by ``EpochTimer(samples_in_batch=fn)``, else the module's
own ``samples_in_batch(batch) -> int`` where it defines one (for batches whose tensors do not lead with
the batch dimension, such as groups of stacked batches), else the leading length of the batch's tensors,
found by Lightning's ``extract_batch_size`` in a dict, tuple, list, bare tensor or nested mix. What it cannot measure
(samples no batch shows, GPU busy time beside a torch profiler of the user's) it says once. Several
training loaders (a dict or list of them, a CombinedLoader in any mode) are each counted, and the
epoch's row keeps each loader's samples. A batch counts once it has trained: one the module skips
(its ``on_train_batch_start`` returning -1) does not. A fit resumed inside an epoch numbers that
epoch as Lightning does, although Lightning does not start it with ``on_train_epoch_start``.

A thin callback over :class:`~mnistperf.diagnosis.record.clock.EpochClock`, which holds the arithmetic: the
callback tells the clock when epochs, steps and validation begin and end, and hands it the input
wait timed around Lightning's fetch of each training batch (:mod:`mnistperf.diagnosis.measure.fetch_clock`).
The clock also profiles the device's work over a short window of steps in the first epoch (the
warm-up epoch, reported apart): the GPU's kernels on CUDA, the CPU's tensor operations on a CPU. It
saves that window beside ``timing.json`` as a trace that Perfetto and TensorBoard's profile plugin
open (``plugins/profile/busy_window/*.pt.trace.json``). On one optimizer step in sixteen (its training
steps, under gradient accumulation) it marks where the forward, the backward and the update begin
(:mod:`mnistperf.diagnosis.measure.phases`), for the epoch's split of train time. The verdict
(:func:`mnistperf.diagnosis.record.summary.classify`) is input-bound, overhead-bound or compute-bound, on CUDA
and on a CPU alike.

Sanity-check validation is excluded. Lightning creates the first epoch's DataLoader
iterator (starting its workers and fetching one batch) before the epoch begins, so epoch 1
leaves that out; later epochs include it when workers are not persistent.

Under DDP every rank measures itself; at the end of each epoch the figures are gathered:
samples are summed, times are the slowest rank's, shares are averaged, and only global
rank 0 prints, logs and writes ``timing.json`` into the run's log folder.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol, cast

import torch
from lightning.pytorch import Callback, LightningDataModule, LightningModule, Trainer
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from lightning.pytorch.profilers import Profiler, PyTorchProfiler
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.data import extract_batch_size
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from typing_extensions import override

from mnistperf.diagnosis.callbacks.arguments import Arguments
from mnistperf.diagnosis.callbacks.batch_hooks import skip_unused_batch_hooks
from mnistperf.diagnosis.callbacks.project_reader import project_hints, project_terms
from mnistperf.diagnosis.figures import EVAL_S, FORWARD_S, SAMPLES_PER_S, TRAIN_S, Measures, gather, scalars
from mnistperf.diagnosis.guard import Reporter
from mnistperf.diagnosis.measure.batches import Loaders
from mnistperf.diagnosis.measure.busy_window import TRACE_LIMIT, WINDOW_FIT_SHARE, WINDOW_STEPS
from mnistperf.diagnosis.measure.fetch_clock import FetchClock
from mnistperf.diagnosis.measure.flops import StepCounter, compiled, number_format, peak_flops, too_short_to_count
from mnistperf.diagnosis.measure.phases import sampled, unsampled
from mnistperf.diagnosis.record.advice import USER_HINTS, imported_hints
from mnistperf.diagnosis.record.clock import EpochClock
from mnistperf.diagnosis.record.summary import (
    INPUT_BOUND_SHARE,
    SUMMARY_FILE,
    environment,
    format_summary,
    throughput,
    write_summary,
)
from mnistperf.diagnosis.show.report import REPORT_FILE, html_report, write_report
from mnistperf.upstream import restore_hook, skip_hook, swap_profiler

PHASE_HOOKS = ("on_before_backward", "on_after_backward", "on_before_optimizer_step")
VALIDATION_METRIC = re.compile(r"(val|valid|validation)[/_.-]")


class TrainerAttributes(Protocol):
    """The Trainer's attributes that Lightning assigns outside its class, so its annotations do not declare them."""

    profiler: Profiler
    datamodule: LightningDataModule | None
    callbacks: list[Callback]


def leading_length(batch: Any) -> int | None:
    """The leading length of a batch's first tensor, as Lightning's ``extract_batch_size`` finds it; None if none.

    A tensor, or a tuple, list or dict whose first item is a tensor, is read directly (once per step, so this
    path stays cheap); anything else goes through ``extract_batch_size``.
    """
    first = batch
    if isinstance(first, (tuple, list)) and first:
        first = first[0]
    elif isinstance(first, dict) and first:
        first = next(iter(first.values()))
    if isinstance(first, torch.Tensor):
        return first.shape[0] if first.ndim else 1
    try:
        return extract_batch_size(batch)
    except (MisconfigurationException, RecursionError):
        return None


def scalar_metrics(metrics: Mapping[str, Any], names: re.Pattern[str], also: str | None = None) -> dict[str, float]:
    """The metrics named as ``names`` matches (or ``also``) that hold one number (a one-element tensor, a number)."""
    found = {}
    for name, value in metrics.items():
        if not names.match(name) and name != also:
            continue
        if (isinstance(value, torch.Tensor) and value.numel() == 1) or isinstance(value, numbers.Real):
            found[name] = float(value)
    return found


def own_counter(module: LightningModule, given: Callable[[Any], int] | None) -> Callable[[Any], int] | None:
    """The user's way to count a batch's samples: ``given`` (the timer's), else ``module.samples_in_batch``; or None."""
    own = given or getattr(module, "samples_in_batch", None)
    return own if callable(own) else None


def sample_counter(module: LightningModule, given: Callable[[Any], int] | None = None) -> Callable[[Any], int | None]:
    """How to count a training batch's samples: the user's (:func:`own_counter`), else :func:`leading_length`.

    Looked up once per fit, not per step.
    """
    own = own_counter(module, given)
    return (lambda batch: int(own(batch))) if own is not None else leading_length


def per_loader_text(samples: dict[str, int | None] | None) -> str:
    """An epoch's samples per training loader as its line says them (nothing for one loader, or where not counted).

    Each loader's count where they differ, else how many loaders counted how many each.
    """
    if not samples or any(count is None for count in samples.values()):
        return ""
    counts = cast(dict[str, int], samples)
    if len(set(counts.values())) == 1:
        return f" ({len(counts)} loaders of {next(iter(counts.values())):,} samples each)"
    return " (" + " + ".join(f"{name} {count:,}" for name, count in counts.items()) + " samples)"


def last_epoch(trainer: Trainer, batches: float | None = None) -> bool:
    """Whether the epoch starting now is the fit's last by its limits (max_epochs, max_steps).

    ``batches``: the epoch's training steps, by default the trainer's (inf where its loader has no length: then
    max_steps may end the fit inside it, and it is taken as possibly the last).
    """
    batches = float(trainer.num_training_batches) if batches is None else batches
    last = trainer.max_epochs is not None and 0 < trainer.max_epochs <= trainer.current_epoch + 1
    steps = trainer.max_steps
    return last or (steps > 0 and trainer.global_step + batches >= steps)


def steps_left(trainer: Trainer, batches: float | None = None) -> float:
    """The training steps the fit will still run from the epoch starting now, by its limits (inf where none bounds it).

    max_epochs and max_steps (optimizer steps, each of ``accumulate_grad_batches`` training steps); max_time is not
    known ahead. ``batches``: the training steps of each epoch left, by default the trainer's count of this one's; NaN
    where that is not known (a loader without a length) and max_epochs alone bounds the fit.
    """
    batches = float(trainer.num_training_batches) if batches is None else batches
    left = math.inf
    if trainer.max_epochs is not None and trainer.max_epochs > 0:
        left = batches * (trainer.max_epochs - trainer.current_epoch) if math.isfinite(batches) else math.nan
    if trainer.max_steps > 0:
        bound = float(trainer.max_steps - trainer.global_step) * max(1, int(trainer.accumulate_grad_batches))
        left = bound if math.isnan(left) else min(left, bound)
    return left


class EpochTimer(Callback):
    """Times every epoch, logs the figures to the loggers and prints the run's summary.

    Args:
        input_bound_share: share of train time the device (on CUDA) or the host (on a CPU)
            spends waiting for data at which a run is called input-bound (above 0, at most 1).
        summary_file: name of the JSON summary written into the run's log folder.
        busy_window_steps: training steps of the first steady epoch whose device work is profiled for the
            busy share (0 turns the profiling off; on a CPU at most six).
        hints: what the advice at the end suggests per verdict, in the project's own terms, or the import path
            of such a dict (``mypackage.hints.HINTS``, as a YAML config names it); by default what anyone can
            change in their own code (:data:`~mnistperf.diagnosis.record.advice.USER_HINTS`), an input bound
            named by the DataModule's own loader options and pointed at ``mnistperf tune`` with the run's config
            (:mod:`~mnistperf.diagnosis.callbacks.project_reader`).
        trace_limit: the most recorded operations the window's trace is written with (a few MB); None writes
            it whatever its size.
        window_share: on a CPU, the most of the fit's training time left the profiled window may cost (one per
            cent by default: the profiler's first start alone asks for some 25 s of training left, and a recorded
            step for 250 steps; above 0, at most 1); None profiles whatever it costs.
        samples_in_batch: ``batch -> int``, the samples of a training batch, for batches whose tensors do not lead
            with the batch dimension; by default the LightningModule's own ``samples_in_batch(batch)`` where it
            defines one, else the leading length of the batch's first tensor.
        monitor: a validation metric (as logged, e.g. ``val/acc``) whose last value the summary reports; None:
            none.
        flops_per_batch: the FLOPs of one training step (above 0), where known; by default torch's FLOP counter
            counts the fit's first step (:mod:`mnistperf.diagnosis.measure.flops`).
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
    ):
        check = Arguments("EpochTimer")  # at once: a nonsense argument would otherwise fail late in the fit, or never
        check.share("input_bound_share", input_bound_share)
        check.text("summary_file", summary_file, takes="a file name (a non-empty string)")
        check.number("busy_window_steps", busy_window_steps, 0, integer=True, takes="a count of steps, 0 or more")
        check.hints(hints, list(USER_HINTS))
        check.number("trace_limit", trace_limit, 0, integer=True, optional=True, takes="a count of 0 or more, or None")
        check.share("window_share", window_share, optional=True)
        check.function("samples_in_batch", samples_in_batch, takes="a function batch -> int, or None")
        check.text("monitor", monitor, optional=True, takes="a logged metric's name, or None")
        check.number(
            "flops_per_batch", flops_per_batch, 0, above=True, optional=True, takes="a number of FLOPs above 0, or None"
        )
        self.flops_per_batch = flops_per_batch
        self._flops = StepCounter()
        self._count_flops = self._counting_flops = False  # the fit's first step is to be counted, or is being
        self.input_bound_share = input_bound_share
        self.window_share = window_share
        self.samples_in_batch = samples_in_batch
        self.monitor = monitor
        self.hints = imported_hints(hints)
        check.hints(self.hints, list(USER_HINTS))
        self.summary_file = summary_file
        self.busy_window_steps = busy_window_steps
        self.trace_limit = trace_limit
        self.summary_path: Path | None = None  # where timing.json was written (None until it is)
        self._reported = False
        self.clock = EpochClock(torch.device("cpu"), input_bound_share, busy_window_steps)
        self._fetch: FetchClock | None = None
        self._count_samples: Callable[[Any], int | None] = leading_length
        self._uncounted = False  # a batch of this fit had no countable samples (said once)
        self._batch_read = False  # the fit's first batch was read for lengths that disagree
        self._loaders = Loaders()  # the fit's training loaders; several are counted each apart
        self._pending: int | None = None  # the samples of the step begun, counted once it trains
        self._pending_parts: list[int | None] = []  # the same, per loader (several loaders)
        self._step_begun = False  # a step began whose samples are not counted yet
        self._loader_samples: list[float] = []  # the epoch's samples per loader (several loaders)
        self._first_step: int | None = None  # the epoch's first training step that trained (its index)
        self._last_step: int | None = None  # and its last so far
        self._split_said = False  # why an epoch has no split was said (once a fit)
        self._accumulate = 1  # training steps per optimizer step (accumulate_grad_batches)
        self._epoch_open = False  # on_train_epoch_start ran for the epoch under way
        self._val_metrics: dict[str, float] = {}
        self.problems = Reporter("EpochTimer")  # what the timer says, and what went wrong inside it (timing.json)
        skip_unused_batch_hooks(self)
        # The phase hooks this class leaves as the timer's own are dispatched on sampled steps only.
        self._phase_hooks = [hook for hook in PHASE_HOOKS if getattr(type(self), hook) is getattr(EpochTimer, hook)]
        self._sampling = False
        self._stop_sampling()

    @property
    def epochs(self) -> list[dict[str, Any]]:
        """Every finished epoch's row, as timing.json has it."""
        return self.clock.epochs

    @property
    def busy_window(self) -> dict[str, Any] | None:
        """CUDA: where the busy share was profiled, and its value (None elsewhere)."""
        return self.clock.busy_window

    @staticmethod
    def _fitting(trainer: Trainer) -> bool:
        return not trainer.sanity_checking and trainer.state.fn == TrainerFn.FITTING

    # ------------------------------------------------------------------ hooks
    @override
    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Start a new clock on the module's device and time the training fetches through the trainer's profiler."""
        self.summary_path = None
        self._reported = False
        self.problems = Reporter("EpochTimer")
        self.clock = EpochClock(torch.device("cpu"), self.input_bound_share, 0)
        self._fetch = None
        with self.problems.guard("starting the clock"):
            self._start(trainer, pl_module)

    def _start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        busy_unavailable = None
        attributes = cast(TrainerAttributes, trainer)
        if isinstance(attributes.profiler, PyTorchProfiler):
            busy_unavailable = "the trainer's PyTorchProfiler holds torch's profiler, and only one can run"
            self.problems.say_once(trainer, f"busy share not measured: {busy_unavailable}.")
        hints = self.hints
        with self.problems.guard("naming the advice in the project's terms"):
            hints = project_hints(self.hints, project_terms(trainer), pl_module.device.type == "cuda")
        self.clock = EpochClock(
            pl_module.device,
            self.input_bound_share,
            self.busy_window_steps,
            busy_unavailable=busy_unavailable,
            hints=hints,
            trace_limit=self.trace_limit,
            window_share=self.window_share,
            metric=self.monitor,
        )
        self._fetch = FetchClock(attributes.profiler)
        self._count_samples = sample_counter(pl_module, self.samples_in_batch)
        self._uncounted = False
        self._batch_read = own_counter(pl_module, self.samples_in_batch) is not None  # the module counts its own
        self._loaders, self._loader_samples, self._step_begun = Loaders(), [], False
        self._accumulate = max(1, int(trainer.accumulate_grad_batches))
        self._look_up_peak(trainer, pl_module)

    def _look_up_peak(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """The device's peak FLOP/s for the run's number format, and whether the fit's first step is to be counted."""
        self.clock.flops_per_step = self.flops_per_batch
        self._count_flops = self.flops_per_batch is None and not compiled(pl_module)
        if self.flops_per_batch is None and not self._count_flops:
            self.clock.flops_reason = (
                "the module runs through torch.compile, whose graphs a FLOP counter would change; "
                "EpochTimer(flops_per_batch=...) gives the step's FLOPs"
            )
        self.clock.world_size = trainer.world_size
        device = pl_module.device
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
        fmt = number_format(str(trainer.precision), torch.get_float32_matmul_precision())
        peak, reason = peak_flops(device, fmt)
        said = f"{name}'s {fmt} peak ({peak / 1e12:,.0f} TFLOP/s)" if peak is not None else reason
        self.clock.peak = (peak, said)
        swap_profiler(trainer, self._fetch)  # Lightning's fetch reports to the trainer's profiler: time it there

    @override
    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Give the trainer back its own profiler and stop a busy window still open."""
        attributes = cast(TrainerAttributes, trainer)
        if self._fetch is not None and attributes.profiler is self._fetch:
            swap_profiler(trainer, self._fetch.inner)
        with self.problems.guard("stopping the busy window"):
            self.clock.close()
        self._stop_counting()

    def _stop_counting(self) -> None:
        """Stop a FLOP count whose step never ended (a skipped batch, an error)."""
        if self._counting_flops:
            self._counting_flops = False
            with self.problems.guard("counting the step's FLOPs"):
                self._flops.stop()

    @override
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Read the training loaders: several (a dict or list of them, a CombinedLoader) are counted each apart."""
        self._epoch_open = False
        with self.problems.guard("reading the training loaders"):
            loaders = Loaders(trainer.train_dataloader)
            if loaders.several and own_counter(pl_module, self.samples_in_batch) is None:
                self._loaders, self._count_samples = loaders, self._count_loaders
                self._loader_samples = [0.0] * len(loaders.names)

    @override
    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Start timing the epoch, its fetch wait from zero."""
        self._epoch_open = True
        self._val_metrics = {}
        if self._fetch is not None:
            self._fetch.reset()
        with self.problems.guard("starting the epoch's clock"):
            batches = float(trainer.num_training_batches)  # inf where the training loader has no length
            expected = self.clock.expected_steps(batches)
            self.clock.epoch_start(
                batches, trainer.current_epoch + 1, last_epoch(trainer, expected), steps_left(trainer, expected)
            )

    @override
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        """Mark the step's start and count the batch's samples, saying once where they cannot be counted.

        The samples count once the step has trained (:meth:`on_train_batch_end`): a batch the module skips by
        returning -1 from its own ``on_train_batch_start`` is not counted. A fit resumed inside an epoch starts
        that epoch here, since Lightning does not call ``on_train_epoch_start`` for it.
        """
        if not self._epoch_open:
            self.on_train_epoch_start(trainer, pl_module)
        try:
            if not self._batch_read and self._loaders.several:
                self._check_loaders(trainer, batch)
            self.clock.step_start(batch_idx)
            if self._count_flops:  # the fit's first step, if the fit can pay for counting it
                self._count_flops = False
                left = steps_left(trainer)
                # A fit of unknown length (a loader without one) is counted: a dozen steps' time, paid once.
                short = None if math.isnan(left) else too_short_to_count(left)
                if short is None:
                    self._counting_flops = True
                    self._flops.start()
                else:
                    self.clock.flops_reason = short
        except Exception as error:
            self.problems.note("timing a step's start", error)
        try:  # apart from the timing: a step whose clock failed still has its samples
            samples = self._count_samples(batch)
        except Exception as error:
            self.problems.note("counting a step's samples", error)
            samples = None
        if samples is None and not self._uncounted:
            self._uncounted = True
            self.problems.say_once(
                trainer,
                f"no tensor in a training batch ({type(batch).__name__}) gives its samples, so "
                "samples/s is not measured; pass EpochTimer(samples_in_batch=...) or define "
                f"samples_in_batch(self, batch) -> int on {type(pl_module).__name__}.",
            )
        self._pending, self._step_begun = samples, True
        if not self._batch_read:
            self._batch_read = True
            self._say_if_ambiguous(trainer, pl_module, batch)
        if self._sampling:
            self._next_sampled_step()
        elif sampled(batch_idx, self._accumulate) and not self.clock.profiling:  # profiled steps run slower
            self._start_sampling()

    def _count_loaders(self, batch: Any) -> int | None:
        """The samples of every loader's part of a batch (several loaders), each loader's kept for the step's end."""
        self._pending_parts = [0 if part is None else leading_length(part) for part in self._loaders.split(batch)]
        return None if None in self._pending_parts else sum(cast(list[int], self._pending_parts))

    def _check_loaders(self, trainer: Trainer, batch: Any) -> None:
        """Once a fit: a batch that does not hold each training loader's batch at its key is counted as one."""
        names = self._loaders.misfit(batch)
        if names is not None:
            self._loader_samples = []
            self._count_samples = sample_counter(trainer.lightning_module, self.samples_in_batch)
            self.problems.say_once(
                trainer,
                f"a training batch ({type(batch).__name__}) does not hold the batches of the training loaders "
                f"({names}) at their keys (a hook of the module reshaped it?): its samples are counted as one "
                "loader's.",
            )

    def _say_if_ambiguous(self, trainer: Trainer, pl_module: LightningModule, batch: Any) -> None:
        """Once a fit: where a batch's tensors lead with different lengths, say which one samples are counted by."""
        with self.problems.guard("reading the first batch's tensors"):
            for name, part, lengths in self._loaders.ambiguous(batch):
                where = f" of loader {name}" if name is not None else ""
                self.problems.say_once(
                    trainer,
                    f"the tensors of a training batch{where} ({type(part).__name__}) lead with different "
                    f"lengths ({', '.join(map(str, lengths))}): samples are counted as the first tensor's, "
                    f"{lengths[0]} a batch; pass EpochTimer(samples_in_batch=...) or define samples_in_batch(self, "
                    f"batch) -> int on {type(pl_module).__name__} to count what a sample is.",
                )

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        """Count the step's samples, now that it trained, and mark its end (after the epoch's last, training ends)."""
        try:
            if self._step_begun:  # not for a None batch, which Lightning ends without beginning it
                self._step_begun = False
                self._count_step(batch_idx)
            if self._sampling and self.clock.phases.end():
                self._stop_sampling()
            if self._counting_flops:
                self._counting_flops = False
                self.clock.flops_per_step = self._flops.stop()
            self.clock.step_end(batch_idx)
        except Exception as error:
            self._stop_sampling()
            self.problems.note("timing a step's end", error)

    def _count_step(self, index: int) -> None:
        """Count the samples of training step ``index``, which trained."""
        if self._first_step is None:
            self._first_step = index
        self._last_step = index
        self.clock.count(self._pending)
        if self._loader_samples:
            for i, samples in enumerate(self._pending_parts):
                self._loader_samples[i] += math.nan if samples is None else samples

    # Sampled steps: where the forward, the backward and the update begin and end (mnistperf.diagnosis.measure.phases).
    def _start_sampling(self) -> None:
        try:
            self.clock.phases.start(self._accumulate)
        except Exception as error:
            self.problems.note("marking a sampled step's start", error)
            return
        self._sampling = True
        for hook in self._phase_hooks:
            restore_hook(self, hook)

    def _next_sampled_step(self) -> None:
        """The next training step of a sample that spans several (gradient accumulation) begins."""
        try:
            self.clock.phases.start()
        except Exception as error:
            self._stop_sampling()
            self.problems.note("marking a sampled step's start", error)

    def _stop_sampling(self) -> None:
        self._sampling = False
        for hook in self._phase_hooks:
            skip_hook(self, hook)

    def _mark(self, name: str) -> None:
        if self._sampling:
            try:
                self.clock.phases.mark(name)
            except Exception as error:
                self.problems.note(f"marking a sampled step's {name}", error)

    @override
    def on_before_backward(self, trainer: Trainer, pl_module: LightningModule, loss: torch.Tensor) -> None:
        """On a sampled step: the forward is done."""
        self._mark("backward")

    @override
    def on_after_backward(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """On a sampled step: the backward is done."""
        self._mark("backward_end")

    @override
    def on_before_optimizer_step(self, trainer: Trainer, pl_module: LightningModule, optimizer: Any) -> None:
        """On a sampled step: the optimizer's update begins."""
        self._mark("optimizer")

    @override
    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Start timing a fit's validation (not the sanity check's)."""
        if self._fitting(trainer):
            with self.problems.guard("timing the validation's start"):
                self.clock.eval_start()

    @override
    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Stop timing a fit's validation and keep its scalar validation metrics for the epoch's row.

        Validation metrics are those named ``val``, ``valid`` or ``validation`` then ``/``, ``_``, ``.`` or ``-``
        (``val/acc``, ``val_loss``).
        """
        if not self._fitting(trainer):
            return
        with self.problems.guard("timing the validation's end"):
            self.clock.eval_end()
        with self.problems.guard("reading the validation metrics"):
            self._val_metrics = scalar_metrics(trainer.callback_metrics, VALIDATION_METRIC, self.monitor)

    @override
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Close the epoch's row over every rank; rank 0 logs its figures and prints its line.

        Every rank takes part in the epoch's one gather, also one whose own figures failed (it sends NaN). An epoch
        none of which ran in this fit (resumed from a checkpoint saved after its last step) has no row.
        """
        if not self._epoch_open:
            return
        self._epoch_open = self._step_begun = False
        self._stop_sampling()  # the epoch ended inside a sample (a batch the module skipped)
        self._stop_counting()
        per_loader, self._loader_samples = self._loader_samples, [0.0] * len(self._loader_samples)
        trained, self._first_step, self._last_step = (self._first_step, self._last_step), None, None
        measures = Measures.unmeasured()
        with self.problems.guard("measuring the epoch"):
            if self._fetch is not None:
                self.clock.add_fetch_wait(self._fetch.reset())
            measures = self.clock.measure_epoch()
        try:  # every rank takes part in the epoch's one collective, also one whose own measures failed
            gathered = gather(measures, trainer.strategy, per_loader)
            row = self.clock.close_epoch(gathered, self._val_metrics)
        except Exception as error:
            self.problems.note("closing the epoch's figures", error)
            return
        with self.problems.guard("counting the epoch's samples per loader and its split"):
            self._add_counts(trainer, row, gathered.loader_samples, trained)
        self.problems.log(trainer, scalars(row), "the epoch's figures")
        self.problems.say(
            trainer,
            f"epoch {row['epoch']}{self._bar_epoch(trainer)}: train {row[TRAIN_S]:.2f} s, "
            f"eval {row[EVAL_S]:.2f} s, {throughput(row[SAMPLES_PER_S])}"
            f"{per_loader_text(row.get('loader_samples'))}, {row['verdict']} ({row['verdict_reason']})",
        )

    def _add_counts(
        self, trainer: Trainer, row: dict[str, Any], per_loader: list[float], trained: tuple[int | None, int | None]
    ) -> None:
        """Add to the epoch's row its samples per training loader, and why it has no split where none was sampled.

        ``trained``: the epoch's first and last training steps that trained. The reason is also said, once a fit.
        """
        if per_loader:
            row["loader_samples"] = {
                name: None if math.isnan(count) else int(count)
                for name, count in zip(self._loaders.names, per_loader, strict=True)
            }
        reason = unsampled(*trained, self._accumulate)
        if row.get(FORWARD_S) is None and not self.clock.phases.started and reason is not None:
            row["split_reason"] = reason
            if not self._split_said:
                self._split_said = True
                self.problems.say_once(
                    trainer, f"train time is not split into forward, backward and optimizer: {row['split_reason']}."
                )

    def _bar_epoch(self, trainer: Trainer) -> str:
        """Beside a progress bar, the first epoch's line says the bar's number for it (the bar counts from 0)."""
        if trainer.progress_bar_callback is None or len(self.epochs) != 1:
            return ""
        return f" (the progress bar's Epoch {trainer.current_epoch})"

    @override
    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Report the run: rank 0 prints the summary and writes it into the run's log folder."""
        if not self.epochs:
            return
        folder = Path(trainer.default_root_dir)
        with self.problems.guard("finding the run's log folder"):
            folder = Path(trainer.log_dir or trainer.default_root_dir)  # a collective under DDP: every rank asks
        if trainer.is_global_zero:
            self._report(trainer, folder, interrupted=False)

    @override
    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        """A fit stopped early (Ctrl-C, an error): the finished epochs are still reported, marked interrupted."""
        if trainer.state.fn != TrainerFn.FITTING or not self.epochs or self._reported:
            return
        if trainer.is_global_zero:  # trainer.log_dir's folder without its collective: the other ranks may be gone
            folder = Path(trainer.default_root_dir)
            with self.problems.guard("finding the run's log folder"):
                logger = trainer.logger
                found = (
                    trainer.default_root_dir
                    if logger is None
                    else logger.log_dir
                    if isinstance(logger, (TensorBoardLogger, CSVLogger))
                    else logger.save_dir
                )
                folder = Path(found or trainer.default_root_dir)
            self._report(trainer, folder, interrupted=True)

    def _report(self, trainer: Trainer, folder: Path, interrupted: bool) -> None:
        """Print the summary once and write it atomically to ``folder``/timing.json.

        Each part that fails is one warning line; the rest is still printed and written.
        """
        self._reported = True
        trace = None
        with self.problems.guard(f"saving the busy window's trace under {folder}"):
            trace = self.clock.export_trace(folder)  # before the summary, which names it
        summary = {**self.summary(trainer), "interrupted": interrupted}
        with self.problems.guard("printing the summary"):
            print(format_summary(summary), flush=True)
        if interrupted:
            print(f"Interrupted: the figures cover the {len(self.epochs)} finished epoch(s)", flush=True)
        path = folder / self.summary_file
        with self.problems.guard(f"writing {path}"):
            write_summary({**summary, "problems": list(self.problems.lines)}, path)
            self.summary_path = path
            print(f"timing summary written to {path}", flush=True)
        if self.summary_path is not None:  # the report goes beside it (a folder refusing it was said once)
            with self.problems.guard(f"writing the report beside {path}"):
                name = summary.get("config") or folder.name
                report = path.with_name(REPORT_FILE)
                write_report(html_report([(str(name), summary)]), report)
                print(f"timing report written to {report} (open it in a browser)", flush=True)
        if trace is not None:
            print(f"busy window's trace written to {trace} (Perfetto; TensorBoard's profile tab)", flush=True)

    # ------------------------------------------------------------------ summary
    def summary(self, trainer: Trainer) -> dict[str, Any]:
        """Every figure of the run, per epoch and in total, with what produced it.

        ``config`` (the logger's name) and ``data`` (a DataModule's ``loader_settings()``) appear where the run
        has them.
        """
        datamodule = cast(TrainerAttributes, trainer).datamodule
        found: dict[str, Any] = {"runner": "lightning"}
        with self.problems.guard("reading the logger's name"):
            if trainer.logger is not None and trainer.logger.name is not None:
                found["config"] = trainer.logger.name
        with self.problems.guard("reading the DataModule's loader_settings()"):
            if datamodule is not None and hasattr(datamodule, "loader_settings"):
                found["data"] = datamodule.loader_settings()
        with self.problems.guard("reading the module's hyperparameters"):
            found["model"] = {k: v for k, v in trainer.lightning_module.hparams.items() if not k.startswith("_")}
        found.update(precision=str(trainer.precision), world_size=trainer.world_size)
        with self.problems.guard("reading the environment"):
            found.update(environment(self.clock.device))
        with self.problems.guard("summarizing the epochs"):
            found.update(self.clock.summary())
        return found
