"""What ``mnistperf predict`` leaves: each test image's predicted class, by its index in the split (predictions.csv)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import BasePredictionWriter
from typing_extensions import override

from mnistperf.atomic import atomic_write_text

PREDICTIONS_FILE = "predictions.csv"
# Where a loader gives no index of its images (litdata's): its workers' turns are not the split's order
READ_ORDER = "; their index is the order read, as the loader gives none (with workers, not the split's order)"


class PredictionsFile(BasePredictionWriter):
    """Write the predicted class of every image ``predict`` read to the run's log folder, and say where.

    Each image by its index in the split where Lightning tracks the loader's indices or the batch carries them
    (the stream's ``index``), else by its place in the order read. Under several processes, each writes the images
    it read to a file of its own (``predictions.rank1.csv``).
    """

    def __init__(self) -> None:
        super().__init__(write_interval="batch")
        self.path: Path | None = None  # where the predictions were written (None until they are)
        self._rows: list[tuple[int, int]] = []
        self._read_order = False
        self._folder = Path()

    @override
    def on_predict_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Nothing predicted yet; the run's log folder read on every process (Lightning broadcasts it)."""
        self._rows, self._folder = [], Path(trainer.log_dir or trainer.default_root_dir)
        self._read_order = False  # whether a batch came without its images' indices

    @override
    def write_on_batch_end(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        prediction: Any,
        batch_indices: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int,
    ) -> None:
        classes = prediction.cpu().tolist()
        start = len(self._rows)
        if not batch_indices and isinstance(batch, Mapping) and "index" in batch:  # a stream's, read in order
            batch_indices = batch["index"].tolist()
        self._read_order |= not batch_indices
        self._rows += zip(batch_indices or range(start, start + len(classes)), classes, strict=True)

    @override
    def on_predict_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Write the predictions of this process, ordered by index."""
        name = PREDICTIONS_FILE if trainer.world_size == 1 else f"predictions.rank{trainer.global_rank}.csv"
        self.path = self._folder / name
        atomic_write_text(self.path, "index,predicted\n" + "".join(f"{i},{c}\n" for i, c in sorted(self._rows)))
        if trainer.is_global_zero:
            each = "" if trainer.world_size == 1 else f" (rank 0's; each of the {trainer.world_size} ranks its own)"
            order = READ_ORDER if self._read_order else ""
            print(
                f"predictions: the class of each of {len(self._rows):,} test images written to {self.path}{each}{order}"
            )
