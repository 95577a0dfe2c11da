"""Per-epoch timing that says whether a run was input-bound or compute-bound.

What is measured, per epoch:

* **train time**: from the start of the epoch to the end of its last training step, with
  the device synchronized at both ends; evaluation inside the epoch is paused out.
* **eval time**: from the end of the last training step to the end of validation
  (device synchronized), so it includes starting the validation DataLoader's workers.
* **input wait**: host time between the end of one training step and the start of the
  next: fetching and collating the batch and copying it to the device. Its share of train
  time gives the verdict: at or above ``input_bound_share`` the run is *input-bound* (the
  device waited for data), below it *compute-bound*.

Sanity-check validation is excluded. Lightning creates the first epoch's DataLoader
iterator (starting its workers and fetching one batch) before the epoch begins, so epoch 1
leaves that out; later epochs include it when workers are not persistent.

Under DDP every rank measures itself; at the end of each epoch the figures are gathered:
samples are summed, times are the slowest rank's, the wait share is averaged, and only
global rank 0 prints, logs and writes ``timing.json`` into the run's log folder.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import sys
import time
from pathlib import Path
from statistics import mean
from typing import Any, Optional

import lightning
import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.trainer.states import TrainerFn

from mnistperf.atomic import atomic_write

SUMMARY_FILE = "timing.json"


def synchronize(device: torch.device) -> None:
    """Wait for queued device work, so a host clock read after it covers that work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def describe_device(device: torch.device) -> str:
    """A human-readable name of the device that ran, e.g. 'cuda:0 (NVIDIA H100 80GB HBM3)'."""
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return f"{device.type} ({platform.machine()}, {os.cpu_count()} logical cores)"


def peak_rss_mb() -> dict[str, float]:
    """Peak resident memory of this process and of its largest finished child (workers), in MB."""
    scale = 1 / 1024 if sys.platform != "darwin" else 1 / 2**20  # ru_maxrss: KiB on Linux, bytes on macOS
    return {
        "main_process": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale,
        "largest_child": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * scale,
    }


def say(trainer: Trainer, message: str) -> None:
    """Print a line without tearing the progress bar."""
    bar = trainer.progress_bar_callback
    if bar is not None:
        bar.print(message)
    else:
        print(message, flush=True)


def verdict(wait_share: float, threshold: float) -> str:
    if wait_share >= threshold:
        return f"input-bound ({wait_share:.0%} of train time waiting for the next batch)"
    return f"compute-bound ({1 - wait_share:.0%} of train time computing, {wait_share:.0%} waiting for data)"


class EpochTimer(Callback):
    """Times every epoch, logs the figures to the loggers and prints the reference's summary.

    Args:
        input_bound_share: share of train time spent waiting for data at which a run is
            called input-bound.
        summary_file: name of the JSON summary written into the run's log folder.
    """

    def __init__(self, input_bound_share: float = 0.5, summary_file: str = SUMMARY_FILE):
        self.input_bound_share = input_bound_share
        self.summary_file = summary_file
        self.epochs: list[dict[str, Any]] = []
        self.summary_path: Optional[Path] = None
        self._device = torch.device("cpu")
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
        if trainer.is_global_zero:
            say(trainer, f"mnistperf: training on {describe_device(self._device)}")

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._reset_epoch()
        self._train_start = self._last_step_end = self._now(sync=True)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        now = self._now()
        if self._train_start is None:  # resuming after a validation run inside the epoch
            self._train_start = now
        else:
            self._wait_s += now - self._last_step_end
        self._samples += len(batch["label"])

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
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
        self._pause_train()
        # Gather [train_s, eval_s, wait_share, samples] from every rank (identity on one process).
        local = torch.tensor(
            [self._train_s, self._eval_s, self._wait_s / max(self._train_s, 1e-12), float(self._samples)],
            dtype=torch.float64,
            device=pl_module.device,
        )
        gathered = trainer.strategy.all_gather(local).reshape(-1, 4).cpu()
        train_s, eval_s = gathered[:, 0].max().item(), gathered[:, 1].max().item()
        wait_share, samples = gathered[:, 2].mean().item(), int(gathered[:, 3].sum().item())
        row = epoch_row(trainer.current_epoch + 1, train_s, eval_s, samples, wait_share, self._val_metrics)
        self.epochs.append(row)
        if trainer.is_global_zero:
            scalars = {f"timing/{k}": row[k] for k in ("train_s", "eval_s", "samples_per_s", "input_wait_share")}
            for logger in trainer.loggers:
                logger.log_metrics(scalars, step=trainer.global_step)
            say(
                trainer,
                f"epoch {row['epoch']}: train {train_s:.2f} s, eval {eval_s:.2f} s, "
                f"{row['samples_per_s']:,.0f} samples/s, {verdict(wait_share, self.input_bound_share)}",
            )

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self.epochs:
            return
        folder = Path(trainer.log_dir or trainer.default_root_dir)  # a collective under DDP: every rank asks
        if not trainer.is_global_zero:
            return
        summary = self.summary(trainer)
        print(format_summary(summary), flush=True)
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
            **aggregate(self.epochs, self.input_bound_share),
        }


def epoch_row(epoch: int, train_s: float, eval_s: float, samples: int, wait_share: float, metrics: dict) -> dict:
    """One epoch's figures, as they appear in timing.json."""
    return {
        "epoch": epoch,
        "train_s": train_s,
        "eval_s": eval_s,
        "samples": samples,
        "samples_per_s": samples / train_s if train_s > 0 else float("nan"),
        "input_wait_share": wait_share,
        **metrics,
    }


def environment(device: torch.device) -> dict[str, Any]:
    """What ran: device, CPU count and versions."""
    return {
        "device": describe_device(device),
        "accelerator": device.type,
        "cpu_count": os.cpu_count(),
        "versions": {"python": platform.python_version(), "torch": torch.__version__, "lightning": lightning.__version__},
    }


def aggregate(epochs: list[dict[str, Any]], input_bound_share: float) -> dict[str, Any]:
    """The per-epoch rows and the reference's totals and averages over them, with the verdict."""
    train = [e["train_s"] for e in epochs]
    evals = [e["eval_s"] for e in epochs]
    samples = sum(e["samples"] for e in epochs)
    wait_share = sum(e["input_wait_share"] * e["train_s"] for e in epochs) / max(sum(train), 1e-12)
    return {
        "epochs": epochs,
        "avg_train_s": mean(train),
        "avg_eval_s": mean(evals),
        "total_train_s": sum(train),
        "total_eval_s": sum(evals),
        "samples_per_s": samples / sum(train) if sum(train) > 0 else float("nan"),
        "input_wait_share": wait_share,
        "input_bound_share": input_bound_share,
        "verdict": "input-bound" if wait_share >= input_bound_share else "compute-bound",
        "final_val_acc": epochs[-1].get("val/acc"),
        "peak_rss_mb": peak_rss_mb(),
    }


def write_summary(summary: dict[str, Any], path: Path) -> None:
    text = json.dumps(summary, indent=2)
    atomic_write(path, lambda tmp: tmp.write_text(text))


def format_summary(summary: dict[str, Any]) -> str:
    """The reference's four lines, then throughput, the device and the verdict."""
    lines = [
        f"Average Train Time per Epoch: {summary['avg_train_s']:.2f} s",
        f"Average Test Time per Epoch: {summary['avg_eval_s']:.2f} s",
        f"Total Train Time: {summary['total_train_s']:.2f} s",
        f"Total Test Time: {summary['total_eval_s']:.2f} s",
        f"Train throughput: {summary['samples_per_s']:,.0f} samples/s",
        f"Device: {summary['device']}",
        f"Verdict: {verdict(summary['input_wait_share'], summary['input_bound_share'])}",
    ]
    if summary.get("final_val_acc") is not None:
        lines.append(f"Final validation accuracy: {summary['final_val_acc']:.4f}")
    return "\n".join(lines)
