"""The single entry point: ``mnistperf {fit,validate,test,predict,prepare,bench,tune}``.

``fit``/``validate``/``test``/``predict`` are LightningCLI's own subcommands, configured by the
YAML files in ``configs/``; ``prepare``, ``bench`` and ``tune`` sit beside them. ``main(args)`` takes
the arguments as a list so that tests drive the whole CLI in-process. Errors the user can
fix are printed as one line naming the file or option, with exit status 2; so are the trainer
settings Lightning rejects (an accelerator this machine lacks, an impossible device count).
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path
from typing import Optional, Sequence

import torch
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.exceptions import MisconfigurationException

from mnistperf.data import MNISTDataModule
from mnistperf.errors import ConfigError, MnistperfError
from mnistperf.model import ImageClassifier

LIGHTNING_COMMANDS = ("fit", "validate", "test", "predict")
DEBUG_ENV = "MNISTPERF_DEBUG"  # set to 1 to see the traceback behind a one-line error
OVERVIEW = """\
usage: mnistperf COMMAND [options]

commands:
  prepare    convert the official MNIST/FashionMNIST files to Parquet (and CSV), with a size/time table
  fit        train a stage:        mnistperf fit --config configs/v2_pinned.yaml
  validate   evaluate on the validation data
  test       evaluate on the test split
  predict    predict the test split's labels
  bench      run the whole ladder (or a sweep) in fresh processes and print the table
  tune       find the fastest input pipeline for this machine by measuring, and write a config

`mnistperf COMMAND --help` shows each command's options.
"""


class OneLineErrorParser(LightningArgumentParser):
    """LightningCLI's parser, answering a wrong option or value in one line instead of the whole usage."""

    def error(self, message: str, ex: Optional[Exception] = None):
        if os.environ.get(DEBUG_ENV):
            super().error(message, ex)
        text = " ".join(line.strip() for line in str(message).splitlines() if line.strip())
        print(f"mnistperf: error: {text} (`python -m mnistperf {self.prog.split()[-1]} --help` lists the options)",
              file=sys.stderr)
        raise SystemExit(2)


def native_bf16(accelerator) -> bool:
    """Whether the accelerator a run asks for resolves to a GPU with native bf16 (not emulated) here."""
    wants_gpu = str(accelerator) in ("auto", "gpu", "cuda")
    return wants_gpu and torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False)


class MnistperfCLI(LightningCLI):
    """LightningCLI with the project's model and data module fixed.

    A ``bf16`` trainer precision runs only where the GPU has native bf16: elsewhere (a CPU, an
    older GPU) it would be emulated and slower, so the run falls back to ``32-true`` and says so;
    timing.json records the precision that actually ran.
    """

    def __init__(self, args: Optional[Sequence[str]] = None, run: bool = True):
        super().__init__(
            ImageClassifier,
            MNISTDataModule,
            save_config_kwargs={"overwrite": True},
            args=args,
            run=run,
            parser_class=OneLineErrorParser,
        )

    def before_fit(self) -> None:
        for name in ("limit_train_batches", "max_epochs", "max_steps"):
            if getattr(self.trainer, name) == 0:
                raise ConfigError(f"trainer.{name} is 0, so fit would train nothing; raise it or remove the option.")

    def after_fit(self) -> None:
        if self.trainer.global_step == 0 and not self.trainer.interrupted:
            raise ConfigError("fit trained no batch (the training split gave no batches with these options); "
                              "check data.batch_size, data.drop_last and trainer.limit_train_batches.")

    def parse_arguments(self, parser, args) -> None:
        super().parse_arguments(parser, args)
        self._check_checkpoint()  # before LightningCLI reads the checkpoint's hyperparameters

    def _check_checkpoint(self) -> None:
        """An explicit checkpoint path must be a readable Lightning checkpoint (not 'last', 'best', ...)."""
        subcommand = self.config.get("subcommand")
        path = self.config[subcommand].get("ckpt_path") if subcommand else None
        if path is None or str(path) in ("last", "best", "hpc", "registry"):
            return
        if not Path(path).is_file():
            raise ConfigError(f"--ckpt_path {path}: no such file; give a checkpoint written by fit "
                              "(lightning_logs/<config>/version_N/checkpoints/*.ckpt), or 'last'.")
        try:
            checkpoint = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # truncated zip, pickle garbage, ...: torch raises many kinds
            raise ConfigError(f"--ckpt_path {path} is not a readable checkpoint ({type(exc).__name__}); "
                              "it may be truncated or not a checkpoint: use another one.") from None
        if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
            raise ConfigError(f"--ckpt_path {path} holds no model state_dict; give a checkpoint written by fit.")

    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand] if self.subcommand else self.config
        precision = str(config.trainer.precision)
        if precision.startswith("bf16") and not native_bf16(config.trainer.accelerator):
            rank_zero_info(f"trainer.precision {precision}: no GPU with native bf16 here; training in 32-true.")
            config.trainer.precision = "32-true"


def parse_fit_config(args: Sequence[str]) -> MnistperfCLI:
    """The trainer, model and DataModule a ``fit`` with these arguments would build, without running it."""
    with warnings.catch_warnings():  # LightningCLI warns that args were given beside the process's own argv
        warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
        return MnistperfCLI(args=list(args), run=False)


def prepare_command(argv: Sequence[str]) -> None:
    from mnistperf.data import prepare, sources

    parser = argparse.ArgumentParser(prog="mnistperf prepare", description=prepare.__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="all", choices=["all", *sources.DATASETS, "synthetic"])
    parser.add_argument("--data-dir", default="data", help="where <Folder>/{train,test}.parquet are written")
    parser.add_argument(
        "--source-root",
        default=None,
        help=f"folder holding mnist/ and fashion-mnist/ with the official .gz files (or set {sources.SOURCE_ROOT_ENV})",
    )
    parser.add_argument("--formats", default="parquet", help="comma-separated: parquet (always) and csv")
    parser.add_argument("--force", action="store_true", help="rebuild files that are already there")
    parser.add_argument("--rows", type=int, default=2_000_000, help="training rows of --dataset synthetic")
    parser.add_argument("--seed", type=int, default=0, help="seed of --dataset synthetic")
    parser.add_argument("--litdata", action="store_true",
                        help="also write the litdata copy each split needs for data.pipeline litdata")
    parser.add_argument("--from", dest="source", type=Path, default=None, metavar="DIR",
                        help="import your own data: a folder with train and test splits as CSV (Kaggle's layout) "
                             "or Parquet (Hugging Face's image layout, or pixel columns)")
    parser.add_argument("--name", default=None, help="with --from: the dataset's name, its folder under --data-dir "
                                                     "(default: the folder's name); use it as --data.dataset NAME")
    opts = parser.parse_args(argv)
    if opts.name is not None and opts.source is None:
        parser.error("--name goes with --from DIR, the folder to import")
    if opts.source is not None:
        from mnistperf.data import importer

        opts.dataset = opts.name or opts.source.resolve().name
        reports = importer.import_folder(opts.source, opts.dataset, Path(opts.data_dir),
                                         prepare.check_formats(opts.formats.split(",")), force=opts.force)
    elif opts.dataset == "synthetic":
        reports = prepare.prepare_synthetic(opts.rows, opts.data_dir, seed=opts.seed, force=opts.force)
    else:
        names = list(sources.DATASETS) if opts.dataset == "all" else [opts.dataset]
        reports = []
        for name in names:
            reports += prepare.prepare_dataset(
                name, opts.data_dir, opts.source_root, opts.formats.split(","), force=opts.force
            )
    if reports:
        print(prepare.format_reports(reports))
    if opts.litdata:
        from mnistperf.data.litdata_stream import prepare_copies

        names = list(sources.DATASETS) if opts.dataset == "all" else [opts.dataset]
        prepare_copies([prepare.split_path(opts.data_dir, name, split) for name in names for split in prepare.SPLITS],
                       force=opts.force)


def main(args: Optional[Sequence[str]] = None) -> None:
    """Run one mnistperf command; ``args`` defaults to the process's command line."""
    argv = list(sys.argv[1:] if args is None else args)
    command = argv[0] if argv else None
    try:
        if command == "prepare":
            prepare_command(argv[1:])
        elif command == "bench":
            from mnistperf.bench.runner import bench_command

            bench_command(argv[1:])
        elif command == "tune":
            from mnistperf.tune.command import tune_command

            tune_command(argv[1:])
        elif command in LIGHTNING_COMMANDS:
            MnistperfCLI(args=None if args is None else argv)
        else:
            print(OVERVIEW, end="")
            if command not in (None, "-h", "--help"):
                print(f"mnistperf: error: unknown command {command!r}", file=sys.stderr)
                raise SystemExit(2)
    except (MnistperfError, MisconfigurationException) as exc:
        if os.environ.get(DEBUG_ENV):
            raise
        print(f"mnistperf: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
