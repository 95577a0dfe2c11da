"""litdata: Lightning's streaming engine over a chunked copy of each split.

litdata's StreamingDataset and StreamingDataLoader read data that need not fit in memory, from
a local folder or object storage (``s3://``, ``gs://``, ...), split it across nodes, ranks and
workers, shuffle it with a seed, and keep their position in a state dict that Lightning saves
in its checkpoints, so a run resumes mid-epoch with the samples it had not yet seen.

What it reads is a litdata copy of the split, written once by ``prepare_data`` beside the
Parquet data: ``<data_dir>/<Folder>/litdata/<split>/`` (chunk files and ``index.json``), one
litdata item per block of ``BLOCK_ROWS`` consecutive rows, holding their uint8 pixels and labels. litdata can also index Parquet
files and read them in place, but only through polars (one more dependency), decoding rows
one at a time out of 785 columns; the copy is read as raw bytes. The copy is written from
the Parquet file or shards after the same checks as every other pipeline, into a temporary
folder that is renamed into place, so an interrupted copy is never read.

With ``data_dir`` a URI, the copy is read from there: write it locally with
``python -m mnistperf prepare --dataset NAME --litdata`` and upload the ``litdata/`` folder.
litdata is an optional extra: ``pip install 'mnistperf[litdata]'``.

What this pipeline decides rather than leaving to litdata's defaults (0.2.76):

* **The topology comes from Lightning**, set on the dataset in :func:`tell_topology`, not
  guessed by litdata. litdata infers nodes as ``world_size // cuda.device_count()`` (two gloo
  processes on a one-GPU host become "two nodes"), and with more than one node its shuffle
  gives every node the whole of each chunk it touches from the second epoch on, so samples are
  seen twice. With one node declared, every rank of every node takes its share of one global,
  seeded assignment: every sample at most once per epoch, on any topology. The price: no node
  keeps a private set of chunks in its cache across epochs.
* **The same drop_last everywhere.** Under DDP training every rank must run the same number
  of steps; litdata gives each rank whole batches and the last one the remainder, so the
  remainder (fewer than world_size x batch_size samples, different ones each shuffled epoch)
  is left out. ``StreamingDataLoader(drop_last=...)`` overrides the dataset's own setting, so it
  gets the same value, or the ranks' batch counts differ and DDP waits forever.
* **On a GPU, batches travel as uint8** and become float images there
  (:meth:`LitdataPipeline.on_device`): a quarter of the bytes through the workers' shared memory
  and the copy to the device. On the CPU the workers finish them, off the training process.
* **A chunk is decoded once per worker** (``batch_decode="all"``) and its items permuted as a
  whole (``item_shuffle_window=0``). litdata's defaults decode 256-row windows aligned to the
  chunk, caching one, while its in-chunk shuffle works in 256-item blocks aligned to each
  worker's start: most workers then decode the same rows many times over.
* **Rows travel in blocks of 8.** litdata spends about 25 microseconds of Python on every item
  it reads (measured on the 2-core CPU: one worker reads 60,000 one-row items in 2.05 s, where
  v2 indexes them in 0.52 s), so one item holds 8 consecutive rows and a batch of 512 is 64
  items. What it costs in randomness: litdata shuffles items, so the 8 rows of a block are
  always in the same batch, in the same order, every epoch; batches are still drawn from the
  whole split in a new order each epoch, and which blocks meet in a batch changes. The blocks
  are the rows in the order of the Parquet data: data sorted by class or time should be
  shuffled once before ``prepare``. ``data.batch_size`` must be a multiple of 8 here.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any, Union

import numpy as np
import torch

from mnistperf.atomic import atomic_write_dir
from mnistperf.data import schema
from mnistperf.data.pipelines.base import Pipeline, Placement, is_uri, normalize
from mnistperf.errors import ConfigError, DataError

COPY_FOLDER = "litdata"
BATCH_DECODE = "all"  # decode a chunk's rows together, once per worker
ITEM_SHUFFLE_WINDOW = 0  # a full permutation of the items inside each chunk
CHUNK_BYTES = "8MB"  # about 10,000 samples: each worker holds a few chunks, not the split
BLOCK_ROWS = 8  # rows per litdata item (see the module's docstring)
LAYOUT_FILE = "mnistperf-layout.json"  # the copy's layout, so a copy in another layout is rewritten
INSTALL = "pip install 'mnistperf[litdata]' (or pip install litdata)"

Location = Union[Path, str]


def require_litdata():
    """The litdata module, or a one-line error saying how to install it."""
    try:
        import litdata
    except ImportError:
        raise ConfigError(f"data.pipeline litdata needs the litdata package, which is not installed: {INSTALL}.") from None
    return litdata


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
                emit(pixels[start:start + BLOCK_ROWS], labels[start:start + BLOCK_ROWS])
            held = (pixels[whole:], labels[whole:]) if whole < len(labels) else None
        if held is not None:
            emit(*held)  # the split's last, shorter block
        writer.done()
        # merge() waits for an index from every DDP rank, but prepare_data runs on one process only:
        # merge this process's index alone.
        writer._merge_no_wait()
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
    """Give the dataset Lightning's world size and rank, as one node (see the module's docstring)."""
    from litdata.utilities.env import _DistributedEnv

    dataset.distributed_env = _DistributedEnv(world_size=place.world_size, global_rank=place.rank, num_nodes=1)


def collate(items: list[dict[str, Any]], finish: bool = True) -> dict[str, torch.Tensor]:
    """Blocks of rows to a batch: int64 labels, and float32 images [N, 1, 28, 28] in 0..1, or with ``finish``
    false the uint8 pixels [N, 784] (a quarter of the bytes), which :meth:`LitdataPipeline.on_device` finishes."""
    pixels = torch.from_numpy(np.concatenate([item["pixels"] for item in items]).reshape(-1, schema.NUM_PIXELS))
    labels = torch.from_numpy(np.concatenate([np.atleast_1d(item["label"]) for item in items]).astype(np.int64))
    return {"image": normalize(pixels) if finish else pixels, "label": labels}


class LitdataPipeline(Pipeline):
    """litdata's StreamingDataset and StreamingDataLoader over the split's litdata copy."""

    can_split_off = False
    reads_uris = True
    tune_rank = 30

    def check(self) -> None:
        super().check()
        require_litdata()
        size = self.options.batch_size
        if size % BLOCK_ROWS:
            lower, upper = max(BLOCK_ROWS, size - size % BLOCK_ROWS), size - size % BLOCK_ROWS + BLOCK_ROWS
            raise ConfigError(f"data.batch_size {size}: the litdata pipeline reads rows in blocks of {BLOCK_ROWS}, so "
                              f"the batch size must be a multiple of {BLOCK_ROWS} (such as {lower} or {upper}).")

    def prepare(self, path: Path) -> None:
        prepare_copies([path])

    def load(self, path: Location, require_labels: bool, place: Placement):
        litdata = require_litdata()
        copy = copy_location(path)
        if not is_uri(str(copy)) and not (Path(copy) / "index.json").is_file():
            raise DataError(f"{copy} holds no litdata copy: run `python -m mnistperf fit` (its prepare_data writes "
                            f"it) or `python -m mnistperf prepare --litdata`.")
        try:
            dataset = litdata.StreamingDataset(str(copy), shuffle=False, seed=self.options.seed, drop_last=False,
                                               batch_decode=BATCH_DECODE, item_shuffle_window=ITEM_SHUFFLE_WINDOW)
        except (OSError, ValueError, AssertionError, json.JSONDecodeError) as exc:
            raise DataError(f"{copy}: litdata cannot read it ({exc}); write it again with "
                            "`python -m mnistperf prepare --litdata --force`.") from exc
        tell_topology(dataset, place)
        first = dataset[0]
        if np.ndim(first["label"]) != 1:  # a copy written one row per item, by an earlier version
            raise DataError(f"{copy} holds a litdata copy in another layout (one row per item); write it again with "
                            "`python -m mnistperf prepare --litdata --force` (and upload it again if it is remote).")
        if require_labels and int(first["label"][0]) == schema.NO_LABEL:
            raise DataError(f"{path} has no '{schema.LABEL_COLUMN}' column, which training, validation and testing "
                            "need; add the labels or use the file only with `predict`.")
        return dataset

    def on_device(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """uint8 pixels [N, 784] to float32 images [N, 1, 28, 28] in 0..1, on the training device."""
        if batch["image"].dtype != torch.uint8:
            return batch  # finished in the worker already (training on the CPU)
        return {**batch, "image": normalize(batch["image"])}

    def loader(self, data, train: bool, place: Placement):
        litdata = require_litdata()
        shuffle, drop_last = self.order(train)
        # Under DDP training every rank must run the same number of steps: the remainder is left
        # out (see the module's docstring). Evaluation has no per-step collective and keeps every sample.
        drop_last = drop_last or (train and place.world_size > 1)
        options = self.worker_options(place)
        if not options["num_workers"]:
            options.pop("persistent_workers")
            options.pop("prefetch_factor")
        # On a GPU, batches travel as uint8 and become images there; on the CPU the workers finish them,
        # since the training process would otherwise do that work itself, beside the step.
        on_gpu = place.device.type == "cuda"
        # StreamingDataLoader sets shuffle and drop_last on the dataset, which reads them when an epoch starts.
        return litdata.StreamingDataLoader(data, batch_size=self.options.batch_size // BLOCK_ROWS, shuffle=shuffle,
                                           drop_last=drop_last, collate_fn=partial(collate, finish=not on_gpu), **options)
