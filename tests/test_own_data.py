"""Data of the user's own: any pixel column names, a dataset by name, and importing CSV and Hugging Face layouts."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
import torch
from conftest import NO_WORKERS, damage, fails_in_one_line, random_split, stage_argv, write_parquet

from mnistperf.cli import main
from mnistperf.data import schema
from mnistperf.data.datamodule import MNISTDataModule
from mnistperf.data.ingest import prepare
from mnistperf.errors import DataError

PIL = pytest.importorskip("PIL.Image")
PIPELINES = ["v1", "v2", "resident", "stream", "litdata"]
LITDATA_MARKED = [pytest.param(p, marks=[pytest.mark.litdata] * (p == "litdata")) for p in PIPELINES]
NAMINGS = {
    "pixel1..784": lambda i: f"pixel{i + 1}",
    "pixel_0..783": lambda i: f"pixel_{i}",
    "0..783": lambda i: str(i),
}


def table_with_names(images: np.ndarray, labels: np.ndarray, name, label="label", order=None) -> pa.Table:
    flat = images.reshape(len(images), -1)
    columns = {label: pa.array(labels.astype(np.int64))}
    for i in order if order is not None else range(784):
        columns[name(i)] = pa.array(flat[:, i].astype(np.int64))
    return pa.table(columns)


def first_batch(data_dir: Path, dataset: str, pipeline: str) -> dict:
    dm = MNISTDataModule(dataset=dataset, data_dir=str(data_dir), pipeline=pipeline, batch_size=8, shuffle=False)
    dm.prepare_data()
    dm.setup("fit")
    return next(iter(dm.train_dataloader()))


def assert_batch_is(batch, images, labels):
    expected = torch.from_numpy(images[: len(batch["label"])]).to(torch.float32).div(255).unsqueeze(1)
    assert torch.equal(batch["image"].cpu(), expected)
    assert batch["label"].tolist() == labels[: len(batch["label"])].tolist()


@pytest.mark.parametrize("naming", NAMINGS)
@pytest.mark.parametrize("pipeline", LITDATA_MARKED)
def test_any_pixel_names_same_pixels_in_every_pipeline(tmp_path, naming, pipeline):
    images, labels = random_split(24, seed=4)
    shuffled = np.random.default_rng(0).permutation(784)  # columns stored out of order: names give the order
    for split in prepare.SPLITS:
        write_parquet(
            tmp_path / "data" / "mine" / f"{split}.parquet",
            table_with_names(images, labels, NAMINGS[naming], order=shuffled if naming != "0..783" else None),
        )
    assert_batch_is(first_batch(tmp_path / "data", "mine", pipeline), images, labels)


@pytest.mark.parametrize("label", ["labels", "target", "class", "y"])
def test_the_label_column_may_go_by_any_of_its_usual_names(tmp_path, label):
    images, labels = random_split(16, seed=5)
    for split in prepare.SPLITS:
        table = table_with_names(images, labels, NAMINGS["pixel1..784"], label=label)
        write_parquet(tmp_path / "data" / "mine" / f"{split}.parquet", table)
    assert_batch_is(first_batch(tmp_path / "data", "mine", "v2"), images, labels)


def test_names_without_numbers_are_taken_in_file_order(tmp_path):
    images, labels = random_split(8, seed=5)

    def letters(i: int) -> str:  # pa, pb, ...: no digits
        return "p" + "".join(chr(97 + int(d)) for d in f"{i:03d}")

    for split in prepare.SPLITS:
        write_parquet(tmp_path / "data" / "letters" / f"{split}.parquet", table_with_names(images, labels, letters))
    assert_batch_is(first_batch(tmp_path / "data", "letters", "v2"), images, labels)


@pytest.mark.parametrize(
    "build, expected",
    [
        (
            lambda im, lb: table_with_names(im, lb, lambda i: f"pixel{i}").append_column("extra", pa.array(lb)),
            "785 columns besides the label 'label'",
        ),
        (
            lambda im, lb: table_with_names(im, lb, lambda i: f"pixel{i}").append_column("target", pa.array(lb)),
            "2 label-like columns (label, target)",
        ),
        (
            lambda im, lb: table_with_names(im, lb, lambda i: f"pixel{i}").set_column(
                1, "pixel0", pa.array(np.full(len(lb), 300.5))
            ),
            "column pixel0 has type double",
        ),
        (
            lambda im, lb: table_with_names(im, lb, lambda i: f"pixel{i}").set_column(
                1, "pixel0", pa.array(np.full(len(lb), 300))
            ),
            "values 300..300; pixels must lie in 0..255",
        ),
    ],
)
def test_ambiguous_or_impossible_files_are_named_with_what_was_found(tmp_path, build, expected):
    images, labels = random_split(8, seed=6)
    for split in prepare.SPLITS:
        write_parquet(tmp_path / "data" / "odd" / f"{split}.parquet", build(images, labels))
    with pytest.raises(DataError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        first_batch(tmp_path / "data", "odd", "v2")


def test_a_dataset_of_your_own_that_is_missing_says_where_it_is_read_from(tmp_path, capsys):
    fails_in_one_line(
        capsys,
        stage_argv("v2_pinned", "--data.dataset", "mine", "--data.data_dir", str(tmp_path / "data")),
        f"{tmp_path / 'data' / 'mine' / 'train.parquet'} not found",
        "prepare --from DIR --name mine",
    )


# ---------------------------------------------------------------- importing the layouts people have
def kaggle_csv(path: Path, images: np.ndarray, labels: np.ndarray, header: bool = True) -> None:
    table = table_with_names(images, labels, lambda i: f"pixel{i + 1}")
    path.parent.mkdir(parents=True, exist_ok=True)
    pacsv.write_csv(table, path, pacsv.WriteOptions(include_header=header))


def png(image: np.ndarray, mode: str = "L") -> bytes:
    buffer = io.BytesIO()
    PIL.fromarray(image).convert(mode).save(buffer, format="PNG")
    return buffer.getvalue()


def hf_parquet(path: Path, images: np.ndarray, labels: np.ndarray, encode=png) -> None:
    structs = [{"bytes": encode(image), "path": f"{i}.png"} for i, image in enumerate(images)]
    write_parquet(path, pa.table({"image": pa.array(structs), "label": pa.array(labels.astype(np.int64))}))


def imported(tmp_path: Path, source: Path, name: str = "mine", *extra: str) -> tuple[np.ndarray, np.ndarray]:
    main(["prepare", "--from", str(source), "--name", name, "--data-dir", str(tmp_path / "data"), *extra])
    pixels, labels = schema.to_tensors(pq.read_table(tmp_path / "data" / name / "train.parquet"))
    return pixels.numpy().reshape(-1, 28, 28), labels.numpy()


@pytest.mark.parametrize("layout", ["kaggle csv", "csv without header", "hugging face", "hugging face shards"])
def test_import_gives_back_exactly_the_pixels_that_went_in(tmp_path, layout, capsys):
    images, labels = random_split(30, seed=7)
    source = tmp_path / "source"
    if layout == "kaggle csv":
        kaggle_csv(source / "fashion-mnist_train.csv", images, labels)
        kaggle_csv(source / "fashion-mnist_test.csv", images[:5], labels[:5])
    elif layout == "csv without header":
        kaggle_csv(source / "mnist_train.csv", images, labels, header=False)
        kaggle_csv(source / "mnist_test.csv", images[:5], labels[:5], header=False)
    elif layout == "hugging face":
        hf_parquet(source / "data" / "train-00000-of-00001.parquet", images, labels)
        hf_parquet(source / "data" / "test-00000-of-00001.parquet", images[:5], labels[:5])
        hf_parquet(source / "data" / "validation-00000-of-00001.parquet", images[:3], labels[:3])  # left out, said
    else:
        hf_parquet(source / "train" / "part-0.parquet", images[:12], labels[:12])
        hf_parquet(source / "train" / "part-1.parquet", images[12:], labels[12:])
        hf_parquet(source / "test" / "part-0.parquet", images[:5], labels[:5])
    got_images, got_labels = imported(tmp_path, source, "mine", "--formats", "parquet,csv")
    assert np.array_equal(got_images, images) and np.array_equal(got_labels, labels)
    out = capsys.readouterr().out
    assert "mine" in out and "csv" in out and "parquet" in out  # the size report, as for the built-in data
    left_out = f"{source / 'data' / 'validation-00000-of-00001.parquet'}: left out (its name says no split, or both"
    assert (left_out in out) == (layout == "hugging face")
    assert_batch_is(first_batch(tmp_path / "data", "mine", "v2"), images, labels)  # usable by name at once


def bad_source(tmp_path: Path, case: str) -> Path:
    images, labels = random_split(6, seed=8)
    source = tmp_path / "source"
    if case in ("no train split", "no test split"):
        kaggle_csv(source / ("test.csv" if case == "no train split" else "train.csv"), images, labels)
    elif case == "labels written as floats":
        kaggle_csv(source / "test.csv", images, labels)
        kaggle_csv(source / "train.csv", images, labels)
        lines = (source / "train.csv").read_text().splitlines()
        lines[2] = ",".join([f"{lines[2].split(',')[0]}.0", *lines[2].split(",")[1:]])  # a label as 3.0
        (source / "train.csv").write_text("\n".join(lines) + "\n")
    elif case == "pixels scaled to 0..1":
        kaggle_csv(source / "test.csv", images, labels)
        kaggle_csv(source / "train.csv", images, labels)
        lines = (source / "train.csv").read_text().splitlines()
        for at in range(1, len(lines)):  # every row's first pixel a fraction, as a file scaled to 0..1 holds them
            fields = lines[at].split(",")
            lines[at] = ",".join([fields[0], f"{int(fields[1]) / 255:.4f}", *fields[2:]])
        (source / "train.csv").write_text("\n".join(lines) + "\n")
    elif case == "a word among the pixels":
        kaggle_csv(source / "test.csv", images, labels)
        kaggle_csv(source / "train.csv", images, labels)
        lines = (source / "train.csv").read_text().splitlines()
        fields = lines[2].split(",")
        lines[2] = ",".join([fields[0], "x", *fields[2:]])  # a row's first pixel a word
        (source / "train.csv").write_text("\n".join(lines) + "\n")
    elif case == "a folder of PNGs":
        for split in ("train", "test"):
            (source / split / "3").mkdir(parents=True)
            (source / split / "3" / "0.png").write_bytes(png(images[0]))
    elif case.startswith("a pixel past 255"):
        header = case.endswith("with a header")
        kaggle_csv(source / "test.csv", images, labels)
        kaggle_csv(source / "train.csv", images, labels, header=header)
        lines = (source / "train.csv").read_text().splitlines()
        fields = lines[int(header)].split(",")
        fields[10] = "300"  # the file's pixel10: its 11th column
        lines[int(header)] = ",".join(fields)
        (source / "train.csv").write_text("\n".join(lines) + "\n")
    elif case == "a file for the folder":
        kaggle_csv(source / "train.csv", images, labels)
        return source / "train.csv"
    elif case == "a header and no rows":  # pyarrow reads its columns as nulls
        kaggle_csv(source / "test.csv", images, labels)
        header = (source / "test.csv").read_text().splitlines()[0]
        (source / "train.csv").write_text(header + "\n")
    elif case == "a Parquet file of no rows":
        hf_parquet(source / "test.parquet", images, labels)
        kind = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
        write_parquet(
            source / "train.parquet", pa.table({"image": pa.array([], kind), "label": pa.array([], pa.int64())})
        )
    elif case == "783 columns":
        kaggle_csv(source / "test.csv", images, labels)
        (source / "train.csv").write_text("\n".join(",".join(["1"] * 783) for _ in range(3)) + "\n")
    else:
        hf_parquet(source / "test.parquet", images, labels)
        encode = {
            "not 28x28 grayscale": lambda im: png(np.zeros((32, 32), np.uint8), "RGB"),
            "png does not decode": lambda im: b"\x89PNG\r\n\x1a\n garbage",
            "not an image": lambda im: b"plain bytes",
        }[case]
        hf_parquet(source / "train.parquet", images, labels, encode)
    return source


@pytest.mark.parametrize(
    "case, expected",
    [
        (
            "no train split",
            "has no train split: expected CSV or Parquet files named like train.csv, mnist_train.csv or train-00000-",
        ),
        ("no test split", "has no test split: expected CSV or Parquet files named like test.csv, mnist_test.csv or"),
        ("783 columns", "train.csv has 783 columns and no header; expected 785"),
        ("a header and no rows", "train.csv has a header and no rows of data; give it the images' rows"),
        ("a Parquet file of no rows", "train.parquet holds no rows; give it the images' rows"),
        ("a folder of PNGs", "(or inside a folder named train/); its 2 loose image files are not read (a file per"),
        (
            "a word among the pixels",
            "train.csv: column pixel1 holds string values, not whole numbers; labels must be 0..9 and pixels 0..255",
        ),
        (
            "pixels scaled to 0..1",
            "column pixel1 holds double values, not whole numbers; labels must be 0..9 and"
            " pixels 0..255 (pixels scaled to 0..1: times 255, rounded): correct the file",
        ),
        (
            "labels written as floats",
            "train.csv: column label holds double values, not whole numbers; labels must "
            "be 0..9 and pixels 0..255: correct the file",
        ),  # no word on scaling pixels
        ("a pixel past 255, with a header", "train.csv: column pixel10 has values"),
        ("a pixel past 255, no header", "train.csv: column 11 (no header) has values"),
        ("not 28x28 grayscale", "train.parquet: the image in row 0 is 32x32 RGB; expected 28x28 grayscale"),
        ("png does not decode", "train.parquet: the image in row 0 does not decode"),
        ("not an image", "row 0 does not decode (UnidentifiedImageError: no image format Pillow reads); re-export"),
        ("a file for the folder", "train.csv: a file, not a folder; give the folder that holds the train and test"),
    ],
)
def test_bad_imports_end_in_one_line_naming_the_file(tmp_path, capsys, case, expected):
    source = bad_source(tmp_path, case)
    fails_in_one_line(
        capsys, ["prepare", "--from", str(source), "--name", "mine", "--data-dir", str(tmp_path / "data")], expected
    )
    assert not (tmp_path / "data" / "mine" / "train.parquet").exists()  # nothing half-written


@pytest.mark.slow
@pytest.mark.realdata
def test_official_files_in_each_layout_import_pixel_for_pixel(shared_datasets, tmp_path):
    main(["prepare", "--dataset", "mnist", "--source-root", str(shared_datasets), "--data-dir", str(tmp_path / "data")])
    official = {
        split: schema.to_tensors(pq.read_table(prepare.split_path(tmp_path / "data", "mnist", split)))
        for split in prepare.SPLITS
    }
    kaggle, hf = tmp_path / "kaggle", tmp_path / "hf"
    for split, (pixels, labels) in official.items():
        images = pixels.numpy().reshape(-1, 28, 28)
        kaggle_csv(kaggle / f"mnist_{split}.csv", images, labels.numpy())
        hf_parquet(hf / "mnist" / f"{split}-00000-of-00001.parquet", images[:2000], labels.numpy()[:2000])
    got = imported(tmp_path, kaggle, "kaggle")
    assert np.array_equal(got[0].reshape(-1, 784), official["train"][0].numpy())
    assert np.array_equal(got[1], official["train"][1].numpy())
    got = imported(tmp_path, hf, "hf")
    assert np.array_equal(got[0].reshape(-1, 784), official["train"][0].numpy()[:2000])
    assert np.array_equal(got[1], official["train"][1].numpy()[:2000])


def test_an_import_forced_over_a_dataset_kept_as_shard_folders_replaces_each_folder_whole(tmp_path, capsys):
    images, labels = random_split(30, seed=7)
    source, data = tmp_path / "source", tmp_path / "data"
    kaggle_csv(source / "mnist_train.csv", images, labels)
    kaggle_csv(source / "mnist_test.csv", images[:5], labels[:5])
    old, _ = random_split(8, seed=1)
    for split in ("train", "test"):  # the user's own layout: a folder of shards per split
        for shard in range(2):
            write_parquet(data / "mine" / split / f"part-{shard}.parquet", table_with_names(old, labels[:8], str))
    main(["prepare", "--from", str(source), "--name", "mine", "--data-dir", str(data), "--force"])
    assert sorted(p.name for p in (data / "mine").iterdir()) == ["test", "train"]  # nothing else left beside them
    (report,) = prepare.write_split(pq.read_table(data / "mine" / "train"), "mine", "train", data, ["parquet"])
    (shard,) = (data / "mine" / "train").iterdir()
    assert report.size_mb == shard.stat().st_size / 1e6  # the shard's size, not its folder entry's
    read = pq.read_table(data / "mine" / "train")
    pixels, got = schema.to_tensors(read)
    assert np.array_equal(pixels.numpy().reshape(-1, 28, 28), images) and np.array_equal(got.numpy(), labels)
    assert_batch_is(first_batch(data, "mine", "v2"), images, labels)


def test_an_import_into_a_data_dir_this_process_may_not_write_in_is_said_before_its_files_are_read(
    tmp_path, monkeypatch, capsys
):
    import os

    from mnistperf.data.ingest import importer

    images, labels = random_split(10, seed=7)
    source, data = tmp_path / "source", tmp_path / "data"
    kaggle_csv(source / "mnist_train.csv", images, labels)
    kaggle_csv(source / "mnist_test.csv", images[:5], labels[:5])
    data.mkdir()
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != data)  # as a read-only mount answers
    read = []
    monkeypatch.setattr(importer, "find_splits", lambda folder: read.append(folder))
    with pytest.raises(SystemExit):
        main(["prepare", "--from", str(source), "--name", "mine", "--data-dir", str(data)])
    said = f"--data-dir {data}: {data} is a folder this process may not write in; give a folder you may write in"
    assert said in capsys.readouterr().err and read == [] and list(data.iterdir()) == []


def test_an_import_done_is_kept_and_a_damaged_one_names_the_import_that_makes_it_again(tmp_path, capsys):
    """Only the user knows the folder an import came from: the fix line says DIR where the official data's names it."""
    images, labels = random_split(30, seed=7)
    source, data = tmp_path / "source", tmp_path / "data"
    kaggle_csv(source / "mnist_train.csv", images, labels)
    kaggle_csv(source / "mnist_test.csv", images[:5], labels[:5])
    imported(tmp_path, source)
    capsys.readouterr()
    imported(tmp_path, source)
    assert capsys.readouterr().out == f"mine: ready in {data / 'mine'} (use --force to rebuild)\n"
    damage(data / "mine" / "train.parquet", "middle")
    options = ("--data.batch_size", "8", "--data.dataset", "mine", "--data.data_dir", str(data))
    fix = (
        "put a good copy in its place, or, where it was imported, import it again: "
        f"`python -m mnistperf prepare --force --from DIR --name mine --data-dir {data}`"
    )
    fails_in_one_line(capsys, stage_argv("v2_pinned", *NO_WORKERS, *options, epochs=1), "train.parquet", fix)
    imported(tmp_path, source, "mine", "--force")  # the fix, DIR filled in: the same fit then trains
    main(stage_argv("v2_pinned", *NO_WORKERS, *options, epochs=1))
