"""Timing: the verdict from real slow loaders and steps, the device timeline arithmetic, warm-up, and CUDA-only checks."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch
from lightning import LightningModule, Trainer
from torch.utils.data import DataLoader, Dataset

from conftest import CONFIGS
from mnistperf.cli import main
from mnistperf.timing import EpochTimer
from mnistperf.timing.device_clock import device_figures
from mnistperf.timing.summary import aggregate, classify, epoch_row

PIPELINES = ("v1", "v2", "resident", "stream")


# ---------------------------------------------------------------- the verdict on a CPU, driven for real
class SlowItems(Dataset):
    def __init__(self, delay_s: float):
        self.delay_s = delay_s

    def __len__(self) -> int:
        return 32

    def __getitem__(self, index):
        time.sleep(self.delay_s)
        return {"image": torch.zeros(4), "label": torch.tensor(index % 2)}


class SleepyModule(LightningModule):
    def __init__(self, step_delay_s: float):
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)
        self.step_delay_s = step_delay_s

    def training_step(self, batch, batch_idx):
        time.sleep(self.step_delay_s)
        return torch.nn.functional.cross_entropy(self.layer(batch["image"]), batch["label"])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def timed_fit(item_delay_s: float, step_delay_s: float) -> EpochTimer:
    timer = EpochTimer()
    trainer = Trainer(accelerator="cpu", max_epochs=2, callbacks=[timer], logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(SleepyModule(step_delay_s), DataLoader(SlowItems(item_delay_s), batch_size=4))
    return timer


def test_a_slow_loader_is_called_input_bound():
    timer = timed_fit(item_delay_s=0.01, step_delay_s=0.0)  # 40 ms of loading per step, a step of microseconds
    assert [e["verdict"] for e in timer.epochs] == ["input-bound", "input-bound"]
    assert timer.epochs[1]["host_wait_share"] > 0.5


def test_a_slow_step_is_called_compute_bound():
    timer = timed_fit(item_delay_s=0.0, step_delay_s=0.04)
    assert [e["verdict"] for e in timer.epochs] == ["compute-bound", "compute-bound"]
    assert timer.epochs[1]["host_wait_share"] < 0.5


# ---------------------------------------------------------------- the device timeline, as CUDA events report it
def timeline(steps: int, host_step: float, device_step: float, fetch: float):
    """Simulate a host that fetches for ``fetch`` s and launches a step for ``host_step`` s, and a device that
    runs each step for ``device_step`` s once its work is launched (in order, never before it was launched)."""
    host = device_free = 0.0
    starts, ends, host_ends = [], [], []
    for _ in range(steps):
        host += fetch
        start = max(host, device_free)  # the start marker runs when enqueued and the device is free
        host += host_step
        end = max(start + device_step, host)  # the device cannot finish before the host launched the last kernel
        device_free = end
        starts.append(start)
        ends.append(end)
        host_ends.append(host)
    return device_figures(starts, ends, host_ends), max(host, device_free)


@pytest.mark.parametrize("host_step,device_step,fetch,expected", [
    (0.001, 0.010, 0.0001, "compute-bound"),   # the host runs ahead; work queues on the device
    (0.005, 0.001, 0.0001, "overhead-bound"),  # the device finishes each kernel as soon as it is launched
    (0.001, 0.001, 0.0100, "input-bound"),     # the device idles while the host fetches the next batch
])
def test_device_timelines_give_the_three_verdicts(host_step, device_step, fetch, expected):
    figures, train_s = timeline(50, host_step, device_step, fetch)
    row = epoch_row(2, train_s, 0.1, 50 * 512, host_wait_s=50 * fetch, device=figures, metrics={}, threshold=0.5)
    assert row["verdict"] == expected, row
    assert row["device_step_s"] + row["device_gap_s"] == pytest.approx(train_s)


def test_without_device_figures_the_cpu_keeps_two_answers():
    assert classify({"host_wait_share": 0.7}, 0.5)[0] == "input-bound"
    assert classify({"host_wait_share": 0.2}, 0.5)[0] == "compute-bound"


def test_warm_up_is_reported_apart_from_the_steady_state():
    epochs = [epoch_row(i, t, 0.5, 1000, 0.1, None, {}, 0.5) for i, t in ((1, 30.0), (2, 2.0), (3, 4.0))]
    summary = aggregate(epochs, 0.5)
    assert summary["warmup"] == {"epoch": 1, "train_s": 30.0, "eval_s": 0.5}
    assert summary["steady_epochs"] == [2, 3] and summary["avg_train_s"] == 3.0
    assert summary["samples_per_s"] == pytest.approx(2000 / 6.0) and summary["total_train_s"] == 36.0
    single = aggregate(epochs[:1], 0.5)
    assert single["warmup"] is None and single["avg_train_s"] == 30.0


# ---------------------------------------------------------------- precision and compilation through the CLI
def fit(tmp_path: Path, config: str, *overrides: str) -> dict:
    main(["fit", "--config", str(CONFIGS / config), "--trainer.max_epochs", "3", "--trainer.enable_progress_bar",
          "false", "--trainer.enable_model_summary", "false", *overrides])
    return json.loads(next((tmp_path / "lightning_logs").glob("*/version_0/timing.json")).read_text())


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the fallback where no GPU has native bf16")
def test_bf16_falls_back_to_32_bit_without_a_native_bf16_gpu_and_says_so(tiny_data, monkeypatch, caplog):
    monkeypatch.chdir(tiny_data.parent)
    summary = fit(tiny_data.parent, "v3_resident.yaml", "--trainer.precision", "bf16-mixed")
    assert summary["precision"] == "32-true"
    assert "trainer.precision bf16-mixed: no GPU with native bf16 here" in caplog.text


def test_the_compiled_step_recompiles_nothing_after_its_first_epoch(tiny_data, monkeypatch):
    """96 training rows in batches of 40 leave a partial batch of 16, and validation runs in eval mode:
    every graph torch needs is compiled in epoch 1, none in the epochs after."""
    from torch._dynamo.utils import counters

    monkeypatch.chdir(tiny_data.parent)
    torch._dynamo.reset()
    counters.clear()
    frames_after_epoch: list[int] = []

    class CountCompiles(EpochTimer):  # the timing callback the config already has, reading torch's counters
        def on_train_epoch_end(self, trainer, pl_module):
            super().on_train_epoch_end(trainer, pl_module)
            frames_after_epoch.append(counters["stats"]["unique_graphs"])

    monkeypatch.setattr("mnistperf.timing.EpochTimer", CountCompiles)
    fit(tiny_data.parent, "v3_compiled.yaml", "--model.compile_on_cpu", "true", "--data.batch_size", "40")
    assert frames_after_epoch[0] > 0  # on_train_epoch_end comes after the epoch's validation
    assert frames_after_epoch[0] == frames_after_epoch[1] == frames_after_epoch[2], frames_after_epoch


# ---------------------------------------------------------------- CUDA only
@pytest.mark.cuda
@pytest.mark.parametrize("pipeline", PIPELINES)
def test_no_step_waits_for_the_device(tiny_data, monkeypatch, pipeline):
    """Between the first and the last training step nothing may synchronize host and device."""

    class ForbidSyncs(EpochTimer):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            super().on_train_batch_start(trainer, pl_module, batch, batch_idx)
            if batch_idx == 1:
                torch.cuda.set_sync_debug_mode("error")

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if batch_idx + 2 == trainer.num_training_batches:
                torch.cuda.set_sync_debug_mode("default")
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)

    monkeypatch.chdir(tiny_data.parent)
    monkeypatch.setattr("mnistperf.timing.EpochTimer", ForbidSyncs)
    try:
        fit(tiny_data.parent, "v2_pinned.yaml", "--data.pipeline", pipeline, "--data.batch_size", "8",
            "--data.num_workers", "0", "--data.persistent_workers", "false", "--trainer.max_epochs", "1")
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.cuda
def test_cuda_events_give_device_figures_and_gpu_memory(tiny_data, monkeypatch):
    monkeypatch.chdir(tiny_data.parent)
    summary = fit(tiny_data.parent, "v3_resident.yaml", "--data.batch_size", "8")
    for epoch in summary["epochs"]:
        assert 0 < epoch["device_step_s"] <= epoch["train_s"] and 0 <= epoch["device_gap_share"] <= 1
        assert epoch["device_lag_steps"] >= 0 and epoch["verdict"] in ("input-bound", "overhead-bound", "compute-bound")
    assert summary["accelerator"] == "cuda" and summary["peak_device_mb"]["reserved"] > 0


@pytest.mark.cuda
def test_the_compiled_stage_runs_bf16_on_a_gpu_that_has_it(tiny_data, monkeypatch):
    monkeypatch.chdir(tiny_data.parent)
    summary = fit(tiny_data.parent, "v3_compiled.yaml", "--data.batch_size", "40")
    expected = "bf16-mixed" if torch.cuda.is_bf16_supported(including_emulation=False) else "32-true"
    assert summary["precision"] == expected and summary["accelerator"] == "cuda"
