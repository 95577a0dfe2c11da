"""A pipeline the tests register for themselves, to show that a new pipeline is this module and one registry line."""

from __future__ import annotations

import pyarrow as pa
import torch
from torch.utils.data import Dataset

from mnistperf.data import schema
from mnistperf.data.pipelines.base import normalize
from mnistperf.data.pipelines.map_style import MapStylePipeline


class ItemListDataset(Dataset):
    """Every item made once, up front, and kept in a Python list."""

    def __init__(self, table: pa.Table):
        pixels, labels = schema.to_tensors(table)
        self.items = [{"image": image, "label": label} for image, label in zip(normalize(pixels), labels, strict=True)]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return self.items[index]


class ItemListPipeline(MapStylePipeline):
    """Items made once and kept in a Python list."""

    dataset_class = ItemListDataset
    tune_rank = 0  # tried before every built-in pipeline
