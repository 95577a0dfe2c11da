"""The two map-style pipelines the reference compares: per-row pandas work (v1) against ready tensors (v2).

Both return identical items, bit for bit: ``{"image": float32 [1, 28, 28] in 0..1, "label": int64}``
with label -1 for a file that has no label column.

v1 is the baseline being measured: every ``__getitem__`` does the row lookup and the
conversions again, on purpose. Do not make it faster; that is what v2 is for.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import torch
from torch.utils.data import Dataset, Subset

from mnistperf.data import schema
from mnistperf.data.pipeline import Pipeline, Placement, seeded_split
from mnistperf.data.workers import WorkerLoader

IMAGE_SHAPE = (1, 28, 28)


def normalize(pixels: torch.Tensor) -> torch.Tensor:
    """uint8 (or integer) pixels [..., 784] to float32 images [..., 1, 28, 28] in 0..1."""
    return pixels.to(torch.float32).div_(255).reshape(*pixels.shape[:-1], *IMAGE_SHAPE)


class PandasRowDataset(Dataset):
    """v1: the whole file as a pandas DataFrame; each item converted from its row on every access."""

    def __init__(self, table: pa.Table):
        self.frame = table.to_pandas()
        self.has_labels = schema.LABEL_COLUMN in self.frame.columns

    def __len__(self) -> int:
        return len(self.frame)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        row = self.frame.iloc[index]
        pixels = row[schema.PIXEL_COLUMNS].to_numpy(dtype="float32")
        image = torch.tensor(pixels).reshape(IMAGE_SHAPE) / 255
        label = row[schema.LABEL_COLUMN] if self.has_labels else schema.NO_LABEL
        return {"image": image, "label": torch.tensor(label, dtype=torch.int64)}


class TensorDataset(Dataset):
    """v2: the conversion done once for the whole file; each item only indexes ready tensors."""

    def __init__(self, table: pa.Table):
        pixels, self.labels = schema.to_tensors(table)
        self.images = normalize(pixels)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"image": self.images[index], "label": self.labels[index]}


class MapStylePipeline(Pipeline):
    """A whole split read into a map-style dataset, batched by a DataLoader with worker processes."""

    dataset_class: type[Dataset]

    def load(self, path: Path, require_labels: bool, place: Placement) -> Dataset:
        return self.dataset_class(schema.read_checked(path, require_labels))

    def split_off(self, data: Dataset, fraction: float) -> tuple[Subset, Subset]:
        train, val = seeded_split(len(data), fraction, self.options.seed)
        return Subset(data, train.tolist()), Subset(data, val.tolist())

    def loader(self, data: Dataset, train: bool, place: Placement) -> WorkerLoader:
        shuffle, drop_last = self.order(train)
        return WorkerLoader(data, batch_size=self.options.batch_size, shuffle=shuffle, drop_last=drop_last,
                            **self.worker_options(place))


class PandasRowsPipeline(MapStylePipeline):
    """v1: the naive per-row pandas dataset."""

    dataset_class = PandasRowDataset


class TensorsPipeline(MapStylePipeline):
    """v2: the pre-tensorized dataset."""

    dataset_class = TensorDataset
