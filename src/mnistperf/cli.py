"""The single entry point: ``mnistperf {fit,validate,test,predict,prepare,bench}``.

``fit``/``validate``/``test``/``predict`` are LightningCLI's own subcommands, configured by the
YAML files in ``configs/``; ``prepare`` and ``bench`` sit beside them. ``main(args)`` takes
the arguments as a list so that tests drive the whole CLI in-process. Errors the user can
fix are printed as one line naming the file or option, with exit status 2; so are the trainer
settings Lightning rejects (an accelerator this machine lacks, an impossible device count).
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

import torch
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.exceptions import MisconfigurationException

from mnistperf.data import MNISTDataModule
from mnistperf.errors import MnistperfError
from mnistperf.model import ImageClassifier

LIGHTNING_COMMANDS = ("fit", "validate", "test", "predict")
OVERVIEW = """\
usage: mnistperf COMMAND [options]

commands:
  prepare    convert the official MNIST/FashionMNIST files to Parquet (and CSV), with a size/time table
  fit        train a stage:        mnistperf fit --config configs/v2_pinned.yaml
  validate   evaluate on the validation data
  test       evaluate on the test split
  predict    predict the test split's labels
  bench      run the whole ladder (or a sweep) in fresh processes and print the table

`mnistperf COMMAND --help` shows each command's options.
"""


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
        )

    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand] if self.subcommand else self.config
        precision = str(config.trainer.precision)
        if precision.startswith("bf16") and not native_bf16(config.trainer.accelerator):
            rank_zero_info(f"trainer.precision {precision}: no GPU with native bf16 here; training in 32-true.")
            config.trainer.precision = "32-true"


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
    opts = parser.parse_args(argv)
    if opts.dataset == "synthetic":
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

        names = ["synthetic"] if opts.dataset == "synthetic" else (
            list(sources.DATASETS) if opts.dataset == "all" else [opts.dataset])
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
        elif command in LIGHTNING_COMMANDS:
            MnistperfCLI(args=None if args is None else argv)
        else:
            print(OVERVIEW, end="")
            if command not in (None, "-h", "--help"):
                print(f"mnistperf: error: unknown command {command!r}", file=sys.stderr)
                raise SystemExit(2)
    except (MnistperfError, MisconfigurationException) as exc:
        print(f"mnistperf: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
