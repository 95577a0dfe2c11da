"""Every bad input fails at setup, in the main process, with a message naming the file or option and the fix."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch
from conftest import CONFIGS, fails_in_one_line, random_split, stage_argv, write_parquet

from mnistperf.data import schema
from mnistperf.data.datamodule import MNISTDataModule
from mnistperf.errors import ConfigError, DataError


def good_table(rows: int = 20) -> pa.Table:
    return schema.build_table(*random_split(rows, seed=9))


def replace_column(table: pa.Table, name: str, values) -> pa.Table:
    return table.set_column(table.schema.get_field_index(name), name, pa.array(values))


def bad_tables() -> dict[str, tuple[pa.Table, str]]:
    good = good_table()
    n = good.num_rows
    floats = np.arange(n, dtype=np.float64) + 0.5
    with_nan = np.zeros(n)
    with_nan[3] = np.nan
    return {
        "no label column": (good.drop_columns(["label"]), "has no 'label' column"),
        "wrong number of pixel columns": (
            good.drop_columns(["pixel783"]),
            "has 783 columns besides the label 'label'; expected",
        ),
        "pixels above 255": (
            replace_column(good, "pixel5", np.full(n, 300, dtype=np.int16)),
            "pixel5 has values 300..300",
        ),
        "negative pixels": (replace_column(good, "pixel6", np.full(n, -1, dtype=np.int16)), "must lie in 0..255"),
        "pixels not integers": (replace_column(good, "pixel7", floats), "pixel7 has type double"),
        "NaN pixels": (replace_column(good, "pixel8", with_nan), "pixel8 holds 1 NaN or missing values"),
        "labels outside 0..9": (
            replace_column(good, "label", np.full(n, 10)),
            "label has values 10..10; labels must lie in 0..9",
        ),
        "null labels": (
            replace_column(good, "label", pa.array([None] + [1] * (n - 1), pa.int64())),
            "label holds 1 NaN",
        ),
        "text pixels": (replace_column(good, "pixel9", ["x"] * n), "pixel9 has type string, expected integers"),
        "empty file": (good.slice(0, 0), "is empty (0 rows)"),
    }


@pytest.mark.parametrize("pipeline", ["v1", "v2", "resident", "stream"])
@pytest.mark.parametrize("case", list(bad_tables()))
def test_bad_parquet_fails_at_setup_naming_the_file(tmp_path, case, pipeline):
    table, expected = bad_tables()[case]
    data = tmp_path / "data"
    path = write_parquet(data / "FashionMNIST" / "train.parquet", table)
    write_parquet(data / "FashionMNIST" / "test.parquet", good_table())
    dm = MNISTDataModule(data_dir=str(data), pipeline=pipeline, batch_size=4)
    if pipeline == "stream" and case == "NaN pixels":
        expected = "pixel8 has type double, expected integers"  # the stream rejects float columns by type
    if pipeline == "stream" and case in ("pixels above 255", "negative pixels", "labels outside 0..9", "null labels"):
        # The stream pipeline never reads the whole file at setup: it checks the schema there and
        # every record batch's values as it reads them, still naming the file.
        dm.setup("fit")
        with pytest.raises(DataError) as error:
            next(iter(dm.train_dataloader()))
    else:
        with pytest.raises(DataError) as error:
            dm.setup("fit")
    assert str(path) in str(error.value) and expected in str(error.value)


def write_shards(folder, *tables):
    return [write_parquet(folder / f"part-{i:05d}.parquet", table) for i, table in enumerate(tables)]


@pytest.mark.parametrize("pipeline", ["v1", "v2", "resident", "stream"])
def test_a_bad_shard_is_named(tmp_path, pipeline):
    data = tmp_path / "data"
    _, bad = write_shards(data / "Synthetic" / "train", good_table(), good_table().drop_columns(["label"]))
    write_shards(data / "Synthetic" / "test", good_table())
    with pytest.raises(DataError) as error:
        MNISTDataModule(dataset="synthetic", data_dir=str(data), pipeline=pipeline).setup("fit")
    assert f"{bad} has no 'label' column" in str(error.value)


@pytest.mark.parametrize("pipeline", ["v2", "stream"])
def test_shards_must_agree_on_labels(tmp_path, pipeline):
    data = tmp_path / "data"
    _, unlabelled = write_shards(data / "Synthetic" / "test", good_table(), good_table().drop_columns(["label"]))
    with pytest.raises(DataError, match=rf"{unlabelled} lacks a 'label' column, unlike the shards before it"):
        MNISTDataModule(dataset="synthetic", data_dir=str(data), pipeline=pipeline).setup("predict")


def test_a_shard_folder_without_parquet_files(tmp_path):
    data = tmp_path / "data"
    for split in ("train", "test"):
        (data / "Synthetic" / split).mkdir(parents=True)
    with pytest.raises(DataError, match=r"train is a folder without .parquet files; re-create it"):
        MNISTDataModule(dataset="synthetic", data_dir=str(data), pipeline="stream").setup("fit")


def test_not_a_parquet_file(tmp_path):
    data = tmp_path / "data"
    path = data / "FashionMNIST" / "train.parquet"
    path.parent.mkdir(parents=True)
    path.write_text("label,pixel0\n1,2\n")
    with pytest.raises(DataError, match=rf"{path} is not a readable Parquet file .*prepare --force"):
        MNISTDataModule(data_dir=str(data), pipeline="v2").setup("fit")


def test_missing_prepared_file_says_how_to_prepare(tmp_path):
    with pytest.raises(DataError, match=r"train.parquet not found. Create it with `python -m mnistperf prepare"):
        MNISTDataModule(data_dir=str(tmp_path), pipeline="v2").setup("fit")


def test_prepare_data_with_no_source_reachable_says_how_to_get_it(fake_raw, tmp_path):
    (tmp_path / "empty").mkdir()  # a source root that exists but holds none of the files
    dm = MNISTDataModule(dataset="mnist", data_dir=str(tmp_path / "data"), source_root=str(tmp_path / "empty"))
    with pytest.raises(
        DataError, match="To fix: put train-images-idx3-ubyte.gz .*/empty/mnist/, or allow network access to file:///"
    ):
        dm.prepare_data()


@pytest.mark.parametrize(
    "options, expected",
    [
        ({"persistent_workers": True, "num_workers": 0}, "data.persistent_workers needs worker processes"),
        ({"prefetch_factor": 4, "num_workers": 0}, "data.prefetch_factor needs worker processes"),
        ({"prefetch_factor": 0, "num_workers": 2}, r"data.prefetch_factor must be at least 1 batch a worker \(got 0\)"),
        ({"batch_size": 0}, "data.batch_size must be at least 1"),
        ({"num_workers": -1}, "data.num_workers cannot be negative"),
        ({"dataset": "../cifar10"}, "data.dataset '../cifar10' is neither a built-in dataset"),
        ({"dataset": "FashionMNIST"}, "the built-in fashion_mnist is prepared into; give --data.dataset fashion_mnist"),
        ({"pipeline": "v9"}, "data.pipeline: unknown pipeline 'v9'"),
        ({"val_source": 1.5}, "data.val_source must be 'test' or a fraction"),
        ({"val_source": 0.1, "pipeline": "stream"}, "data.val_source: the stream pipeline never holds"),
        ({"stream_buffer_rows": 0}, "data.stream_buffer_rows must be at least 1"),
        ({"batches_per_step": 0}, "data.batches_per_step must be at least 1"),
        ({"batches_per_step": 4, "pipeline": "v2"}, "data.batches_per_step 4: the v2 pipeline hands out one batch"),
    ],
)
def test_bad_options_are_rejected_by_name(options, expected):
    with pytest.raises(ConfigError, match=expected):
        MNISTDataModule(**options)


@pytest.mark.parametrize(
    "override, expected",
    [
        (
            ["--data.persistent_workers", "true", "--data.num_workers", "0"],
            "data.persistent_workers needs worker processes: give --data.num_workers 2 (or more), or "
            "--data.persistent_workers false.",
        ),
        (["--data.batch_size", "0"], "data.batch_size must be at least 1"),
        (["--model.lr", "-1"], "model.lr must be above 0 (got -1.0); the stages train with --model.lr 0.001."),
        (["--data.pipeline", "v9"], "data.pipeline"),
        (["--data.dataset", "cifar10"], "data.dataset"),
        (
            ["--config", str(CONFIGS / "v3_resident.yaml"), "--data.batches_per_step", "4"],
            "data.batches_per_step 4 needs model.cuda_graph true",
        ),
    ],
)
def test_cli_reports_bad_options_without_a_traceback(override, expected, capsys, tiny_data):
    fails_in_one_line(capsys, stage_argv("v1_naive", *override), expected)


@pytest.mark.parametrize(
    "override, expected",
    [
        (["--trainer.accelerator", "cpu", "--trainer.devices", "0"], "is not a valid input using cpu accelerator"),
        pytest.param(
            ["--trainer.accelerator", "cuda"],
            "trainer.accelerator cuda: this machine has no CUDA GPU that torch",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA"),
        ),
    ],
)
def test_cli_reports_trainer_settings_lightning_rejects_without_a_traceback(workdir, override, expected, capsys):
    fails_in_one_line(capsys, stage_argv("v3_compiled", *override), expected)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_tunes_refusal_of_a_setting_gives_its_fix_in_tunes_own_option(workdir, capsys):
    argv = ["tune", "--config", str(CONFIGS / "v2_pinned.yaml"), "--set", "trainer.accelerator=cuda"]
    fails_in_one_line(capsys, argv, "give --set trainer.accelerator=auto (CUDA where present, else the CPU) or cpu")


def test_a_source_root_that_is_a_file_is_said_to_be_one(tmp_path, capsys):
    (tmp_path / "raw.gz").write_bytes(b"")
    argv = [
        "prepare",
        "--dataset",
        "mnist",
        "--data-dir",
        str(tmp_path / "d"),
        "--source-root",
        str(tmp_path / "raw.gz"),
    ]
    fails_in_one_line(capsys, argv, f"--source-root {tmp_path / 'raw.gz'}: a file, not a folder; give the folder")


def test_cli_reports_missing_data_without_a_traceback(tmp_path, monkeypatch, capsys, fake_raw):
    monkeypatch.chdir(tmp_path)
    argv = stage_argv("v2_pinned", "--data.dataset", "mnist", "--data.source_root", str(tmp_path / "nowhere"))
    fails_in_one_line(capsys, argv, "--data.source_root")


@pytest.mark.parametrize(
    "dataset, command",
    [
        ("synthetic", "`python -m mnistperf prepare --dataset synthetic --data-dir {data}`"),
        ("mine", "`python -m mnistperf prepare --from DIR --name mine --data-dir {data}`"),
    ],
)
def test_a_missing_split_names_the_command_for_the_users_data_dir(tmp_path, dataset, command):
    data = tmp_path / "elsewhere"
    with pytest.raises(DataError) as error:
        MNISTDataModule(dataset=dataset, data_dir=str(data), pipeline="stream").setup("fit")
    assert command.format(data=data) in str(error.value)
