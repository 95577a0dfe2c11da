"""The float32 matmul precision is the run's decision, stated: set by the model option, on the device line and in
timing.json, with Lightning's Tensor Cores hint answered by the lab's own words where it applies."""

from __future__ import annotations

import logging

import pytest
import torch
from conftest import fails_in_one_line, run_stage, stage_argv
from lightning.fabric.accelerators import cuda as lightning_cuda

from mnistperf import console


@pytest.fixture(autouse=True)
def _torch_default():
    """torch's default before each test (whatever an earlier test set) and after it."""
    torch.set_float32_matmul_precision("highest")
    yield
    torch.set_float32_matmul_precision("highest")


def device_line_and_timing(capsys, *overrides: str) -> tuple[str, dict]:
    """One epoch of v3_resident: the first line it printed, and its timing.json."""
    summary = run_stage("v3_resident", *overrides, epochs=1)
    return capsys.readouterr().out.splitlines()[0], summary


def test_the_run_sets_says_and_records_its_float32_matmul_precision(workdir, capsys):
    line, summary = device_line_and_timing(capsys, "--model.float32_matmul_precision", "high")
    assert line.endswith("precision 32-true, float32 matmuls high"), line
    assert summary["float32_matmul_precision"] == "high"
    line, summary = device_line_and_timing(capsys)  # a published stage: torch's default, set again
    assert line.endswith("float32 matmuls highest") and summary["float32_matmul_precision"] == "highest"


def test_a_wrong_precision_is_refused_in_one_line(workdir, capsys):
    argv = stage_argv("v3_resident", "--model.float32_matmul_precision", "tf32")
    fails_in_one_line(capsys, argv, "float32_matmul_precision")


@pytest.mark.parametrize(
    "tensor_cores,precision,matmuls,hint",
    [
        (True, "32-true", "highest", True),  # full fp32 products on a GPU that could run them as TF32
        (True, "bf16-mixed", "highest", False),  # autocast runs the products in bf16
        (True, "32-true", "high", False),  # already TF32
        (False, "32-true", "highest", False),  # a CPU, or a GPU older than Ampere
    ],
)
def test_the_tf32_option_is_named_only_where_it_would_change_something(
    monkeypatch, tensor_cores, precision, matmuls, hint
):
    monkeypatch.setattr(console, "has_tf32_tensor_cores", lambda device: tensor_cores)
    note = console.matmul_precision_note(torch.device("cuda", 0), precision, matmuls)
    assert note.startswith(f"float32 matmuls {matmuls}")
    assert ("--model.float32_matmul_precision high" in note) is hint


def test_lightnings_tensor_cores_hint_is_not_printed(monkeypatch, caplog):
    """Lightning's own check, run as on an H100 at torch's default precision: the device line speaks instead."""
    monkeypatch.setattr(lightning_cuda.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(lightning_cuda, "_is_ampere_or_later", lambda device=None: True)
    monkeypatch.setattr(lightning_cuda.torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100")
    console.calm_library_noise()
    with caplog.at_level(logging.INFO):
        lightning_cuda._check_cuda_matmul_precision(torch.device("cuda", 0))
    assert "Tensor Cores" not in caplog.text


def test_every_stage_config_has_cudnn_time_its_algorithms_and_keeps_the_default_matmul_precision():
    """docs/gpu.md: every stage sets trainer.benchmark, and none sets another float32 matmul precision."""
    import yaml
    from conftest import CONFIGS

    configs = {path.stem: yaml.safe_load(path.read_text()) for path in sorted(CONFIGS.glob("*.yaml"))}
    assert configs and {name: c["trainer"].get("benchmark") for name, c in configs.items()} == dict.fromkeys(
        configs, True
    )
    assert [name for name, c in configs.items() if "float32_matmul_precision" in (c.get("model") or {})] == []
