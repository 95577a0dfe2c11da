"""A prepared file damaged anywhere is caught before training, named, with the exact command that re-creates it."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import CONFIGS, NO_WORKERS, QUIET, damage

from mnistperf.cli import main

PREFIX = ["python", "-m", "mnistperf"]


def fit(data_dir: str, pipeline: str, dataset: str = "mnist", source_root: Path | None = None) -> list[str]:
    source = ["--data.source_root", str(source_root)] if source_root else []
    return [
        "fit",
        "--config",
        str(CONFIGS / "v2_pinned.yaml"),
        *QUIET,
        *NO_WORKERS,
        "--trainer.max_epochs",
        "1",
        "--data.batch_size",
        "8",
        "--data.pipeline",
        pipeline,
        "--data.dataset",
        dataset,
        "--data.data_dir",
        data_dir,
        *source,
    ]


@pytest.mark.parametrize("pipeline", ["v2", "stream"])
@pytest.mark.parametrize("place", ["start", "middle", "footer", "truncated"])
def test_damage_anywhere_is_caught_before_training_and_the_fix_works_pasted(
    tmp_path, capsys, fake_raw, place, pipeline
):
    main(["prepare", "--dataset", "mnist", "--source-root", str(fake_raw.root), "--data-dir", "mine"])
    damaged = Path("mine") / "MNIST" / "train.parquet"
    damage(damaged, place)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(fit("mine", pipeline, source_root=fake_raw.root))
    out, err = capsys.readouterr()
    assert exit_info.value.code == 2, err
    assert err.startswith(f"mnistperf: error: {damaged} ") and err.strip().count("\n") == 0, err
    assert "Traceback" not in err and "epoch" not in out.lower(), (out, err)
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
    with pytest.raises(SystemExit) as exit_info:
        main(fit("big", "stream", dataset="synthetic"))
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and str(shard) in err, err
    assert "re-create it with `python -m mnistperf prepare --force --dataset synthetic --rows 48 --data-dir big`" in err


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
