"""DDP: two CPU processes (gloo) through the real command line, every row once per epoch (SampleAudit) and one
summary (the slow tier); and, fast, each part of that emulated in one process: each rank's share of a DataLoader
pipeline's rows, the timer's and the audit's gathers over two ranks, the graphed stage's eager step."""

from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import pickle
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from added_figures import STEPS_RUN, WAIT_PER_STEP_S
from conftest import CONFIGS, NO_WORKERS, REPO, run_stage, stage_process, write_parquet
from lightning.pytorch.trainer.connectors.data_connector import _get_distributed_sampler
from lightning.pytorch.trainer.states import RunningStage
from lightning.pytorch.utilities.data import _is_dataloader_shuffled, _update_dataloader
from records import AUDIT, audit_counts, audit_epochs
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from mnistperf.data import schema
from mnistperf.data.datamodule import MNISTDataModule
from mnistperf.diagnosis import figures
from mnistperf.diagnosis.figures import COMM_SHARE, EVAL_S, FORWARD_S, SAMPLES, TRAIN_S, Measures, gather
from mnistperf.diagnosis.measure.sample_counts import Order, gathered_shares, loader_counts
from mnistperf.diagnosis.record.text import format_summary
from mnistperf.diagnosis.show.compare import compare
from mnistperf.diagnosis.show.report import html_report
from mnistperf.model.classifier import ImageClassifier

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
    assert result.stdout.count("Verdict: ") == 1  # printed once
    return result


def ddp_fit(folder: Path, config: str, *overrides: str) -> list[dict]:
    """:func:`ddp_run` with a strict sample audit (a duplicate or a missing row fails the run); its counts, per
    epoch."""
    audit = (AUDIT, "--trainer.callbacks.strict=true", f"--trainer.callbacks.dataset_size={ROWS}")
    return audit_epochs(ddp_run(folder, config, *audit, *overrides).stdout)


@pytest.mark.slow
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


@pytest.mark.slow
def test_predict_on_two_processes_writes_each_ranks_images_by_their_index_as_one_process_predicts_them(
    numbered_data, monkeypatch
):
    monkeypatch.chdir(numbered_data)
    run_stage("v2_pinned", *NO_WORKERS, "--data.batch_size", "16", epochs=1)  # the checkpoint both predict from
    run_stage("v2_pinned", *NO_WORKERS, "--data.batch_size", "16", command="predict")
    runs = numbered_data / "lightning_logs" / "v2_pinned"
    (alone,) = runs.glob("version_*/predictions.csv")
    ddp = ["--trainer.accelerator", "cpu", "--trainer.strategy", "ddp", "--trainer.devices", "2", *NO_WORKERS]
    command = stage_process("v2_pinned", *ddp, "--data.batch_size", "16", command="predict")
    result = subprocess.run(command, cwd=numbered_data, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    ranks = sorted(runs.glob("version_*/predictions.rank*.csv"))
    assert [path.name for path in ranks] == ["predictions.rank0.csv", "predictions.rank1.csv"]
    rows = [line for path in ranks for line in path.read_text().splitlines()[1:]]
    assert sorted(rows, key=lambda row: int(row.split(",")[0])) == alone.read_text().splitlines()[1:]  # ROWS of them


@pytest.mark.slow
def test_ranks_that_each_read_the_whole_dataset_are_named_as_the_cause_of_its_duplicates(numbered_data):
    """Lightning's use_distributed_sampler=False beside the DataModule's own shuffled loader: no rank's share."""
    options = ("--trainer.use_distributed_sampler", "false", "--data.pipeline", "v1", *NO_WORKERS)
    result = ddp_run(numbered_data, "v2_pinned.yaml", AUDIT, f"--trainer.callbacks.dataset_size={ROWS}", *options)
    assert audit_counts(audit_epochs(result.stdout)) == [(2 * ROWS, ROWS, ROWS, 0)] * 2
    said = "each of the 2 ranks reads the whole dataset, so every sample came 2 times: its sampler does not split it"
    assert result.stdout.count(said) == 2


@pytest.mark.slow
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


@pytest.mark.slow
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
    whole = format_summary(summary)  # what `mnistperf report` prints of the run: the fit's end leaves it there
    assert "gloo collectives" in whole and "in collectives" in whole and "`mnistperf report " in result.stdout


@pytest.mark.slow
def test_under_ddp_figures_added_to_the_registry_reach_each_rank_the_row_the_scalars_compare_and_the_report(
    numbered_data, monkeypatch
):
    """Every rank adds the test's figures (added_figures.py, through with_added_figures/sitecustomize.py): the measured
    one is summed over the ranks, the per-rank one kept for each rank and its slowest in the row, and both reach
    timing.json, the loggers, compare, the report and the printed ranks line."""
    monkeypatch.setenv("PYTHONPATH", str(REPO / "tests" / "with_added_figures"))
    monkeypatch.setattr(figures, "FIGURES", (*figures.FIGURES, STEPS_RUN, WAIT_PER_STEP_S))  # this process reads them
    ddp_run(numbered_data, "v2_pinned.yaml", "--data.pipeline", "v2", *NO_WORKERS, "--data.pin_memory", "false")
    path = next((numbered_data / "lightning_logs" / "v2_pinned").glob("version_*/timing.json"))
    summary = json.loads(path.read_text())
    for row in summary["epochs"]:
        assert row[STEPS_RUN] > 0 and len(row["ranks"]) == 2
        each = [rank[WAIT_PER_STEP_S] for rank in row["ranks"]]
        assert row[WAIT_PER_STEP_S] == pytest.approx(max(each)) and None not in each
    assert [rank[WAIT_PER_STEP_S] for rank in summary["ranks"]] == [
        pytest.approx(v)
        for v in [
            sum(row["ranks"][rank][WAIT_PER_STEP_S] for row in summary["epochs"][1:]) / (len(summary["epochs"]) - 1)
            for rank in range(2)
        ]
    ]
    events = EventAccumulator(str(path.parent))
    events.Reload()
    for added in (STEPS_RUN, WAIT_PER_STEP_S):
        assert len(events.Scalars(f"timing/{added}")) == len(summary["epochs"])
        [row] = [row for row in compare(summary, summary)["rows"] if row["key"] == added]
        assert row["a"] == pytest.approx(added.scale * summary[added])
        assert html_report([("a", summary)]).count(added.label) == 1
    assert f"{WAIT_PER_STEP_S.label} " in format_summary(summary)  # each rank's, in the ranks line


# ---------------------------------------------------------------- the same parts, emulated in one process
class TwoRanks:
    """Two ranks as two threads of this process: each one's strategy gathers as gloo's ``all_gather`` does, both
    ranks' tensors stacked in rank order."""

    def __init__(self):
        self._barrier = threading.Barrier(2, timeout=60)
        self._sent: list[torch.Tensor | None] = [None, None]

    def _all_gather(self, rank: int, tensor: torch.Tensor) -> torch.Tensor:
        self._sent[rank] = tensor
        self._barrier.wait()
        stacked = torch.stack(self._sent)
        self._barrier.wait()  # both have read before either sends its next tensor
        return stacked

    def run(self, work) -> list:
        """``work(rank, strategy)`` on both ranks at once; what each returned, in rank order."""

        def on(rank: int):
            strategy = SimpleNamespace(root_device=torch.device("cpu"), all_gather=lambda t: self._all_gather(rank, t))
            return work(rank, strategy)

        with ThreadPoolExecutor(2) as ranks:
            return list(ranks.map(on, range(2)))


@pytest.mark.parametrize("fails", [False, True])
def test_the_fit_command_destroys_its_process_group_before_the_process_ends(workdir, fails):
    """Lightning leaves a gloo process group to the interpreter's end, where its threads abort a finished fit now and
    then (status -6, "terminate called without an active exception"): the command destroys it, also after a failure."""
    ddp = ("--trainer.accelerator", "cpu", "--trainer.strategy", "ddp", "--trainer.devices", "1", *NO_WORKERS)
    broken = ("--trainer.callbacks+=records.FailingCallback",) if fails else ()
    with pytest.raises(RuntimeError, match="a failing callback") if fails else contextlib.nullcontext():
        run_stage("v2_pinned", *ddp, "--data.pin_memory", "false", *broken, epochs=1)
    assert not torch.distributed.is_initialized()


@pytest.mark.parametrize("pipeline", ["v1", "v2"])
def test_lightnings_distributed_sampler_gives_each_rank_a_disjoint_half_of_a_dataloader_pipeline(tiny_data, pipeline):
    """The DataLoader pipelines' training loader as Lightning remakes it under DDP (its sampler replaced by a
    DistributedSampler, shuffled because the pipeline's is): two ranks see every row once, in a new order each
    epoch."""
    dm = MNISTDataModule(data_dir=str(tiny_data), pipeline=pipeline, batch_size=8, num_workers=0)
    dm.setup("fit")
    loader = dm.train_dataloader()
    rows = len(dm.datasets["train"])
    assert _is_dataloader_shuffled(loader)
    orders = []
    for epoch in (0, 1):
        seen = []
        for rank in range(2):
            sampler = _get_distributed_sampler(loader, True, 0, num_replicas=2, rank=rank, seed=0)
            sampler.set_epoch(epoch)  # as Lightning's loop does before each training epoch
            ranks_loader = _update_dataloader(loader, sampler, mode=RunningStage.TRAINING)
            seen.append([image.numpy().tobytes() for batch in ranks_loader for image in batch["image"]])
        assert [len(share) for share in seen] == [rows // 2] * 2  # an even split of the 80 rows left after validation
        assert len(set(seen[0] + seen[1])) == rows  # disjoint, and every row
        orders.append(seen[0])
    assert orders[0] != orders[1]


def test_an_epochs_figures_are_combined_over_the_ranks_each_by_its_rule():
    """Both ranks get the slowest rank's train time, the samples of both and the mean of their forwards, each
    rank's own train time beside; a figure one rank could not measure (NaN) poisons a max and is left out of a
    mean. One process: its own figures, none per rank."""
    local = [
        Measures({**Measures.unmeasured(), TRAIN_S: 10.0, SAMPLES: 96.0, FORWARD_S: 1.0, EVAL_S: 2.0, COMM_SHARE: 0.4}),
        Measures({**Measures.unmeasured(), TRAIN_S: 12.0, SAMPLES: 104.0, FORWARD_S: 3.0}),
    ]
    for merged in TwoRanks().run(lambda rank, strategy: gather(local[rank], strategy, [96.0 - rank, float(rank)])):
        measures = merged.measures
        assert [measures[f] for f in (TRAIN_S, SAMPLES, FORWARD_S, COMM_SHARE)] == [12.0, 200.0, 2.0, 0.4]
        assert math.isnan(measures[EVAL_S])
        assert merged.loader_samples == [191.0, 1.0]
        assert merged.per_rank is not None and merged.per_rank["train_s"] == [10.0, 12.0]
    alone = gather(local[0], SimpleNamespace(root_device=torch.device("cpu"), all_gather=lambda t: t), [96.0])
    assert alone.measures[TRAIN_S] == 10.0 and alone.loader_samples == [96.0] and alone.per_rank is None
    # a strategy of one rank skips the tensor and the collective, and reads the same, NaN included
    single = gather(local[0], SimpleNamespace(world_size=1, all_gather=None), [96.0])
    assert str(single) == str(alone)


def test_the_audits_fingerprints_are_gathered_in_rank_order_however_many_each_rank_saw():
    """Two training loaders; rank 0 saw 3 + 1 samples, rank 1 2 + 0 (one of them rank 0's too): every rank gets
    both ranks' fingerprints per loader, the padding of the shorter cut away, with each one's order and carried
    counts. An epoch where neither rank saw a sample gathers too."""
    empty = torch.empty(0, dtype=torch.int64)
    fingerprints = [[torch.tensor([11, 12, 13]), torch.tensor([21])], [torch.tensor([13, 14]), empty]]

    def audit_gather(parts):
        def on(rank, strategy):
            trainer = SimpleNamespace(world_size=2, strategy=strategy)
            return gathered_shares(trainer, parts[rank], Order(rank), [rank, 0])

        return TwoRanks().run(on)

    for shares in audit_gather(fingerprints):
        assert [[part.tolist() for part in share.parts] for share in shares] == [[[11, 12, 13], [21]], [[13, 14], []]]
        assert [share.order for share in shares] == [Order.CHANGED, Order.SAME]
        assert [share.carried for share in shares] == [[0, 0], [1, 0]]
        counts = loader_counts(shares, 0, 6)
        assert (counts["seen"], counts["distinct"], counts["duplicates"], counts["missing"]) == (5, 4, 1, 2)
    for shares in audit_gather([[empty, empty], [empty, empty]]):
        assert [[part.numel() for part in share.parts] for share in shares] == [[0, 0], [0, 0]]


def test_a_strict_audit_raises_on_every_rank_at_the_end_of_an_epoch_with_a_duplicate():
    """Rank 0 trains samples 0-2, rank 1 samples 2-3: each rank counts both ranks' gathered samples and raises, so
    that no rank goes on to wait in the next epoch's collective for one that stopped."""
    from mnistperf.diagnosis import SampleAudit
    from mnistperf.diagnosis.callbacks.sample_identity import SampleAuditError

    ids = [torch.tensor([0, 1, 2]), torch.tensor([2, 3])]

    def on(rank, strategy):
        trainer = SimpleNamespace(
            world_size=2, global_rank=rank, is_global_zero=rank == 0, strategy=strategy, current_epoch=0,
            interrupted=False, loggers=[], train_dataloader=None, sanity_checking=False,
        )  # fmt: skip
        audit, module = SampleAudit(strict=True, sample_id=0), SimpleNamespace()
        audit.setup(trainer, module, "fit")
        audit.on_train_start(trainer, module)
        audit.on_train_epoch_start(trainer, module)
        audit.on_train_batch_start(trainer, module, (ids[rank],), 0)
        try:
            audit.on_train_epoch_end(trainer, module)
        except SampleAuditError as error:
            return str(error)
        return None

    raised = TwoRanks().run(on)
    assert [error is not None and "5 samples seen (3 + 2 on 2 ranks), 4 distinct" in error for error in raised] == [
        True,
        True,
    ], raised


def test_the_graphed_stage_steps_eagerly_under_several_processes_and_says_so(monkeypatch, caplog):
    """On CUDA with two processes the whole step is not captured (the gradients' all-reduce would not be)."""
    model = ImageClassifier(cuda_graph=True)
    monkeypatch.setattr(model, "_run_device", lambda: torch.device("cuda"))
    for world_size, graphing in ((1, True), (2, False)):
        model._trainer = SimpleNamespace(world_size=world_size)
        caplog.clear()
        model.configure_model()
        assert model._graphing is graphing
        said = "model.cuda_graph: skipped under 2 processes (the gradients' all-reduce is not captured)"
        assert (said in caplog.text) is not graphing, caplog.text


def test_both_callbacks_travel_to_spawned_processes_and_a_copy_reads_its_own_clock():
    """ddp_spawn pickles the trainer's callbacks; Lightning and users deep-copy them."""
    from mnistperf.diagnosis import EpochTimer, SampleAudit

    for callback in (EpochTimer(), SampleAudit(sample_dims=2)):
        for copied in (pickle.loads(pickle.dumps(callback)), copy.deepcopy(callback)):
            assert type(copied) is type(callback) and copied.problems is not callback.problems
    timer = EpochTimer()
    copied = copy.deepcopy(timer)
    copied.clock.windows.window = pending = object()  # a window pending in the copy alone
    assert copied._timed_steps.window() == (False, id(pending)) != timer._timed_steps.window()
