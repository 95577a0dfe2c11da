"""Rows that take a while to read, as files that must be decoded do: DataLoader workers make them faster."""

from __future__ import annotations

import time

import torch
from lightning import LightningDataModule
from torch.utils.data import DataLoader, Dataset

FEATURES = 16


class SlowRows(Dataset):
    """``rows`` items of FEATURES numbers and a class; each item sleeps ``delay_ms`` before it is returned."""

    def __init__(self, rows: int, delay_ms: float):
        self.rows, self.delay_s = rows, delay_ms / 1000
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(rows, FEATURES, generator=generator)
        self.y = (self.x.sum(dim=1) > 0).long()

    def __len__(self) -> int:
        return self.rows

    def __getitem__(self, index: int):
        if self.delay_s:
            time.sleep(self.delay_s)
        return self.x[index], self.y[index]


class ShelfData(LightningDataModule):
    """The project's data, with its own names for the loader's settings: ``batch``, ``workers``, ``keep_workers``."""

    features = FEATURES  # what a model reads from a row (the project's CLI links it to the model)

    def __init__(
        self, rows: int = 256, batch: int = 8, workers: int = 0, keep_workers: bool = False, delay_ms: float = 2.0
    ):
        super().__init__()
        self.save_hyperparameters()

    def train_dataloader(self) -> DataLoader:
        workers = self.hparams.workers
        return DataLoader(
            SlowRows(self.hparams.rows, self.hparams.delay_ms),
            batch_size=self.hparams.batch,
            shuffle=True,
            num_workers=workers,
            persistent_workers=self.hparams.keep_workers and workers > 0,
        )

    def val_dataloader(self) -> DataLoader:
        return DataLoader(SlowRows(32, 0.0), batch_size=self.hparams.batch)


class FixedShelfData(LightningDataModule):
    """The same data with the loader's settings written into ``train_dataloader``: no argument changes them."""

    def __init__(self, rows: int = 256, delay_ms: float = 2.0):
        super().__init__()
        self.save_hyperparameters()

    def train_dataloader(self) -> DataLoader:
        rows = SlowRows(self.hparams.rows, self.hparams.delay_ms)
        return DataLoader(rows, batch_size=8, shuffle=True, drop_last=True)


class PairedShelfData(LightningDataModule):
    """Two training loaders at once, as a dict: Lightning combines them; no one DataLoader to make again."""

    def train_dataloader(self) -> dict[str, DataLoader]:
        return {"a": DataLoader(SlowRows(32, 0.0), batch_size=8), "b": DataLoader(SlowRows(32, 0.0), batch_size=8)}
