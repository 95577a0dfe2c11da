"""MnistperfCLI: LightningCLI with the lab's model and DataModule, its device line, bf16 only where the GPU has it."""

from __future__ import annotations

import contextlib
import shlex
import sys
import textwrap
import warnings
from argparse import RawDescriptionHelpFormatter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import torch
from jsonargparse import DefaultHelpFormatter
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import RichProgressBar, TQDMProgressBar
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.utilities import rank_zero_only

from mnistperf.atomic import place_taken
from mnistperf.console import device_line, matmul_precision_note
from mnistperf.data.datamodule import MNISTDataModule
from mnistperf.data.ingest import prepare
from mnistperf.data.ingest.sources import DATASETS
from mnistperf.data.options import fit_help_lines, is_uri
from mnistperf.data.pipelines import registry
from mnistperf.diagnosis.callbacks.batch_hooks import skip_unused_batch_hooks
from mnistperf.diagnosis.callbacks.project_reader import TrainerAttributes
from mnistperf.errors import ConfigError, MnistperfError
from mnistperf.lightning_cli.checkpoints import (
    check_checkpoint,
    folder_checkpoint,
    newest_checkpoint,
    resumed_checkpoint,
    runs_folder,
)
from mnistperf.lightning_cli.configs import given_configs, read_config, stage_names
from mnistperf.lightning_cli.parser_errors import OneLineErrorParser
from mnistperf.lightning_cli.predictions import PredictionsFile
from mnistperf.machine import run_device
from mnistperf.model import ImageClassifier
from mnistperf.upstream import (
    CHECKPOINT_FOLDER_CHANGED,
    CLI_ARGS_BESIDE_ARGV,
    KeepRunHyperparameters,
    PlainHelpFormatter,
    raised_inside,
    subcommand_parser,
)


def native_bf16(accelerator) -> bool:
    """Whether the accelerator a run asks for resolves to a GPU with native bf16 (not emulated) here."""
    wants_gpu = str(accelerator) in ("auto", "gpu", "cuda")
    return wants_gpu and torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False)


def check_accelerator(accelerator) -> None:
    """One line where the run asks for a CUDA GPU this machine does not have, before the device line names another."""
    if str(accelerator) in ("gpu", "cuda") and run_device(str(accelerator)).type == "cpu":  # gpu: MPS too
        build = "a CPU build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
        raise ConfigError(
            f"trainer.accelerator {accelerator}: this machine has no CUDA GPU that torch {torch.__version__} "
            f"({build}) can use; give --trainer.accelerator auto (CUDA where present, else the CPU) or cpu"
        )


# fit --help's lines for the trainer's options a user of this lab changes, after the DataModule's (fit_help_lines).
TRAINER_OPTIONS = """\
  --trainer.max_epochs N            epochs to train
  --trainer.accelerator cpu|cuda    where to train (auto: CUDA when present)
  --ckpt_path last                  resume the newest run of this config
"""
# Lightning's own progress bar is redrawn every this many steps, not every step: drawn every step it was the largest
# per-step cost the lab added to Lightning's loop (docs/results/cpu-2core-bar-cost). A config that names a progress
# bar of its own keeps it.
BAR_REFRESH = 10


def fit_description() -> str:
    """``fit --help``'s description: the options a user of this lab changes, the stages and the pipelines."""
    stages = textwrap.fill(
        "the stage: " + (", ".join(stage_names()) or "none found in configs/"),
        width=100,
        initial_indent="  --config configs/STAGE.yaml       ",
        subsequent_indent=" " * 36,
    )
    options = "\n".join([stages, *fit_help_lines(), TRAINER_OPTIONS])
    return (
        f"Train one stage of the ladder. The options a user of this lab changes:\n\n{options}\n"
        "Input pipelines (--data.pipeline):\n" + "\n".join(registry.help_lines()) + "\n\n"
        "Every other option of Lightning's Trainer, the model and the data module follows.\n"
    )


# What each evaluation does, as its --help says first (Lightning's own words stop where its docstring's line breaks)
EVAL_DESCRIPTIONS = {
    "validate": "Evaluate on the validation data",
    "test": "Evaluate on the test split",
    "predict": "Predict the test split's labels, written to predictions.csv in the run's log folder",
}
EVAL_COMMANDS = tuple(EVAL_DESCRIPTIONS)
EVENT_FILE = "events.out.tfevents."  # how TensorBoard's event files are named
FIT_USAGE = "mnistperf fit --config configs/STAGE.yaml [--KEY VALUE ...]"


class KeepDescriptionLines(PlainHelpFormatter, RawDescriptionHelpFormatter, DefaultHelpFormatter):
    """jsonargparse's help as plain text, with the description's lines kept as written (the table above)."""


class MnistperfCLI(KeepRunHyperparameters, LightningCLI):
    """LightningCLI with the project's model and data module fixed.

    Before anything else it prints the device line (``mnistperf: fit on cuda:0 (...), precision
    bf16-mixed, float32 matmuls highest``). A ``bf16`` trainer precision runs only where the GPU has native bf16:
    elsewhere (a CPU, an older GPU) it would be emulated and slower, so the run falls back to ``32-true``
    and says so on that line; timing.json records the precision that actually ran. ``validate``,
    ``test`` and ``predict`` without ``--ckpt_path`` use the newest checkpoint of the config's runs
    and name it, or refuse: they never score an untrained model in silence; ``fit --ckpt_path last`` resumes
    it. A run whose official dataset is not prepared and cannot be made here (offline, no source folder) stops
    before anything is built, naming the ``prepare`` command for its data folder. A checkpoint brings weights,
    optimizer state and the loop's position; the model's settings stay the config's and the command line's
    (:class:`~mnistperf.upstream.KeepRunHyperparameters`), and the module names those that differ
    (:meth:`ImageClassifier.on_load_checkpoint`).

    Args:
        announce: the command named on the device line; by default the subcommand that runs,
            nothing when ``run`` is false.
    """

    def __init__(self, args: list[str] | None = None, run: bool = True, announce: str | None = None):
        self._announce = announce
        self._announce_subcommand = run
        given = sys.argv[1:] if args is None else args
        self._asked = given[0] if run and given and given[0] in LightningCLI.subcommands() else None
        self._given = given[1:] if self._asked else given  # the subcommand's own arguments
        # one line where the parser would answer in its own words, or a traceback; kept to name a key's file
        self._configs = {path: read_config(path, self._asked or "fit") for path in given_configs(given)}
        try:
            super().__init__(
                ImageClassifier,
                MNISTDataModule,
                save_config_kwargs={"overwrite": True},
                args=args,
                run=run,
                parser_class=OneLineErrorParser,
                parser_kwargs={
                    "prog": "mnistperf",
                    "formatter_class": KeepDescriptionLines,
                    **(
                        {"fit": {"usage": FIT_USAGE, "description": fit_description()}}
                        if "fit" in self.subcommands()
                        else {}
                    ),
                    **{
                        name: {"description": f"{said}, by the newest checkpoint of the config's runs or --ckpt_path."}
                        for name, said in EVAL_DESCRIPTIONS.items()
                        if name in self.subcommands()
                    },
                },
            )
        except (MnistperfError, SystemExit):  # the user's mistake, or Ctrl-C (Lightning exits): no empty run left
            self._remove_empty_run()
            raise

    def _remove_empty_run(self) -> None:
        """Remove the run folder a command stopped before its first step left empty, and its parents left empty.

        The logger makes it before the data is set up, where a missing or damaged file is found (or Ctrl-C comes while
        it is read): kept, each such stop would leave a version_N holding nothing but an empty TensorBoard event file.
        """
        trainer = getattr(self, "trainer", None)
        folder = getattr(trainer and trainer.logger, "log_dir", None)
        if trainer is None or folder is None or trainer.global_step > 0 or not trainer.is_global_zero:
            return
        folder = Path(folder)
        found = list(folder.iterdir()) if folder.is_dir() else []
        if not found or not all(path.is_file() and path.name.startswith(EVENT_FILE) for path in found):
            return
        for path in found:
            path.unlink()
        for empty in (folder, *folder.parents[:2]):  # version_N, then the run's name and save_dir where now empty
            with contextlib.suppress(OSError):
                empty.rmdir()

    def subcommands(self) -> dict[str, set[str]]:  # type: ignore[override]
        """Lightning's subcommands; where the command line names one, that one alone, whose parser alone is built."""
        every = LightningCLI.subcommands()
        return {self._asked: every[self._asked]} if self._asked else every

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """The trainer, with Lightning's own progress bar (where the config names none) redrawn every few steps.

        Each callback it is built with pays Lightning only for the per-batch hooks its class overrides, as the
        diagnosis's own do: Lightning dispatches each of the others to it every step, some 2 us a hook, to do nothing.
        (Those a module's ``configure_callbacks`` adds during the fit are left as they come.)
        """
        # a copy: building the trainer adds Lightning's own callbacks to the config's list
        given = self._get(self.config_init, "trainer", default={}).get("callbacks")
        configured = list(given) if isinstance(given, list) else [given] if given is not None else []
        trainer = super().instantiate_trainer(**kwargs)
        callbacks = cast(TrainerAttributes, trainer).callbacks
        bar = trainer.progress_bar_callback
        if isinstance(bar, (TQDMProgressBar, RichProgressBar)) and not any(bar is c for c in configured):
            callbacks[callbacks.index(bar)] = TQDMProgressBar(refresh_rate=BAR_REFRESH)
        for callback in callbacks:
            skip_unused_batch_hooks(callback)
        return trainer

    def instantiate_classes(self) -> None:
        """Build the model, data and trainer; a mistake of the user's in a callback's arguments stays one line."""
        try:
            super().instantiate_classes()
        except ValueError as error:
            ours = raised_inside(error, MnistperfError)
            if ours is None:
                raise
            raise ours from None

    def before_fit(self) -> None:
        """Refuse a fit that would train nothing, or group batches without the whole-step module."""
        refuse_training_nothing(self.trainer)
        group = self.datamodule.options.batches_per_step
        if group > 1 and not self.model.hparams.cuda_graph:
            raise ConfigError(
                f"data.batches_per_step {group} needs model.cuda_graph true: only the whole-step "
                "module runs several optimizer steps per Lightning step; or set batches_per_step 1."
            )

    def before_predict(self) -> None:
        """Have the predictions written where the run's logs go (Lightning's predict returns them to no one here)."""
        cast(TrainerAttributes, self.trainer).callbacks.append(PredictionsFile())

    def after_fit(self) -> None:
        """Refuse, after the fact, a fit that trained no batch (and was not interrupted)."""
        if self.trainer.global_step == 0 and not self.trainer.interrupted:
            raise ConfigError(
                "fit trained no batch (the training split gave no batches with these options); "
                "check data.batch_size, data.drop_last and trainer.limit_train_batches."
            )

    def parse_arguments(self, parser, args) -> None:
        """Parse, then settle the precision, print the device line and pick the checkpoint an evaluation uses."""
        for refusing in {parser, subcommand_parser(parser, self._asked or "fit")}:  # a wrong value: the subcommand's
            refusing.configs = self._configs  # where a key or value the parser refuses is named by its file
        super().parse_arguments(parser, args)
        # Here, before Lightning seeds and builds anything, so the device line is the run's first.
        subcommand = self.config.get("subcommand")
        config = self.config[subcommand] if subcommand else self.config
        if subcommand and not self._configs:  # the model's and the data's defaults are no stage, and time nothing
            raise ConfigError(
                f"{subcommand} runs a stage: give its config, e.g. python -m mnistperf {subcommand} --config "
                "configs/v2_pinned.yaml (configs/ holds every stage)"
            )
        check_accelerator(config.trainer.accelerator)
        precision_note = self._resolve_precision(config)
        announce = self._announce or (subcommand if self._announce_subcommand else None)
        if announce and rank_zero_only.rank == 0:  # type: ignore[attr-defined]
            device = run_device(config.trainer.accelerator)
            matmuls = matmul_precision_note(device, config.trainer.precision, config.model.float32_matmul_precision)
            print(
                device_line(announce, device, f"precision {config.trainer.precision}{precision_note}, {matmuls}"),
                flush=True,
            )
        if subcommand:
            runs = runs_folder(config)
            taken = place_taken(runs, folder=True, written=True)  # (every command writes its run there)
            if taken is not None:  # said before the data is read and the model built, not by the logger
                other = Path("lightning_logs")  # a folder it may write in: here, else under the home folder
                other = other if place_taken(other, folder=True, written=True) is None else Path.home() / other
                raise ConfigError(
                    f"the runs' folder {runs}: {taken}; give trainer.logger.init_args.save_dir "
                    "(or trainer.default_root_dir) a folder you may write in, e.g. add "
                    f"--trainer.logger.init_args.save_dir {shlex.quote(str(other))}"
                )
            asked = config.get("ckpt_path")
            if asked is not None and Path(str(asked)).is_dir():  # a run's folder: its newest checkpoint
                config.ckpt_path = str(folder_checkpoint(subcommand, Path(str(asked))))
            check_checkpoint(config.get("ckpt_path"))  # one line, before Lightning loads it
            if config.data.dataset in DATASETS and not is_uri(config.data.data_dir):  # before Lightning says more
                prepare.require_preparable(config.data.dataset, config.data.data_dir, config.data.source_root)
        if subcommand in EVAL_COMMANDS:
            # Evaluating restores the checkpoint callback's state too, and Lightning warns that the new run's
            # folder differs from the training run's: true, and nothing to act on when only evaluating.
            warnings.filterwarnings("ignore", message=CHECKPOINT_FOLDER_CHANGED)
            asked = config.get("ckpt_path")
            if asked in (None, "last", "best"):  # the newest (or best) of this config's runs, not of the new run's
                config.ckpt_path = str(newest_checkpoint(subcommand, config, self._given, best=asked == "best"))
        elif subcommand == "fit" and config.get("ckpt_path") == "last":
            config.ckpt_path = resumed_checkpoint(config)

    @staticmethod
    def _resolve_precision(config) -> str:
        precision = str(config.trainer.precision)
        if precision.startswith("bf16") and not native_bf16(config.trainer.accelerator):
            config.trainer.precision = "32-true"
            return f" ({precision} asked for: no GPU with native bf16 here)"
        return ""


def refuse_training_nothing(trainer: Trainer) -> None:
    """One line where the trainer's limit_train_batches, max_epochs or max_steps is 0: a fit of it trains nothing."""
    for name in ("limit_train_batches", "max_epochs", "max_steps"):
        if getattr(trainer, name) == 0:
            raise ConfigError(f"trainer.{name} is 0, so fit would train nothing; raise it or remove the option.")


def parse_fit_config(args: Sequence[str], announce: str | None = None) -> MnistperfCLI:
    """The trainer, model and DataModule a ``fit`` with these arguments would build, without running it.

    Args:
        args: the arguments after ``fit``.
        announce: the command named on the device line it prints first (none when not given).
    """
    with warnings.catch_warnings():  # LightningCLI warns that args were given beside the process's own argv
        warnings.filterwarnings("ignore", message=CLI_ARGS_BESIDE_ARGV)
        return MnistperfCLI(args=list(args), run=False, announce=announce)
