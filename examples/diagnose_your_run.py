"""Diagnose a Lightning run that is not the lab's: a small MLP on random points, with the lab's two callbacks.

EpochTimer says per epoch whether the run waits for data, for the host or for the device; SampleAudit says
whether every training sample was seen once. Nothing here is specific to mnistperf except the two callbacks:
a plain ``Dataset`` of ``(x, y)`` tuples, a plain ``DataLoader`` and a ``LightningModule`` that logs a loss
every step. ``--slow-ms`` makes every item cost that long to load, so the timer's verdict turns input-bound.

    python examples/diagnose_your_run.py                  # a few seconds on a CPU
    python examples/diagnose_your_run.py --slow-ms 2      # the same run, waiting for its data
    python examples/diagnose_your_run.py --bare           # the same run without the callbacks: what they cost
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
from lightning.pytorch import LightningModule, Trainer, seed_everything
from torch import nn
from torch.utils.data import DataLoader, Dataset

from mnistperf.diagnosis import EpochTimer, SampleAudit


class Points(Dataset):
    """Random points in ``features`` dimensions, labelled by which of ``classes`` random centres is nearest.

    Args:
        samples: number of points.
        features: dimensions of a point.
        classes: number of labels.
        slow_ms: time every ``__getitem__`` sleeps, as a slow decode or a remote read would take.
    """

    def __init__(self, samples: int, features: int = 32, classes: int = 4, slow_ms: float = 0.0):
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(samples, features, generator=generator)
        centres = torch.randn(classes, features, generator=generator)
        self.y = torch.cdist(self.x, centres).argmin(dim=1)
        self.slow_s = slow_ms / 1000

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.slow_s:
            time.sleep(self.slow_s)
        return self.x[index], self.y[index]


class Classifier(LightningModule):
    """A two-layer MLP trained with cross-entropy.

    Args:
        features: input dimensions.
        classes: output classes.
        hidden: width of the hidden layer.
    """

    def __init__(self, features: int = 32, classes: int = 4, hidden: int = 64):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, classes))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2048, help="points in the training set")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    parser.add_argument("--slow-ms", type=float, default=0.0, help="sleep in every __getitem__, in milliseconds")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="folder for the logs and timing.json (default: a new temporary folder, kept for `mnistperf report`)",
    )
    parser.add_argument("--bare", action="store_true", help="the same fit without the two callbacks")
    args = parser.parse_args(argv)
    seed_everything(0, verbose=False)
    out = args.out or Path(tempfile.mkdtemp(prefix="diagnose-"))  # kept: the fit's end names the run to report
    loader = DataLoader(
        Points(args.samples, slow_ms=args.slow_ms),
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.workers,
        persistent_workers=args.workers > 0,
    )
    trainer = Trainer(
        accelerator="auto",
        devices=1,
        max_epochs=args.epochs,
        default_root_dir=out,
        callbacks=[] if args.bare else [EpochTimer(), SampleAudit()],
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        log_every_n_steps=10,
    )
    trainer.fit(Classifier(), loader)


if __name__ == "__main__":
    main()
