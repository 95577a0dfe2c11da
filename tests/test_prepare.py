"""prepare: where raw files come from, checksum verification, atomic and idempotent writes."""

from __future__ import annotations

import gzip
import http.server
import os
import shutil
import threading
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import fails_in_one_line

from mnistperf.cli import main
from mnistperf.data import schema
from mnistperf.data.ingest import prepare, sources
from mnistperf.errors import ConfigError, DataError


def assert_matches(path: Path, images: np.ndarray, labels: np.ndarray) -> None:
    table = pq.read_table(path)
    assert table.schema.field("pixel0").type == "uint8"
    assert table.column_names == [schema.LABEL_COLUMN, *schema.PIXEL_COLUMNS]
    pixels, read_labels = schema.to_tensors(table)
    np.testing.assert_array_equal(pixels.numpy().reshape(-1, 28, 28), images)
    np.testing.assert_array_equal(read_labels.numpy(), labels)


def test_prepare_from_source_root_writes_official_content_in_order(fake_raw, tmp_path):
    reports = prepare.prepare_dataset("mnist", tmp_path / "data", source_root=fake_raw.root, log=lambda m: None)
    for split in prepare.SPLITS:
        assert_matches(tmp_path / "data" / "MNIST" / f"{split}.parquet", *fake_raw.arrays[split])
    assert [(r.split, r.format) for r in reports] == [("train", "parquet"), ("test", "parquet")]


def test_source_root_from_environment(fake_raw, tmp_path, monkeypatch):
    monkeypatch.setenv(sources.SOURCE_ROOT_ENV, str(fake_raw.root))
    prepare.prepare_dataset("mnist", tmp_path / "data", log=lambda m: None)
    assert_matches(prepare.split_path(tmp_path / "data", "mnist", "train"), *fake_raw.arrays["train"])


def test_the_datasets_own_folder_given_as_the_source_root_is_pointed_to_its_parent(fake_raw, tmp_path, monkeypatch):
    own = fake_raw.root / "mnist"  # holds the .gz files: the root is the folder above it
    with pytest.raises(DataError) as error:
        prepare.prepare_dataset("mnist", tmp_path / "data", source_root=own, log=lambda m: None)
    assert str(error.value) == (
        f"--source-root {own} is the mnist/ folder itself: give the one above it, --source-root {fake_raw.root}"
    )
    monkeypatch.setenv(sources.SOURCE_ROOT_ENV, str(own))
    with pytest.raises(DataError, match=f"give the one above it, {sources.SOURCE_ROOT_ENV}={fake_raw.root}$"):
        prepare.prepare_dataset("mnist", tmp_path / "data", log=lambda m: None)
    assert not (tmp_path / "data").exists()
    empty = tmp_path / "elsewhere" / "mnist"  # a folder of that name without the files: searched, as any
    empty.mkdir(parents=True)
    cache = tmp_path / "data" / "MNIST" / "raw"
    assert sources.candidate_dirs(sources.DATASETS["mnist"], empty, cache)[0] == empty / "mnist"


def test_recompressed_copy_with_other_gzip_header_passes(fake_raw, tmp_path, monkeypatch):
    system = tmp_path / "system"
    shutil.copytree(fake_raw.folder, system / "mnist")
    for path in (system / "mnist").iterdir():  # like Debian: same content, different header and level
        path.write_bytes(gzip.compress(gzip.decompress(path.read_bytes()), compresslevel=9, mtime=1234))
    monkeypatch.setattr(sources, "SYSTEM_DATASETS_DIR", system)
    prepare.prepare_dataset("mnist", tmp_path / "data", log=lambda m: None)
    assert_matches(prepare.split_path(tmp_path / "data", "mnist", "test"), *fake_raw.arrays["test"])


def test_download_from_mirror_is_verified_and_cached(fake_raw, tmp_path, monkeypatch):
    mirror = fake_raw.folder.as_uri() + "/"
    spec = sources.DATASETS["mnist"]
    monkeypatch.setitem(
        sources.DATASETS, "mnist", type(spec)(**{**spec.__dict__, "mirrors": ("file:///nope/", mirror)})
    )
    logged = []
    prepare.prepare_dataset("mnist", tmp_path / "data", log=logged.append)
    assert any("downloading" in m for m in logged)
    assert_matches(prepare.split_path(tmp_path / "data", "mnist", "train"), *fake_raw.arrays["train"])
    cached = sorted(p.name for p in (tmp_path / "data" / "MNIST" / "raw").iterdir())
    assert cached == sorted(f.name for pair in spec.splits.values() for f in pair)  # no .part files left


def test_no_source_reachable_says_how_to_get_the_data(fake_raw, tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError) as error:
        prepare.prepare_dataset("mnist", tmp_path / "data", source_root=tmp_path / "empty", log=lambda m: None)
    message = str(error.value)
    # the folder given lacks the files: said as that, not as the option to pass it already is
    assert (
        f"To fix: put train-images-idx3-ubyte.gz (with the other official .gz files) in {tmp_path / 'empty' / 'mnist'}/"
        in message
    )
    assert not (tmp_path / "data" / "MNIST" / "train.parquet").exists()
    # Debian packages FashionMNIST alone: its package is named for FashionMNIST and never for MNIST
    assert "Debian" not in message
    said = sources.how_to_get(sources.DATASETS["fashion_mnist"])
    assert "files; or install Debian's package dataset-fashion-mnist (into " in said


class Forbidden(http.server.BaseHTTPRequestHandler):
    """A mirror that answers every request with 403, as an object store may answer a HEAD request."""

    def do_HEAD(self):
        self.send_response(403)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_a_missing_dataset_is_refused_early_only_where_nothing_here_can_make_it(fake_raw, tmp_path, monkeypatch):
    """fit goes on to prepare when the raw files are local or a mirror answers at all (any status); only
    with neither does it stop before anything is built."""
    data = tmp_path / "data"
    with pytest.raises(DataError, match=f"data.data_dir {data} holds no prepared MNIST"):
        prepare.require_preparable("mnist", data)
    prepare.require_preparable("mnist", data, source_root=fake_raw.root)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Forbidden)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        spec = sources.DATASETS["mnist"]
        mirror = f"http://127.0.0.1:{server.server_address[1]}/"
        monkeypatch.setitem(sources.DATASETS, "mnist", type(spec)(**{**spec.__dict__, "mirrors": (mirror,)}))
        prepare.require_preparable("mnist", data)
    finally:
        server.shutdown()
        server.server_close()
    prepare.prepare_dataset("mnist", data, source_root=fake_raw.root, log=lambda m: None)
    (data / "MNIST" / "test.parquet").unlink()
    with pytest.raises(DataError, match=f"data.data_dir {data} lacks {Path('MNIST', 'test.parquet')},"):
        prepare.require_preparable("mnist", data)


def test_truncated_file_is_rejected_by_name(fake_raw, tmp_path):
    path = fake_raw.folder / "train-images-idx3-ubyte.gz"
    path.write_bytes(path.read_bytes()[:-200])
    with pytest.raises(DataError, match="train-images-idx3-ubyte.gz is corrupt or truncated") as error:
        prepare.prepare_dataset("mnist", tmp_path / "data", source_root=fake_raw.root, log=lambda m: None)
    # the user's source folder's file is replaced, not removed; the command keeps the run's options
    url = sources.DATASETS["mnist"].mirrors[0] + path.name
    fix = f"`python -m mnistperf prepare --dataset mnist --data-dir {tmp_path / 'data'} --source-root {fake_raw.root}`"
    assert str(error.value).endswith(f"Replace it with the official file ({url}), then prepare again: {fix}")
    assert path.exists()
    # the formats and the litdata copies asked for stay in the command
    with pytest.raises(DataError) as error:
        prepare.prepare_dataset("mnist", tmp_path / "data", fake_raw.root, ["csv"], log=lambda m: None, litdata=True)
    assert str(error.value).endswith(f"--source-root {fake_raw.root} --formats parquet,csv --litdata`")


def test_a_damaged_file_prepare_downloaded_is_removed_by_the_fix_and_fetched_again(fake_raw, tmp_path):
    data = tmp_path / "data"
    cached = data / "MNIST" / "raw" / "train-images-idx3-ubyte.gz"  # where a download is kept
    cached.parent.mkdir(parents=True)
    cached.write_bytes((fake_raw.folder / cached.name).read_bytes()[:-200])
    with pytest.raises(DataError, match="corrupt or truncated") as error:
        prepare.prepare_dataset("mnist", data, log=lambda m: None)
    fix = f"`rm {cached} && python -m mnistperf prepare --dataset mnist --data-dir {data}`"
    assert str(error.value).endswith(f"Remove it and prepare again, downloading it: {fix}")


def test_altered_content_fails_checksum(fake_raw, tmp_path):
    path = fake_raw.folder / "t10k-labels-idx1-ubyte.gz"
    content = bytearray(gzip.decompress(path.read_bytes()))
    content[-1] ^= 1
    path.write_bytes(gzip.compress(bytes(content)))
    with pytest.raises(DataError, match=r"t10k-labels-idx1-ubyte.gz decompresses to content with MD5") as error:
        prepare.prepare_dataset("mnist", tmp_path / "data", source_root=fake_raw.root, log=lambda m: None)
    assert f"then prepare again: `python -m mnistperf prepare --dataset mnist --data-dir {tmp_path / 'data'}" in str(
        error.value
    )
    assert not (tmp_path / "data" / "MNIST").exists()  # the test split's file failed: the train split's not written
    path.write_bytes(b"")  # an empty file: said as that, not as the digest of nothing
    with pytest.raises(DataError, match=r"t10k-labels-idx1-ubyte.gz is empty: the file is damaged or is not the"):
        prepare.prepare_dataset("mnist", tmp_path / "data", source_root=fake_raw.root, log=lambda m: None)


def test_second_run_does_nothing_unless_forced(fake_raw, tmp_path):
    data = tmp_path / "data"
    prepare.prepare_dataset("mnist", data, source_root=fake_raw.root, log=lambda m: None)
    target = prepare.split_path(data, "mnist", "train")
    before = target.stat().st_mtime_ns
    assert prepare.prepare_dataset("mnist", data, source_root=fake_raw.root, log=lambda m: None) == []
    assert target.stat().st_mtime_ns == before
    os.utime(target, ns=(0, 0))
    assert len(prepare.prepare_dataset("mnist", data, source_root=fake_raw.root, force=True, log=lambda m: None)) == 2
    assert target.stat().st_mtime_ns != 0


def test_a_damaged_prepared_file_is_rebuilt(fake_raw, tmp_path):
    data = tmp_path / "data"
    prepare.prepare_dataset("mnist", data, source_root=fake_raw.root, log=lambda m: None)
    prepare.split_path(data, "mnist", "test").write_bytes(b"half a file")
    assert prepare.prepare_dataset("mnist", data, source_root=fake_raw.root, log=lambda m: None)
    assert_matches(prepare.split_path(data, "mnist", "test"), *fake_raw.arrays["test"])


def test_interrupted_write_leaves_no_partial_file(fake_raw, tmp_path, monkeypatch):
    def write_half_then_die(table, where, **kwargs):
        Path(where).write_bytes(b"PAR1 partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(prepare.pq, "write_table", write_half_then_die)
    with pytest.raises(KeyboardInterrupt):
        prepare.prepare_dataset("mnist", tmp_path / "data", source_root=fake_raw.root, log=lambda m: None)
    assert not (tmp_path / "data").exists()  # no partial file, and no folder the preparation made


def test_a_synthetic_split_written_again_alone_draws_what_it_drew_not_the_other_splits_rows(tmp_path):
    """Run again after an interruption, the test split is drawn as a whole run draws it: no copy of train's rows."""
    data, quiet = tmp_path / "data", lambda m: None
    prepare.prepare_synthetic(8, data, test_rows=8, log=quiet)
    test = prepare.split_path(data, "synthetic", "test")
    first = pq.read_table(test).to_pydict()
    shutil.rmtree(test)
    prepare.prepare_synthetic(8, data, test_rows=8, log=quiet)  # train ready: the test split alone
    assert pq.read_table(test).to_pydict() == first
    assert pq.read_table(prepare.split_path(data, "synthetic", "train")).to_pydict() != first


def test_an_interrupted_synthetic_dataset_leaves_no_folder_it_made(tmp_path, monkeypatch):
    def die(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(prepare.pq, "write_table", die)
    with pytest.raises(KeyboardInterrupt):
        prepare.prepare_synthetic(8, tmp_path / "data", test_rows=8, log=lambda m: None)
    assert not (tmp_path / "data").exists()


def test_ctrl_c_in_prepare_is_one_line_not_a_traceback(fake_raw, tmp_path, monkeypatch, capsys):
    def write_half_then_die(table, where, **kwargs):
        Path(where).write_bytes(b"PAR1 partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(prepare.pq, "write_table", write_half_then_die)
    with pytest.raises(SystemExit) as exit_info:
        main(["prepare", "--dataset", "mnist", "--source-root", str(fake_raw.root), "--data-dir", str(tmp_path / "d")])
    assert exit_info.value.code == 130
    kept = "the file being written is not kept, those finished are: the same command again writes the rest"
    assert capsys.readouterr().err == f"mnistperf: interrupted; {kept}\n"
    assert not (tmp_path / "d").exists()


def test_two_prepares_at_once_both_end_with_correct_files(fake_raw, tmp_path):
    data, errors = tmp_path / "data", []

    def run():
        try:
            prepare.prepare_dataset(
                "mnist", data, source_root=fake_raw.root, formats=["csv"], force=True, log=lambda m: None
            )
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert_matches(prepare.split_path(data, "mnist", "train"), *fake_raw.arrays["train"])
    assert sorted(p.name for p in (data / "MNIST").iterdir()) == [
        "test.csv",
        "test.parquet",
        "train.csv",
        "train.parquet",
    ]


def test_prepare_command_prints_size_and_time_table(fake_raw, tmp_path, capsys):
    main(
        [
            "prepare",
            "--dataset",
            "mnist",
            "--data-dir",
            str(tmp_path / "data"),
            "--source-root",
            str(fake_raw.root),
            "--formats",
            "parquet,csv",
        ]
    )
    out = capsys.readouterr().out
    rows = [
        line.split() for line in out.splitlines() if line.startswith("MNIST ") and ("csv" in line or "parquet" in line)
    ]
    assert [(r[1], r[3]) for r in rows] == [
        ("train", "parquet"),
        ("train", "csv"),
        ("test", "parquet"),
        ("test", "csv"),
    ]
    assert all(r[-1].endswith("x") for r in rows)
    folder = tmp_path / "data" / "MNIST"
    expected = (folder / "train.csv").stat().st_size / (folder / "train.parquet").stat().st_size
    assert float(rows[1][-1].rstrip("x")) == pytest.approx(expected, abs=0.05)


def test_prepare_command_rejects_unknown_format(fake_raw, tmp_path, capsys):
    argv = ["prepare", "--dataset", "mnist", "--data-dir", str(tmp_path), "--source-root", str(fake_raw.root)]
    fails_in_one_line(capsys, [*argv, "--formats", "parquet,xlsx"], "--formats: unknown format 'xlsx'")


def test_synthetic_dataset_is_written_in_shards_of_row_groups(tmp_path, monkeypatch):
    monkeypatch.setattr(prepare, "SYNTHETIC_SHARD_ROWS", 20_000)
    monkeypatch.setattr(prepare, "SYNTHETIC_ROW_GROUP_ROWS", 5_000)
    prepare.prepare_synthetic(50_000, tmp_path / "data", test_rows=100, log=lambda m: None)
    train = prepare.split_path(tmp_path / "data", "synthetic", "train")
    shards = [pq.read_metadata(f) for f in schema.parquet_files(train)]
    assert [m.num_rows for m in shards] == [20_000, 20_000, 10_000]
    assert [m.num_row_groups for m in shards] == [4, 4, 2]
    assert prepare.is_ready(train, 50_000) and not prepare.is_ready(train, 60_000)
    assert schema.read_checked(train, require_labels=True).num_rows == 50_000
    schema.read_checked(prepare.split_path(tmp_path / "data", "synthetic", "test"), require_labels=True)
    assert sorted(p.name for p in (tmp_path / "data" / "Synthetic").iterdir()) == ["test", "train"]  # no temp left


def test_synthetic_rebuild_replaces_the_shard_folder_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(prepare, "SYNTHETIC_SHARD_ROWS", 1_000)
    data = tmp_path / "data"
    prepare.prepare_synthetic(3_000, data, test_rows=10, log=lambda m: None)
    prepare.prepare_synthetic(1_500, data, test_rows=10, log=lambda m: None)  # fewer shards: no stale one may stay
    train = prepare.split_path(data, "synthetic", "train")
    assert [f.name for f in schema.parquet_files(train)] == ["part-00000.parquet", "part-00001.parquet"]
    assert sorted(p.name for p in (data / "Synthetic").iterdir()) == ["test", "train"]


def test_a_data_dir_this_process_may_not_write_in_is_said_before_the_files_are_decoded(fake_raw, tmp_path, monkeypatch):
    import os

    data = tmp_path / "data"
    data.mkdir()
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != data)  # as a read-only mount answers
    decoded = []
    monkeypatch.setattr(sources, "load_split", lambda *args, **kwargs: decoded.append(args))
    with pytest.raises(ConfigError, match=f"--data-dir {data}: {data} is a folder this process may not write in; give"):
        prepare.prepare_dataset("mnist", data, source_root=fake_raw.root, log=lambda m: None)
    assert decoded == [] and list(data.iterdir()) == []
    prepare.require_preparable("mnist", data)  # no local files either: the folder is the fix said first, not them


def test_a_prepare_killed_with_sigterm_lets_go_of_what_it_was_writing_as_ctrl_c_does(tmp_path, monkeypatch, capsys):
    import signal

    from mnistperf.atomic import atomic_write

    target = tmp_path / "data" / "Synthetic" / "train.parquet"

    def killed_while_writing(*args, **kwargs):
        atomic_write(target, lambda tmp: (tmp.write_bytes(b"half"), signal.raise_signal(signal.SIGTERM)))

    monkeypatch.setattr(prepare, "prepare_synthetic", killed_while_writing)
    handler = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as exited:
        main(["prepare", "--dataset", "synthetic", "--data-dir", str(tmp_path / "data")])
    assert signal.getsignal(signal.SIGTERM) is handler  # the process's own handler again afterwards
    assert exited.value.code == 128 + signal.SIGTERM
    kept = "the file being written is not kept, those finished are: the same command again writes the rest"
    assert capsys.readouterr().err == f"mnistperf: terminated; {kept}\n"
    assert list(target.parent.iterdir()) == []  # no temporary file left beside the target
