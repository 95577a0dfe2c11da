"""EpochTimer: the Lightning callback that times every epoch and says what bounds the run.

Per epoch it measures, on the host:

* **train time**: from the start of the epoch to the end of its last training step, with the
  device synchronized at both ends (the only synchronizations in the training loop);
  evaluation inside the epoch is paused out;
* **eval time**: from the end of the last training step to the end of validation
  (synchronized), so it includes starting the validation DataLoader's workers;
* **input wait**: host time inside Lightning's fetch of the next training batch
  (:mod:`mnistperf.timing.fetch_clock`): the time the host waited for data;
* **host wait**: host time between the end of one training step and the start of the next
  (the fetch, the copy to the device and Lightning's own work between steps).

On CUDA it also profiles the GPU's kernels over a short window of steps in the first epoch (the
warm-up epoch, reported apart; :mod:`mnistperf.timing.kernel_busy`): the share of the time the
GPU was executing work. The verdict (:func:`mnistperf.timing.summary.classify`) is input-bound,
overhead-bound or compute-bound on CUDA, and input-bound or compute-bound on a CPU, where host
and device are one.

Sanity-check validation is excluded. Lightning creates the first epoch's DataLoader
iterator (starting its workers and fetching one batch) before the epoch begins, so epoch 1
leaves that out; later epochs include it when workers are not persistent.

Under DDP every rank measures itself; at the end of each epoch the figures are gathered:
samples are summed, times are the slowest rank's, shares are averaged, and only global
rank 0 prints, logs and writes ``timing.json`` into the run's log folder.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Optional

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from lightning.pytorch.trainer.states import TrainerFn

from mnistperf.timing.fetch_clock import FetchClock
from mnistperf.timing.kernel_busy import WINDOW_STEPS, KernelWindow, window_steps
from mnistperf.timing.summary import SUMMARY_FILE, aggregate, environment, epoch_row, format_summary, write_summary

# Figures gathered from every rank at the end of an epoch, with how they combine.
GATHERED = (("train_s", "max"), ("eval_s", "max"), ("fetch_wait_s", "max"), ("host_wait_s", "max"),
            ("samples", "sum"), ("device_busy", "mean"))


def synchronize(device: torch.device) -> None:
    """Wait for queued device work, so a host clock read after it covers that work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def say(trainer: Trainer, message: str) -> None:
    """Print a line without tearing the progress bar."""
    bar = trainer.progress_bar_callback
    if bar is not None:
        bar.print(message)
    else:
        print(message, flush=True)


class EpochTimer(Callback):
    """Times every epoch, logs the figures to the loggers and prints the reference's summary.

    Args:
        input_bound_share: share of train time the device (on CUDA) or the host (on a CPU)
            spends waiting for data at which a run is called input-bound.
        summary_file: name of the JSON summary written into the run's log folder.
        busy_window_steps: training steps of the first epoch whose GPU kernels are profiled for the
            busy share (CUDA only; 0 turns the profiling off).
    """

    def __init__(self, input_bound_share: float = 0.5, summary_file: str = SUMMARY_FILE,
                 busy_window_steps: int = WINDOW_STEPS):
        self.input_bound_share = input_bound_share
        self.summary_file = summary_file
        self.busy_window_steps = busy_window_steps
        self.epochs: list[dict[str, Any]] = []
        self.summary_path: Optional[Path] = None
        self.busy_window: Optional[dict[str, Any]] = None  # CUDA: where the busy share was profiled, and its value
        self._device = torch.device("cpu")
        self._fetch: Optional[FetchClock] = None
        self._window: Optional[KernelWindow] = None
        self._reset_epoch()

    # ------------------------------------------------------------------ clocks
    def _now(self, sync: bool = False) -> float:
        if sync:
            synchronize(self._device)
        return time.perf_counter()

    def _reset_epoch(self) -> None:
        self._train_s = self._eval_s = self._wait_s = 0.0
        self._samples = 0
        self._train_start: Optional[float] = None
        self._eval_start: Optional[float] = None
        self._last_step_end = 0.0
        self._val_metrics: dict[str, float] = {}
        if self._fetch is not None:
            self._fetch.reset()

    def _pause_train(self) -> None:
        if self._train_start is not None:
            now = self._now(sync=True)
            self._train_s += now - self._train_start
            self._train_start = None
            self._eval_start = now

    # ------------------------------------------------------------------ hooks
    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._device = pl_module.device
        self.epochs = []
        self.summary_path = None
        self.busy_window = {"share": None} if self._device.type == "cuda" else None
        self._fetch = FetchClock(trainer.profiler)
        trainer.profiler = self._fetch  # Lightning's fetch reports to the trainer's profiler: time it there

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if self._fetch is not None and trainer.profiler is self._fetch:
            trainer.profiler = self._fetch.inner
        if self._window is not None:
            self._window.close()
            self._window = None

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._reset_epoch()
        first_epoch = not self.epochs
        if first_epoch and self.busy_window is not None and self.busy_window_steps > 0:
            steps = window_steps(trainer.num_training_batches, self.busy_window_steps)
            self._window = KernelWindow(*steps) if steps else None
        self._train_start = self._last_step_end = self._now(sync=True)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        now = self._now()
        if self._train_start is None:  # resuming after a validation run inside the epoch
            self._train_start = now
        else:
            self._wait_s += now - self._last_step_end
        if self._window is not None:
            self._window.step_start(batch_idx)
        self._samples += batch["label"].numel()  # a group of k batches (data.batches_per_step) counts k

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._window is not None:
            self._window.step_end(batch_idx)
            if self._window.busy is not None:
                self.busy_window = self._window.result(trainer.current_epoch + 1)
                self._window = None
        self._last_step_end = self._now()
        if batch_idx + 1 == trainer.num_training_batches:
            self._pause_train()

    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.sanity_checking or trainer.state.fn != TrainerFn.FITTING:
            return
        self._pause_train()
        if self._eval_start is None:
            self._eval_start = self._now(sync=True)

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.sanity_checking or trainer.state.fn != TrainerFn.FITTING or self._eval_start is None:
            return
        self._eval_s += self._now(sync=True) - self._eval_start
        self._eval_start = None
        self._val_metrics = {
            k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/") and v.numel() == 1
        }

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._pause_train()  # synchronizes: every kernel of the epoch has run
        if self._window is not None:  # the epoch ended before the window did (a limit on batches)
            self._window.close()
            self._window = None
        local = {"train_s": self._train_s, "eval_s": self._eval_s, "fetch_wait_s": self._fetch.reset(),
                 "host_wait_s": self._wait_s, "samples": self._samples}
        if self.busy_window is not None and self.busy_window["share"] is not None:
            local["device_busy"] = self.busy_window["share"]
        merged = self._gather(trainer, local)
        if "device_busy" in merged:
            self.busy_window["share"] = merged["device_busy"]  # every rank's window, averaged
        row = epoch_row(trainer.current_epoch + 1, merged["train_s"], merged["eval_s"], int(merged["samples"]),
                        merged["fetch_wait_s"], merged["host_wait_s"], self.busy_window, self._val_metrics,
                        self.input_bound_share)
        self.epochs.append(row)
        if trainer.is_global_zero:
            keys = ("train_s", "eval_s", "samples_per_s", "input_wait_share", "host_wait_share", "device_busy_share")
            scalars = {f"timing/{k}": row[k] for k in keys if row.get(k) is not None}
            for logger in trainer.loggers:
                logger.log_metrics(scalars, step=trainer.global_step)
            say(trainer, f"epoch {row['epoch']}: train {row['train_s']:.2f} s, eval {row['eval_s']:.2f} s, "
                         f"{row['samples_per_s']:,.0f} samples/s, {row['verdict']} ({row['verdict_reason']})")

    @staticmethod
    def _gather(trainer: Trainer, local: dict[str, float]) -> dict[str, float]:
        """Combine one epoch's figures over every rank (identity on one process); absent figures stay absent."""
        keys = [(k, how) for k, how in GATHERED if k in local]
        values = torch.tensor([float(local[k]) for k, _ in keys], dtype=torch.float64,
                              device=trainer.strategy.root_device)
        gathered = trainer.strategy.all_gather(values).reshape(-1, len(keys)).cpu()
        reduce = {"max": lambda c: c.max(), "sum": lambda c: c.sum(), "mean": lambda c: c.mean()}
        return {k: reduce[how](gathered[:, i]).item() for i, (k, how) in enumerate(keys)}

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self.epochs:
            return
        folder = Path(trainer.log_dir or trainer.default_root_dir)  # a collective under DDP: every rank asks
        if trainer.is_global_zero:
            self._report(trainer, folder, interrupted=False)

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        """A fit stopped early (Ctrl-C, an error): the finished epochs are still reported, marked interrupted."""
        if trainer.state.fn != TrainerFn.FITTING or not self.epochs or self.summary_path is not None:
            return
        if trainer.is_global_zero:  # trainer.log_dir's folder without its collective: the other ranks may be gone
            logger = trainer.logger
            folder = trainer.default_root_dir if logger is None else \
                logger.log_dir if isinstance(logger, (TensorBoardLogger, CSVLogger)) else logger.save_dir
            self._report(trainer, Path(folder or trainer.default_root_dir), interrupted=True)

    def _report(self, trainer: Trainer, folder: Path, interrupted: bool) -> None:
        """Print the summary once and write it atomically to ``folder``/timing.json."""
        summary = {**self.summary(trainer), "interrupted": interrupted}
        print(format_summary(summary), flush=True)
        if interrupted:
            print(f"Interrupted: the figures cover the {len(self.epochs)} finished epoch(s)", flush=True)
        self.summary_path = folder / self.summary_file
        write_summary(summary, self.summary_path)
        print(f"timing summary written to {self.summary_path}", flush=True)

    # ------------------------------------------------------------------ summary
    def summary(self, trainer: Trainer) -> dict[str, Any]:
        """Every figure of the run, per epoch and in total, with what produced it."""
        datamodule = trainer.datamodule
        return {
            "config": trainer.logger.name if trainer.logger is not None else None,
            "runner": "lightning",
            "data": datamodule.loader_settings() if hasattr(datamodule, "loader_settings") else None,
            "model": {k: v for k, v in trainer.lightning_module.hparams.items() if not k.startswith("_")},
            "precision": str(trainer.precision),
            "world_size": trainer.world_size,
            **environment(self._device),
            **aggregate(self.epochs, self.input_bound_share, self.busy_window),
        }
