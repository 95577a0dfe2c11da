"""A prepared file damaged anywhere is caught before training, named, with the exact command that re-creates it."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import NO_WORKERS, damage, fails_in_one_line, stage_argv

from mnistperf.cli import main

PREFIX = ["python", "-m", "mnistperf"]


def fit(data_dir: str, pipeline: str, dataset: str = "mnist", source_root: Path | None = None) -> list[str]:
    source = ["--data.source_root", str(source_root)] if source_root else []
    options = ["--data.batch_size", "8", "--data.pipeline", pipeline, "--data.dataset", dataset]
    return stage_argv("v2_pinned", *NO_WORKERS, *options, "--data.data_dir", data_dir, *source, epochs=1)


@pytest.mark.parametrize("pipeline", ["v2", "stream"])
@pytest.mark.parametrize("place", ["start", "middle", "footer", "truncated"])
def test_damage_anywhere_is_caught_before_training_and_the_fix_works_pasted(
    tmp_path, capsys, fake_raw, place, pipeline
):
    main(["prepare", "--dataset", "mnist", "--source-root", str(fake_raw.root), "--data-dir", "mine"])
    damaged = Path("mine") / "MNIST" / "train.parquet"
    damage(damaged, place)
    capsys.readouterr()
    argv = fit("mine", pipeline, source_root=fake_raw.root)
    out, err = fails_in_one_line(capsys, argv, f"mnistperf: error: {damaged} ")
    assert "epoch" not in out.lower(), out
    assert not (tmp_path / "lightning_logs").exists(), "a fit that never started left a run folder"
    fix = re.search(r"re-create it with `([^`]+)`", err).group(1)
    assert fix == f"python -m mnistperf prepare --force --dataset mnist --data-dir mine --source-root {fake_raw.root}"
    if pipeline == "v2":  # pasted, the fix rebuilds that file, and the same fit then trains
        args = shlex.split(fix)
        assert args[:3] == PREFIX
        main(args[3:])
        main(fit("mine", pipeline, source_root=fake_raw.root))
        assert not (tmp_path / "data").exists(), "the fix wrote somewhere else than the user's data dir"
        assert not (tmp_path / "mine" / "FashionMNIST").exists(), "the fix prepared a dataset the user never used"


def test_a_damaged_synthetic_shard_names_the_command_for_its_own_rows(tmp_path, capsys):
    main(["prepare", "--dataset", "synthetic", "--rows", "48", "--data-dir", "big"])
    shard = Path("big") / "Synthetic" / "train" / "part-00000.parquet"
    damage(shard, "middle")
    capsys.readouterr()
    fails_in_one_line(
        capsys,
        fit("big", "stream", dataset="synthetic"),
        str(shard),
        "re-create it with `python -m mnistperf prepare --force --dataset synthetic --rows 48 --data-dir big`",
    )


@pytest.mark.parametrize("place", ["start", "middle", "footer", "truncated"])
def test_prepare_without_force_rebuilds_a_damaged_file_instead_of_calling_it_ready(tmp_path, capsys, fake_raw, place):
    prepare = ["prepare", "--dataset", "mnist", "--source-root", str(fake_raw.root), "--data-dir", "mine"]
    main(prepare)
    damaged = Path("mine") / "MNIST" / "train.parquet"
    damage(damaged, place)
    capsys.readouterr()
    main(prepare)
    assert "ready" not in capsys.readouterr().out
    pq.ParquetFile(damaged, page_checksum_verification=True).read()  # whole again: every page reads
    main(prepare)
    assert "ready" in capsys.readouterr().out
