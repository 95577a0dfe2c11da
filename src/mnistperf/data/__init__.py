"""The data path: raw idx files -> verified -> Parquet -> one of four pipelines -> batches."""

from mnistperf.data.datamodule import MNISTDataModule

__all__ = ["MNISTDataModule"]
