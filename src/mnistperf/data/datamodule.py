"""The LightningDataModule every stage config points at: the wiring between ingestion and pipelines.

``prepare_data`` calls :mod:`mnistperf.data.ingest` to make the Parquet splits if they are
missing; ``setup`` and the ``*_dataloader`` hooks hand them to the pipeline that the
``pipeline`` option names, looked up in :mod:`mnistperf.data.pipelines.registry`.

The ladder's stages differ only in this module's options: which dataset class (``pipeline``)
and how the DataLoader is set up. ``prepare_data`` converts the raw files once (rank 0 only);
``setup`` only loads and checks, in the main process, so bad files fail early and clearly. The options are taken
one by one, as LightningCLI reads them, and kept as one checked :class:`~mnistperf.data.options.LoaderOptions`, which
the pipeline gets.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import lightning as L
import pyarrow as pa
import torch
from lightning.pytorch.utilities import rank_zero_info

from mnistperf.data.ingest import prepare
from mnistperf.data.ingest.sources import DATASETS
from mnistperf.data.options import LoaderOptions, is_uri
from mnistperf.data.pipelines.base import EpochShuffle, Placement, pins_memory
from mnistperf.data.pipelines.registry import pipeline_for
from mnistperf.errors import PreparedFileError
from mnistperf.machine import usable_cpus


class MNISTDataModule(L.LightningDataModule):
    """MNIST-style Parquet data with the DataLoader options the ladder tunes.

    Args:
        dataset: which dataset to read: ``fashion_mnist``, ``mnist`` or ``synthetic`` (made by
            ``prepare``), or the name of a dataset of your own, read from ``<data_dir>/<name>/``.
        data_dir: folder holding ``<Folder>/{train,test}.parquet`` (for ``synthetic``, the shard
            folders ``Synthetic/{train,test}/``); for the litdata pipeline also a URI such as
            ``s3://bucket/data`` holding ``<Folder>/litdata/{train,test}/``.
        pipeline: the input pipeline, by its name in the registry
            (:mod:`mnistperf.data.pipelines.registry`); ``fit --help`` lists them.
        batch_size: samples per batch (per process under DDP).
        num_workers: DataLoader worker processes (v1, v2, stream, litdata).
        persistent_workers: keep workers alive between epochs (needs num_workers > 0).
        pin_memory: page-locked host batches for faster, asynchronous copies to the GPU (applies only
            when batches go to a CUDA device; elsewhere pinning would cost time for nothing).
        prefetch_factor: batches each worker loads ahead (needs num_workers > 0; default 2).
        shuffle: reshuffle the training set every epoch.
        drop_last: drop the last, partial training batch.
        val_source: ``test`` evaluates on the test split, as the published experiment does; a fraction
            such as ``0.1`` splits that share off the training set instead (seeded).
        seed: seed for the validation split and the resident/stream shuffles.
        source_root: folder with the raw ``mnist/`` and ``fashion-mnist/`` .gz files, for prepare_data.
        stream_buffer_rows: rows held in the stream pipeline's shuffle buffer.
        batches_per_step: training batches handed to the model per Lightning step (resident pipeline
            with ``model.cuda_graph`` only): k optimizer steps per Lightning step, so that Lightning's
            per-step cost is paid once per k. The batches, their order and the optimizer steps are
            those of 1; the progress bar counts groups.
    """

    def __init__(
        self,
        dataset: str = "fashion_mnist",
        data_dir: str = "data",
        pipeline: str = "v2",
        batch_size: int = 64,
        num_workers: int = 0,
        persistent_workers: bool = False,
        pin_memory: bool = False,
        prefetch_factor: int | None = None,
        shuffle: bool = True,
        drop_last: bool = False,
        val_source: Literal["test"] | float = "test",
        seed: int = 42,
        source_root: str | None = None,
        stream_buffer_rows: int = 10_000,
        batches_per_step: int = 1,
    ):
        super().__init__()
        self.save_hyperparameters()
        self.options = LoaderOptions.of(self.hparams)
        self.pipeline = pipeline_for(self.options)
        self.pipeline.check()
        self.data_dir = data_dir.rstrip("/") if is_uri(data_dir) else Path(data_dir)
        self.datasets: dict[str, object] = {}
        # Where the resident pipeline puts the data when no Trainer is attached (the bench's plain-PyTorch
        # reference row).
        self.device = torch.device("cpu")
        self._workers_noted = False

    # ----------------------------------------------------------------- preparation
    def prepare_data(self) -> None:
        """Convert the raw files to Parquet if they are missing, then let the pipeline build what it reads.

        Lightning runs this on one process.
        """
        o = self.options
        if is_uri(self.data_dir):  # remote data is prepared where it was made, then uploaded
            return
        missing = [s for s in prepare.SPLITS if not prepare.split_path(self.data_dir, o.dataset, s).exists()]
        if missing and o.dataset in DATASETS:  # only the official datasets can be made here
            prepare.prepare_dataset(
                o.dataset, self.data_dir, source_root=o.source_root, source_option="--data.source_root"
            )
        for split in prepare.SPLITS:
            path = prepare.split_path(self.data_dir, o.dataset, split)
            if path.exists():
                with self._exact_fix():
                    self.pipeline.prepare(path)

    def setup(self, stage: str) -> None:
        """Load and check the splits this stage needs; nothing is converted or downloaded here."""
        o = self.options
        if self.pipeline.uses_workers and o.num_workers > usable_cpus() and not self._workers_noted:
            self._workers_noted = True  # one line of ours instead of torch's warning per loader
            rank_zero_info(
                f"mnistperf: data.num_workers {o.num_workers} on {usable_cpus()} usable CPUs: the workers "
                "share them (as the published stage does on a small machine); `mnistperf tune` measures "
                "the best count here."
            )
        elif not self.pipeline.uses_workers and (o.num_workers or o.pin_memory) and not self._workers_noted:
            self._workers_noted = True  # once, not per loader
            rank_zero_info(
                f"mnistperf: data.pipeline={o.pipeline} uses no DataLoader: num_workers and pin_memory have no effect."
            )
        if stage in ("fit", "validate"):
            if o.val_source == "test":
                if stage == "fit":
                    self.datasets["train"] = self._load("train", require_labels=True)
                self.datasets["val"] = self._load("test", require_labels=True)
            else:
                self.datasets["train"], self.datasets["val"] = self.pipeline.split_off(
                    self._load("train", require_labels=True), float(o.val_source)
                )
        elif stage == "test":
            self.datasets["test"] = self._load("test", require_labels=True)
        elif stage == "predict":
            self.datasets["predict"] = self._load("test", require_labels=False)
        # The Arrow tables are gone once converted, but pyarrow's allocator keeps their pages for
        # reuse: without this, every pipeline would carry about twice the decoded file for the whole run.
        pa.default_memory_pool().release_unused()

    def _load(self, split: str, require_labels: bool) -> Any:
        dataset = self.options.dataset
        path: Path | str
        if is_uri(self.data_dir):
            path = f"{self.data_dir}/{prepare.split_path('', dataset, split).as_posix()}"
        else:
            path = prepare.require_prepared(dataset, self.data_dir, split)
        with self._exact_fix():
            # A URI reaches only a pipeline that reads URIs (Pipeline.check rejects the others).
            return self.pipeline.load(path, require_labels, self._placement())  # type: ignore[arg-type]

    @contextmanager
    def _exact_fix(self) -> Iterator[None]:
        """A damaged or malformed prepared file names the command that re-creates this dataset in this folder."""
        o = self.options
        try:
            yield
        except PreparedFileError as exc:
            if is_uri(self.data_dir):
                raise
            fix = prepare.recreate_command(o.dataset, self.data_dir, o.source_root)
            raise exc.with_fix(fix, own=not prepare.is_builtin(o.dataset)) from exc

    # ----------------------------------------------------------------- loaders
    def train_dataloader(self) -> Iterable[dict[str, torch.Tensor]]:
        """The pipeline's training loader over the training split, its shuffle at the fit's epoch.

        Lightning makes the loader's iterator before it hands the sampler its epoch, and a loader with workers draws
        the order then: a fit resumed at epoch N would train it in epoch 0's order. The epoch is the one Lightning
        hands the sampler (its epochs processed), which a checkpoint at an epoch's end holds one past current_epoch.
        """
        loader = self.pipeline.loader(self.datasets["train"], True, self._placement())
        sampler = getattr(loader, "sampler", None)
        if isinstance(sampler, EpochShuffle) and self.trainer is not None:
            progress: Any = self.trainer.fit_loop.epoch_progress.current  # (typed by its base, which counts less)
            sampler.set_epoch(progress.processed)
        return loader

    def val_dataloader(self) -> Iterable[dict[str, torch.Tensor]]:
        """The pipeline's evaluation loader over the validation split."""
        return self.pipeline.loader(self.datasets["val"], False, self._placement())

    def test_dataloader(self) -> Iterable[dict[str, torch.Tensor]]:
        """The pipeline's evaluation loader over the test split."""
        return self.pipeline.loader(self.datasets["test"], False, self._placement())

    def predict_dataloader(self) -> Iterable[dict[str, torch.Tensor]]:
        """The pipeline's evaluation loader over the test split, labels not required."""
        return self.pipeline.loader(self.datasets["predict"], False, self._placement())

    def on_after_batch_transfer(self, batch, dataloader_idx: int):
        """Lightning calls this with each batch on the device: the pipeline finishes it there."""
        return self.pipeline.on_device(batch)

    def to_device(self, batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
        """A batch copied to the device and finished there, as Lightning hands it to the step (for plain loops)."""
        return self.on_after_batch_transfer({k: v.to(device, non_blocking=True) for k, v in batch.items()}, 0)

    def _device(self) -> torch.device:
        """The training device: the strategy's (known before setup runs), else ``self.device``."""
        return self.trainer.strategy.root_device if self.trainer is not None else self.device

    def _placement(self) -> Placement:
        if self.trainer is None:
            return Placement(self.device)
        return Placement(self._device(), self.trainer.global_rank, self.trainer.world_size)

    @property
    def pins_memory(self) -> bool:
        """pin_memory as it applies: only when batches go to a CUDA device."""
        return self.pipeline.uses_workers and pins_memory(self.options.pin_memory, self._device())

    def loader_settings(self) -> dict:
        """The options that describe this pipeline, for timing summaries and reports."""
        return {**self.options.described(), "pin_memory_applied": self.pins_memory}
