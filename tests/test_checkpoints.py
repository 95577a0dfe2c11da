"""A checkpoint brings weights, optimizer state and the loop's position; the stage config and the command line
bring everything else, on any device, from any stage."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest
import torch
from conftest import CONFIGS, NO_WORKERS, TEST_ROWS, fails_in_one_line, newest_checkpoint, run_stage, stage_argv

from mnistperf.data.datamodule import MNISTDataModule
from mnistperf.model import ImageClassifier
from mnistperf.model.checkpoint import follow_the_run

# Batches of 32 (3 steps an epoch) loaded in the main process (the resident stages have no workers anyway).
SMALL = ("--data.batch_size", "32", *NO_WORKERS)


@pytest.fixture
def v2_checkpoint(workdir) -> Path:
    run_stage("v2_pinned", *SMALL, epochs=1)
    return newest_checkpoint(workdir, "v2_pinned")


@pytest.fixture
def seen_hparams(monkeypatch) -> list[dict]:
    """The model settings every evaluation ran with."""
    seen: list[dict] = []
    for hook in ("on_test_start", "on_validation_start", "on_predict_start"):
        monkeypatch.setattr(ImageClassifier, hook, lambda self: seen.append(dict(self.hparams)), raising=False)
    return seen


def test_predict_writes_each_test_images_class_from_the_checkpoint_to_its_runs_folder(workdir, v2_checkpoint, capsys):
    run_stage("v2_pinned", *SMALL, command="predict")
    (path,) = workdir.glob("lightning_logs/v2_pinned/version_*/predictions.csv")
    header, *rows = path.read_text().splitlines()
    assert header == "index,predicted" and [row.split(",")[0] for row in rows] == [str(i) for i in range(TEST_ROWS)]
    model = ImageClassifier.load_from_checkpoint(v2_checkpoint, map_location="cpu").eval()
    test = MNISTDataModule(data_dir=str(workdir / "data"), batch_size=TEST_ROWS, num_workers=0)
    test.setup("predict")
    (batch,) = list(test.predict_dataloader())
    with torch.no_grad():
        assert [int(row.split(",")[1]) for row in rows] == model(batch["image"]).argmax(dim=1).tolist()
    assert f"predictions: the class of each of {TEST_ROWS} test images written to {path.relative_to(workdir)}" in (
        capsys.readouterr().out
    )


# ---------------------------------------------------------------- the stage config and the command line win
def test_evaluating_a_checkpoint_of_another_stage_runs_the_stage_asked_for_and_says_what_differs(
    workdir, v2_checkpoint, seen_hparams, caplog
):
    run_stage("v3_compiled", *SMALL, "--ckpt_path", str(v2_checkpoint), command="test")
    assert seen_hparams[-1]["compile"] and seen_hparams[-1]["channels_last"] and seen_hparams[-1]["fused_adam"]
    assert (
        "checkpoint trained with model.compile false, model.channels_last false, model.fused_adam false; "
        "running v3_compiled's model.compile true, model.channels_last true, model.fused_adam true"
    ) in caplog.text


def test_evaluating_a_checkpoint_on_another_dataset_says_which_it_was_trained_on(workdir, v2_checkpoint, caplog):
    shutil.copytree(workdir / "data" / "FashionMNIST", workdir / "data" / "mine")
    run_stage("v2_pinned", *SMALL, "--ckpt_path", str(v2_checkpoint), "--data.dataset", "mine", command="test")
    assert "checkpoint trained with data.dataset fashion_mnist; running v2_pinned's data.dataset mine" in caplog.text


def test_the_command_line_wins_over_the_checkpoint(workdir, v2_checkpoint, seen_hparams, caplog):
    run_stage(
        "v2_pinned", *SMALL, "--ckpt_path", str(v2_checkpoint), "--model.channels_last", "true", command="validate"
    )
    assert seen_hparams[-1]["channels_last"]
    assert (
        "checkpoint trained with model.channels_last false; running v2_pinned's model.channels_last true" in caplog.text
    )


def test_resuming_into_another_stage_trains_that_stage_from_where_it_stopped(workdir, v2_checkpoint, caplog):
    """v2_pinned (automatic optimization) to v4_graphed (the whole step, 8 batches per Lightning step): the config's
    cuda_graph and batches_per_step hold, Adam's state carries over, and the optimizer steps go on counting."""
    run_stage("v4_graphed", *SMALL, "--ckpt_path", str(v2_checkpoint), epochs=2)
    assert (
        "checkpoint trained with model.channels_last false, model.fused_adam false, model.cuda_graph false; "
        "running v4_graphed's model.channels_last true, model.fused_adam true, model.cuda_graph true" in caplog.text
    )
    assert "fresh optimizer" not in caplog.text
    resumed = newest_checkpoint(workdir, "v4_graphed")
    assert resumed.name == "epoch=1-step=6.ckpt"  # 96 rows in batches of 32: 3 steps per epoch, the first 3 before
    summary = json.loads((resumed.parents[1] / "timing.json").read_text())
    assert summary["model"]["cuda_graph"] and [e["epoch"] for e in summary["epochs"]] == [2]
    state = torch.load(resumed, weights_only=True)["optimizer_states"][0]["state"]
    assert all(float(s["step"]) == 6 for s in state.values())  # Adam's step counts went on from the checkpoint's 3


def test_fit_with_ckpt_path_last_resumes_the_newest_run_of_its_config(workdir, capsys):
    """fit --help's ``--ckpt_path last``: every fit logs into a new version_N, whose checkpoint folder Lightning's own
    'last' searches and finds empty (it warns and trains from the start); the lab resumes the config's newest run,
    and says which; with no run of the config yet, that the fit starts from its first epoch."""
    summary = run_stage("v2_pinned", *SMALL, "--ckpt_path", "last", epochs=1)
    assert [e["epoch"] for e in summary["epochs"]] == [1]
    said = "mnistperf: no checkpoint of this config's runs in lightning_logs/v2_pinned/version_*/checkpoints to resume"
    assert said in capsys.readouterr().out
    summary = run_stage("v2_pinned", *SMALL, "--ckpt_path", "last", epochs=2)
    assert [e["epoch"] for e in summary["epochs"]] == [2]
    assert "mnistperf: fit resumes from lightning_logs/v2_pinned/version_0/checkpoints/epoch=0-step=3.ckpt" in (
        capsys.readouterr().out
    )


def test_a_runs_folder_as_ckpt_path_gives_its_newest_checkpoint_and_one_holding_none_is_refused(workdir, capsys):
    run_stage("v2_pinned", *SMALL, epochs=1)
    capsys.readouterr()
    summary = run_stage("v2_pinned", *SMALL, "--ckpt_path", "lightning_logs/v2_pinned/version_0", epochs=2)
    assert [e["epoch"] for e in summary["epochs"]] == [2]  # resumed from it
    said = "mnistperf: fit resumes from lightning_logs/v2_pinned/version_0/checkpoints/epoch=0-step=3.ckpt (the newest "
    assert said in capsys.readouterr().out
    (workdir / "empty").mkdir()
    argv = stage_argv("v2_pinned", *SMALL, "--ckpt_path", "empty", command="validate")
    fails_in_one_line(capsys, argv, "--ckpt_path empty: a folder holding no checkpoint (*.ckpt); give a checkpoint")


OWN_FOLDER = """trainer:
  callbacks:
    - class_path: lightning.pytorch.callbacks.ModelCheckpoint
      init_args: {dirpath: kept, monitor: val/acc, mode: max, save_last: true, save_top_k: 1}
"""


def test_evaluating_last_or_best_reads_a_model_checkpoint_of_a_folder_of_its_own(workdir, capsys):
    """A ModelCheckpoint saving in a folder of its own (save_last, a monitor): last is its newest, best the one it
    kept; both named by where they lie, neither an older run's under lightning_logs; a fit resumes from its last."""
    run_stage("v2_pinned", *SMALL, epochs=1)  # an older run, in the runs' folder
    (workdir / "own.yaml").write_text(OWN_FOLDER)
    run_stage("v2_pinned", *SMALL, "--config", "own.yaml", epochs=2)
    capsys.readouterr()
    run_stage("v2_pinned", *SMALL, "--config", "own.yaml", "--ckpt_path", "last", command="validate", quiet=False)
    assert "mnistperf: validate with kept/last.ckpt (the newest checkpoint in kept; " in capsys.readouterr().out
    state = torch.load(workdir / "kept" / "last.ckpt", weights_only=True)["callbacks"]
    (best,) = [Path(s["best_model_path"]).name for s in state.values() if s.get("best_model_path")]
    run_stage("v2_pinned", *SMALL, "--config", "own.yaml", "--ckpt_path", "best", command="validate", quiet=False)
    assert f"mnistperf: validate with kept/{best} (the best its fit had kept, of kept)" in capsys.readouterr().out
    run_stage("v2_pinned", *SMALL, "--config", "own.yaml", "--ckpt_path", "last", epochs=3)  # (its callbacks: no timer)
    assert "mnistperf: fit resumes from kept/last.ckpt (the newest checkpoint in kept; " in capsys.readouterr().out


def test_best_is_read_beside_the_newest_checkpoint_wherever_the_evaluation_runs(workdir, tmp_path, monkeypatch, capsys):
    """The best path a fit saves is relative to where it ran: read beside its checkpoint, not from here."""
    run_stage("v2_pinned", *SMALL, epochs=1)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "lightning_logs" / "v2_pinned" / "version_0" / "checkpoints").mkdir(parents=True)
    (elsewhere / "lightning_logs" / "v2_pinned" / "version_0" / "checkpoints" / "epoch=0-step=3.ckpt").write_bytes(b"")
    monkeypatch.chdir(elsewhere)  # a run of the same name here, whose checkpoint is no checkpoint
    capsys.readouterr()
    logs = str(workdir / "lightning_logs")
    argv = [*SMALL, "--trainer.logger.init_args.save_dir", logs, "--data.data_dir", str(workdir / "data")]
    argv += ["--ckpt_path", "best"]
    run_stage(CONFIGS / "v2_pinned.yaml", *argv, command="validate", quiet=False)
    said = f"mnistperf: validate with {logs}/v2_pinned/version_0/checkpoints/epoch=0-step=3.ckpt (the best its fit"
    assert said in capsys.readouterr().out


def test_an_optimizer_state_of_another_kind_starts_a_fresh_optimizer(workdir, v2_checkpoint, caplog):
    checkpoint = torch.load(v2_checkpoint, weights_only=True)
    params = [torch.nn.Parameter(t.clone()) for t in checkpoint["state_dict"].values()]
    sgd = torch.optim.SGD(params, lr=0.1, momentum=0.9)
    sum(p.sum() for p in params).backward()
    sgd.step()
    checkpoint["optimizer_states"] = [{**sgd.state_dict(), "kind": "SGD"}]  # as a stage training with SGD writes it
    torch.save(checkpoint, workdir / "sgd.ckpt")
    run_stage("v2_pinned", *SMALL, "--ckpt_path", "sgd.ckpt", epochs=2)
    assert (
        "the checkpoint's optimizer state is not loaded (it holds SGD state, this run optimizes with Adam): "
        "starting a fresh optimizer" in caplog.text
    )
    state = torch.load(newest_checkpoint(workdir, "v2_pinned"), weights_only=True)["optimizer_states"][0]["state"]
    assert all(float(s["step"]) == 3 for s in state.values())  # one epoch of Adam, from nothing


def test_a_checkpoint_that_does_not_record_its_precision_is_not_said_to_differ(caplog):
    """Checkpoints written before the precision was recorded, with the run's own model settings: nothing to say."""
    from types import SimpleNamespace

    module = ImageClassifier()
    module._trainer = SimpleNamespace(precision="32-true", logger=SimpleNamespace(name="v2_pinned"))
    module.on_load_checkpoint({"state_dict": ImageClassifier().state_dict(), "hyper_parameters": dict(module.hparams)})
    module.on_load_checkpoint(
        {
            "state_dict": ImageClassifier().state_dict(),
            "mnistperf_precision": "bf16-mixed",
            "hyper_parameters": {**module.hparams, "lr": 0.01},
        }
    )
    assert "checkpoint trained with" in caplog.text and caplog.text.count("checkpoint trained with") == 1
    assert (
        "trained with trainer.precision bf16-mixed, model.lr 0.01; running v2_pinned's trainer.precision "
        "32-true, model.lr 0.001" in caplog.text
    )


# ---------------------------------------------------------------- any checkpoint on any device
# The network's keys, as every checkpoint of the lab has held them, compiled or not.
NETWORK_KEYS = {f"net.{layer}.{kind}" for layer in ("conv1", "conv2", "fc1", "fc2") for kind in ("weight", "bias")}


def as_a_gpu_writes_it(checkpoint: dict) -> dict:
    """A CPU checkpoint made into what a GPU run writes: capturable (and fused) Adam whose step counts are float32
    tensors (on the device, mapped to the CPU when Lightning loads them)."""
    optimizer = checkpoint["optimizer_states"][0]
    for group in optimizer["param_groups"]:
        group.update(capturable=True, fused=True)
    for state in optimizer["state"].values():
        state["step"] = state["step"].to(torch.float32)
    return checkpoint


def test_a_gpu_checkpoint_resumes_and_evaluates_on_a_cpu(workdir, seen_hparams):
    run_stage("v4_graphed", *SMALL, epochs=1)
    checkpoint = as_a_gpu_writes_it(torch.load(newest_checkpoint(workdir, "v4_graphed"), weights_only=True))
    assert set(checkpoint["state_dict"]) == NETWORK_KEYS  # as checkpoints written before compiling in place hold them
    torch.save(checkpoint, workdir / "gpu.ckpt")
    weights = checkpoint["state_dict"]
    run_stage("v4_graphed", *SMALL, "--ckpt_path", "gpu.ckpt", epochs=2)
    resumed = torch.load(newest_checkpoint(workdir, "v4_graphed"), weights_only=True)
    assert all(not g["capturable"] for g in resumed["optimizer_states"][0]["param_groups"])  # the run's, on a CPU
    assert all(k.startswith("net.") and "_orig_mod" not in k for k in resumed["state_dict"])
    assert not any(torch.equal(weights[k], v) for k, v in resumed["state_dict"].items())  # it trained on
    seen_hparams.clear()
    for command in ("validate", "test", "predict"):
        run_stage("v3_compiled", *SMALL, "--ckpt_path", "gpu.ckpt", command=command)
    assert len(seen_hparams) == 3 and all(hp["channels_last"] and hp["fused_adam"] for hp in seen_hparams)


def test_a_network_compiled_in_place_keeps_its_keys_and_either_reads_the_others_weights():
    compiled = ImageClassifier(compile=True, compile_on_cpu=True)
    compiled.configure_model()  # nn.Module.compile: nothing is compiled until a forward
    assert compiled.step.net is compiled.net  # the same module, compiled in place
    assert set(compiled.state_dict()) == set(ImageClassifier().state_dict()) == NETWORK_KEYS
    for module in (compiled, ImageClassifier()):
        loaded = {"state_dict": {k: torch.zeros_like(v) for k, v in ImageClassifier().state_dict().items()}}
        module.on_load_checkpoint(loaded)
        module.load_state_dict(loaded["state_dict"])  # strict: every key matched
        assert not any(p.any() for p in module.parameters())


def test_optimizer_flags_follow_the_run_not_the_file():
    """A CPU checkpoint (capturable false, step counts on the CPU) into a run whose Adam is capturable and fused,
    as a graphed step on a GPU builds it: the run's flags stay, and torch puts the step counts where they need to be."""
    weights = [torch.nn.Parameter(torch.randn(3))]
    on_cpu = torch.optim.Adam(weights, lr=0.5)
    weights[0].grad = torch.ones(3)
    on_cpu.step()
    run = follow_the_run(torch.optim.Adam([torch.nn.Parameter(torch.randn(3))], lr=0.001, capturable=True, fused=True))
    run.load_state_dict(on_cpu.state_dict())
    group = run.param_groups[0]
    assert group["capturable"] and group["fused"] and group["lr"] == 0.001
    assert run.state[run.param_groups[0]["params"][0]]["step"].dtype == torch.float32
    assert torch.equal(run.state[group["params"][0]]["exp_avg"], on_cpu.state[weights[0]]["exp_avg"])
    assert run.state_dict()["kind"] == "Adam"


@pytest.mark.cuda
def test_a_cpu_checkpoint_of_the_graphed_stage_resumes_captured_on_cuda(workdir):
    run_stage("v4_graphed", *SMALL, "--trainer.accelerator", "cpu", epochs=1)
    run_stage("v4_graphed", *SMALL, "--ckpt_path", str(newest_checkpoint(workdir, "v4_graphed")), epochs=2)
    resumed = torch.load(newest_checkpoint(workdir, "v4_graphed"), weights_only=True)
    assert resumed["global_step"] == 6
    assert all(g["capturable"] for g in resumed["optimizer_states"][0]["param_groups"])


# ---------------------------------------------------------------- an interrupted fit keeps its timing
def test_an_interrupted_fit_writes_the_finished_epochs_timing_marked_interrupted(workdir, monkeypatch, capsys):
    def interrupt_in_epoch_2(self):
        if self.current_epoch == 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(ImageClassifier, "on_train_epoch_start", interrupt_in_epoch_2, raising=False)
    assert interrupted_fit(epochs=3) == 1
    folder = workdir / "lightning_logs" / "v2_pinned" / "version_0"
    summary = json.loads((folder / "timing.json").read_text())
    assert summary["interrupted"] is True and [e["epoch"] for e in summary["epochs"]] == [1]
    assert summary["stopped_by"] == "KeyboardInterrupt"  # said as interrupted, not as an error
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) == []  # no temporary file left
    out = capsys.readouterr().out
    assert out.count("Verdict: ") == 1 and out.count("timing summary written to") == 1
    assert "Interrupted: the figures cover the 1 finished epoch(s)" in out


def test_a_fit_interrupted_before_its_first_step_leaves_no_run_folder(workdir, monkeypatch):
    def interrupt(self, stage):
        raise KeyboardInterrupt  # Ctrl-C while the data is read

    monkeypatch.setattr(MNISTDataModule, "setup", interrupt)
    assert interrupted_fit(epochs=1) == 1
    assert not (workdir / "lightning_logs").exists()


def test_a_finished_fit_says_it_was_not_interrupted(workdir, v2_checkpoint):
    summary = json.loads((v2_checkpoint.parents[1] / "timing.json").read_text())
    assert summary["interrupted"] is False


def test_evaluating_names_a_newest_checkpoint_whose_fit_did_not_finish(tmp_path, capsys):
    """test, validate and predict take the newest checkpoint: they say where its fit was interrupted or left no
    timing.json, and nothing where it finished."""
    from types import SimpleNamespace

    from mnistperf.lightning_cli.checkpoints import newest_checkpoint as newest

    config = SimpleNamespace(trainer={"default_root_dir": str(tmp_path)}, get=lambda key: None)
    said = []
    for version, summary in enumerate(
        [{"interrupted": False, "epochs": [{}] * 3}, None, {"interrupted": True, "epochs": [{}]}]
    ):
        run = tmp_path / "lightning_logs" / f"version_{version}"
        (run / "checkpoints").mkdir(parents=True)
        torch.save({"state_dict": {}}, run / "checkpoints" / "last.ckpt")  # readable: the newest is checked
        os.utime(run / "checkpoints" / "last.ckpt", (1000 + version, 1000 + version))  # each newer than the last
        if summary is not None:
            (run / "timing.json").write_text(json.dumps(summary))
        newest("test", config)
        said.append(capsys.readouterr().out)
    assert "version_0" in said[0] and "from a fit" not in said[0]
    assert (
        "version_1" in said[1] and "from a fit that wrote no timing.json: it may have stopped before its end" in said[1]
    )
    assert "version_2" in said[2] and "from a fit interrupted after 1 finished epoch;" in said[2]


def interrupted_fit(epochs: int) -> int:
    """The exit status of a v2_pinned fit that a Ctrl-C (raised by a patched hook) interrupts."""
    handler = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(SystemExit) as exit_info:
            run_stage("v2_pinned", *SMALL, epochs=epochs)
    finally:
        signal.signal(signal.SIGINT, handler)  # Lightning's graceful shutdown ignores further Ctrl-C
    return exit_info.value.code
