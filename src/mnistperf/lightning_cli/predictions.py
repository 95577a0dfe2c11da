"""What ``mnistperf predict`` leaves: each test image's predicted class, in the split's order, in predictions.csv."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import BasePredictionWriter
from lightning.pytorch.utilities import rank_zero_only
from typing_extensions import override

from mnistperf.atomic import atomic_write_text

PREDICTIONS_FILE = "predictions.csv"


class PredictionsFile(BasePredictionWriter):
    """Write the predicted class of every image ``predict`` read to the run's log folder, and say where."""

    def __init__(self) -> None:
        super().__init__(write_interval="epoch")
        self.path: Path | None = None  # where the predictions were written (None until they are)

    @override
    @rank_zero_only
    def write_on_epoch_end(
        self, trainer: Trainer, pl_module: LightningModule, predictions: Any, batch_indices: Any
    ) -> None:
        classes = torch.cat([batch.cpu() for batch in predictions]).tolist()  # one loader's batches, in its order
        self.path = Path(trainer.log_dir or trainer.default_root_dir) / PREDICTIONS_FILE
        atomic_write_text(self.path, "index,predicted\n" + "".join(f"{i},{c}\n" for i, c in enumerate(classes)))
        print(f"predictions: the class of each of {len(classes):,} test images written to {self.path}", flush=True)
