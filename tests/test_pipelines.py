"""v1, v2 and resident pipelines: identical items, the same samples per epoch, seeded splits."""

from __future__ import annotations

import collections
import dataclasses
import inspect

import pyarrow as pa
import pytest
import torch
from conftest import TEST_ROWS, TRAIN_ROWS, random_split, write_parquet

from mnistperf.data import schema
from mnistperf.data.datamodule import MNISTDataModule
from mnistperf.data.options import LoaderOptions
from mnistperf.data.pipelines.resident import ResidentBatches
from mnistperf.data.pipelines.v1 import PandasRowDataset
from mnistperf.data.pipelines.v2 import TensorDataset
from mnistperf.model.step import step_batches


def items_equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and torch.equal(a[k], b[k]) for k in a
    )


@pytest.mark.parametrize("with_labels", [True, False])
def test_v1_and_v2_items_are_identical_bit_for_bit(with_labels):
    images, labels = random_split(50, seed=3)
    table = schema.build_table(images, labels if with_labels else None)
    v1, v2 = PandasRowDataset(table), TensorDataset(table)
    assert len(v1) == len(v2) == 50
    for index in range(50):
        assert items_equal(v1[index], v2[index])
    item = v2[7]
    assert item["image"].shape == (1, 28, 28) and item["image"].dtype == torch.float32
    assert torch.equal(item["image"], torch.from_numpy(images[7]).float().unsqueeze(0) / 255)
    assert item["label"].dtype == torch.int64
    assert item["label"].item() == (labels[7] if with_labels else -1)


def datamodule(data_dir, **options) -> MNISTDataModule:
    return MNISTDataModule(data_dir=str(data_dir), **options)


def epoch_labels_and_sizes(loader) -> tuple[list[int], list[int]]:
    seen, sizes = [], []
    for batch in loader:
        seen += batch["label"].tolist()
        sizes.append(len(batch["label"]))
    return seen, sizes


def test_resident_gives_the_same_samples_and_batches_as_v2(tiny_data):
    loaders = {}
    for pipeline in ("v2", "resident"):
        dm = datamodule(tiny_data, pipeline=pipeline, batch_size=32)
        dm.setup("fit")
        loaders[pipeline] = dm.train_dataloader()
    v2_labels, v2_sizes = epoch_labels_and_sizes(loaders["v2"])
    res_labels, res_sizes = epoch_labels_and_sizes(loaders["resident"])
    assert res_sizes == v2_sizes == [32, 32, 32]
    assert collections.Counter(res_labels) == collections.Counter(v2_labels)
    assert len(loaders["resident"]) == len(loaders["v2"])


def test_resident_keeps_the_last_partial_batch_like_a_dataloader(tiny_data):
    for drop_last, expected in ((False, [40, 40, 16]), (True, [40, 40])):
        for pipeline in ("v2", "resident"):
            dm = datamodule(tiny_data, pipeline=pipeline, batch_size=40, drop_last=drop_last)
            dm.setup("fit")
            loader = dm.train_dataloader()
            assert len(loader) == len(expected)
            assert epoch_labels_and_sizes(loader)[1] == expected, (pipeline, drop_last)


def test_resident_batches_are_normalized_like_v2():
    images, labels = random_split(20, seed=4)
    table = schema.build_table(images, labels)
    v2 = TensorDataset(table)
    pixels, label_tensor = schema.to_tensors(table)
    batch = next(iter(ResidentBatches(pixels, label_tensor, batch_size=20, shuffle=False, seed=0)))
    assert torch.equal(batch["image"], v2.images) and torch.equal(batch["label"], v2.labels)


@pytest.mark.parametrize("rows,drop_last", [(100, False), (100, True), (96, False)])
def test_grouped_resident_batches_are_the_same_batches_stacked(rows, drop_last):
    """k = 3 at batch 8: groups of three full batches, the full ones left over, then the partial one alone;
    the same samples in the same order as k = 1, so the optimizer steps are the same."""
    pixels = torch.randint(0, 256, (rows, 784), dtype=torch.uint8)
    labels = torch.arange(rows)

    def epoch(k):
        return list(ResidentBatches(pixels, labels, 8, shuffle=True, seed=5, drop_last=drop_last, batches_per_step=k))

    single, grouped = epoch(1), epoch(3)
    full, rest = divmod(rows, 8)
    shapes = [tuple(g["label"].shape) for g in grouped]
    expected = (
        [(3, 8)] * (full // 3) + ([(full % 3, 8)] if full % 3 else []) + ([(1, rest)] if rest and not drop_last else [])
    )
    assert shapes == expected
    assert len(ResidentBatches(pixels, labels, 8, True, 5, drop_last, batches_per_step=3)) == len(expected)
    unstacked = [b for g in grouped for b in step_batches(g)]
    assert len(unstacked) == len(single)
    for mine, theirs in zip(unstacked, single, strict=True):
        assert items_equal(mine, theirs)
        assert mine["image"].shape[1:] == (1, 28, 28)


def test_only_the_training_loader_groups_batches(tiny_data):
    dm = datamodule(tiny_data, pipeline="resident", batch_size=16, batches_per_step=4)
    dm.setup("fit")
    assert [tuple(b["label"].shape) for b in dm.train_dataloader()] == [(4, 16), (2, 16)]  # 96 rows
    assert [tuple(b["label"].shape) for b in dm.val_dataloader()] == [(16,), (16,), (8,)]  # 40 rows
    assert dm.loader_settings()["batches_per_step"] == 4


def test_resident_shuffle_is_seeded_and_changes_every_epoch():
    pixels, labels = torch.zeros(100, 784, dtype=torch.uint8), torch.arange(100)

    def orders(seed):
        loader = ResidentBatches(pixels, labels, batch_size=100, shuffle=True, seed=seed)
        return [next(iter(loader))["label"].tolist() for _ in range(2)]

    first, again = orders(42), orders(42)
    assert first == again
    assert first[0] != first[1]
    assert sorted(first[0]) == list(range(100))


@pytest.mark.parametrize("rows,world_size", [(100, 2), (101, 2), (96, 3)])
def test_resident_ranks_get_disjoint_shares_like_distributed_sampler(rows, world_size):
    pixels, labels = torch.zeros(rows, 784, dtype=torch.uint8), torch.arange(rows)
    shares = []
    for rank in range(world_size):
        loader = ResidentBatches(pixels, labels, 8, shuffle=True, seed=1, rank=rank, world_size=world_size)
        shares.append(epoch_labels_and_sizes(loader)[0])
        sampler = torch.utils.data.DistributedSampler(range(rows), world_size, rank, shuffle=False)
        assert len(shares[-1]) == len(sampler)
    everything = sum(shares, [])
    assert set(everything) == set(range(rows))
    padding = len(everything) - rows  # DistributedSampler pads to a multiple of world_size
    assert padding == (-rows) % world_size
    if padding == 0:
        assert sorted(everything) == list(range(rows))


def test_val_source_fraction_is_seeded_and_disjoint(tiny_data):
    def split(seed):
        dm = datamodule(tiny_data, pipeline="v2", val_source=0.25, seed=seed)
        dm.setup("fit")
        return dm.datasets["train"].indices, dm.datasets["val"].indices

    train, val = split(42)
    assert len(val) == TRAIN_ROWS // 4 and len(train) == TRAIN_ROWS - TRAIN_ROWS // 4
    assert not set(train) & set(val)
    assert split(42) == (train, val)
    assert split(7)[1] != val


def test_val_source_fraction_on_resident_uses_the_same_split(tiny_data):
    dms = {}
    for pipeline in ("v2", "resident"):
        dms[pipeline] = datamodule(tiny_data, pipeline=pipeline, val_source=0.25)
        dms[pipeline].setup("fit")
    v2_val = sorted(dms["v2"].datasets["val"][i]["label"].item() for i in range(len(dms["v2"].datasets["val"])))
    assert sorted(dms["resident"].datasets["val"][1].tolist()) == v2_val


def test_validation_uses_the_test_split_by_default(tiny_data):
    dm = datamodule(tiny_data, pipeline="v2")
    dm.setup("fit")
    assert len(dm.datasets["val"]) == TEST_ROWS


def test_predict_accepts_a_file_without_labels(tmp_path):
    data = tmp_path / "data"
    write_parquet(data / "FashionMNIST" / "test.parquet", schema.build_table(random_split(10, 5)[0], None))
    for pipeline in ("v1", "v2", "resident"):
        dm = datamodule(data, pipeline=pipeline, batch_size=4)
        dm.setup("predict")
        batch = next(iter(dm.predict_dataloader()))
        assert batch["label"].tolist() == [-1] * 4


def test_the_datamodule_takes_the_loader_options_one_by_one_as_lightningcli_reads_them():
    """The signature LightningCLI reads and the record the rest reads from name the same options, typed and
    defaulted alike, and the DataModule's docstring says what each means."""
    (_, *taken) = inspect.signature(MNISTDataModule.__init__).parameters.values()
    assert [(p.name, p.annotation, p.default) for p in taken] == [
        (option.name, option.type, option.default) for option in dataclasses.fields(LoaderOptions)
    ]
    assert all(f"\n        {p.name}: " in MNISTDataModule.__doc__ for p in taken)
    assert MNISTDataModule(batch_size=8).options == LoaderOptions(batch_size=8)


@pytest.mark.parametrize("pipeline", ["v1", "v2"])
def test_worker_processes_give_the_batches_the_main_process_gives(tiny_data, pipeline):
    """The ladder's rungs with workers: items read in two worker processes arrive as the main process reads them."""
    epochs = {}
    for workers in (0, 2):
        dm = datamodule(tiny_data, pipeline=pipeline, batch_size=32, num_workers=workers, persistent_workers=False)
        dm.setup("fit")
        epochs[workers] = list(dm.train_dataloader())
    assert [len(batch["label"]) for batch in epochs[2]] == [32, 32, 32]
    assert all(items_equal(a, b) for a, b in zip(epochs[0], epochs[2], strict=True))


def test_loader_settings_reach_the_dataloader(tiny_data):
    dm = datamodule(
        tiny_data,
        pipeline="v1",
        batch_size=8,
        num_workers=2,
        persistent_workers=True,
        pin_memory=True,
        prefetch_factor=3,
    )
    dm.setup("fit")
    loader = dm.train_dataloader()
    assert (loader.batch_size, loader.num_workers, loader.persistent_workers, loader.prefetch_factor) == (8, 2, True, 3)
    # Pinning only helps copies to a CUDA device: it applies there and nowhere else.
    assert loader.pin_memory is (dm._device().type == "cuda") is dm.loader_settings()["pin_memory_applied"]
    dm.device = torch.device("cuda")
    assert dm.pins_memory and dm.loader_settings()["pin_memory"] is True
    assert isinstance(loader.sampler, torch.utils.data.RandomSampler)
    assert isinstance(dm.val_dataloader().sampler, torch.utils.data.SequentialSampler)


def test_build_table_layout():
    table = schema.build_table(*random_split(3, 0))
    assert table.schema.field("label").type == pa.int64()
    assert all(table.schema.field(n).type == pa.uint8() for n in schema.PIXEL_COLUMNS)


@pytest.mark.parametrize("num_workers,persistent,freezes", [(0, False, 0), (2, False, 2), (2, True, 1)])
def test_garbage_collector_is_frozen_before_each_fork_of_workers(monkeypatch, num_workers, persistent, freezes):
    """Workers share the parent's pages only if no later collection writes to the objects that existed at the fork."""
    import gc

    from mnistperf.data.pipelines.workers import WorkerLoader

    calls = []
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))
    loader = WorkerLoader(list(range(8)), batch_size=4, num_workers=num_workers, persistent_workers=persistent)
    for _ in range(2):  # two epochs
        assert [len(b) for b in loader] == [4, 4]
    assert len(calls) == freezes


def test_more_workers_than_cores_is_said_once_in_the_labs_line_instead_of_torchs_warning(tiny_data, caplog):
    import warnings

    from mnistperf.console import calm_library_noise
    from mnistperf.machine import usable_cpus

    dm = datamodule(tiny_data, pipeline="v2", batch_size=32, num_workers=usable_cpus() + 1, persistent_workers=False)
    with caplog.at_level("INFO"):
        dm.setup("fit")
        dm.setup("validate")
    said = [r.getMessage() for r in caplog.records if "usable CPUs" in r.getMessage()]
    assert said == [
        f"mnistperf: data.num_workers {usable_cpus() + 1} on {usable_cpus()} usable CPUs: the workers share them (as "
        "the published stage does on a small machine); `mnistperf tune` measures the best count here."
    ]
    with warnings.catch_warnings(record=True) as raised:
        warnings.simplefilter("always")
        calm_library_noise()
        next(iter(dm.train_dataloader()))
    assert not [w for w in raised if "worker processes" in str(w.message)]  # torch's own is not said beside it


def test_worker_options_on_the_resident_pipeline_are_said_in_the_labs_line_not_a_warning(tiny_data, caplog):
    import warnings

    dm = datamodule(tiny_data, pipeline="resident", batch_size=32, num_workers=2, persistent_workers=False)
    with caplog.at_level("INFO"), warnings.catch_warnings(record=True) as raised:
        warnings.simplefilter("always")
        dm.setup("fit")
        dm.train_dataloader()
        dm.val_dataloader()
    said = [r.getMessage() for r in caplog.records if "uses no DataLoader" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("mnistperf: data.pipeline=resident uses no DataLoader: num_workers")
    assert not [w for w in raised if "no DataLoader" in str(w.message)]
