"""The litdata pipeline: every sample once per epoch, resuming mid-epoch, remote data, and a missing package."""

from __future__ import annotations

import builtins
import collections
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import CONFIGS, REPO, random_split, write_parquet
from mnistperf.cli import main
from mnistperf.data import schema
from mnistperf.data.datamodule import MNISTDataModule

pytest.importorskip("litdata")
ROWS = 203  # not a multiple of the batch, the workers or the shards


def numbered_table(rows: int):
    """Rows whose first two pixels hold the row number (low byte, high byte)."""
    images, labels = random_split(rows, seed=3)
    images[:, 0, 0], images[:, 0, 1] = np.arange(rows) % 256, np.arange(rows) // 256
    return schema.build_table(images, labels)


def row_ids(batch) -> list[int]:
    pixels = (batch["image"].reshape(len(batch["label"]), -1)[:, :2] * 255).round().to(torch.int64)
    return (pixels[:, 0] + 256 * pixels[:, 1]).tolist()


@pytest.fixture(params=["one file", "shards"])
def numbered_data(tmp_path, request) -> tuple[Path, str]:
    """(data_dir, dataset): FashionMNIST as one Parquet file per split, or Synthetic as folders of shards."""
    table = numbered_table(ROWS)
    if request.param == "one file":
        folder = tmp_path / "data" / "FashionMNIST"
        write_parquet(folder / "test.parquet", table.slice(0, 50))
        write_parquet(folder / "train.parquet", table, row_group_size=40)
        return tmp_path / "data", "fashion_mnist"
    folder = tmp_path / "data" / "Synthetic"
    write_parquet(folder / "test" / "part-00000.parquet", table.slice(0, 50))
    for index, start in enumerate(range(0, ROWS, 70)):
        write_parquet(folder / "train" / f"part-{index:05d}.parquet", table.slice(start, 70), row_group_size=25)
    return tmp_path / "data", "synthetic"


def litdata_module(data_dir: Path, **options) -> MNISTDataModule:
    dm = MNISTDataModule(data_dir=str(data_dir), pipeline="litdata", **{"batch_size": 16, **options})
    dm.prepare_data()
    dm.setup("fit")
    return dm


@pytest.mark.parametrize("num_workers", [0, 2])
def test_every_sample_once_per_epoch_with_workers_and_reshuffled(numbered_data, num_workers):
    data_dir, dataset = numbered_data
    dm = litdata_module(data_dir, dataset=dataset, num_workers=num_workers)
    epochs = []
    loader = dm.train_dataloader()
    for _ in range(2):
        seen = [i for batch in loader for i in row_ids(batch)]
        assert collections.Counter(seen) == collections.Counter(range(ROWS))
        epochs.append(seen)
    assert epochs[0] != epochs[1]  # a new order every epoch
    validation = [i for batch in dm.val_dataloader() for i in row_ids(batch)]
    assert collections.Counter(validation) == collections.Counter(range(50))


def test_the_copy_is_written_once_and_rewritten_when_the_parquet_changes(tiny_data, capsys):
    litdata_module(tiny_data)
    copy = tiny_data / "FashionMNIST" / "litdata" / "train"
    assert (copy / "index.json").is_file() and "wrote the litdata copy" in capsys.readouterr().out
    litdata_module(tiny_data)
    assert "wrote the litdata copy" not in capsys.readouterr().out  # current: not written again
    train = tiny_data / "FashionMNIST" / "train.parquet"
    os.utime(train, (train.stat().st_mtime + 10,) * 2)
    litdata_module(tiny_data)
    assert "wrote the litdata copy of" in capsys.readouterr().out
    assert not [p for p in copy.parent.iterdir() if p.name.startswith(".")]  # no temporary folder left behind


def test_without_litdata_the_pipeline_says_how_to_install_it(tiny_data, monkeypatch, capsys):
    real_import = builtins.__import__

    def no_litdata(name, *args, **kwargs):
        if name == "litdata" or name.startswith("litdata."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_litdata)
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(CONFIGS / "streaming_litdata.yaml"), "--data.data_dir", str(tiny_data)])
    assert exit_info.value.code == 2
    assert "pip install 'mnistperf[litdata]'" in capsys.readouterr().err


def test_remote_data_dir_is_refused_by_pipelines_that_read_local_files_only(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(CONFIGS / "v2_pinned.yaml"), "--data.data_dir", "s3://bucket/data"])
    assert exit_info.value.code == 2
    assert "is remote, and the v2 pipeline reads local files only" in capsys.readouterr().err


# ---------------------------------------------------------------- through the command line, in fresh processes
def run_fit(cwd: Path, *args: str, record: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "MNISTPERF_RECORD_DIR": str(cwd),
           "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "mnistperf", "fit", "--config", str(CONFIGS / "streaming_litdata.yaml"),
               "--trainer.accelerator", "cpu", "--trainer.enable_progress_bar", "false",
               "--trainer.enable_model_summary", "false", "--data.batch_size", "16", "--data.num_workers", "0",
               "--data.persistent_workers", "false", "--data.pin_memory", "false", *args]
    if record:
        command.append("--trainer.callbacks+=sample_recorder.SampleRecorder")
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def test_ddp_two_processes_see_every_sample_once_per_epoch(tiny_data):
    """192 rows = 2 ranks x 6 batches of 16: litdata leaves nothing out (see LitdataPipeline.loader)."""
    table = numbered_table(192)
    write_parquet(tiny_data / "FashionMNIST" / "train.parquet", table, row_group_size=32)
    run_fit(tiny_data.parent, "--trainer.strategy", "ddp", "--trainer.devices", "2", "--trainer.max_epochs", "2",
            "--trainer.enable_checkpointing", "false")
    ranks = [json.loads((tiny_data.parent / f"rank{r}.json").read_text()) for r in range(2)]
    for epoch in range(2):
        assert len(ranks[0][epoch]) == len(ranks[1][epoch]) == 96
        assert collections.Counter(ranks[0][epoch] + ranks[1][epoch]) == collections.Counter(range(192))
    assert ranks[0][0] != ranks[0][1]


def test_an_interrupted_epoch_resumes_with_the_samples_not_yet_seen(tiny_data):
    write_parquet(tiny_data / "FashionMNIST" / "train.parquet", numbered_table(ROWS), row_group_size=40)
    cwd = tiny_data.parent
    checkpoints = ["--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint",
                   "--trainer.callbacks.every_n_train_steps=5", "--trainer.callbacks.save_last=true",
                   "--trainer.callbacks.dirpath=checkpoints"]
    # Interrupted right after the checkpoint of step 5: samples of 5 batches seen.
    run_fit(cwd, "--trainer.max_epochs", "1", "--trainer.max_steps", "5", *checkpoints)
    first = json.loads((cwd / "rank0.json").read_text())
    assert len(first[0]) == 5 * 16
    run_fit(cwd, "--trainer.max_epochs", "1", *checkpoints, "--ckpt_path", "checkpoints/last.ckpt")
    rest = json.loads((cwd / "rank0.json").read_text())
    assert collections.Counter(first[0] + rest[0]) == collections.Counter(range(ROWS))


# ---------------------------------------------------------------- remote data, on an S3-compatible server of this test's own
@pytest.fixture
def s3_server(monkeypatch):
    server_module = pytest.importorskip("moto.server")
    boto3 = pytest.importorskip("boto3")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    for key, value in {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1",
                       "AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true"}.items():
        monkeypatch.setenv(key, value)
    try:
        yield boto3.client("s3", endpoint_url=endpoint)
    finally:
        server.stop()


def test_litdata_finds_the_copy_on_s3(tiny_data, s3_server, tmp_path, monkeypatch):
    """The URI reaches litdata, which reads the copy's index and its first sample from the server. (Iterating is not
    tested here: litdata prefetches chunks through obstore, which refuses the plain-http endpoint of a local server.)"""
    litdata_module(tiny_data)  # writes the local copy
    s3_server.create_bucket(Bucket="lab")
    copy_root = tiny_data / "FashionMNIST" / "litdata"
    for file in copy_root.rglob("*"):
        if file.is_file():
            s3_server.upload_file(str(file), "lab", f"data/FashionMNIST/litdata/{file.relative_to(copy_root).as_posix()}")
    monkeypatch.chdir(tmp_path)  # nothing local to fall back on
    dm = MNISTDataModule(data_dir="s3://lab/data/", pipeline="litdata", batch_size=16)
    dm.prepare_data()  # nothing to prepare for remote data
    dm.setup("fit")
    train, val = dm.datasets["train"], dm.datasets["val"]
    assert train.input_dir.url == "s3://lab/data/FashionMNIST/litdata/train"
    assert (len(train), len(val)) == (96, 40)
    assert len(dm.train_dataloader()) == 6
