"""v4_graphed: the whole step captured once per batch shape and replayed, inside Lightning.

On a CPU the graph logic runs through StepGraphs' emulation (static buffers, warm-up undone,
one capture per shape, replays) and the stage trains eagerly; the CUDA-only tests check the
real graphs: the same losses as eager steps, one capture per batch shape, resume, accuracy.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml
from conftest import CONFIGS, TRAIN_ROWS, fails_in_one_line, fit_module, run_stage, stage_argv
from emulated_graphs import EmulatedGraphs

from mnistperf.data.datamodule import MNISTDataModule
from mnistperf.diagnosis import EpochTimer
from mnistperf.model import ImageClassifier, SimpleCNN
from mnistperf.model.graphs import GraphedAdam, StepGraphs
from mnistperf.model.sums import EpochSums


class PlainStep:
    """The whole step on a bare SimpleCNN, as the module runs it; the last loss lands in a static tensor."""

    def __init__(self, device: str = "cpu", seed: int = 0):
        torch.manual_seed(seed)
        self.net = SimpleCNN().to(device)
        cuda = device == "cuda"
        self.optimizer = GraphedAdam(self.net.parameters(), lr=1e-3, fused=cuda or None, capturable=cuda)
        self.sums = EpochSums(torch.device(device))
        self.loss = torch.zeros((), device=device)

    def __call__(self, batch) -> None:
        self.optimizer.zero_grad(set_to_none=False)
        logits = self.net(batch["image"])
        loss = F.cross_entropy(logits, batch["label"])
        loss.backward()
        self.optimizer.update()
        self.sums.add(loss, logits, batch["label"])
        self.loss.copy_(loss.detach())

    def state(self):
        tensors = list(self.net.parameters())
        tensors += [t for s in self.optimizer.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
        return tensors + [self.sums.totals]


def batches(sizes, device="cpu", seed=1):
    generator = torch.Generator().manual_seed(seed)
    return [
        {
            "image": torch.rand(n, 1, 28, 28, generator=generator).to(device),
            "label": torch.randint(0, 10, (n,), generator=generator).to(device),
        }
        for n in sizes
    ]


SIZES = [32, 32, 32, 8, 32, 32, 32, 8]  # two epochs of 104 rows: three full batches and a partial one


def run(step: PlainStep, runner, data) -> list[float]:
    losses = []
    for batch in data:
        runner(batch)
        losses.append(float(step.loss))
    return losses


# ---------------------------------------------------------------- the logic, on a CPU
def test_emulated_graphs_train_exactly_like_eager_steps():
    """Warm-up undone, static buffers refilled, replays: the same losses, sums and weights as plain steps."""
    data = batches(SIZES)
    eager = PlainStep()
    eager_losses = run(eager, eager, data)
    graphed = PlainStep()
    graphs = EmulatedGraphs(graphed, graphed.state)
    graphed_losses = run(graphed, graphs, data)
    assert graphed_losses == pytest.approx(eager_losses, abs=1e-6)
    assert torch.allclose(graphed.sums.totals, eager.sums.totals, atol=1e-4)
    assert graphed.sums.totals[2] == sum(SIZES)  # every sample counted once: the warm-up left no trace
    for mine, theirs in zip(graphed.net.parameters(), eager.net.parameters(), strict=True):
        assert torch.allclose(mine, theirs, atol=1e-6)
    assert graphs.captures == 2  # one per batch shape: 32 and the partial 8


def test_the_warm_up_leaves_no_trace_of_itself():
    step = PlainStep()
    before = [p.detach().clone() for p in step.net.parameters()]
    graphs = EmulatedGraphs(step, step.state, warmup_steps=3)
    graphs._capture(batches([16])[0])  # warm-up and capture, no replay
    assert all(torch.equal(a, b) for a, b in zip(before, step.net.parameters(), strict=True))
    assert all(float(t.abs().sum()) == 0 for s in step.optimizer.state.values() for t in s.values())
    assert float(step.sums.totals.abs().sum()) == 0


def test_graphed_adam_steps_only_through_its_closure():
    step = PlainStep()
    with pytest.raises(RuntimeError, match="needs the closure"):
        step.optimizer.step()
    assert step.optimizer.step(closure=lambda: "ran") == "ran"


def test_reset_forgets_the_graphs():
    step = PlainStep()
    graphs = EmulatedGraphs(step, step.state)
    graphs(batches([8])[0])
    graphs.reset()
    graphs(batches([8])[0])
    assert graphs.captures == 2 and len(graphs.graphs) == 1


def test_the_emulation_refuses_a_graph_whose_state_was_replaced():
    """As a real graph would read and write the old tensors, the emulated one refuses: here a new optimizer
    (a second fit's) whose state is not the one captured."""
    step = PlainStep()
    graphs = EmulatedGraphs(step, step.state)
    graphs(batches([8])[0])
    step.optimizer = GraphedAdam(step.net.parameters(), lr=1e-3)
    with pytest.raises(RuntimeError, match="state moved or was replaced"):
        graphs(batches([8])[0])
    graphs.reset()
    graphs(batches([8])[0])
    assert graphs.captures == 2


def test_adam_is_capturable_only_where_the_step_is_captured(monkeypatch):
    """On CUDA under DDP the whole step runs eagerly: its Adam is not capturable there."""
    model = ImageClassifier(cuda_graph=True)
    monkeypatch.setattr(model, "_run_device", lambda: torch.device("cuda"))
    for graphing in (False, True):
        model._graphing = graphing
        optimizer = model.configure_optimizers()
        assert isinstance(optimizer, GraphedAdam) and optimizer.param_groups[0]["capturable"] is graphing


# ---------------------------------------------------------------- the stage, inside Lightning
BATCH_40 = ("--data.batch_size", "40")  # 40 + 40 + 16 a training epoch: two batch shapes
CPU = ("--trainer.accelerator", "cpu")


@pytest.fixture
def captures(monkeypatch) -> list[int]:
    """The module's capture count at the end of every training epoch, read by the config's own timer."""
    seen: list[int] = []

    class CountCaptures(EpochTimer):
        def on_train_epoch_end(self, trainer, pl_module):
            super().on_train_epoch_end(trainer, pl_module)
            seen.append(pl_module.step.graphs.captures)

    monkeypatch.setattr("mnistperf.diagnosis.EpochTimer", CountCaptures)
    return seen


def test_off_cuda_the_stage_trains_eagerly_and_says_why(workdir, caplog, captures):
    summary = run_stage("v4_graphed", *BATCH_40, *CPU, epochs=2)
    assert "model.cuda_graph: skipped on cpu (a CUDA graph needs a CUDA device)" in caplog.text
    assert [e["samples"] for e in summary["epochs"]] == [TRAIN_ROWS, TRAIN_ROWS]  # 40 + 40 + 16, every row once
    assert captures == [0, 0]
    checkpoints = list((workdir / "lightning_logs" / "v4_graphed").glob("version_0/checkpoints/*.ckpt"))
    assert [c.name for c in checkpoints] == ["epoch=1-step=6.ckpt"]  # Lightning counted every optimizer step


@pytest.fixture(scope="module")
def eager(tmp_path_factory: pytest.TempPathFactory, _tiny_parquet: Path) -> dict:
    """The timing summary of v4_graphed as it runs on a CPU (eager steps), batches of 40, two epochs: one fit for
    the tests that compare another fit of the same data with it."""
    folder = tmp_path_factory.mktemp("eager")
    shutil.copytree(_tiny_parquet, folder / "data", copy_function=shutil.copyfile)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        return run_stage("v4_graphed", *BATCH_40, *CPU, epochs=2)


def test_the_manual_whole_step_matches_lightnings_automatic_one(workdir, eager):
    """The same config with the graph option off (automatic optimization) logs the same training loss."""
    graphed = eager
    automatic = run_stage(
        "v4_graphed", *BATCH_40, *CPU, "--model.cuda_graph", "false", "--data.batches_per_step", "1", epochs=2
    )
    assert len(graphed["epochs"]) == len(automatic["epochs"]) == 2  # both fits timed: the losses below compared
    for mine, theirs in zip(graphed["epochs"], automatic["epochs"], strict=True):
        assert mine["val/loss"] == pytest.approx(theirs["val/loss"], abs=1e-5)
        assert mine["val/acc"] == theirs["val/acc"]


def test_several_batches_per_lightning_step_train_exactly_like_one(workdir, captures):
    """data.batches_per_step 2: the same optimizer steps in the same order (Lightning counts each one),
    so the same losses, accuracies and checkpoint step; Lightning's loop ran once per group."""
    grouped = run_stage("v4_graphed", *BATCH_40, *CPU, "--data.batches_per_step", "2", epochs=2)
    single = run_stage("v4_graphed", *BATCH_40, *CPU, "--data.batches_per_step", "1", epochs=2)
    assert grouped["data"]["batches_per_step"] == 2 and single["data"]["batches_per_step"] == 1
    assert len(grouped["epochs"]) == len(single["epochs"]) == 2
    for mine, theirs in zip(grouped["epochs"], single["epochs"], strict=True):
        assert mine["samples"] == theirs["samples"] == TRAIN_ROWS
        assert mine["val/loss"] == pytest.approx(theirs["val/loss"], abs=1e-6)
        assert mine["val/acc"] == theirs["val/acc"]
    checkpoints = sorted(
        p.name for p in (workdir / "lightning_logs" / "v4_graphed").glob("version_*/checkpoints/*.ckpt")
    )
    assert (
        checkpoints == ["epoch=1-step=6.ckpt"] * 2
    )  # 40 + 40 + 16 per epoch: 3 optimizer steps, in 2 or 3 Lightning steps


def test_emulated_graphs_inside_lightning_capture_once_per_shape_with_groups(workdir, captures, monkeypatch, eager):
    """The module's graph path on a CPU (StepGraphs' emulation): batches of 40, 40 and 16 in groups of 2
    and 1 capture two shapes in epoch 1 and none in epoch 2, and train as the eager path does."""
    monkeypatch.setattr("mnistperf.model.step.StepGraphs", EmulatedGraphs)
    monkeypatch.setattr("mnistperf.model.classifier.ImageClassifier.configure_model", graphing_on_cpu)
    emulated = run_stage("v4_graphed", *BATCH_40, *CPU, "--data.batches_per_step", "2", epochs=2)
    assert captures == [2, 2]
    assert len(emulated["epochs"]) == len(eager["epochs"]) == 2
    for mine, theirs in zip(emulated["epochs"], eager["epochs"], strict=True):
        assert mine["val/loss"] == pytest.approx(theirs["val/loss"], abs=1e-5)


@pytest.mark.slow  # the compile alone takes some 20 s where torch has not cached it
def test_a_compiled_network_inside_the_emulated_graphs_trains_as_the_eager_step_does(
    workdir, captures, monkeypatch, eager
):
    """``--model.compile true`` beside the graph path (emulated on a CPU): the network is compiled in the warm-up
    before each capture, the partial batch's shape recompiled there, and the fit trains as the eager path does, up
    to the order of the compiled kernels' sums."""
    configure_model = ImageClassifier.configure_model

    def compiled_and_graphing(module) -> None:
        configure_model(module)  # compiles the network, as compile_on_cpu asks; a CPU declines the graph
        module._graphing = True

    monkeypatch.setattr("mnistperf.model.step.StepGraphs", EmulatedGraphs)
    monkeypatch.setattr("mnistperf.model.classifier.ImageClassifier.configure_model", compiled_and_graphing)
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    compiled = ("--model.compile", "true", "--model.compile_on_cpu", "true")
    summary = run_stage("v4_graphed", *BATCH_40, *CPU, *compiled, epochs=2)
    assert captures == [2, 2] and counters["stats"]["unique_graphs"] > 0
    for mine, theirs in zip(summary["epochs"], eager["epochs"], strict=True):
        assert mine["samples"] == theirs["samples"] == TRAIN_ROWS
        assert mine["val/loss"] == pytest.approx(theirs["val/loss"], abs=1e-4)


def test_a_second_fit_of_the_same_module_captures_again(tiny_data, monkeypatch):
    """A second fit builds a new optimizer (and Lightning's teardown moved the module between them): the
    graphs of the first fit are gone, the second captures its own, and it trains."""
    monkeypatch.setattr("mnistperf.model.step.StepGraphs", EmulatedGraphs)
    monkeypatch.setattr("mnistperf.model.classifier.ImageClassifier.configure_model", graphing_on_cpu)
    model = ImageClassifier(cuda_graph=True)
    data = MNISTDataModule(data_dir=str(tiny_data), pipeline="resident", batch_size=40)
    for fits in (1, 2):
        trainer = fit_module(model, data)
        assert model.step.graphs.captures == 2 * fits and trainer.global_step == 6
        assert not model.step.graphs.graphs  # none outlives the fit


def graphing_on_cpu(module) -> None:
    """configure_model as on a single CUDA device: the module takes its graph path (emulated on a CPU)."""
    module._graphing = True
    if module.hparams.channels_last:
        module.net = module.net.to(memory_format=torch.channels_last)


def test_resume_from_the_last_checkpoint(workdir, captures):
    run_stage("v4_graphed", *BATCH_40, *CPU, epochs=1)
    summary = run_stage(
        "v4_graphed",
        *BATCH_40,
        *CPU,
        "--ckpt_path",
        str(next((workdir / "lightning_logs").glob("v4_graphed/version_0/checkpoints/*.ckpt"))),
        epochs=2,
    )
    assert [e["epoch"] for e in summary["epochs"]] == [2]


def test_tune_keeps_the_groups_where_the_resident_pipeline_makes_them_and_fit_runs_its_config(
    workdir, monkeypatch, capsys
):
    """tune on v4_graphed (8 batches a step), its step made slow: the first loader probed, the resident pipeline's,
    outruns it and ends the search. The tuned config keeps the groups, says above its settings what tune found, has
    the table of probes beside it, and fit runs it as it is."""
    from mnistperf.cli import main
    from mnistperf.tune import probes
    from mnistperf.tune.command import probes_path

    monkeypatch.setattr(probes, "time_step", lambda *a, **k: [10.0, 10.0])
    monkeypatch.setattr(probes, "REPEATS", 2)
    monkeypatch.setattr(probes.Probes, "batches", 4)
    config = str(CONFIGS / "v4_graphed.yaml")
    main(["tune", "--config", config, "--set", "data.batch_size=16", "--budget", "2", "--out", "tuned.yaml"])
    out = capsys.readouterr().out
    assert "[probe 1] step" in out and "[probe 2] loader pipeline=resident" in out and "stopped: compute-bound" in out
    text = (workdir / "tuned.yaml").read_text()
    assert text.startswith("# mnistperf tune: tuned from") and "# Step alone:" in text and "# Stopped:" in text
    tuned = yaml.safe_load(text)["data"]
    assert (tuned["pipeline"], tuned["batch_size"], tuned["batches_per_step"]) == ("resident", 16, 8)
    table = probes_path(workdir / "tuned.yaml").read_text()
    assert "| 1 | step | batch_size=16 |" in table and "| 2 | loader |" in table
    summary = run_stage("tuned.yaml", *CPU, epochs=1)
    assert summary["data"]["batches_per_step"] == 8 and summary["epochs"][0]["samples"] == TRAIN_ROWS


def test_a_compile_mode_that_graphs_on_its_own_is_refused_beside_cuda_graph(workdir, capsys):
    argv = stage_argv("v4_graphed", "--model.compile", "true", "--model.compile_mode", "reduce-overhead")
    fails_in_one_line(capsys, argv, "with cuda_graph, pass --model.compile_mode null")


def test_the_network_compiled_and_the_step_graphed_run_together(workdir, caplog, captures):
    """Off CUDA both are skipped, each with its line, and the same step runs eagerly; on CUDA the test below."""
    summary = run_stage("v4_graphed", *CPU, *BATCH_40, "--model.compile", "true", epochs=1)
    assert "model.compile: skipped on cpu" in caplog.text and "model.cuda_graph: skipped on cpu" in caplog.text
    assert captures == [0] and summary["epochs"][0]["samples"] == TRAIN_ROWS
    # the run records both asked for and neither applied, which compare says beside a change of either
    assert summary["model"]["compile"] and summary["model"]["cuda_graph"]
    assert summary["model"]["compile_applied"] is False and summary["model"]["cuda_graph_applied"] is False


# ---------------------------------------------------------------- bf16: graphed and eager steps agree
def run_autocast(step: PlainStep, runner, data, device: str) -> list[float]:
    """``run`` with bf16 autocast entered per step, as Lightning's precision does: autocast's weight cache
    lives as long as its region, so one region around every step would reuse the first step's bf16 weights."""
    losses = []
    for batch in data:
        with torch.autocast(device, dtype=torch.bfloat16):
            runner(batch)
        losses.append(float(step.loss))
    return losses


# Two summation orders of the same bf16 steps (channels_last or not, on a CPU) part by at most 1.1e-4 in 20
# steps' losses; a warm-up left in the weights parts them by 0.14, one autocast region around all 20 eager
# steps by 0.03.
BF16_LOSS_TOLERANCE = 5e-3


def test_emulated_graphs_under_bf16_give_the_losses_of_eager_steps():
    data = batches([16] * 5 + [8])  # two shapes, the first replayed; on a CPU bf16's products are slow, so few
    eager = PlainStep()
    graphed = PlainStep()
    graphs = EmulatedGraphs(graphed, graphed.state)
    assert run_autocast(graphed, graphs, data, "cpu") == run_autocast(eager, eager, data, "cpu")


# ---------------------------------------------------------------- CUDA only
@pytest.mark.cuda
def test_graphed_steps_give_the_losses_of_eager_steps():
    """The first 20 graphed steps from the same initial weights, bf16 autocast per step in both: the same
    losses up to the order of the GPU's sums."""
    data = batches([64] * 19 + [24], device="cuda")
    eager = PlainStep("cuda")
    eager_losses = run_autocast(eager, eager, data, "cuda")
    graphed = PlainStep("cuda")
    graphs = StepGraphs(graphed, graphed.state)
    graphed_losses = run_autocast(graphed, graphs, data, "cuda")
    assert graphs.captures == 2 and len(graphed_losses) == 20
    assert graphed_losses == pytest.approx(eager_losses, rel=0, abs=BF16_LOSS_TOLERANCE)
    assert graphed.sums.totals[2] == eager.sums.totals[2] == sum(64 for _ in range(19)) + 24


@pytest.mark.cuda
def test_one_capture_per_batch_shape_and_none_after_the_first_epoch(workdir, captures):
    summary = run_stage("v4_graphed", *BATCH_40, epochs=3)
    assert summary["accelerator"] == "cuda"
    assert captures == [2, 2, 2]  # batches of 40, 40 and 16: two shapes, captured in epoch 1 only
    assert [e["samples"] for e in summary["epochs"]] == [TRAIN_ROWS] * 3


@pytest.mark.cuda
def test_the_compiled_network_is_captured_once_per_batch_shape(workdir, captures):
    """Compiled in the warm-up before each capture (the partial batch recompiles there), then only replayed."""
    summary = run_stage("v4_graphed", *BATCH_40, "--model.compile", "true", epochs=2)
    assert summary["accelerator"] == "cuda" and captures == [2, 2]
    assert [e["samples"] for e in summary["epochs"]] == [TRAIN_ROWS] * 2 and summary["final_metric"] is not None


@pytest.mark.cuda
def test_resume_captures_again_after_loading(workdir, captures):
    run_stage("v4_graphed", *BATCH_40, epochs=1)
    checkpoint = next((workdir / "lightning_logs").glob("v4_graphed/version_0/checkpoints/*.ckpt"))
    summary = run_stage("v4_graphed", *BATCH_40, "--ckpt_path", str(checkpoint), epochs=3)
    assert [e["epoch"] for e in summary["epochs"]] == [2, 3]
    assert captures[-2:] == [2, 2] and summary["final_metric"] is not None


@pytest.mark.cuda
@pytest.mark.realdata
def test_the_graphed_stage_learns_what_the_same_stage_run_eagerly_does(shared_datasets, tmp_path, monkeypatch):
    """FashionMNIST, 5 epochs: v4_graphed against itself with model.cuda_graph false and one batch per step (the
    same initial weights, data order and bf16 precision), so only a fault of the graph parts them, not a seed.
    The GPU's sums run in no fixed order, so the two runs part slowly: after one epoch (118 steps) the test loss
    agrees within 1 % (a fault in the step, such as a warm-up left in or a stale buffer, moves it further);
    after five the accuracy within a point (three seeds span 1.25: docs/results/cpu-2core-accuracy-seeds)."""
    monkeypatch.chdir(tmp_path)
    runs = []
    for overrides in ((), ("--model.cuda_graph", "false", "--data.batches_per_step", "1")):
        runs.append(run_stage("v4_graphed", "--data.source_root", str(shared_datasets), *overrides))
    graphed, eager = runs
    assert graphed["precision"] == eager["precision"] and len(graphed["epochs"]) == len(eager["epochs"]) == 5
    assert graphed["epochs"][0]["val/loss"] == pytest.approx(eager["epochs"][0]["val/loss"], rel=0.01), runs
    assert abs(graphed["final_metric"] - eager["final_metric"]) <= 0.01, runs
