"""What trains to the same weights, bit for bit, on a CPU: the claims docs/stages.md makes, each guarded here.

The stages change speed, not the arithmetic: with the same seed and the same loader settings, a run repeats
itself, the per-row and pre-tensorized datasets train the same weights, and a resumed run continues exactly
where it stopped. Where it stops: see docs/stages.md (v3_resident's own shuffle, bf16, a GPU's kernels).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from conftest import NO_WORKERS, newest_checkpoint, run_stage


def trained(workdir: Path, stage: str, *overrides: str, epochs: int = 2) -> dict[str, torch.Tensor]:
    """The weights of the newest checkpoint of ``stage`` after a fit with these overrides (batch 32: 3 steps)."""
    run_stage(stage, "--data.batch_size", "32", *overrides, epochs=epochs)
    return torch.load(newest_checkpoint(workdir, stage), weights_only=True)["state_dict"]


def assert_identical(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    different = [key for key in a if not torch.equal(a[key], b[key])]
    assert not different, f"weights differ: {different}"


ONE_WORKER = ["--data.num_workers", "1"]  # v2_pinned's persistent, pinned workers, fewer of them


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory, _tiny_parquet: Path) -> dict[str, dict[str, torch.Tensor]]:
    """The weights of two-epoch fits that several tests compare: v2_pinned with one worker, and v3_resident."""
    folder = tmp_path_factory.mktemp("straight")
    shutil.copytree(_tiny_parquet, folder / "data", copy_function=shutil.copyfile)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        return {"v2_pinned": trained(folder, "v2_pinned", *ONE_WORKER), "v3_resident": trained(folder, "v3_resident")}


def test_a_stage_run_twice_trains_the_same_weights(workdir, straight):
    assert_identical(trained(workdir, "v2_pinned", *ONE_WORKER), straight["v2_pinned"])


def test_the_cpu_ladder_trains_the_same_weights_at_the_same_batch_size(workdir, straight):
    """Per-row or pre-tensorized dataset, workers or none, persistent or not, DataLoader or resident: one order."""
    v2 = straight["v2_pinned"]
    assert_identical(trained(workdir, "v1_bs512"), v2)
    assert_identical(straight["v3_resident"], v2)


@pytest.mark.parametrize(
    "stage, overrides",
    [("v2_pinned", [*NO_WORKERS]), ("v2_pinned", ONE_WORKER), ("v3_resident", [])],
)
def test_a_resumed_run_trains_the_weights_of_an_uninterrupted_one(workdir, straight, stage, overrides):
    """With workers too: Lightning starts the loader's iterator, which draws the order, before it sets the epoch."""
    kept = stage == "v3_resident" or overrides == ONE_WORKER
    uninterrupted = straight[stage] if kept else trained(workdir, stage, *overrides, epochs=2)
    trained(workdir, stage, *overrides, epochs=1)
    resumed = trained(workdir, stage, *overrides, "--ckpt_path", str(newest_checkpoint(workdir, stage)), epochs=2)
    assert_identical(uninterrupted, resumed)
