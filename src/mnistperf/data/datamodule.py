"""The LightningDataModule every stage config points at: Parquet in, batches out.

The ladder's stages differ only in this module's options: which dataset class (``pipeline``)
and how the DataLoader is set up. ``prepare_data`` converts the raw files once (rank 0 only);
``setup`` only loads and checks, in the main process, so bad files fail early and clearly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional, Union

import lightning as L
import pyarrow as pa
import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch.utils.data import Subset

from mnistperf.data import prepare, schema
from mnistperf.data.datasets import PandasRowDataset, TensorDataset
from mnistperf.data.resident import ResidentBatches
from mnistperf.data.sources import DATASETS
from mnistperf.data.streaming import ParquetStream, StreamLoader
from mnistperf.data.workers import WorkerLoader
from mnistperf.errors import ConfigError

DatasetName = Literal["fashion_mnist", "mnist", "synthetic"]
PipelineName = Literal["v1", "v2", "resident", "stream"]
MAP_STYLE = {"v1": PandasRowDataset, "v2": TensorDataset}


class MNISTDataModule(L.LightningDataModule):
    """MNIST-style Parquet data with the DataLoader options the ladder tunes.

    Args:
        dataset: which prepared dataset to read: ``fashion_mnist``, ``mnist`` or ``synthetic``.
        data_dir: folder holding ``<Folder>/{train,test}.parquet`` (for ``synthetic``, the shard
            folders ``Synthetic/{train,test}/``).
        pipeline: ``v1`` per-row pandas dataset, ``v2`` pre-tensorized dataset, ``resident``
            whole split on the training device, ``stream`` record batches read from Parquet.
        batch_size: samples per batch (per process under DDP).
        num_workers: DataLoader worker processes (v1, v2, stream).
        persistent_workers: keep workers alive between epochs (needs num_workers > 0).
        pin_memory: page-locked host batches for faster, asynchronous copies to the GPU (applies only
            when batches go to a CUDA device; elsewhere pinning would cost time for nothing).
        prefetch_factor: batches each worker loads ahead (needs num_workers > 0; default 2).
        shuffle: reshuffle the training set every epoch.
        drop_last: drop the last, partial training batch.
        val_source: ``test`` evaluates on the test split, as the reference does; a fraction
            such as ``0.1`` splits that share off the training set instead (seeded).
        seed: seed for the validation split and the resident/stream shuffles.
        source_root: folder with the raw ``mnist/`` and ``fashion-mnist/`` .gz files, for prepare_data.
        stream_buffer_rows: rows held in the stream pipeline's shuffle buffer.
    """

    def __init__(
        self,
        dataset: DatasetName = "fashion_mnist",
        data_dir: str = "data",
        pipeline: PipelineName = "v2",
        batch_size: int = 64,
        num_workers: int = 0,
        persistent_workers: bool = False,
        pin_memory: bool = False,
        prefetch_factor: Optional[int] = None,
        shuffle: bool = True,
        drop_last: bool = False,
        val_source: Union[Literal["test"], float] = "test",
        seed: int = 42,
        source_root: Optional[str] = None,
        stream_buffer_rows: int = 10_000,
    ):
        super().__init__()
        _check_options(dataset, pipeline, batch_size, num_workers, persistent_workers, prefetch_factor, val_source,
                       stream_buffer_rows)
        self.save_hyperparameters()
        self.data_dir = Path(data_dir)
        self.datasets: dict[str, object] = {}
        # Where the resident pipeline puts the data when no Trainer is attached (the plain-PyTorch baseline).
        self.device = torch.device("cpu")

    # ----------------------------------------------------------------- preparation
    def prepare_data(self) -> None:
        """Convert the raw files to Parquet if they are missing (Lightning runs this on one process)."""
        hp = self.hparams
        missing = [s for s in prepare.SPLITS if not prepare.split_path(self.data_dir, hp.dataset, s).exists()]
        if missing and hp.dataset != "synthetic":
            prepare.prepare_dataset(hp.dataset, self.data_dir, source_root=hp.source_root)

    def setup(self, stage: str) -> None:
        """Load and check the splits this stage needs; nothing is converted or downloaded here."""
        hp = self.hparams
        if stage == "fit":
            train = self._load("train", require_labels=True)
            if hp.val_source == "test":
                self.datasets["train"], self.datasets["val"] = train, self._load("test", require_labels=True)
            else:
                self.datasets["train"], self.datasets["val"] = self._split_off(train, float(hp.val_source))
        elif stage == "validate":
            if hp.val_source == "test":
                self.datasets["val"] = self._load("test", require_labels=True)
            else:
                _, self.datasets["val"] = self._split_off(self._load("train", require_labels=True), float(hp.val_source))
        elif stage == "test":
            self.datasets["test"] = self._load("test", require_labels=True)
        elif stage == "predict":
            self.datasets["predict"] = self._load("test", require_labels=False)
        # The Arrow tables are gone once converted, but pyarrow's allocator keeps their pages for
        # reuse: without this, every pipeline would carry about twice the decoded file for the whole run.
        pa.default_memory_pool().release_unused()

    def _load(self, split: str, require_labels: bool):
        path = prepare.require_prepared(self.hparams.dataset, self.data_dir, split)
        if self.hparams.pipeline == "stream":
            return ParquetStream(path, require_labels=require_labels, seed=self.hparams.seed)
        table = schema.read_checked(path, require_labels)
        if self.hparams.pipeline == "resident":  # straight to the device: no host copy outlives setup
            return tuple(t.to(self._device()) for t in schema.to_tensors(table))
        return MAP_STYLE[self.hparams.pipeline](table)

    def _split_off(self, train, fraction: float):
        """Seeded split of the training data into (train, validation) parts."""
        n = len(train[1]) if isinstance(train, tuple) else len(train)
        order = torch.randperm(n, generator=torch.Generator().manual_seed(self.hparams.seed))
        n_val = max(1, int(round(n * fraction)))
        val_index, train_index = order[:n_val].sort().values, order[n_val:].sort().values
        if isinstance(train, tuple):
            return tuple(t[train_index] for t in train), tuple(t[val_index] for t in train)
        return Subset(train, train_index.tolist()), Subset(train, val_index.tolist())

    # ----------------------------------------------------------------- loaders
    def train_dataloader(self):
        return self._loader(self.datasets["train"], train=True)

    def val_dataloader(self):
        return self._loader(self.datasets["val"], train=False)

    def test_dataloader(self):
        return self._loader(self.datasets["test"], train=False)

    def predict_dataloader(self):
        return self._loader(self.datasets["predict"], train=False)

    def _loader(self, data, train: bool):
        hp = self.hparams
        shuffle, drop_last = (hp.shuffle, hp.drop_last) if train else (False, False)
        if hp.pipeline == "resident":
            return self._resident(data, shuffle, drop_last)
        if hp.pipeline == "stream":
            stream = data.configured(shuffle=shuffle, buffer_rows=hp.stream_buffer_rows, batch_size=hp.batch_size,
                                     drop_last=drop_last, **self._ranks())
            # The stream yields whole batches and shuffles itself, through its buffer.
            return StreamLoader(stream, batch_size=None, **self._worker_options())
        return WorkerLoader(data, batch_size=hp.batch_size, shuffle=shuffle, drop_last=drop_last, **self._worker_options())

    def _worker_options(self) -> dict:
        hp = self.hparams
        return {
            "num_workers": hp.num_workers,
            "persistent_workers": hp.persistent_workers,
            "pin_memory": self.pins_memory,
            "prefetch_factor": hp.prefetch_factor,
        }

    @property
    def pins_memory(self) -> bool:
        """pin_memory as it applies: only when batches go to a CUDA device."""
        return bool(self.hparams.pin_memory) and self._device().type == "cuda"

    def _resident(self, tensors, shuffle: bool, drop_last: bool) -> ResidentBatches:
        hp = self.hparams
        if hp.num_workers or hp.pin_memory:
            rank_zero_warn("data.pipeline=resident uses no DataLoader: num_workers and pin_memory have no effect.")
        pixels, labels = tensors  # moved to the device in setup
        return ResidentBatches(pixels, labels, hp.batch_size, shuffle, hp.seed, drop_last, **self._ranks())

    def _device(self) -> torch.device:
        """The training device: the strategy's (known before setup runs), else ``self.device``."""
        return self.trainer.strategy.root_device if self.trainer is not None else self.device

    def _ranks(self) -> dict[str, int]:
        if self.trainer is None:
            return {"rank": 0, "world_size": 1}
        return {"rank": self.trainer.global_rank, "world_size": self.trainer.world_size}

    def loader_settings(self) -> dict:
        """The options that describe this pipeline, for timing summaries and reports."""
        keys = ("dataset", "pipeline", "batch_size", "num_workers", "persistent_workers", "pin_memory",
                "prefetch_factor", "shuffle", "drop_last", "val_source")
        return {**{k: self.hparams[k] for k in keys}, "pin_memory_applied": self.pins_memory}


def _check_options(dataset, pipeline, batch_size, num_workers, persistent_workers, prefetch_factor, val_source,
                   stream_buffer_rows) -> None:
    """Reject option values that cannot work, naming the option and the fix."""
    names = [*DATASETS, "synthetic"]
    if dataset not in names:
        raise ConfigError(f"data.dataset: unknown dataset {dataset!r}; choose one of {', '.join(names)}.")
    if pipeline not in (*MAP_STYLE, "resident", "stream"):
        raise ConfigError(f"data.pipeline: unknown pipeline {pipeline!r}; choose one of v1, v2, resident, stream.")
    if batch_size < 1:
        raise ConfigError(f"data.batch_size must be at least 1 (got {batch_size}).")
    if num_workers < 0:
        raise ConfigError(f"data.num_workers cannot be negative (got {num_workers}); use 0 to load in the main process.")
    if persistent_workers and num_workers == 0:
        raise ConfigError("data.persistent_workers needs worker processes: set data.num_workers above 0 or persistent_workers false.")
    if prefetch_factor is not None and num_workers == 0:
        raise ConfigError("data.prefetch_factor needs worker processes: set data.num_workers above 0 or prefetch_factor null.")
    if val_source != "test" and not (isinstance(val_source, (int, float)) and 0 < float(val_source) < 1):
        raise ConfigError(f"data.val_source must be 'test' or a fraction between 0 and 1 (got {val_source!r}).")
    if stream_buffer_rows < 1:
        raise ConfigError(f"data.stream_buffer_rows must be at least 1 (got {stream_buffer_rows}): it is how many rows "
                          "the stream pipeline holds for shuffling.")
    if val_source != "test" and pipeline == "stream":
        raise ConfigError("data.val_source: the stream pipeline never holds the training set, so it cannot split "
                          "a fraction off it; use val_source: test or another pipeline.")

