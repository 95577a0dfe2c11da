"""The run as its trainer shows it: its length, its log folder, and its classes, loader options and config for advice.

Which of tune's calls the advice points at, and why: docs/timing.md, "The verdict".
"""

from __future__ import annotations

import math
import numbers
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import torch
from lightning.fabric.utilities.data import sized_len
from lightning.pytorch import Callback, LightningDataModule, LightningModule, Trainer
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from lightning.pytorch.profilers import Profiler, PyTorchProfiler
from lightning.pytorch.trainer.states import TrainerFn
from lightning_utilities.core.overrides import is_overridden
from torch.utils.data import DataLoader, IterableDataset, Subset, TensorDataset

from mnistperf.diagnosis.measure.loader_options import arguments, own_names
from mnistperf.diagnosis.measure.sample_counts import sampler_of_batches
from mnistperf.diagnosis.record.advice import USER_HINTS, WORKERS, Hints
from mnistperf.diagnosis.record.project_terms import (
    LoaderFacts,
    ProjectTerms,
    input_hints,
    library_log_hint,
    workers_hints,
)
from mnistperf.upstream import loader_ran_out, step_unfinished, steps_started

LIGHTNING_BARS = ("TQDMProgressBar", "RichProgressBar")  # the bars that show Lightning's epoch, counted from 0
TRANSFER_HOOKS = ("on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer")

if TYPE_CHECKING:  # LightningCLI (and jsonargparse, a tenth of a second to load) only where the run loaded it
    from lightning.pytorch.cli import SaveConfigCallback


VALIDATION_METRIC = re.compile(r"(val|valid|validation)[/_.-]")  # val/acc, val_loss: the metrics an epoch's row keeps


class TrainerAttributes(Protocol):
    """The Trainer's attributes that Lightning assigns outside its class, so its annotations do not declare them."""

    profiler: Profiler
    datamodule: LightningDataModule | None
    callbacks: list[Callback]
    overfit_batches: int | float


def last_epoch(trainer: Trainer, batches: float) -> bool:
    """Whether the epoch starting now, of ``batches`` training steps, may be the fit's last."""
    last = trainer.max_epochs is not None and 0 < trainer.max_epochs <= trainer.current_epoch + 1
    return last or 0 < trainer.max_steps <= trainer.global_step + batches


def steps_left(trainer: Trainer, batches: float | None = None) -> float:
    """The training steps left from the epoch starting now, each of ``batches`` (inf: unbounded; NaN: not known)."""
    batches = float(trainer.num_training_batches) if batches is None else batches
    left = math.inf
    if trainer.max_epochs is not None and trainer.max_epochs > 0:
        left = batches * (trainer.max_epochs - trainer.current_epoch) if math.isfinite(batches) else math.nan
    if trainer.max_steps > 0:
        optimizer_steps = float(trainer.max_steps - trainer.global_step)  # what max_steps counts
        bound = optimizer_steps * max(1, int(trainer.accumulate_grad_batches))
        left = bound if math.isnan(left) else min(left, bound)
    return left


def limited_epoch(trainer: Trainer, steps: int | None = None, declined: bool = False) -> str | None:
    """How the trainer's own option cuts the epoch that trained ``steps`` to fewer batches than due; else None.

    ``declined``: the module declined the epoch's last step begun (``on_train_batch_start`` returned -1), ending it.

    ``max_steps``, a stop (``trainer.should_stop``) or an interruption, which ended the fit inside it; or
    ``fast_dev_run``, ``overfit_batches`` or ``limit_train_batches``, fewer than its one training loader holds:
    ``limit_train_batches=0.5: the epoch trains 8 of the loader's 16 batches``. An epoch of a loader of no length
    that such a setting may have cut is said to be (its loader's end is not known).
    """
    trained, known = trainer.num_training_batches, math.isfinite(trainer.num_training_batches)
    if not known and loader_ran_out(trainer):  # whole, whatever stopped the fit after it (EarlyStopping at its end)
        return None
    after = f"of the epoch's {int(trained):,} batches" if known else "batches of a loader of no length"
    if steps is not None and (steps < trained or not known):
        if 0 < trainer.max_steps <= trainer.global_step:
            return f"max_steps={trainer.max_steps}: the fit ended after {steps:,} {after}"
        if trainer.should_stop:  # a callback's stop (Lightning's Timer for max_time, EarlyStopping) inside the epoch
            return f"the fit was stopped (trainer.should_stop) after {steps:,} {after}"
        if trainer.interrupted:  # an error or Ctrl-C, as the callbacks' on_exception runs; a step that raised before
            trained_steps = steps - 1 if step_unfinished(trainer) else steps  # it trained is not counted (nor said)
            return f"the fit was interrupted after {trained_steps:,} {after}"
    if steps is not None and declined:  # the module's on_train_batch_start returned -1: the rest skipped
        ran = steps_started(trainer)
        return f"the module's on_train_batch_start returned -1, ending the epoch after {ran:,} {after}"
    batches = sized_len(trainer.train_dataloader)  # None: several loaders, or one of no length
    if not known or (batches is not None and trained >= batches):
        return None
    if batches is None and steps is not None and steps < trained:  # no length: it ran out first, a whole epoch
        return None
    options = ("fast_dev_run", "overfit_batches", "limit_train_batches")  # what sets the others, first
    option = next(name for name in options if getattr(trainer, name, None) or name == options[-1])
    trains = (
        f"{int(trained):,} of the loader's {batches:,} batches"
        if batches is not None
        else f"at most {int(trained):,} batches, its loader having no length"
    )
    return f"{option}={getattr(trainer, option)}: the epoch trains {trains}"


def closes_stopped_epoch(trainer: Trainer) -> bool:
    """Whether a callback may close the epoch a fit stopped inside (an error, Ctrl-C), as far as it trained.

    Only while fitting on one process: under DDP, closing it would wait for ranks that may be gone.
    """
    return trainer.state.fn == TrainerFn.FITTING and trainer.world_size == 1


def project_terms(trainer: Trainer) -> ProjectTerms:
    """The names the advice gives the run's project: its classes, its DataModule's loader options, its config."""
    datamodule = getattr(trainer, "datamodule", None)
    cli = sys.modules.get("lightning.pytorch.cli")  # a run that did not load LightningCLI has no config saver
    callbacks = trainer.callbacks  # type: ignore[attr-defined]
    saver = next((c for c in callbacks if isinstance(c, cli.SaveConfigCallback)), None) if cli else None
    config: Any = saver.config if saver is not None else None
    prefix = None
    if config is not None and datamodule is not None:
        prefix = "data.init_args." if config.get("data.class_path") is not None else "data."
    named = config is not None and config.get("model.class_path") is not None  # a config LightningCLI wrote
    module = trainer.lightning_module
    # tune makes the loader again from the DataModule or the module's own train_dataloader, not from one given to fit
    remade = datamodule is not None or type(module).train_dataloader is not LightningModule.train_dataloader
    return ProjectTerms(
        model=type(module).__name__ if remade else None,
        datamodule=type(datamodule).__name__ if datamodule is not None else None,
        options=own_names(arguments(type(datamodule), {})) if datamodule is not None else {},
        prefix=prefix,
        config=config_file(trainer, saver) if saver is not None and named else None,
        in_main="__main__" in (type(module).__module__, type(datamodule).__module__),  # NoneType's: builtins
        loader=loader_facts(trainer.train_dataloader),  # None before the fit loads it
        step_from=installed_step(module),
    )


def installed_step(module: Any) -> str | None:
    """``package.module.Class`` whose ``training_step`` ``module`` runs, where that class is an installed package's."""
    owner = next((kind for kind in type(module).__mro__ if "training_step" in vars(kind)), None)
    source = getattr(sys.modules.get(getattr(owner, "__module__", "")), "__file__", None) or ""
    if owner is None or not any(part in ("site-packages", "dist-packages") for part in Path(source).parts):
        return None
    return f"{owner.__module__}.{owner.__qualname__}"


def loader_facts(loader: Any) -> LoaderFacts | None:
    """What the advice knows of a run's training loader: None for a nest of several, or none."""
    if loader is None or isinstance(loader, (Mapping, list, tuple)):
        return None
    if not isinstance(loader, DataLoader):
        return LoaderFacts(type(loader).__name__, data_loader=False)
    return LoaderFacts(
        type(loader).__name__,
        data_loader=True,
        map_style=not isinstance(loader.dataset, IterableDataset),
        persistent=bool(loader.persistent_workers),
        pinned=bool(loader.pin_memory),
        tensors=holds_tensors(loader.dataset),
        sliced=sampler_of_batches(loader) is not None,
    )


def holds_tensors(dataset: Any) -> bool:
    """Whether ``dataset`` is a TensorDataset, or a Subset of one (of one...): items sliced from tensors in memory."""
    while isinstance(dataset, Subset):
        dataset = dataset.dataset
    return isinstance(dataset, TensorDataset)


def config_file(trainer: Trainer, saver: SaveConfigCallback) -> str | None:
    """The config the run was given (one ``--config``), else the one LightningCLI saved (with the command line's)."""
    given = saver.config.get("config") or []
    if len(given) == 1:
        return str(getattr(given[0], "relative", given[0]))  # as the user typed it, from where they ran
    if saver.save_to_log_dir and trainer.log_dir is not None:
        return os.path.join(trainer.log_dir, saver.config_filename)
    return None


def project_hints(given: Hints | None, terms: ProjectTerms, cuda: bool) -> Hints:
    """What the advice suggests per verdict: the hints given, else anyone's with the loader's ones in these terms."""
    own = {"input-bound": input_hints(terms, cuda), WORKERS: workers_hints(terms)}
    log_fix = library_log_hint(terms)  # by the part it fixes, where the step is an installed package's
    return {**USER_HINTS, **own, **({"self.log": log_fix} if log_fix else {}), **(given or {})}


def log_folder(trainer: Trainer, every_rank: bool) -> Path:
    """The run's log folder, else its root folder; without ``every_rank`` not by the DDP collective trainer.log_dir."""
    if every_rank:
        return Path(trainer.log_dir or trainer.default_root_dir)
    logger = trainer.logger
    found = logger.log_dir if isinstance(logger, (TensorBoardLogger, CSVLogger)) else getattr(logger, "save_dir", None)
    return Path(found or trainer.default_root_dir)


def lightnings(kind: type, *names: str) -> bool:
    """Whether ``kind`` is Lightning's class of one of ``names``, of ``lightning.pytorch`` or ``pytorch_lightning``."""
    return kind.__name__ in names and kind.__module__.startswith(("lightning.pytorch.", "pytorch_lightning."))


def bar_epoch(trainer: Trainer) -> int | None:
    """The epoch's number as the bar shows it, beside Lightning's own bars, which count from 0; else None.

    A library's own bar may count as it likes, so an epoch's line gets no number it might not show.
    """
    shown = lightnings(type(trainer.progress_bar_callback), *LIGHTNING_BARS)
    return trainer.current_epoch if shown else None


def why_no_profiler(trainer: Trainer) -> str | None:
    """Why the busy window cannot profile: the trainer's own profiler holds torch's; None where it does not."""
    if isinstance(cast(TrainerAttributes, trainer).profiler, PyTorchProfiler):
        return "the trainer's PyTorchProfiler holds torch's profiler, and only one can run"
    return None


def transfers_batches(owner: Any) -> bool:
    """Whether a LightningModule or LightningDataModule (None: neither) moves batches its own way (a transfer hook).

    Of either package (:func:`lightnings`), where ``lightning.pytorch``'s ``is_overridden`` refuses the older one's.
    """
    if owner is None:
        return False
    base = next(kind for kind in type(owner).__mro__ if lightnings(kind, "LightningModule", "LightningDataModule"))
    return any(is_overridden(hook, owner, base) for hook in TRANSFER_HOOKS)


def validation_metrics(logged: Mapping[str, Any], monitor: str | None) -> dict[str, float]:
    """The one-number validation metrics among those ``logged`` (``val/acc``, ``val_loss``), ``monitor`` too."""
    return {
        name: float(value)
        for name, value in logged.items()
        if (VALIDATION_METRIC.match(name) or name == monitor)
        and ((isinstance(value, torch.Tensor) and value.numel() == 1) or isinstance(value, numbers.Real))
    }


def audit_beside(trainer: Trainer) -> Any:
    """The audit among the trainer's callbacks (the one with ``samples_counted``); None if none."""
    callbacks = cast(TrainerAttributes, trainer).callbacks
    return next((c for c in callbacks if hasattr(c, "samples_counted")), None)


def audited_samples(trainer: Trainer) -> int | None:
    """This rank's samples of the epoch as the audit beside counted them (its ``samples_counted``), where one did."""
    counted = getattr(audit_beside(trainer), "samples_counted", None)
    return counted[1] if isinstance(counted, tuple) and counted[0] == trainer.current_epoch else None


def audit_kept(trainer: Trainer) -> dict[str, Any]:
    """For timing.json: the epochs' rows and the problems of the audit beside; {} where none ran."""
    audit = audit_beside(trainer)
    rows = getattr(audit, "epochs", None)
    if not isinstance(rows, list):
        return {}
    return {"sample_audit": {"epochs": rows, "problems": list(getattr(getattr(audit, "problems", None), "lines", []))}}
