"""How a ``fit`` configuration is read: shared by the commands that sit on top of it.

``fit`` itself (through :mod:`mnistperf.cli`), ``bench`` (its plain-PyTorch baseline parses a
fit command line) and ``tune`` (which measures a config before rewriting it) all read a stage
config the same way: LightningCLI with the project's model and DataModule, errors in one line,
bf16 only where the GPU has it, and ``--set KEY=VALUE`` overrides checked against the options
a stage config has. It lives below the commands so that none of them imports another.
"""

from __future__ import annotations

import inspect
import os
import sys
import warnings
from pathlib import Path
from typing import Optional, Sequence

import torch
from lightning.pytorch import Trainer
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities import rank_zero_info

from mnistperf.data.datamodule import MNISTDataModule
from mnistperf.errors import DEBUG_ENV, ConfigError
from mnistperf.model import ImageClassifier


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


def parse_setting(text: str) -> tuple[str, str]:
    """--set KEY=VALUE; the value is kept whole (it may hold commas, e.g. a list)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip() or not value.strip():
        raise ConfigError(f"--set {text!r}: expected KEY=VALUE such as data.num_workers=2.")
    return key.strip(), value.strip()


def check_key(key: str, option: str) -> None:
    """A --set or --sweep key must name an option a stage config has: data.X, model.X, trainer.X or seed_everything."""
    section, _, name = key.partition(".")
    known = {"data": MNISTDataModule, "model": ImageClassifier, "trainer": Trainer}
    if key == "seed_everything":
        return
    if section not in known or name.split(".")[0] not in inspect.signature(known[section].__init__).parameters:
        raise ConfigError(f"{option} {key}: no stage config has this option; use data.NAME, model.NAME or "
                          "trainer.NAME (`python -m mnistperf fit --help` lists them).")
