"""The stream pipeline: every row exactly once across ranks and workers, bounded seeded shuffling."""

from __future__ import annotations

import collections

import pytest
import torch
from conftest import random_split, write_parquet

from mnistperf.data import schema
from mnistperf.data.pipelines.stream import ParquetStream, StreamLoader, _shuffled
from mnistperf.lightning_cli.predictions import PredictionsFile


@pytest.fixture(params=["one file", "shards"])
def numbered(tmp_path, request):
    """203 rows in row groups of 25 whose labels are 0..9 and whose pixel0 is the row number % 256:
    one file, or a folder of three shards (70, 70 and 63 rows) whose edges fall inside batches."""
    images, _ = random_split(203, seed=0)
    images[:, 0, 0] = torch.arange(203).numpy() % 256
    table = schema.build_table(images, torch.arange(203).numpy() % 10)
    if request.param == "one file":
        return write_parquet(tmp_path / "rows.parquet", table, row_group_size=25), images
    for index, start in enumerate(range(0, 203, 70)):
        write_parquet(tmp_path / "rows" / f"part-{index}.parquet", table.slice(start, 70), row_group_size=25)
    return tmp_path / "rows", images


def test_shards_are_read_in_name_order_as_one_sequence(numbered):
    path, images = numbered
    unshuffled = ParquetStream(path, require_labels=True).configured(batch_size=64)
    rows, _ = rows_seen(unshuffled, num_workers=0)
    assert rows == [bytes(row.reshape(-1).tolist()) for row in images]


def rows_seen(stream: ParquetStream, num_workers: int) -> tuple[list[bytes], list[int]]:
    loader = StreamLoader(stream, batch_size=None, num_workers=num_workers)
    rows, sizes = [], []
    for batch in loader:
        pixels = (batch["image"] * 255).round().to(torch.uint8).reshape(len(batch["label"]), -1)
        rows += [bytes(p.tolist()) for p in pixels]
        sizes.append(len(batch["label"]))
    return rows, sizes


@pytest.mark.parametrize("world_size,num_workers,shuffle", [(1, 0, False), (1, 3, True), (2, 2, True), (3, 0, True)])
def test_every_row_is_read_once_across_ranks_and_workers(numbered, world_size, num_workers, shuffle):
    path, images = numbered
    expected = collections.Counter(bytes(row.reshape(-1).tolist()) for row in images)
    seen, batch_counts = collections.Counter(), []
    for rank in range(world_size):
        stream = ParquetStream(path, require_labels=True, seed=1).configured(
            shuffle=shuffle, buffer_rows=30, batch_size=16, rank=rank, world_size=world_size
        )
        rows, sizes = rows_seen(stream, num_workers)
        assert len(sizes) == len(stream)  # the length Lightning is told is the length it gets
        assert all(size == 16 for size in sizes[:-1])  # only a rank's last batch may be partial
        seen.update(rows)
        batch_counts.append(len(sizes))
    assert len(set(batch_counts)) == 1  # every rank runs the same number of steps
    padding = sum(seen.values()) - 203
    assert padding == (-203) % world_size  # like DistributedSampler: pad to a multiple of world_size
    assert set(seen) == set(expected)
    if padding == 0:
        assert seen == expected


@pytest.mark.parametrize("world_size,num_workers", [(1, 0), (1, 3), (2, 2)])
def test_rows_read_in_order_carry_their_index_in_the_split_and_predictions_are_written_by_it(
    numbered, world_size, num_workers, tmp_path
):
    """The workers' batches come in turns, so the order read is not the split's: predict writes each image's class
    by the index its batch carries (a rank's padding wraps to the first rows). Training's batches carry none."""
    path, images = numbered
    pixels = torch.as_tensor(images).reshape(len(images), -1)
    writer, predicted = PredictionsFile(), []
    for rank in range(world_size):
        stream = ParquetStream(path, require_labels=True).configured(
            batch_size=16, rank=rank, world_size=world_size, indexed=True
        )
        for batch in StreamLoader(stream, batch_size=None, num_workers=num_workers):
            read = (batch["image"] * 255).round().to(torch.uint8).reshape(len(batch["label"]), -1)
            assert torch.equal(read, pixels[batch["index"]]) and torch.equal(batch["label"], batch["index"] % 10)
            classes = batch["index"] % 7  # a class of its own for each row
            writer.write_on_batch_end(None, None, classes, None, batch, 0, 0)  # type: ignore[arg-type]
            predicted += zip(batch["index"].tolist(), classes.tolist(), strict=True)
    assert sorted(writer._rows) == sorted(predicted) and {index for index, _ in predicted} == set(range(203))
    shuffled = ParquetStream(path, require_labels=True).configured(batch_size=16, shuffle=True, buffer_rows=30)
    unindexed = ParquetStream(path, require_labels=True).configured(batch_size=16)  # training's, in order
    assert all(
        "index" not in batch for stream in (shuffled, unindexed) for batch in StreamLoader(stream, batch_size=None)
    )


def test_the_stream_pipelines_evaluation_batches_carry_their_indices_and_its_training_batches_none(workdir):
    from mnistperf.data.datamodule import MNISTDataModule

    data = MNISTDataModule(
        data_dir=str(workdir / "data"), pipeline="stream", batch_size=8, num_workers=0, shuffle=False
    )
    data.setup("fit")
    assert "index" not in next(iter(data.train_dataloader()))
    assert next(iter(data.val_dataloader()))["index"].tolist() == list(range(8))


def test_predictions_of_batches_without_indices_say_they_are_numbered_in_the_order_read(tmp_path, capsys):
    """A loader that gives no index (litdata's): the line says its numbers are the order read, not the split's."""
    from types import SimpleNamespace

    writer = PredictionsFile()
    trainer = SimpleNamespace(log_dir=str(tmp_path), default_root_dir=str(tmp_path), world_size=1, global_rank=0)
    trainer.is_global_zero = True
    writer.on_predict_start(trainer, None)  # type: ignore[arg-type]
    batch = {"image": torch.zeros(3, 1, 28, 28), "label": torch.zeros(3, dtype=torch.int64)}
    writer.write_on_batch_end(trainer, None, torch.tensor([4, 5, 6]), None, batch, 0, 0)  # type: ignore[arg-type]
    writer.on_predict_end(trainer, None)  # type: ignore[arg-type]
    assert (tmp_path / "predictions.csv").read_text() == "index,predicted\n0,4\n1,5\n2,6\n"
    assert "their index is the order read, as the loader gives none" in capsys.readouterr().out


def test_only_one_footer_is_held_at_a_time(numbered, monkeypatch):
    """Memory must not grow with the number of shards: each file's parsed footer is dropped before the next opens."""
    import weakref

    import pyarrow.parquet as pq

    alive, most = weakref.WeakSet(), []

    class TrackedFile(pq.ParquetFile):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            alive.add(self)
            most.append(len(alive))

    monkeypatch.setattr(pq, "ParquetFile", TrackedFile)
    stream = ParquetStream(numbered[0], require_labels=True).configured(shuffle=True, buffer_rows=30, batch_size=16)
    rows, _ = rows_seen(stream, num_workers=0)
    assert len(rows) == 203 and max(most) == 1
    assert len(most) == 2 * len(schema.parquet_files(numbered[0]))  # each file opened once at setup, once to read


def test_drop_last_drops_only_the_final_partial_batch(numbered):
    stream = ParquetStream(numbered[0], require_labels=True).configured(batch_size=16, drop_last=True)
    rows, sizes = rows_seen(stream, num_workers=2)
    assert sizes == [16] * (203 // 16) and len(stream) == 203 // 16


def test_shuffle_is_seeded_and_changes_every_epoch_even_with_fresh_workers(numbered):
    def epochs(seed):
        stream = ParquetStream(numbered[0], require_labels=True, seed=seed).configured(
            shuffle=True, buffer_rows=50, batch_size=64
        )
        loader = StreamLoader(stream, batch_size=None, num_workers=2, persistent_workers=False)
        return [[b["label"].tolist() for b in loader] for _ in range(2)]

    first = epochs(5)
    assert first == epochs(5)
    assert first[0] != first[1]
    unshuffled = ParquetStream(numbered[0], require_labels=True).configured(batch_size=64)
    assert first[0] != [b["label"].tolist() for b in StreamLoader(unshuffled, batch_size=None)]


def test_shuffle_buffer_fills_first_then_holds_a_fixed_number_of_rows():
    pieces = [(torch.full((10, 1), i, dtype=torch.uint8), torch.arange(i * 10, i * 10 + 10)) for i in range(20)]
    pulled, held = [0], []

    def counted():
        for piece in pieces:
            pulled[0] += len(piece[1])
            yield piece

    emitted = []
    for _, labels in _shuffled(counted(), buffer_rows=35, generator=torch.Generator().manual_seed(0)):
        held.append(pulled[0] - len(emitted))  # rows read but not yet emitted, before this output counts
        emitted += labels.tolist()
    assert sorted(emitted) == list(range(200))  # every row once
    assert held[0] >= 35 and max(held) <= 35 + 10  # the buffer fills first, then holds 35 (plus the piece arriving)
    assert emitted[:10] != list(range(10))
