"""GluonTS's torch models fitted as its documentation fits them, EpochTimer and SampleAudit beside a counting callback.

`python gluonts_trial.py MODEL` (deepar, sff, patchtst, dlinear, tft) in an environment with gluonts[torch] and
mnistperf: 8 seeded random-walk series of 200 hours, batches of 16, 10 batches an epoch, 3 epochs, on the CPU. Prints
each epoch's truth (samples, distinct, duplicates: every tensor field's bytes), the timer's samples and verdict, and
the audit's seen, distinct, duplicates and missing.
"""

from __future__ import annotations

import collections
import hashlib
import sys
import tempfile
import warnings

import numpy as np
import pandas as pd
import torch
from gluonts.dataset.common import ListDataset
from lightning.pytorch import Callback

from mnistperf.diagnosis import EpochTimer, SampleAudit


class Truth(Callback):
    """Each epoch's samples (the batch's leading length) and distinct samples, by every tensor field's bytes."""

    def __init__(self) -> None:
        self.epochs: list[tuple[int, int, int]] = []
        self.seen: list[str] = []

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        """Nothing of the epoch seen yet."""
        self.seen = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        """Each sample's digest, over all its tensor fields."""
        keys = sorted(key for key, value in batch.items() if isinstance(value, torch.Tensor))
        for row in range(batch[keys[0]].shape[0]):
            data = b"".join(batch[key][row].contiguous().numpy().tobytes() for key in keys)
            self.seen.append(hashlib.blake2b(data, digest_size=8).hexdigest())

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        """The epoch's samples, distinct samples and duplicates."""
        counts = collections.Counter(self.seen)
        self.epochs.append((len(self.seen), len(counts), sum(n - 1 for n in counts.values())))


def series(count: int = 8, length: int = 200) -> ListDataset:
    """``count`` seeded random walks of ``length`` hours."""
    rng = np.random.default_rng(0)
    start = pd.Period("2024-01-01", freq="h")
    return ListDataset(
        [{"start": start, "target": rng.normal(size=length).cumsum(), "item_id": str(i)} for i in range(count)],
        freq="h",
    )


def fit(kind: str) -> None:
    """Train model ``kind`` with both callbacks and the truth beside them; print the three counts."""
    from gluonts.torch import (
        DeepAREstimator,
        DLinearEstimator,
        PatchTSTEstimator,
        SimpleFeedForwardEstimator,
        TemporalFusionTransformerEstimator,
    )

    timer, audit, truth = EpochTimer(), SampleAudit(), Truth()
    with tempfile.TemporaryDirectory() as root:
        trainer = dict(
            max_epochs=3,
            accelerator="cpu",
            callbacks=[timer, audit, truth],
            enable_progress_bar=False,
            enable_model_summary=False,
            default_root_dir=root,
        )
        options = dict(prediction_length=12, batch_size=16, num_batches_per_epoch=10, trainer_kwargs=trainer)
        estimators = {
            "deepar": lambda: DeepAREstimator(freq="h", **options),
            "sff": lambda: SimpleFeedForwardEstimator(**options),
            "patchtst": lambda: PatchTSTEstimator(patch_len=8, context_length=48, **options),
            "dlinear": lambda: DLinearEstimator(context_length=48, **options),
            "tft": lambda: TemporalFusionTransformerEstimator(freq="h", context_length=48, **options),
        }
        estimators[kind]().train(series())
    print("truth", kind, truth.epochs)
    print("timer", kind, [(e["samples"], e["verdict"]) for e in timer.epochs])
    counted = [(e.get("seen"), e.get("distinct"), e.get("duplicates"), e.get("missing")) for e in audit.epochs]
    print("audit", kind, counted)


if __name__ == "__main__":
    warnings.filterwarnings("ignore")
    fit(sys.argv[1])
