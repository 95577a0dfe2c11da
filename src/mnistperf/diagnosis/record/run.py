"""A run's summary, what ran it, typed, and its file ``timing.json``: written, found and read back, an older one's too.

Each field is named as the file names it; what an older file lacks is the field's default.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import sys
from collections import Counter
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import lightning
import torch

from mnistperf.atomic import atomic_write_text
from mnistperf.close_names import closest
from mnistperf.diagnosis.figures import PEAK_RSS_MB, Figure
from mnistperf.diagnosis.guard import jsonable
from mnistperf.diagnosis.measure.loader_options import loader_settings
from mnistperf.diagnosis.measure.window_reading import WindowReading
from mnistperf.diagnosis.record.shape import SUMMARY, misfit
from mnistperf.errors import ConfigError
from mnistperf.machine import describe_device, usable_cpus

SUMMARY_FILE = "timing.json"
# What one is and how a run gets one: the answer to a file that is not a summary.
WHAT_A_SUMMARY_IS = (
    f"a {SUMMARY_FILE} is the summary EpochTimer writes at a fit's end, in the run's log folder "
    f"(lightning_logs/NAME/version_N/{SUMMARY_FILE}): give it or that folder, after `python -m mnistperf fit "
    "--config FILE` (or a fit of your own with EpochTimer among its callbacks, docs/diagnose.md)"
)


def environment(device: torch.device) -> dict[str, Any]:
    """What ran: device, CPU count, versions and the host's peak memory (the GPU's is the epochs', in the run)."""
    versions = {"python": platform.python_version(), "torch": torch.__version__, "lightning": lightning.__version__}
    scale = 1 / 1024 if sys.platform != "darwin" else 1 / 2**20  # ru_maxrss: KiB on Linux, bytes on macOS
    return {
        "device": describe_device(device),
        "accelerator": device.type,
        "cpu_count": os.cpu_count(),
        "cpu_affinity": usable_cpus(),
        "versions": versions | ({"cuda": torch.version.cuda} if device.type == "cuda" else {}),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        PEAK_RSS_MB: {  # of this process and of its largest finished child (a worker)
            "main_process": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale,
            "largest_child": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * scale,
        },
    }


def run_summary(
    runner: str,
    trainer: Any,
    device: Any,
    figures: Callable[[], dict[str, Any]],
    datamodule: Any = None,
    module: Any = None,
    guard: Callable[[str], AbstractContextManager[Any]] = lambda _: nullcontext(),
) -> dict[str, Any]:
    """What timing.json holds of any timed run: what ran it, where, and its ``figures()``, each read under ``guard``.

    What ran it: the ``runner``, the trainer's logger's name (its config), the ``datamodule``'s loader settings where
    it has them, the ``module``'s hyperparameters, class and parameter count, the precision and the ranks.
    """
    found: dict[str, Any] = {"runner": runner}
    with guard("reading the logger's name"):
        if trainer.logger is not None and trainer.logger.name is not None:
            found["config"] = trainer.logger.name
    with guard("reading the DataModule's loader_settings()"):
        if datamodule is not None and hasattr(datamodule, "loader_settings"):
            found["data"] = datamodule.loader_settings()
    with guard("reading the training DataLoader's settings"):  # another project's, where its DataModule tells none
        loader = getattr(trainer, "train_dataloader", None)
        if "data" not in found and (settings := loader_settings(loader)) is not None:
            found["loader"] = jsonable({**settings, "drop_last": getattr(loader, "drop_last", None)})
    with guard("reading the module's hyperparameters"):
        if module is not None:
            found["model"] = {k: v for k, v in module.hparams.items() if not k.startswith("_")}
            if hasattr(module, "applied_settings"):  # which of them took effect on this device (``NAME_applied``)
                found["model"].update(module.applied_settings())
    with guard("reading the module's class and size"):  # what tells two models apart that save no hyperparameters
        if module is not None:
            size = sum(p.numel() for p in module.parameters())
            found["module"] = {"class": type(module).__name__, "parameters": size}
    found.update(precision=str(trainer.precision), world_size=trainer.world_size)
    with guard("reading the trainer's nodes"):  # the ranks on one machine share its cores
        found["num_nodes"] = int(getattr(trainer, "num_nodes", 1))
    with guard("reading the trainer's limits"):  # what makes two runs' epochs differ, beside the data's settings
        limits = ("max_epochs", "max_steps", "limit_train_batches", "limit_val_batches", "accumulate_grad_batches")
        found["trainer"] = {name: jsonable(getattr(trainer, name, None)) for name in limits}
    with guard("reading the fit's callbacks, loggers and threads"):  # what a fix of the advice changes
        if runner == "lightning":  # (a bench's reference rows are fitted by a trainer of their own, or by none)
            found["fit"] = fit_settings(trainer)
    with guard("reading the environment"):
        found.update(environment(device))
    with guard("summarizing the epochs"):
        found.update(figures())
    return found


def fit_settings(trainer: Any) -> dict[str, Any]:
    """What the advice's fixes change that the trainer's limits do not show.

    Its callbacks and loggers (by class, how many of each), how often it logs and its bar redraws, torch's threads.
    """
    bar = getattr(trainer, "progress_bar_callback", None)
    return {
        "callbacks": dict(Counter(type(callback).__name__ for callback in trainer.callbacks)),
        "loggers": dict(Counter(type(logger).__name__ for logger in trainer.loggers)),
        "log_every_n_steps": trainer.log_every_n_steps,
        "progress_bar_refresh_rate": getattr(bar, "refresh_rate", None),
        "torch_threads": torch.get_num_threads(),
    }


def number(value: Any) -> float | None:
    """A measured value as a float; None where it is none (absent, None, a bool, words)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def typed(kind: Any, found: Mapping[str, Any]) -> Any:
    """A ``kind`` (a dataclass) of its form in timing.json: each field the value of its name, if any (null: none)."""
    return kind(**{f.name: found[f.name] for f in fields(kind) if found.get(f.name) is not None})


@dataclass(frozen=True)
class Advice:
    """What fixing the run's bound could buy (:func:`~mnistperf.diagnosis.record.advice.advice`)."""

    ceiling: str
    hints: list[str] = field(default_factory=list)
    at_most_s_less: float | None = None  # train seconds per epoch, where the figures bound the gain
    culprit: dict[str, Any] | None = None  # the part around a step or between epochs costing an epoch most (overhead)


@dataclass(frozen=True)
class RunSummary:
    """A run's summary, fresh or from a file: what the printed summary, the report and ``compare`` read."""

    content: Mapping[str, Any]  # the whole summary, as timing.json holds it
    verdict: str | None = None
    verdict_figure: str | None = None  # the figure that decided it (None in a summary older than it)
    verdict_reason: str = ""
    epochs: list[dict[str, Any]] = field(default_factory=list)  # one row per epoch, keyed by its figures
    steady_epochs: list[int] | None = None  # the first and the last steady epoch
    warmup: dict[str, Any] | None = None  # the first epoch's number, train and eval time, where others followed
    busy_window: WindowReading | None = None  # the profiled window
    advice: Advice | None = None
    device: str | None = None
    precision: str | None = None
    config: str | None = None  # the logger's name
    data: dict[str, Any] | None = None  # the DataModule's loader_settings()
    model: dict[str, Any] | None = None  # the module's hyperparameters
    stalls: dict[str, Any] | None = None
    memory: dict[str, Any] | None = None
    ranks: list[dict[str, Any]] | None = None  # each rank's figures, under DDP
    slowest_rank: dict[str, Any] | None = None  # where the ranks are apart
    metric: str | None = None
    final_metric: float | None = None

    @classmethod
    def of(cls, run: RunSummary | Mapping[str, Any]) -> RunSummary:
        """``run`` as a RunSummary: itself, or the summary a timing.json's content holds."""
        if isinstance(run, RunSummary):
            return run
        advice, window = run.get("advice"), run.get("busy_window")
        read = {"advice": typed(Advice, advice) if advice else None, "busy_window": window and WindowReading.of(window)}
        return typed(cls, {**run, "content": run, **read})

    def figure(self, figure: Figure) -> float | None:
        """The run's value of ``figure`` (None where it has none)."""
        value: Any = self.content
        for key in figure.where.split("."):
            value = value.get(key) if isinstance(value, Mapping) else None
        return number(value)


def write_summary(summary: dict[str, Any], path: Path) -> None:
    """Write ``summary`` to ``path`` as indented JSON, atomically (a value JSON cannot hold as its repr)."""
    atomic_write_text(path, json.dumps(jsonable(summary), indent=2))


def summaries_under(folder: Path) -> list[Path]:
    """Every timing.json under ``folder``, the newest last."""
    return sorted(folder.rglob(SUMMARY_FILE), key=lambda path: path.stat().st_mtime_ns)


def runs_beside(run: Path) -> list[str]:
    """The names of the folders and timing.json files beside ``run`` (not its own): what a misspelling of it meant."""
    try:
        entries = list(run.parent.iterdir())
    except OSError:  # no parent to read: nothing to suggest
        return []
    return [e.name for e in entries if e.name != run.name and (e.name == SUMMARY_FILE or e.is_dir())]


def find_summary(run: Path) -> Path:
    """The run's timing.json: the file given, or the newest under the folder given."""
    if run.is_file():
        return run
    if not run.is_dir():
        meant = closest(run.name, runs_beside(run))  # a misspelt run's folder: the one meant, to paste
        hint = f"; did you mean {run.parent / meant}?" if meant else f" (give a {SUMMARY_FILE} or the run's log folder)"
        raise ConfigError(f"{run}: no such file or folder{hint}")
    found = summaries_under(run)
    if not found:
        beside = summaries_under(run.parent)
        # a validate, test or predict run's folder, beside its fit's
        fits = f"; the newest under {run.parent}: {beside[-1]}" if beside else ""
        raise ConfigError(f"{run}: no {SUMMARY_FILE} under this folder (is it a fit's log folder?){fits}")
    return found[-1]


def load(run: Path) -> tuple[Path, RunSummary]:
    """The run's timing.json (:func:`find_summary`) and its summary."""
    path = find_summary(run)
    try:
        found = json.loads(path.read_text())
    except OSError as error:
        raise ConfigError(f"{path}: cannot be read ({error.strerror}); {WHAT_A_SUMMARY_IS}") from None
    except ValueError:
        raise ConfigError(f"{path}: not a {SUMMARY_FILE} (not JSON); {WHAT_A_SUMMARY_IS}") from None
    wrong = misfit(found, SUMMARY)
    if wrong is not None:
        raise ConfigError(f"{path}: not a {SUMMARY_FILE} ({wrong}); {WHAT_A_SUMMARY_IS}")
    return path, RunSummary.of(found)
