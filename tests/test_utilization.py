"""Utilization: one training step's FLOPs counted once (or given), the achieved FLOP/s per epoch, and the MFU where
the device's peak is known."""

from __future__ import annotations

import re
import warnings

import pytest
import torch
from conftest import fit_module
from lightning import LightningModule
from torch.utils.data import DataLoader, TensorDataset

from mnistperf.diagnosis import EpochTimer
from mnistperf.diagnosis.figures import scalars
from mnistperf.diagnosis.measure.flops import OWN_PEAKS, Peak, StepFlops, number_format, peak_flops
from mnistperf.diagnosis.record.clock import EpochClock
from mnistperf.diagnosis.record.epoch_text import COMPILED_UNCOUNTED, peak_said
from mnistperf.diagnosis.record.text import format_summary

BATCH, IN, OUT = 8, 32, 16


class Linear(LightningModule):
    """One linear layer: a step's matrix products are 2*B*IN*OUT FLOPs forward, twice that backward (weight, input)."""

    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(IN, OUT)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x.requires_grad_()), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def rows() -> DataLoader:
    return DataLoader(TensorDataset(torch.randn(BATCH * 6, IN), torch.randint(0, OUT, (BATCH * 6,))), batch_size=BATCH)


def peak(monkeypatch, name: str, fmt: str):
    """The peak peak_flops gives for a GPU of that name, emulated (no GPU needed)."""
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    return peak_flops(torch.device("cuda", 0), fmt)


def test_the_number_format_and_the_peaks_of_current_gpus(monkeypatch):
    assert number_format("bf16-mixed", "highest") == "bf16" and number_format("16-mixed", "highest") == "fp16"
    assert number_format("32-true", "high") == "tf32" and number_format("32-true", "highest") == "fp32"
    # Hopper: Lightning's dense peaks for an H100 SXM (HBM3) and PCIe; the dense ones where it has none, or gives an
    # H200's or NVL card's with sparsity (twice as high)
    h100 = peak(monkeypatch, "NVIDIA H100 80GB HBM3", "bf16")
    assert h100[0] == pytest.approx(989.4e12) and peak_said(h100) == "NVIDIA H100 80GB HBM3's bf16 peak (989 TFLOP/s)"
    assert peak(monkeypatch, "NVIDIA H100 PCIe", "bf16")[0] == pytest.approx(756e12)
    h200 = peak(monkeypatch, "NVIDIA H200", "tf32")
    assert h200[0] == pytest.approx(494.7e12) and peak_said(h200) == "NVIDIA H200's tf32 peak (495 TFLOP/s)"
    assert peak(monkeypatch, "NVIDIA GH200 480GB", "bf16")[0] == pytest.approx(989.4e12)
    assert peak(monkeypatch, "NVIDIA H100", "bf16")[0] == pytest.approx(989.4e12)
    assert peak(monkeypatch, "NVIDIA H100 NVL", "bf16")[0] == peak(monkeypatch, "NVIDIA H200 NVL", "bf16")[0] == 835e12
    assert peak(monkeypatch, "NVIDIA A10", "bf16")[0] == pytest.approx(125e12)
    # Lightning's tensor-core-less bf16 for these, and its L4 for an L40: the dense tensor-core peaks instead
    assert peak(monkeypatch, "NVIDIA GeForce RTX 4090", "bf16")[0] == pytest.approx(165.2e12)
    assert peak(monkeypatch, "NVIDIA RTX A6000", "bf16")[0] == pytest.approx(154.8e12)
    assert peak(monkeypatch, "NVIDIA L40", "bf16")[0] == pytest.approx(181e12)
    assert peak(monkeypatch, "NVIDIA L40S", "bf16")[0] == pytest.approx(362e12)
    # The rest from Lightning's table: an A100 is not taken for an A10
    assert peak(monkeypatch, "NVIDIA A100-SXM4-80GB", "bf16")[0] == pytest.approx(312e12)
    assert peak(monkeypatch, "Tesla T4", "fp16")[0] == pytest.approx(65e12)
    unknown = peak(monkeypatch, "Imaginary GPU 9000", "bf16")
    assert unknown.flops_per_s is None and "no bf16 peak is known for Imaginary GPU 9000" in peak_said(unknown)
    assert "mnistperf.diagnosis.measure.flops.OWN_PEAKS" in peak_said(unknown)  # where to add it
    assert peak_flops(torch.device("cpu"), "fp32") == Peak(None, "fp32", "cpu")
    assert peak_said(peak_flops(torch.device("cpu"), "fp32")) == "no peak is known for a cpu device"


def test_the_own_peaks_are_only_what_lightnings_table_lacks_or_states_otherwise(monkeypatch):
    from lightning.fabric.utilities.throughput import get_available_flops

    names = ["NVIDIA H100 NVL", "NVIDIA H200 NVL", "NVIDIA H200", "NVIDIA GH200 480GB", "NVIDIA H100", "NVIDIA L40S"]
    names += ["NVIDIA L40", "NVIDIA A10", "NVIDIA RTX A6000", "NVIDIA A40", "NVIDIA GeForce RTX 4090"]
    matched = set()
    for name in names:
        key = next(key for key, _ in OWN_PEAKS if re.search(rf"\b{key}\b", name))  # each name is one of ours
        matched.add(key)
        ours = peak(monkeypatch, name, "bf16")[0]  # the name now emulated
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs = get_available_flops(torch.device("cuda", 0), torch.bfloat16)
        assert theirs is None or theirs != pytest.approx(ours), name
    assert matched == {key for key, _ in OWN_PEAKS}  # every entry is needed by a GPU named here


def test_a_fit_too_short_for_the_counter_is_not_counted_and_says_how_to_give_its_flops():
    timer = EpochTimer()
    fit_module(Linear(), rows(), callbacks=[timer], max_epochs=2)
    summary = timer.clock.summary()
    assert summary["flops_per_step"] is None
    assert all(row["achieved_flops_per_s"] is None for row in timer.epochs)
    reason = summary["mfu_reason"]
    assert "too few for the FLOP counter" in reason and "flops_per_batch" in reason


def test_the_fits_first_step_is_counted_and_each_epoch_gets_its_achieved_flops(monkeypatch):
    monkeypatch.setattr("mnistperf.diagnosis.measure.flops.COUNT_SHARE", 1.0)  # counted however short the fit
    timer = EpochTimer()
    fit_module(Linear(), rows(), callbacks=[timer], max_epochs=2)
    summary = timer.clock.summary()
    assert summary["flops_per_step"] == 3 * 2 * BATCH * IN * OUT
    for row in timer.epochs:
        assert row["achieved_flops_per_s"] == pytest.approx(summary["flops_per_step"] * 6 / row["train_s"])
        assert row["mfu"] is None and "timing/achieved_flops_per_s" in scalars(row, every=True)
    assert summary["mfu"] is None and summary["mfu_reason"] == "no peak is known for a cpu device"
    assert "Utilization" not in format_summary(summary)  # without a peak the line decides nothing


def test_a_given_flops_per_batch_is_taken_instead_of_counting():
    timer = EpochTimer(flops_per_batch=1e9)
    fit_module(Linear(), rows(), callbacks=[timer], max_epochs=1)
    assert timer.clock.summary()["flops_per_step"] == 1e9
    assert timer.epochs[0]["achieved_flops_per_s"] == pytest.approx(6e9 / timer.epochs[0]["train_s"])


def test_mfu_on_a_known_gpu_is_the_achieved_over_the_peak_times_the_ranks():
    """Emulated: the clock's arithmetic with an H100's bf16 peak, without one."""
    h100 = Peak(989.4e12, "bf16", "cuda", "NVIDIA H100 80GB HBM3")
    clock = EpochClock(torch.device("cpu"), flops_per_step=1e12, world_size=2, peak=h100)
    for _ in range(2):
        clock.epoch_start(batches=4)
        for index in range(4):
            clock.step_start(index)
            clock.step_end(index)
        row = clock.epoch_end()
        assert row["mfu"] == pytest.approx(row["achieved_flops_per_s"] / (2 * 989.4e12))
    summary = clock.summary()
    assert summary["mfu"] == pytest.approx(clock.epochs[1]["mfu"]) and "H100" in summary["peak"]
    assert "FLOP/s achieved, MFU " in format_summary(summary)
    not_counted = StepFlops(None, 2, reason="not counted").run(clock.epochs, [2, 2], "x")
    assert not_counted["mfu"] is None and not_counted["mfu_reason"] == "not counted"


def test_compare_puts_the_two_runs_utilization_side_by_side():
    from mnistperf.diagnosis.show.compare import compare

    base = {"avg_train_s": 2.0, "samples_per_s": 100.0, "verdict": "compute-bound"}
    a = {**base, "achieved_flops_per_s": 100e12, "mfu": 0.1}
    b = {**base, "achieved_flops_per_s": 300e12, "mfu": 0.3}
    rows = {row["key"]: row for row in compare(a, b)["rows"]}
    assert rows["achieved_flops_per_s"]["a"] == pytest.approx(100.0) and rows["mfu"]["ratio"] == pytest.approx(3.0)


def test_a_compiled_module_is_not_counted_and_says_how_to_give_its_flops(monkeypatch):
    from mnistperf.diagnosis.measure.flops import FirstStep, compiled

    module = Linear()
    assert not compiled(module)
    module.net.compile()  # nothing runs yet: torch.compile only wraps the call
    assert compiled(module)
    first = FirstStep(given=None)
    assert first.plan(module) and not first.due
    # a fit of such a module says so, and how to give its FLOPs (compiling itself is emulated: no compiler runs)
    monkeypatch.setattr("mnistperf.diagnosis.measure.flops.compiled", lambda module: True)
    timer = EpochTimer()
    fit_module(Linear(), rows(), callbacks=[timer], max_epochs=1)
    reason = timer.clock.summary()["mfu_reason"]
    assert reason == COMPILED_UNCOUNTED and "torch.compile" in reason and "flops_per_batch" in reason
