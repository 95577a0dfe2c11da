"""The two callbacks under a Trainer of the ``pytorch_lightning`` package, as libraries built on it make one.

The dev extra installs the package's last release before 2.6, whose Trainer refuses ``lightning.pytorch``'s callbacks,
so the main suite runs it; without the package the module skips.
"""

from __future__ import annotations

import pytest

pytest.importorskip("pytorch_lightning")

import pytorch_lightning
import torch
from packaging.version import Version
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


def fit(tmp_path, callbacks: list) -> tuple[pytorch_lightning.Trainer, Classifier]:
    pytorch_lightning.seed_everything(0, verbose=False)
    data = TensorDataset(torch.randn(SAMPLES, 8), torch.randint(0, 2, (SAMPLES,)))
    trainer = pytorch_lightning.Trainer(
        accelerator="cpu",
        max_epochs=EPOCHS,
        default_root_dir=tmp_path,
        callbacks=callbacks,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    module = Classifier()
    trainer.fit(module, DataLoader(data, batch_size=BATCH, shuffle=True))
    return trainer, module


@pytest.mark.skipif(Version(pytorch_lightning.__version__) >= Version("2.6"), reason="2.6 takes either's callbacks")
def test_its_trainer_refuses_lightnings_own_callbacks(tmp_path):
    """Why the module exists: the older package's Trainer takes its own callbacks only."""
    with pytest.raises(ValueError, match="Expected a parent"):
        fit(tmp_path, [LightningsTimer()])


def test_both_callbacks_count_and_audit_its_fit_and_leave_it_as_it_was(tmp_path, capsys):
    timer, audit = EpochTimer(), SampleAudit()
    _, watched = fit(tmp_path / "with", [timer, audit])
    _, plain = fit(tmp_path / "without", [])
    assert [row["samples"] for row in timer.epochs] == [SAMPLES] * EPOCHS
    assert [(row["seen"], row["distinct"], row["missing"]) for row in audit.epochs] == [(SAMPLES, SAMPLES, 0)] * EPOCHS
    assert timer.problems.lines == [] and audit.problems.lines == []
    assert timer.clock.summary()["verdict"] in ("input-bound", "overhead-bound", "compute-bound", "undetermined")
    assert "Verdict: " in capsys.readouterr().out and list((tmp_path / "with").rglob("timing.json"))
    assert torch.equal(watched.layer.weight, plain.layer.weight)  # the diagnosis changed nothing of the fit
