"""Batches streamed from Parquet record batches, for data that does not fit in memory.

Each worker reads its own rows record batch by record batch with pyarrow, through a bounded, seeded
shuffle buffer. A split is one file or a folder of shards read as one sequence of rows, in name order.
Ranks take contiguous, equal shares of ``ceil(N / world_size)`` rows (the last ranks' shares wrap to the
first rows, as with ``DistributedSampler``); each worker takes a contiguous block of batch-sized chunks,
so only a rank's last batch can be partial. Every page is read once at setup, one row group at a time, so
a damaged file fails before training; values are checked batch by batch as they are read.
Why shards: docs/stages.md#stream.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch
from torch.utils.data import IterableDataset, get_worker_info

from mnistperf.data import schema
from mnistperf.data.pipelines.base import Pipeline, Placement, normalize
from mnistperf.data.pipelines.workers import WorkerLoader

READ_ROWS = 4096  # rows per pyarrow record batch


class ParquetStream(IterableDataset):
    """An iterable of ``{"image", "label"}`` batches read from one Parquet file or a folder of shards."""

    def __init__(self, path: Path, require_labels: bool, seed: int = 0):
        self.files, self.layouts, counts = [], [], []
        for file, parquet, layout in schema.checked_files(path, require_labels, allow_float=False):
            schema.verify_pages(parquet, file)  # one row group at a time: damage fails here, not mid-epoch
            self.files.append(file)
            self.layouts.append(layout)
            counts.append(parquet.metadata.num_rows)
            del parquet  # one footer at a time: none is kept
        self.file_offsets = np.cumsum([0] + counts).tolist()  # first row of each file
        self.num_rows = self.file_offsets[-1]
        self.seed = seed
        self.shuffle, self.buffer_rows, self.batch_size, self.drop_last = False, 10_000, 1, False
        self.indexed = False  # whether batches read in order carry their rows' indices (evaluation's, not training's)
        self.rank, self.world_size = 0, 1
        # Shared with worker processes, so a new epoch reshuffles even with non-persistent workers.
        self.epoch = torch.full((), -1, dtype=torch.int64).share_memory_()

    def configured(self, **options) -> ParquetStream:
        """A copy with loader options set: shuffle, indexed, buffer_rows, batch_size, drop_last, rank, world_size."""
        stream = copy.copy(self)
        for name, value in options.items():
            if not hasattr(stream, name):
                raise TypeError(f"unknown stream option {name}")
            setattr(stream, name, value)
        return stream

    # ------------------------------------------------------------------ splitting
    @property
    def rows_per_rank(self) -> int:
        """Rows each rank reads in one epoch: ``ceil(N / world_size)``."""
        return math.ceil(self.num_rows / self.world_size)

    def __len__(self) -> int:
        """Batches this rank yields in one epoch."""
        if self.drop_last:
            return self.rows_per_rank // self.batch_size
        return math.ceil(self.rows_per_rank / self.batch_size)

    def worker_rows(self, worker: int, num_workers: int) -> tuple[int, int]:
        """The [start, stop) range of virtual row numbers one worker of this rank reads."""
        chunks = len(self)
        first, last = chunks * worker // num_workers, chunks * (worker + 1) // num_workers
        rank_start = self.rank * self.rows_per_rank
        rank_stop = rank_start + (self.rows_per_rank if not self.drop_last else chunks * self.batch_size)
        return min(rank_start + first * self.batch_size, rank_stop), min(rank_start + last * self.batch_size, rank_stop)

    # ------------------------------------------------------------------ reading
    def _read(self, start: int, stop: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """uint8 pixels and labels of virtual rows [start, stop); rows past the end wrap to the start."""
        while start < stop:
            begin, end = start % self.num_rows, min(stop - start, self.num_rows - start % self.num_rows)
            yield from self._read_rows(begin, begin + end)
            start += end

    def _read_rows(self, begin: int, end: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Rows [begin, end) of the whole split, file by file."""
        for index, file in enumerate(self.files):
            first, last = self.file_offsets[index], self.file_offsets[index + 1]
            if first < end and last > begin:
                yield from self._read_file(file, self.layouts[index], max(begin - first, 0), min(end, last) - first)

    def _read_file(
        self, file: Path, layout: schema.Layout, begin: int, end: int
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Rows [begin, end) of one file, one row group at a time."""
        import pyarrow.parquet as pq

        parquet = pq.ParquetFile(file, page_checksum_verification=True)
        meta = parquet.metadata
        offsets = np.cumsum([0] + [meta.row_group(g).num_rows for g in range(meta.num_row_groups)])
        groups = [g for g in range(meta.num_row_groups) if offsets[g] < end and offsets[g + 1] > begin]
        for group in groups:
            # One row group per call: asked for many at once, pyarrow reads ahead and memory grows with the file.
            position = int(offsets[group])
            columns = [c for c in (layout.label,) if c] + list(layout.pixels)
            for record_batch in _batches(parquet, file, group, columns):
                lo, hi = max(begin - position, 0), min(end - position, record_batch.num_rows)
                position += record_batch.num_rows
                if lo < hi:
                    piece = layout.canonical(record_batch.slice(lo, hi - lo))
                    schema.check_values(piece, file, layout.told())
                    yield schema.to_tensors(piece)

    # ------------------------------------------------------------------ shuffling and batching
    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        info = get_worker_info()
        worker, num_workers = (info.id, info.num_workers) if info is not None else (0, 1)
        if info is None:  # in the main process nobody else advances the epoch
            self.epoch += 1
        start, stop = self.worker_rows(worker, num_workers)
        read = self._read(start, stop)
        pieces: Iterable[tuple[torch.Tensor, ...]]
        if self.shuffle:
            epoch = int(self.epoch)
            generator = torch.Generator().manual_seed(hash((self.seed, epoch, self.rank, worker)) % 2**63)
            pieces = _shuffled(read, self.buffer_rows, generator)
        elif self.indexed:  # in order: each row's index in the split goes with it, as predictions are written by it
            pieces = _indexed(read, start, self.num_rows)
        else:
            pieces = read
        yield from _batched(pieces, self.batch_size)


def _batches(parquet, file: Path, group: int, columns: list[str]) -> Iterator[pa.RecordBatch]:
    """One row group's record batches; a file damaged since setup raises an error naming it."""
    try:
        yield from parquet.iter_batches(batch_size=READ_ROWS, row_groups=[group], columns=columns)
    except (pa.ArrowException, OSError) as exc:
        raise schema.damaged(file, exc) from exc


def _shuffled(
    pieces: Iterable[tuple[torch.Tensor, torch.Tensor]], buffer_rows: int, generator: torch.Generator
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Shuffle a stream of (pixels, labels) through a buffer of buffer_rows rows, allocated once.

    The buffer fills first; after that every incoming row takes the slot of a randomly chosen
    buffered row, which is emitted. Each row is copied once in and once out, and the buffer is
    never reallocated: a buffer that grew and shrank with every piece would leave the C heap
    fragmented and each worker's memory creeping upwards epoch after epoch.
    """
    buffer_pixels: torch.Tensor | None = None
    buffer_labels: torch.Tensor | None = None
    filled = 0
    for pixels, labels in pieces:
        if buffer_pixels is None or buffer_labels is None:
            buffer_pixels = pixels.new_empty((buffer_rows, *pixels.shape[1:]))
            buffer_labels = labels.new_empty((buffer_rows,))
        start = min(buffer_rows - filled, len(labels))  # rows that go to still-empty slots
        buffer_pixels[filled : filled + start], buffer_labels[filled : filled + start] = pixels[:start], labels[:start]
        filled += start
        while start < len(labels):  # the buffer is full: swap incoming rows for random buffered ones
            count = min(len(labels) - start, buffer_rows)
            slots = torch.randperm(buffer_rows, generator=generator)[:count]
            yield buffer_pixels[slots], buffer_labels[slots]
            buffer_pixels[slots], buffer_labels[slots] = pixels[start : start + count], labels[start : start + count]
            start += count
    if filled:  # the end of the stream: empty the buffer in random order
        assert buffer_pixels is not None and buffer_labels is not None  # allocated with the first piece
        order = torch.randperm(filled, generator=generator)
        for first in range(0, filled, READ_ROWS):
            slots = order[first : first + READ_ROWS]
            yield buffer_pixels[slots], buffer_labels[slots]


def _indexed(
    pieces: Iterable[tuple[torch.Tensor, torch.Tensor]], start: int, rows: int
) -> Iterator[tuple[torch.Tensor, ...]]:
    """Pieces read in order from virtual row ``start`` on, each with its rows' indices in a split of ``rows``."""
    for pixels, labels in pieces:
        yield pixels, labels, torch.arange(start, start + len(labels)) % rows
        start += len(labels)


def _batched(pieces: Iterable[tuple[torch.Tensor, ...]], batch_size: int) -> Iterator[dict[str, torch.Tensor]]:
    """Regroup pieces of any size, (pixels, labels[, indices]), into batches; the final one may be partial."""
    held: list[tuple[torch.Tensor, ...]] = []
    count = 0
    for piece in pieces:
        held.append(piece)
        count += len(piece[1])
        if count < batch_size:
            continue
        joined = [torch.cat(column) for column in zip(*held, strict=True)]
        full = count - count % batch_size
        for i in range(0, full, batch_size):
            yield _batch([t[i : i + batch_size] for t in joined])
        held, count = [tuple(t[full:] for t in joined)], count - full
    if count:
        yield _batch([torch.cat(column) for column in zip(*held, strict=True)])


def _batch(tensors: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """A batch of the stream: its images normalized, its labels, and where read in order its rows' indices."""
    return dict(zip(("image", "label", "index"), [normalize(tensors[0]), *tensors[1:]], strict=False))


class StreamLoader(WorkerLoader):
    """A DataLoader over a ParquetStream that advances the stream's shared epoch before every pass."""

    def __iter__(self):
        if self.num_workers > 0:
            self.dataset.epoch += 1
        return super().__iter__()


class StreamPipeline(Pipeline):
    """Record batches read from Parquet through a bounded, seeded shuffle buffer, by DataLoader workers."""

    can_split_off = False
    tune_rank = 40

    def load(self, path: Path, require_labels: bool, place: Placement) -> ParquetStream:
        """A stream over the split's files; nothing is read until a loader iterates it."""
        return ParquetStream(path, require_labels=require_labels, seed=self.options.seed)

    def loader(self, data: ParquetStream, train: bool, place: Placement) -> StreamLoader:
        """DataLoader workers streaming this rank's batches, through the shuffle buffer where the loader shuffles."""
        shuffle, drop_last = self.order(train)
        stream = data.configured(
            shuffle=shuffle,
            indexed=not train,  # (a training batch holds samples alone: an index would be fingerprinted with them)
            buffer_rows=self.options.stream_buffer_rows,
            batch_size=self.options.batch_size,
            drop_last=drop_last,
            rank=place.rank,
            world_size=place.world_size,
        )
        # The stream yields whole batches and shuffles itself, through its buffer.
        return StreamLoader(stream, batch_size=None, **self.worker_options(place))
