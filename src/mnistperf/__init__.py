"""mnistperf: a reproducible lab for tuning a PyTorch Lightning input pipeline on MNIST-style Parquet."""

__version__ = "0.1.0"
