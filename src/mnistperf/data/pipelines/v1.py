"""v1, where the ladder starts: the naive per-row pandas dataset.

Every ``__getitem__`` does the row lookup and the conversions again, on purpose. Do not make
it faster; that is what v2 (:mod:`.v2`) is for.
"""

from __future__ import annotations

import pyarrow as pa
import torch
from torch.utils.data import Dataset

from mnistperf.data import schema
from mnistperf.data.pipelines.base import IMAGE_SHAPE
from mnistperf.data.pipelines.map_style import MapStylePipeline


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


class V1Pipeline(MapStylePipeline):
    """The naive per-row pandas dataset: every item converted from its row on every access."""

    dataset_class = PandasRowDataset
    tune_rank = 50
