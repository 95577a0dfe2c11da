"""On the official files ($MNISTPERF_SHARED_DATASETS, else ../shared/datasets, when present): prepared Parquet
equals the idx content."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
import torch

from mnistperf.data import schema
from mnistperf.data.ingest import prepare
from mnistperf.data.pipelines.v1 import PandasRowDataset
from mnistperf.data.pipelines.v2 import TensorDataset

pytestmark = [pytest.mark.realdata, pytest.mark.slow]  # 70,000 images a dataset
IDX = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}


def decode(path, header: int) -> np.ndarray:
    return np.frombuffer(gzip.decompress(path.read_bytes())[header:], dtype=np.uint8)


@pytest.mark.parametrize("dataset,folder", [("fashion_mnist", "fashion-mnist"), ("mnist", "mnist")])
def test_prepared_parquet_equals_the_official_idx_files(shared_datasets, tmp_path, dataset, folder):
    prepare.prepare_dataset(dataset, tmp_path, source_root=shared_datasets, log=lambda m: None)
    for split, rows in (("train", 60_000), ("test", 10_000)):
        images = decode(shared_datasets / folder / IDX[split][0], 16).reshape(rows, 784)
        labels = decode(shared_datasets / folder / IDX[split][1], 8)
        table = schema.read_checked(prepare.split_path(tmp_path, dataset, split), require_labels=True)
        pixels, read_labels = schema.to_tensors(table)
        assert table.num_rows == rows
        np.testing.assert_array_equal(pixels.numpy(), images)
        np.testing.assert_array_equal(read_labels.numpy(), labels)
        if split == "test":
            v1, v2 = PandasRowDataset(table), TensorDataset(table)
            for index in (0, 1, 4_321, rows - 1):
                assert torch.equal(v1[index]["image"], v2[index]["image"])
                assert torch.equal(v1[index]["label"], v2[index]["label"])
