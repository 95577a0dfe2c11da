"""Fits under a Trainer of the ``pytorch_lightning`` package, in a process of their own (test_pytorch_lightning.py).

Importing that package beside ``lightning`` spends, for the whole process, what Lightning says once (its tips), so
the main suite's process never imports it. Prints one JSON line: what the fits showed.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path

import pytorch_lightning
import torch
from torch.utils.data import DataLoader, TensorDataset

from mnistperf.diagnosis import EpochTimer as LightningsTimer
from mnistperf.diagnosis.pytorch_lightning import EpochTimer, SampleAudit

SAMPLES, BATCH, EPOCHS = 96, 16, 3


class Classifier(pytorch_lightning.LightningModule):
    """A linear classifier of the older package, its loss logged every step."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(8, 2)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.layer(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit(root: Path, callbacks: list) -> Classifier:
    """One seeded fit of EPOCHS epochs with ``callbacks``; the module trained."""
    pytorch_lightning.seed_everything(0, verbose=False)
    data = TensorDataset(torch.randn(SAMPLES, 8), torch.randint(0, 2, (SAMPLES,)))
    trainer = pytorch_lightning.Trainer(
        accelerator="cpu",
        max_epochs=EPOCHS,
        default_root_dir=root,
        callbacks=callbacks,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    module = Classifier()
    trainer.fit(module, DataLoader(data, batch_size=BATCH, shuffle=True))
    return module


def main() -> None:
    """The fits: lightning.pytorch's callback refused or not, then both of this package's, and none."""
    root, out = Path(tempfile.mkdtemp()), io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            fit(root / "refused", [LightningsTimer()])
            refused = None
        except ValueError as error:
            refused = str(error)
        timer, audit = EpochTimer(), SampleAudit()
        watched = fit(root / "with", [timer, audit])
        plain = fit(root / "without", [])
    found = {
        "version": pytorch_lightning.__version__,
        "refused": refused,
        "samples": [row["samples"] for row in timer.epochs],
        "audited": [[row["seen"], row["distinct"], row["missing"]] for row in audit.epochs],
        "problems": timer.problems.lines + audit.problems.lines,
        "verdict": timer.clock.summary()["verdict"],
        "headline": "Verdict: " in out.getvalue(),
        "timing_json": bool(list((root / "with").rglob("timing.json"))),
        "unchanged": torch.equal(watched.layer.weight, plain.layer.weight),
    }
    print(json.dumps(found), file=sys.stdout)


if __name__ == "__main__":
    main()
