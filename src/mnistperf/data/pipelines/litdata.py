"""litdata: Lightning's streaming engine over a chunked copy of each split.

Reads ``<data_dir>/<Folder>/litdata/<split>/`` (a local folder or a URI such as ``s3://``), which
``prepare_data`` writes once from the checked Parquet data, ``BLOCK_ROWS`` consecutive rows per litdata
item, into a temporary folder renamed into place. The topology comes from Lightning
(:func:`tell_topology`), dataset and loader share one ``drop_last``, each chunk is decoded once per
worker, ``data.batch_size`` must be a multiple of ``BLOCK_ROWS``, and on a GPU batches travel as uint8
(:meth:`LitdataPipeline.on_device`). Why each: docs/stages.md#litdata.
"""

from __future__ import annotations

import json
import shlex
from functools import partial
from pathlib import Path
from typing import Any, overload

import numpy as np
import torch

from mnistperf.atomic import atomic_write_dir
from mnistperf.data import schema
from mnistperf.data.ingest.prepare import dataset_folder, recreate_command
from mnistperf.data.options import is_uri
from mnistperf.data.pipelines.base import Pipeline, Placement, normalize
from mnistperf.errors import ConfigError, DataError
from mnistperf.install_check import litdata_install
from mnistperf.upstream import distributed_env, merge_index_alone

COPY_FOLDER = "litdata"
BATCH_DECODE = "all"  # decode a chunk's rows together, once per worker
ITEM_SHUFFLE_WINDOW = 0  # a full permutation of the items inside each chunk
CHUNK_BYTES = "8MB"  # about 10,000 samples: each worker holds a few chunks, not the split
BLOCK_ROWS = 8  # rows per litdata item
LAYOUT_FILE = "mnistperf-layout.json"  # the copy's layout, so a copy in another layout is rewritten

Location = Path | str


def require_litdata(needed_by: str = "data.pipeline litdata"):
    """The litdata module, or a one-line error naming the option that ``needed_by`` it and how to install it."""
    try:
        import litdata
    except ImportError:
        raise ConfigError(
            f"{needed_by} needs the litdata package, which is not installed: {litdata_install()}."
        ) from None
    return litdata


@overload
def copy_location(split: Path) -> Path: ...


@overload
def copy_location(split: str) -> str: ...


def copy_location(split: Location) -> Location:
    """Where the litdata copy of a split lives: the folder ``litdata/<split>`` beside the Parquet split."""
    if isinstance(split, str):  # a URI: <root>/<Folder>/<split>.parquet or <root>/<Folder>/<split>
        root, _, name = split.rstrip("/").rpartition("/")
        return f"{root}/{COPY_FOLDER}/{name.removesuffix('.parquet')}"
    return split.parent / COPY_FOLDER / split.name.removesuffix(".parquet")


def write_copy(split: Path, target: Path) -> int:
    """Write the litdata copy of a checked Parquet split (file or shards) into target; return its rows."""
    from litdata.streaming.writer import BinaryWriter

    rows = 0

    def write(folder: Path) -> None:
        nonlocal rows
        writer = BinaryWriter(str(folder), chunk_bytes=CHUNK_BYTES)
        items = 0
        held = None  # (pixels, labels) of the rows that did not fill a block yet

        def emit(pixels: np.ndarray, labels: np.ndarray) -> None:
            nonlocal items
            # Flat arrays: litdata stores a 1-D array's bytes as they are and rebuilds it without a header.
            writer[items] = {"pixels": np.ascontiguousarray(pixels).reshape(-1), "label": labels.astype(np.int64)}
            items += 1

        for _, table in schema.checked_tables(split, require_labels=False):
            rows += table.num_rows
            pixels, labels = (t.numpy() for t in schema.to_tensors(table))
            if held is not None:  # rows left over from the previous file or row group come first
                pixels, labels = np.concatenate([held[0], pixels]), np.concatenate([held[1], labels])
            whole = len(labels) - len(labels) % BLOCK_ROWS
            for start in range(0, whole, BLOCK_ROWS):
                emit(pixels[start : start + BLOCK_ROWS], labels[start : start + BLOCK_ROWS])
            held = (pixels[whole:], labels[whole:]) if whole < len(labels) else None
        if held is not None:
            emit(*held)  # the split's last, shorter block
        writer.done()
        # merge() waits for an index from every DDP rank, but prepare_data runs on one process only:
        # merge this process's index alone.
        merge_index_alone(writer)
        (folder / LAYOUT_FILE).write_text(json.dumps({"rows_per_item": BLOCK_ROWS}))

    atomic_write_dir(target, write)
    return rows


def is_current(split: Path, copy: Path) -> bool:
    """Whether the copy exists, is complete, and is no older than the Parquet data it was made from."""
    index = copy / "index.json"
    if not index.is_file() or not _has_block_layout(copy):
        return False
    sources = schema.parquet_files(split) if split.exists() else []
    return all(index.stat().st_mtime >= f.stat().st_mtime for f in sources)


def prepare_copies(splits: list[Path], force: bool = False) -> None:
    """Write the litdata copy of every split that lacks a current one (all of them with force)."""
    require_litdata()
    for split in splits:
        copy = copy_location(split)
        if force or not is_current(split, copy):  # a missing split fails in write_copy, naming it
            rows = write_copy(split, copy)
            print(f"mnistperf: wrote the litdata copy of {split} ({rows:,} samples) to {copy}", flush=True)


def _has_block_layout(copy: Path) -> bool:
    try:
        return json.loads((copy / LAYOUT_FILE).read_text()).get("rows_per_item") == BLOCK_ROWS
    except (OSError, ValueError):
        return False


def tell_topology(dataset, place: Placement) -> None:
    """Give the dataset Lightning's world size and rank, as one node."""
    dataset.distributed_env = distributed_env(place.world_size, place.rank)


def collate(items: list[dict[str, Any]], finish: bool = True) -> dict[str, torch.Tensor]:
    """Blocks of rows to a batch: int64 labels, and float32 images [N, 1, 28, 28] in 0..1.

    With ``finish`` false the images stay uint8 pixels [N, 784] (a quarter of the bytes), which
    :meth:`LitdataPipeline.on_device` finishes.
    """
    pixels = torch.from_numpy(np.concatenate([item["pixels"] for item in items]).reshape(-1, schema.NUM_PIXELS))
    labels = torch.from_numpy(np.concatenate([np.atleast_1d(item["label"]) for item in items]).astype(np.int64))
    return {"image": normalize(pixels) if finish else pixels, "label": labels}


class LitdataPipeline(Pipeline):
    """litdata's StreamingDataset and StreamingDataLoader over the split's litdata copy."""

    can_split_off = False
    reads_uris = True
    tune_rank = 30

    def check(self) -> None:
        """Also reject a missing litdata package and a batch size that is not a whole number of blocks."""
        super().check()
        require_litdata()
        size = self.options.batch_size
        if size % BLOCK_ROWS:
            lower, upper = max(BLOCK_ROWS, size - size % BLOCK_ROWS), size - size % BLOCK_ROWS + BLOCK_ROWS
            raise ConfigError(
                f"data.batch_size {size}: the litdata pipeline reads rows in blocks of {BLOCK_ROWS}, so "
                f"the batch size must be a multiple of {BLOCK_ROWS} (such as {lower} or {upper})."
            )

    def prepare(self, path: Path) -> None:
        """Write the split's litdata copy where it lacks a current one."""
        prepare_copies([path])

    def write_again(self, damaged: Location | None = None) -> str:
        """The command, in backquotes, that writes this run's litdata copies where they are missing or stale.

        The Parquet files that are ready are kept. A ``damaged`` local copy is removed first (it may look
        current); a remote one is written under the local ``data`` folder, and the sentence says to upload it.
        """
        o = self.options
        remote = is_uri(str(o.data_dir))
        data_dir = "data" if remote else o.data_dir
        command = f"{recreate_command(o.dataset, data_dir, o.source_root, force=False)} --litdata"
        if remote:
            folder = dataset_folder(o.dataset)
            return f"`{command}`, then upload data/{folder} to {o.data_dir}/{folder} again"
        return f"`rm -r {shlex.quote(str(damaged))} && {command}`" if damaged is not None else f"`{command}`"

    def load(self, path: Location, require_labels: bool, place: Placement) -> Any:
        """The StreamingDataset over the split's litdata copy (local or remote), checked by its first block."""
        litdata = require_litdata()
        copy = copy_location(path)
        if not is_uri(str(copy)) and not (Path(copy) / "index.json").is_file():
            raise DataError(
                f"{copy} holds no litdata copy: run `python -m mnistperf fit` (its prepare_data writes "
                f"it) or {self.write_again()}."
            )
        try:
            dataset = litdata.StreamingDataset(
                str(copy),
                shuffle=False,
                seed=self.options.seed,
                drop_last=False,
                batch_decode=BATCH_DECODE,
                item_shuffle_window=ITEM_SHUFFLE_WINDOW,
            )
        except (OSError, ValueError, AssertionError, json.JSONDecodeError) as exc:
            raise DataError(
                f"{copy}: litdata cannot read it ({exc}); write it again with {self.write_again(copy)}."
            ) from exc
        tell_topology(dataset, place)
        first = dataset[0]
        if np.ndim(first["label"]) != 1:  # a copy written one row per item, by an earlier version
            raise DataError(
                f"{copy} holds a litdata copy in another layout (one row per item); write it again with "
                f"{self.write_again()}."
            )
        if require_labels and int(first["label"][0]) == schema.NO_LABEL:
            raise DataError(
                f"{path} has no '{schema.LABEL_COLUMN}' column, which training, validation and testing "
                "need; add the labels or use the file only with `predict`."
            )
        return dataset

    def on_device(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """uint8 pixels [N, 784] to float32 images [N, 1, 28, 28] in 0..1, on the training device."""
        if batch["image"].dtype != torch.uint8:
            return batch  # finished in the worker already (training on the CPU)
        return {**batch, "image": normalize(batch["image"])}

    def loader(self, data: Any, train: bool, place: Placement) -> Any:
        """A StreamingDataLoader handing out batches of ``batch_size`` rows (``batch_size / BLOCK_ROWS`` blocks)."""
        litdata = require_litdata()
        shuffle, drop_last = self.order(train)
        # Under DDP training every rank must run the same number of steps: the remainder is left
        # out. Evaluation has no per-step collective and keeps every sample.
        drop_last = drop_last or (train and place.world_size > 1)
        options = self.worker_options(place)
        if not options["num_workers"]:
            options.pop("persistent_workers")
            options.pop("prefetch_factor")
        # On a GPU, batches travel as uint8 and become images there; on the CPU the workers finish them,
        # since the training process would otherwise do that work itself, beside the step.
        on_gpu = place.device.type == "cuda"
        # StreamingDataLoader sets shuffle and drop_last on the dataset, which reads them when an epoch starts.
        return litdata.StreamingDataLoader(
            data,
            batch_size=self.options.batch_size // BLOCK_ROWS,
            shuffle=shuffle,
            drop_last=drop_last,
            collate_fn=partial(collate, finish=not on_gpu),
            **options,
        )
