"""A test-only callback: records which rows each rank trains on, per epoch, for the DDP test.

Rows are identified by their first two pixels, which the test's data encodes as the row
number (low byte, high byte).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from lightning.pytorch import Callback


class SampleRecorder(Callback):
    def __init__(self):
        self.epochs: list[list[int]] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        while len(self.epochs) <= trainer.current_epoch:  # a run resumed mid-epoch starts inside one
            self.epochs.append([])
        pixels = (batch["image"].reshape(batch["label"].numel(), -1)[:, :2] * 255).round().to(torch.int64).cpu()
        self.epochs[-1] += (pixels[:, 0] + 256 * pixels[:, 1]).tolist()

    def on_fit_end(self, trainer, pl_module):
        folder = Path(os.environ["MNISTPERF_RECORD_DIR"])
        (folder / f"rank{trainer.global_rank}.json").write_text(json.dumps(self.epochs))


class WeightsRecorder(Callback):
    """Writes the sum of every parameter at the end of fit, per rank: ranks that synced their gradients agree."""

    def on_fit_end(self, trainer, pl_module):
        sums = [float(p.detach().double().sum()) for p in pl_module.parameters()]
        (Path(os.environ["MNISTPERF_RECORD_DIR"]) / f"weights{trainer.global_rank}.json").write_text(json.dumps(sums))
