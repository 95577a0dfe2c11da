"""What a run prints before its figures: the device line first, and nothing alarming that is not ours.

Every command starts with one line naming its device and the precision it runs. Library messages that are
true but not useful here (Lightning's tips, its ``log_every_n_steps`` warning and its Tensor Cores hint, which
the device line answers; a deprecation inside Lightning; torch's warning about more workers than cores, which
becomes one line of ours) are calmed at their source, known by their text as :mod:`mnistperf.upstream` holds it;
everything else stays visible. See docs/timing.md#where-the-figures-go.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator

import torch
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import TQDMProgressBar
from tqdm import tqdm

from mnistperf.machine import describe_device, has_tf32_tensor_cores
from mnistperf.upstream import CALMED_WARNINGS, DROPPED_LIGHTNING_INFO, LIGHTNING_RANK_ZERO_LOGGERS

FP32_PRECISIONS = ("32-true", "32")


class _NoTips(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not any(fragment in str(record.msg) for fragment in DROPPED_LIGHTNING_INFO)


def calm_library_noise() -> None:
    """Ignore the library warnings and drop the Lightning messages named in :mod:`mnistperf.upstream` (idempotent)."""
    for category, message in CALMED_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
    for name in LIGHTNING_RANK_ZERO_LOGGERS:
        log = logging.getLogger(name)
        if not any(isinstance(f, _NoTips) for f in log.filters):
            log.addFilter(_NoTips())


@contextlib.contextmanager
def lightning_info_dropped() -> Iterator[None]:
    """Lightning's rank-zero info (``GPU available: ...``) dropped in the block: a trainer built to check, not run."""
    logs = [logging.getLogger(name) for name in LIGHTNING_RANK_ZERO_LOGGERS]
    levels = [log.level for log in logs]
    for log in logs:
        log.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for log, level in zip(logs, levels, strict=True):
            log.setLevel(level)


def device_line(command: str, device: torch.device, detail: str = "") -> str:
    """``mnistperf: <command> on <device>[, <detail>]``: the first line every command prints."""
    return f"mnistperf: {command} on {describe_device(device)}" + (f", {detail}" if detail else "")


def matmul_precision_note(device: torch.device, precision: str, matmul_precision: str) -> str:
    """The device line's ``float32 matmuls <precision>``, with the TF32 option where it would help.

    The option is named where full-fp32 products of an fp32 run go to a GPU that has tensor cores for TF32.
    """
    note = f"float32 matmuls {matmul_precision}"
    if matmul_precision == "highest" and str(precision) in FP32_PRECISIONS and has_tf32_tensor_cores(device):
        note += " (full fp32, torch's default; --model.float32_matmul_precision high runs them as TF32)"
    return note


def say(trainer: Trainer, message: str) -> None:
    """Print a line without tearing the progress bar, whether or not a bar is showing.

    Lightning's TQDM bar drops a line printed while none of its bars is open (before the first epoch, after the
    last); tqdm's own ``write`` prints it in any case.
    """
    bar = trainer.progress_bar_callback
    if isinstance(bar, TQDMProgressBar):
        tqdm.write(message)
    elif bar is not None:
        bar.print(message)
    else:
        print(message, flush=True)
