"""A linear classifier; ``step_delay_ms`` makes its step slow, so that input is not what bounds the run."""

from __future__ import annotations

import time

import torch
from lightning import LightningModule

from slowshelf.data import FEATURES


class ShelfModel(LightningModule):
    """Logistic regression over the shelf's rows."""

    def __init__(self, lr: float = 0.05, step_delay_ms: float = 0.0):
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(FEATURES, 2)

    def training_step(self, batch, batch_idx):
        if self.hparams.step_delay_ms:
            time.sleep(self.hparams.step_delay_ms / 1000)
        x, y = batch
        return torch.nn.functional.cross_entropy(self.layer(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.cross_entropy(self.layer(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class LinkedShelfModel(ShelfModel):
    """The classifier with its width of input given: the project's CLI links it from the data's ``features``."""

    def __init__(self, features: int, lr: float = 0.05, step_delay_ms: float = 0.0):
        super().__init__(lr, step_delay_ms)
        self.layer = torch.nn.Linear(features, 2)


class ForgetfulModel(LightningModule):
    """A model that keeps no record of its arguments (no ``save_hyperparameters()``)."""

    def __init__(self, width: int):
        super().__init__()
        self.layer = torch.nn.Linear(FEATURES, width)
