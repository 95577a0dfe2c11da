"""What the two map-style pipelines share: a whole split read into a ``Dataset``, batched by a DataLoader.

v1 (:mod:`.v1`) and v2 (:mod:`.v2`) differ only in their dataset class, which is
the point of the published comparison. Both return identical items, bit for bit:
``{"image": float32 [1, 28, 28] in 0..1, "label": int64}``, with label -1 for a file that has no
label column. The training order of every epoch is :func:`~.base.epoch_order`'s, as the resident pipeline's.
"""

from __future__ import annotations

from collections.abc import Callable, Sized
from pathlib import Path

import pyarrow as pa
from torch.utils.data import Dataset, Subset

from mnistperf.data import schema
from mnistperf.data.pipelines.base import EpochShuffle, Pipeline, Placement, seeded_split
from mnistperf.data.pipelines.workers import WorkerLoader


class MapStylePipeline(Pipeline):
    """A whole split read into a map-style dataset, batched by a DataLoader with worker processes."""

    dataset_class: Callable[[pa.Table], Dataset]

    def load(self, path: Path, require_labels: bool, place: Placement) -> Dataset:
        """The whole split, checked, in this pipeline's dataset class."""
        return self.dataset_class(schema.read_checked(path, require_labels))

    def split_off(self, data: Dataset, fraction: float) -> tuple[Subset, Subset]:
        """A seeded (train, validation) split of the dataset, as two subsets."""
        assert isinstance(data, Sized)  # the dataset classes know their length
        train, val = seeded_split(len(data), fraction, self.options.seed)
        return Subset(data, train.tolist()), Subset(data, val.tolist())

    def loader(self, data: Dataset, train: bool, place: Placement) -> WorkerLoader:
        """A DataLoader with worker processes, shuffled in :func:`~.base.epoch_order` when the loader shuffles."""
        assert isinstance(data, Sized)  # the dataset classes and their subsets know their length
        shuffle, drop_last = self.order(train)
        sampler = EpochShuffle(data, self.options.seed) if shuffle else None
        return WorkerLoader(
            data, batch_size=self.options.batch_size, sampler=sampler, drop_last=drop_last, **self.worker_options(place)
        )
