"""The CLI end to end, in-process: every stage config trains, logs to TensorBoard and writes its timing summary."""

from __future__ import annotations

import json
import re
import shlex
import time
from pathlib import Path

import pytest
import torch
import yaml
from conftest import CONFIGS, NO_WORKERS, TRAIN_ROWS, fails_in_one_line, run_stage, stage_argv, stage_params
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.demos.boring_classes import BoringModel
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from mnistperf.diagnosis import EpochTimer
from mnistperf.diagnosis.record.advice import USER_HINTS, advice
from mnistperf.diagnosis.record.verdict import ONE_STEP_ENDED
from mnistperf.errors import ConfigError
from mnistperf.lab_hints import LAB_HINTS
from mnistperf.lightning_cli.mnistperf_cli import parse_fit_config
from mnistperf.model import ImageClassifier, SimpleCNN

LADDER = ["v1_naive", "v1_bs512", "v1_workers4", "v1_persistent", "v1_pinned", "v2_pinned"]


def test_simple_cnn_has_the_reference_parameter_count():
    assert sum(p.numel() for p in SimpleCNN().parameters()) == 206_922
    assert SimpleCNN()(torch.zeros(3, 1, 28, 28)).shape == (3, 10)


# The ladder's middle rungs change one loader option each, all of which v2_pinned has too (and v1_naive the v1
# pipeline): their fits, loader workers started every epoch, are the slow tier's.
LADDER_MIDDLE = ["v1_bs512", "v1_workers4", "v1_persistent", "v1_pinned"]


@pytest.mark.parametrize("config", stage_params(slow=LADDER_MIDDLE))
def test_every_stage_config_trains_and_writes_its_timing_summary(workdir, config, capsys):
    name = Path(config).stem
    summary = run_stage(name, "--data.batch_size", "32", epochs=2)
    assert summary["config"] == name
    assert [e["epoch"] for e in summary["epochs"]] == [1, 2]
    assert all(e["samples"] == TRAIN_ROWS for e in summary["epochs"])
    assert all(e["train_s"] > 0 and e["eval_s"] > 0 and 0 <= e["input_wait_share"] <= 1 for e in summary["epochs"])
    # Epoch 1 is warm-up, reported apart; the headline figures are the steady-state epochs'.
    assert summary["warmup"]["train_s"] == summary["epochs"][0]["train_s"] and summary["steady_epochs"] == [2, 2]
    assert summary["avg_train_s"] == summary["epochs"][1]["train_s"]
    assert summary["total_train_s"] == pytest.approx(sum(e["train_s"] for e in summary["epochs"]))
    ran_on = "cuda" if torch.cuda.is_available() else "cpu"
    window = summary["busy_window"]
    if ran_on == "cpu" and name == "v4_graphed":  # its 3 batches are one step an epoch: read in a third epoch
        assert summary["verdict"] == "undetermined" and window["reason"] == ONE_STEP_ENDED, window
    else:
        assert summary["verdict"] in ("input-bound", "overhead-bound", "compute-bound"), summary["verdict_reason"]
    if ran_on == "cpu" and name != "v4_graphed":  # 3 steps an epoch: a CPU's window records the middle one
        assert (window["epoch"], window["first_step"], window["last_step"]) == (2, 2, 2), window
    assert summary["accelerator"] == ran_on and summary["versions"]["torch"] == torch.__version__
    assert (summary["peak_device_mb"] is not None) == (ran_on == "cuda")
    assert summary["data"]["pipeline"] == yaml.safe_load((CONFIGS / config).read_text())["data"]["pipeline"]
    assert 0 <= summary["final_metric"] <= 1
    out = capsys.readouterr().out
    for line in ("\nVerdict: ", "\nPer epoch (epoch", f"; {ran_on} (", "; final val/acc ", "`mnistperf report "):
        assert line in out, line


def cpu_verdict(*overrides: str) -> str:
    """Two epochs of two batches of v1_naive (loading in the main process) on the CPU; the verdict of the second."""
    return run_stage(
        "v1_naive",
        "--trainer.accelerator",
        "cpu",
        "--trainer.limit_train_batches",
        "2",
        "--trainer.limit_val_batches",
        "1",
        "--trainer.num_sanity_val_steps",
        "0",
        *overrides,
        epochs=2,
    )["verdict"]


def test_a_slow_loader_is_input_bound(workdir, monkeypatch):
    """Every item takes 100 ms to load: a batch of 16 takes 1.6 s, many times a step of batch 16 even on a busy CPU
    (at 40 ms, beside four other processes on two cores, the step and its profiled window took as long as the wait).
    No validation: its slow batches would only add to the wait."""
    from mnistperf.data.pipelines.v1 import PandasRowDataset

    load = PandasRowDataset.__getitem__
    monkeypatch.setattr(PandasRowDataset, "__getitem__", lambda self, index: (time.sleep(0.1), load(self, index))[1])
    assert cpu_verdict("--trainer.limit_val_batches", "0") == "input-bound"


def test_a_slow_step_outside_tensor_operations_is_overhead_bound_not_compute_bound(workdir, monkeypatch):
    """Every step sleeps 0.5 s in Python, and the loader hands out batches of ready tensors (v2) in about a
    millisecond: the data does not set the pace, and the window over an epoch's second (and last) step finds the
    time outside tensor operations."""
    step = ImageClassifier.training_step
    monkeypatch.setattr(ImageClassifier, "training_step", lambda self, *args: (time.sleep(0.5), step(self, *args))[1])
    assert cpu_verdict("--data.pipeline", "v2") == "overhead-bound"


def test_the_ladder_configs_differ_only_in_their_stage_setting():
    def settings(name):
        config = yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())
        config["trainer"]["logger"]["init_args"].pop("name")
        return config

    changed = []
    for before, after in zip(LADDER, LADDER[1:], strict=False):
        a, b = settings(before), settings(after)
        changed.append(sorted(k for k in a["data"] if a["data"][k] != b["data"][k]))
        assert {k: v for k, v in a.items() if k != "data"} == {k: v for k, v in b.items() if k != "data"}
    assert changed == [["batch_size"], ["num_workers"], ["persistent_workers"], ["pin_memory"], ["pipeline"]]
    first = settings(LADDER[0])
    assert first["seed_everything"] == 42 and first["trainer"]["max_epochs"] == 5
    assert (first["data"]["dataset"], first["data"]["val_source"]) == ("fashion_mnist", "test")


INPUT_BOUND = {"verdict": "input-bound", "avg_train_s": 1.0, "input_wait_share": 0.6}


def hints_given(trainer) -> list[str]:
    """What the trainer's EpochTimer would suggest for an input-bound run."""
    (timer,) = [callback for callback in trainer.callbacks if isinstance(callback, EpochTimer)]
    return advice(INPUT_BOUND, timer.hints)["hints"]


@pytest.mark.parametrize("config", stage_params())
def test_every_stage_configs_timer_advises_in_the_labs_terms(config):
    assert hints_given(parse_fit_config(("--config", str(CONFIGS / config))).trainer) == LAB_HINTS["input-bound"]


def test_every_stage_and_option_the_labs_hints_name_exists():
    """A hint that names a stage or an option sends the user to a config, or to a --set, that must be there."""
    said = " ".join(hint for hints in LAB_HINTS.values() for hint in hints)
    stages = set(re.findall(r"\bstages? (\w+)", said))
    options = set(re.findall(r"\b((?:data|model|trainer)\.\w+)", said))
    assert stages >= {"v1_bs512", "v4_graphed"} and options >= {"data.batch_size", "model.cuda_graph"}
    assert [stage for stage in stages if not (CONFIGS / f"{stage}.yaml").is_file()] == []
    config = parse_fit_config(("--config", str(CONFIGS / "v4_graphed.yaml"))).config
    assert [option for option in options if config.get(option, "absent") == "absent"] == []


def test_a_timer_whose_config_names_no_hints_advises_in_anyones_terms():
    """Nothing is added to a callback once it is built: without hints of its own a timer keeps the general ones."""
    lab = parse_fit_config(("--config", str(CONFIGS / "v2_pinned.yaml"), "--trainer.callbacks.init_args.hints", "null"))
    timer = {"class_path": "mnistperf.diagnosis.EpochTimer"}
    foreign = LightningCLI(BoringModel, run=False, args={"trainer": {"callbacks": [timer], "logger": False}})
    assert hints_given(lab.trainer) == hints_given(foreign.trainer) == USER_HINTS["input-bound"]


def test_runs_land_side_by_side_and_tensorboard_reads_them_back(workdir):
    run_stage("v2_pinned", *NO_WORKERS, epochs=2)
    run_stage("v2_pinned", *NO_WORKERS, epochs=2)  # same command again
    runs = workdir / "lightning_logs" / "v2_pinned"
    assert sorted(p.name for p in runs.iterdir()) == ["version_0", "version_1"]
    events = EventAccumulator(str(runs / "version_1")).Reload()
    scalars = set(events.Tags()["scalars"])
    assert {
        "timing/train_s",
        "timing/eval_s",
        "timing/samples_per_s",
        "timing/input_wait_share",
        "train/loss",
        "train/acc",
        "val/loss",
        "val/acc",
    } <= scalars
    assert len(events.Scalars("timing/train_s")) == 2
    summary = json.loads((runs / "version_1" / "timing.json").read_text())
    assert [s.value for s in events.Scalars("timing/train_s")] == pytest.approx(
        [e["train_s"] for e in summary["epochs"]]
    )
    hparams = yaml.safe_load((runs / "version_1" / "hparams.yaml").read_text())
    assert hparams["pipeline"] == "v2" and hparams["lr"] == 0.001


def test_evaluating_refuses_an_untrained_model_then_uses_the_newest_checkpoint(workdir, capsys):
    """validate/test/predict without --ckpt_path, or with 'last' or 'best', never score random weights: they refuse in
    one line with the command to run, and after a fit they name and load its checkpoint (the best its ModelCheckpoint
    kept, the newest without a monitor). Every command's first line names the device."""
    options = (*NO_WORKERS, "--trainer.enable_progress_bar", "false")
    for command in ("validate", "test", "predict"):
        argv = stage_argv("v2_pinned", *options, command=command, quiet=False)
        fix = f"Train one with `python -m mnistperf fit {shlex.join(argv[1:])}`"  # with every option fit takes
        own = ["--return_predictions", "false"] if command == "predict" else ["--verbose=false"]  # the command's own
        for asked in ("null", "last", "best"):
            out, _ = fails_in_one_line(capsys, [*argv, "--ckpt_path", asked, *own], "no trained model to evaluate", fix)
            assert out.startswith(f"mnistperf: {command} on cpu")
    run_stage("v2_pinned", *NO_WORKERS, epochs=2)
    capsys.readouterr()
    for command in ("validate", "test", "predict"):
        run_stage("v2_pinned", *options, command=command, quiet=False)
        out = capsys.readouterr().out
        assert out.startswith(f"mnistperf: {command} on cpu"), out
        assert f"mnistperf: {command} with lightning_logs/v2_pinned/version_0/checkpoints/epoch=1-step=" in out
        assert command == "predict" or f"{'val' if command == 'validate' else 'test'}/acc" in out
    for asked, said in (("last", "the newest checkpoint in"), ("best", "the best its fit had kept, of")):
        run_stage("v2_pinned", *options, "--ckpt_path", asked, command="validate", quiet=False)
        out = capsys.readouterr().out
        assert "mnistperf: validate with lightning_logs/v2_pinned/version_0/checkpoints/epoch=1-step=" in out
        assert f"({said} lightning_logs/v2_pinned" in out and "val/acc" in out


def test_fit_prints_the_device_line_first_even_with_the_progress_bar(workdir, capsys):
    run_stage("v2_pinned", *NO_WORKERS, epochs=1, quiet=False)
    assert capsys.readouterr().out.startswith("mnistperf: fit on cpu (")


def test_print_config_shows_the_merged_configuration(workdir, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_stage("v1_pinned", "--data.batch_size", "64", "--print_config", quiet=False)
    assert exit_info.value.code in (0, None)
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["data"]["batch_size"] == 64 and printed["data"]["pin_memory"] is True


def test_validation_split_off_the_training_set(workdir):
    summary = run_stage("v2_pinned", "--data.val_source", "0.25", *NO_WORKERS, epochs=2)
    assert summary["epochs"][0]["samples"] == TRAIN_ROWS - TRAIN_ROWS // 4
    assert summary["data"]["val_source"] == 0.25


def test_training_learns_on_separable_data(tmp_path):
    """A sanity check of the model and loop: a trivially separable problem reaches high accuracy."""
    import numpy as np
    from conftest import write_parquet

    from mnistperf.data import schema

    rng = np.random.default_rng(0)
    labels = rng.integers(0, 10, 240)
    images = rng.integers(0, 40, (240, 28, 28)).astype(np.uint8)
    for i, label in enumerate(labels):  # a bright band whose row encodes the class
        images[i, 2 * label + 4, :] = 255
    for split in ("train", "test"):
        write_parquet(tmp_path / "data" / "FashionMNIST" / f"{split}.parquet", schema.build_table(images, labels))
    summary = run_stage("v3_resident", "--data.batch_size", "12", epochs=2)
    assert summary["final_metric"] > 0.9


def test_step_options_follow_the_device_training_will_run_on(monkeypatch):
    """configure_model runs before the module moves to its device: decisions must use the strategy's device."""
    from types import SimpleNamespace

    def configured(device: str) -> ImageClassifier:
        module = ImageClassifier(compile=True, channels_last=True, fused_adam=True)
        module._trainer = SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device(device)))
        module.configure_model()
        return module

    compiled = []
    monkeypatch.setattr(torch, "compile", lambda forward, mode=None: compiled.append(forward) or forward)
    on_gpu = configured("cuda")
    assert len(compiled) == 1 and isinstance(on_gpu.net, SimpleCNN)  # compiled in place, on CUDA only
    on_cpu = configured("cpu")
    assert len(compiled) == 1 and isinstance(on_cpu.net, SimpleCNN)
    assert on_cpu.net.conv1.weight.is_contiguous(memory_format=torch.channels_last)
    assert on_cpu(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
    assert on_cpu.configure_optimizers().defaults["fused"]  # torch has a fused Adam for CPU too
    assert not configured("meta").configure_optimizers().defaults["fused"]


def test_compile_mode_reaches_torch_compile_and_needs_compile(monkeypatch):
    seen = []
    monkeypatch.setattr(torch, "compile", lambda net, mode=None: seen.append(mode) or net)
    ImageClassifier(compile=True, compile_on_cpu=True, compile_mode="reduce-overhead").configure_model()
    ImageClassifier(compile=True, compile_on_cpu=True).configure_model()
    assert seen == ["reduce-overhead", None]
    with pytest.raises(ConfigError, match="model.compile_mode 'max-autotune' applies only with model.compile true"):
        ImageClassifier(compile_mode="max-autotune")


def test_lightning_dispatches_to_the_labs_callbacks_only_the_per_batch_hooks_their_classes_override():
    """Lightning's own callbacks too (its checkpoint, summary, progress bar and the config's saver): each hook their
    classes leave as Callback's is skipped, each they override kept (the timer's phase hooks are its own to switch)."""
    from lightning.pytorch import Callback

    from mnistperf.diagnosis import EpochTimer
    from mnistperf.diagnosis.callbacks.batch_hooks import BATCH_HOOKS

    callbacks = parse_fit_config(("--config", str(CONFIGS / "v2_pinned.yaml"))).trainer.callbacks
    names = {type(callback).__name__ for callback in callbacks}
    assert {"ModelCheckpoint", "SaveConfigCallback", "TQDMProgressBar", "EpochTimer"} <= names
    for callback in callbacks:
        if isinstance(callback, EpochTimer):
            continue
        for hook in BATCH_HOOKS:
            overridden = getattr(type(callback), hook) is not getattr(Callback, hook)
            assert callable(getattr(callback, hook)) == overridden, (type(callback).__name__, hook)
    checkpoint = next(c for c in callbacks if type(c).__name__ == "ModelCheckpoint")
    assert callable(checkpoint.on_train_batch_end)


def test_lightnings_own_progress_bar_is_redrawn_every_few_steps_and_a_configured_one_is_kept(tmp_path):
    from lightning.pytorch.callbacks import RichProgressBar, TQDMProgressBar

    from mnistperf.lightning_cli.mnistperf_cli import BAR_REFRESH

    config = ("--config", str(CONFIGS / "v2_pinned.yaml"))
    bar = parse_fit_config(config).trainer.progress_bar_callback
    assert type(bar) is TQDMProgressBar and bar.refresh_rate == BAR_REFRESH > 1
    assert parse_fit_config((*config, "--trainer.enable_progress_bar", "false")).trainer.progress_bar_callback is None
    own = ("--trainer.callbacks+=lightning.pytorch.callbacks.TQDMProgressBar", "--trainer.callbacks.refresh_rate=1")
    kept = parse_fit_config((*config, *own)).trainer
    bars = [c for c in kept.callbacks if isinstance(c, (TQDMProgressBar, RichProgressBar))]
    assert len(bars) == 1 and bars[0].refresh_rate == 1
    # one callback given alone in a config, not in a list, as the Trainer's type allows
    stage = yaml.safe_load((CONFIGS / "v2_pinned.yaml").read_text())
    stage["trainer"]["callbacks"] = stage["trainer"]["callbacks"][0]  # its EpochTimer, alone
    alone = tmp_path / "alone.yaml"
    alone.write_text(yaml.safe_dump(stage))
    bar = parse_fit_config(("--config", str(alone))).trainer.progress_bar_callback
    assert type(bar) is TQDMProgressBar and bar.refresh_rate == BAR_REFRESH
