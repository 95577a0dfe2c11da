"""Two-process CPU DDP (gloo) through the real command line: every row once per epoch (SampleAudit), one summary."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import CONFIGS, NO_WORKERS, REPO, stage_process, write_parquet
from records import AUDIT, audit_counts, audit_epochs

from mnistperf.data import schema

ROWS = 200  # a multiple of the world size: DistributedSampler-style padding adds nothing


@pytest.fixture
def numbered_data(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (ROWS, 28, 28), dtype=np.uint8)
    images[:, 0, 0], images[:, 0, 1] = np.arange(ROWS) % 256, np.arange(ROWS) // 256
    labels = rng.integers(0, 10, ROWS)
    for split in ("train", "test"):
        write_parquet(tmp_path / "data" / "FashionMNIST" / f"{split}.parquet", schema.build_table(images, labels), 32)
    return tmp_path


def ddp_run(folder: Path, config: str, *overrides: str) -> subprocess.CompletedProcess:
    """fit on two CPU processes (gloo), 2 epochs, batches of 16, in ``folder``; it must succeed."""
    env = {
        **os.environ,
        "MNISTPERF_RECORD_DIR": str(folder),
        "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")]),
    }
    command = stage_process(
        CONFIGS / config,
        "--trainer.accelerator",
        "cpu",
        "--trainer.strategy",
        "ddp",
        "--trainer.devices",
        "2",
        "--trainer.enable_checkpointing",
        "false",
        "--data.batch_size",
        "16",
        *overrides,
        epochs=2,
    )
    result = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.stdout.count("Average Train Time per Epoch") == 1  # printed once
    return result


def ddp_fit(folder: Path, config: str, *overrides: str) -> list[dict]:
    """:func:`ddp_run` with a strict sample audit (a duplicate or a missing row fails the run); its counts, per
    epoch."""
    audit = (AUDIT, "--trainer.callbacks.strict=true", f"--trainer.callbacks.dataset_size={ROWS}")
    return audit_epochs(ddp_run(folder, config, *audit, *overrides).stdout)


@pytest.mark.parametrize("pipeline", ["v1", "v2", "resident", "stream"])
def test_ddp_two_processes_see_every_row_once_per_epoch(numbered_data, pipeline):
    epochs = ddp_fit(
        numbered_data,
        "v2_pinned.yaml",
        "--data.pipeline",
        pipeline,
        *NO_WORKERS,
        "--data.pin_memory",
        "false",
    )
    assert audit_counts(epochs) == [(ROWS, ROWS, 0, 0)] * 2
    assert [e["per_rank"] for e in epochs] == [[ROWS // 2] * 2] * 2
    assert epochs[1]["same_order_ranks"] == 0  # both ranks reshuffled between epochs
    summary = json.loads(
        next((numbered_data / "lightning_logs" / "v2_pinned").glob("version_*/timing.json")).read_text()
    )
    assert summary["world_size"] == 2
    assert [e["samples"] for e in summary["epochs"]] == [ROWS, ROWS]  # all ranks added up
    for row in (summary, *summary["epochs"]):  # each rank's own train time and wait for data
        assert [r["rank"] for r in row["ranks"]] == [0, 1]
        assert all(r["train_s"] > 0 and r["input_wait_s"] >= 0 for r in row["ranks"])


def test_the_graphed_stage_under_ddp_steps_eagerly_in_sync_with_groups_of_batches(numbered_data):
    """v4_graphed on two processes: the whole step runs eagerly (the all-reduce is not captured), 4 batches per
    Lightning step (groups of 4, 2 and a partial 1 of 100 rows per rank); every row once per epoch, and both
    ranks end with the same weights, so every one of the optimizer steps was all-reduced."""
    epochs = ddp_fit(
        numbered_data,
        "v4_graphed.yaml",
        "--data.batches_per_step",
        "4",
        "--trainer.callbacks.sample_dims=2",
        "--trainer.callbacks+=records.WeightsRecorder",
    )
    assert audit_counts(epochs) == [(ROWS, ROWS, 0, 0)] * 2
    weights = [json.loads((numbered_data / f"weights{r}.json").read_text()) for r in range(2)]
    assert weights[0] == pytest.approx(weights[1], abs=1e-6) and weights[0] != pytest.approx([0.0] * len(weights[0]))


def test_under_ddp_the_profiled_window_reads_each_ranks_time_in_collectives(numbered_data):
    """gloo's all-reduces, read from the profiled window: each rank's share of it inside collectives, and inside
    them with no work beside, averaged in timing.json and said in the ranks line."""
    result = ddp_run(
        numbered_data,
        "v2_pinned.yaml",
        "--trainer.callbacks.init_args.window_share",
        "null",  # a window however short the fit
        "--data.pipeline",
        "v2",
        *NO_WORKERS,
        "--data.pin_memory",
        "false",
    )
    summary = json.loads(
        next((numbered_data / "lightning_logs" / "v2_pinned").glob("version_*/timing.json")).read_text()
    )
    talked = summary["busy_window"]["communication"]
    assert talked["backend"] == "gloo" and talked["world_size"] == 2 and talked["collectives"] > 0
    assert 0 < talked["share"] <= 1 and 0 <= talked["exposed_share"] <= talked["share"]
    window_epoch = summary["epochs"][summary["busy_window"]["epoch"] - 1]
    each = [rank["comm_share"] for rank in window_epoch["ranks"]]
    assert all(0 < share <= 1 for share in each)
    assert all(0 <= rank["comm_exposed_share"] <= rank["comm_share"] for rank in window_epoch["ranks"])
    assert sum(each) / 2 == pytest.approx(talked["share"])  # the ranks' own readings, averaged
    assert "gloo collectives" in result.stdout and "in collectives" in result.stdout
