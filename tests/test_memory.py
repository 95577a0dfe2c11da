"""Memory per epoch: the training process's and its running workers' resident memory, the GPU's peaks, growth."""

from __future__ import annotations

import math
import os
import threading
import time

import pytest
import torch
from conftest import fit_module
from lightning import LightningModule
from torch.utils.data import DataLoader, Dataset

from mnistperf.diagnosis import EpochTimer
from mnistperf.diagnosis.figures import scalars
from mnistperf.diagnosis.measure import cores, memory
from mnistperf.diagnosis.measure.batches import may_run_workers
from mnistperf.diagnosis.measure.phases import sampled
from mnistperf.diagnosis.measure.step_parts import parts_timed
from mnistperf.diagnosis.record.clock import EpochClock
from mnistperf.diagnosis.record.text import format_growth, format_summary

linux = pytest.mark.skipif(not memory.measured(), reason="resident memory is read from Linux's /proc")
BALLAST_MB = 64


class Rows(Dataset):
    """Tiny rows; in a worker process each worker first holds ``ballast_mb`` of its own."""

    held: torch.Tensor | None = None

    def __init__(self, count: int = 24, ballast_mb: int = 0):
        self.count, self.ballast_mb = count, ballast_mb

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index):
        if self.ballast_mb and Rows.held is None and torch.utils.data.get_worker_info() is not None:
            Rows.held = torch.ones(self.ballast_mb * 2**18)  # float32: 4 bytes each, written so they are resident
        return torch.randn(4), index % 2


class Hoarder(LightningModule):
    """A tiny model that keeps ``per_epoch_mb`` more of memory every epoch, as a leak does."""

    def __init__(self, per_epoch_mb: int = 0):
        super().__init__()
        self.per_epoch_mb = per_epoch_mb
        self.kept: list[torch.Tensor] = []
        self.net = torch.nn.Linear(4, 2)

    def on_train_epoch_start(self):
        if self.per_epoch_mb:
            self.kept.append(torch.ones(self.per_epoch_mb * 2**18))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def rows_of(key: str, *values: float) -> list[dict]:
    return [{"epoch": n + 2, key: v} for n, v in enumerate(values)]


def test_growth_is_named_where_memory_rises_every_epoch_by_enough():
    grown = memory.growth(rows_of("rss_mb", 500.0, 532.0, 564.0))
    assert [g["figure"] for g in grown] == ["rss_mb"] and grown[0]["per_epoch_mb"] == pytest.approx(32.0)
    assert memory.growth(rows_of("rss_mb", 500.0, 532.0, 530.0)) == []  # not every epoch: no growth named
    assert memory.growth(rows_of("rss_mb", 500.0, 501.0, 502.0)) == []  # every epoch, by too little
    assert memory.growth(rows_of("rss_mb", 500.0, 600.0)) == []  # too few epochs to tell
    line = format_growth(memory.growth(rows_of("device_allocated_mb", 100.0, 200.0, 300.0)))
    assert line == "Memory grows: GPU memory allocated +100 MB per epoch (100 MB to 300 MB, epochs 2-4)"


def test_the_gpu_peaks_are_each_epochs_own_the_counters_reset_as_each_epoch_starts(monkeypatch):
    """Emulated: CUDA's peak counters on a GPU, without one. Epoch 1 peaks at 5 MB and epoch 2 at 3 MB; a clock that did
    not reset them as each epoch starts would read 5 MB twice."""
    counters = {"now": 0.0, "peak": 0.0}

    def allocate(mb: float) -> None:
        counters["now"], counters["peak"] = mb, max(counters["peak"], mb)

    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device: counters["peak"] * 2**20)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda device: 2 * counters["peak"] * 2**20)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device: counters.update(peak=counters["now"]))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    clock = EpochClock(torch.device("cuda", 0), profile_window=False)
    rows = []
    for peak in (5.0, 3.0):
        clock.epoch_start(batches=2)
        for index, mb in enumerate((peak, 1.0)):
            clock.step_start(index)
            allocate(mb)
            clock.step_end(index)
        rows.append(clock.epoch_end())
    assert [(row["device_allocated_mb"], row["device_reserved_mb"]) for row in rows] == [(5.0, 10.0), (3.0, 6.0)]
    assert clock.summary()["peak_device_mb"] == {"allocated": 5.0, "reserved": 10.0}  # the fit's, over its epochs
    allocated, reserved = memory.device_peaks_mb(torch.device("cpu"))
    assert allocated != allocated and reserved != reserved  # NaN: not measured off CUDA


@linux
def test_the_resident_memory_of_running_workers_is_measured():
    timer = EpochTimer()
    loader = DataLoader(Rows(ballast_mb=BALLAST_MB), batch_size=2, num_workers=1)  # not persistent: gone by the end
    fit_module(Hoarder(), loader, callbacks=[timer], max_epochs=2)
    assert [row["epoch"] for row in timer.epochs] == [1, 2]
    for row in timer.epochs:
        assert row["workers_pss_mb"] >= BALLAST_MB and row["rss_mb"] > 0, row
        assert "timing/workers_pss_mb" in scalars(row, every=True) and row["device_allocated_mb"] is None


@linux
def test_without_workers_none_are_counted():
    timer = EpochTimer()
    fit_module(Hoarder(), DataLoader(Rows(ballast_mb=BALLAST_MB), batch_size=2), callbacks=[timer], max_epochs=1)
    assert timer.epochs[0]["workers_pss_mb"] < BALLAST_MB


class Validated(Hoarder):
    def validation_step(self, batch, batch_idx):
        return self.training_step(batch, batch_idx)


def test_only_loaders_known_to_run_no_workers_spare_the_reads():
    none, two = DataLoader(Rows(), batch_size=2), DataLoader(Rows(), batch_size=2, num_workers=2)
    assert not may_run_workers(none) and not may_run_workers(None) and not may_run_workers({"a": none, "b": [none]})
    assert may_run_workers({"a": none, "b": [none, two]}) and may_run_workers(iter(range(3)))  # not a DataLoader


@linux
def test_where_no_loader_runs_workers_none_are_looked_for_and_none_are_counted(monkeypatch):
    looked: list[int] = []

    def children() -> list[int]:
        looked.append(1)
        return []

    monkeypatch.setattr(memory, "workers", children)
    monkeypatch.setattr(cores, "workers", children)
    timer = EpochTimer()
    loader = DataLoader(Rows(), batch_size=2)
    fit_module(Validated(), loader, DataLoader(Rows(), batch_size=2), callbacks=[timer], max_epochs=2)
    assert not looked
    assert [(row["workers_pss_mb"], row["workers_cpu_share"]) for row in timer.epochs] == [(0.0, 0.0)] * 2
    persistent = DataLoader(Rows(), batch_size=2, num_workers=1, persistent_workers=True)  # alive while training
    fit_module(Validated(), loader, persistent, callbacks=[EpochTimer()], max_epochs=2)
    assert looked
    looked.clear()  # a validation loader not loaded yet, as it first runs in epoch 2, may run workers
    workers = DataLoader(Rows(), batch_size=2, num_workers=1)
    options = {"num_sanity_val_steps": 0, "check_val_every_n_epoch": 2}
    fit_module(Validated(), loader, workers, callbacks=[EpochTimer()], max_epochs=2, **options)
    assert looked


@linux
def test_memory_that_grows_every_epoch_is_named_with_how_much():
    timer = EpochTimer()
    fit_module(Hoarder(per_epoch_mb=48), DataLoader(Rows(), batch_size=2), callbacks=[timer], max_epochs=4)
    summary = timer.clock.summary()
    grown = {g["figure"]: g for g in summary["memory"]["growth"]}
    assert "rss_mb" in grown and 24 <= grown["rss_mb"]["per_epoch_mb"] <= 96, summary["memory"]
    assert "Memory grows: the training process +" in format_summary(summary)


def test_off_linux_resident_memory_is_not_measured(monkeypatch, tmp_path):
    monkeypatch.setattr(memory, "PROC", tmp_path)
    assert not memory.measured() and memory.workers_pss_mb() is None and memory.rss_mb() is None
    from mnistperf.diagnosis.record.summary import aggregate

    rows = [{"epoch": 1, "train_s": 1.0, "eval_s": 0.0, "samples": 1, "input_wait_share": 0.0}]
    found = aggregate(rows, 0.5)
    assert "not measured" in found["memory"]["resident"]


def test_an_epochs_memory_is_each_figures_largest_reading_and_nan_until_one_is_readable(monkeypatch):
    own, workers = iter([100.0, None, 120.0]), iter([None])
    monkeypatch.setattr(memory, "rss_mb", lambda: next(own))
    monkeypatch.setattr(memory, "workers_pss_mb", lambda: next(workers))  # read once an epoch: a second would fail
    epoch = memory.EpochMemory(batches=10, loader_workers=True)
    assert epoch.mid_step == 5 and all(math.isnan(mb) for mb in epoch.largest())  # nothing read yet
    epoch.read()
    epoch.read()
    process, its_workers = epoch.largest()
    assert process == 100.0 and math.isnan(its_workers)  # a reading of None is no reading
    epoch.read()
    assert epoch.largest()[0] == 120.0


def test_the_workers_memory_is_read_off_the_training_thread_and_waited_for_as_training_pauses(monkeypatch):
    threads: list[str] = []

    def pss() -> float:
        threads.append(threading.current_thread().name)
        return 8.0

    monkeypatch.setattr(memory, "workers_pss_mb", pss)
    epoch = memory.EpochMemory(batches=10, loader_workers=True)
    epoch.read()
    epoch.settle()
    assert threads == ["mnistperf workers' memory"] and epoch.largest()[1] == 8.0
    # read at the first step from the middle on that is timed neither by its parts nor by its phases, in its own
    # epoch's draws: the thread would slow the step it measures
    for batches, epoch in ((58, 0), (4, 0), (20, 0), (58, 3), (1000, 7)):
        step = memory.EpochMemory(batches, loader_workers=True, epoch=epoch).mid_step  # from 1: index step - 1
        skipped = range(max(1, batches // 2) - 1, step - 1)
        assert not parts_timed(step - 1, epoch) and not sampled(step - 1, 1, epoch), (batches, epoch)
        assert all(parts_timed(index, epoch) or sampled(index, 1, epoch) for index in skipped), (batches, epoch)
    assert [memory.EpochMemory(batches, loader_workers=True).mid_step for batches in (58, 4)] == [29, 4]
    monkeypatch.setattr(memory, "workers_pss_mb", lambda: 1 / 0)  # a reading that fails is no reading, and no error
    failing = memory.EpochMemory(batches=10, loader_workers=True)
    failing.read()
    assert math.isnan(failing.largest()[1])


def test_a_kept_proc_file_is_read_anew_each_time(monkeypatch, tmp_path):
    (tmp_path / "self").mkdir()
    statm = tmp_path / "self" / "statm"
    statm.write_text("9 2 1 0 0 0 0\n")
    monkeypatch.setattr(memory, "PROC", tmp_path)
    assert memory.own_proc_text("statm") == "9 2 1 0 0 0 0\n"
    statm.write_text("9 5 1 0 0 0 0\n")  # the same file, new text: a reading is not kept, only the descriptor
    assert memory.own_proc_text("statm") == "9 5 1 0 0 0 0\n"
    assert memory.rss_mb() == 5 * os.sysconf("SC_PAGE_SIZE") / memory.MB


@linux
def test_the_descriptor_of_a_thread_that_ended_is_closed_and_the_asking_threads_file_read(monkeypatch):
    ended: list[int] = []
    worker = threading.Thread(target=lambda: ended.extend([threading.get_native_id(), thread_id()]))
    worker.start()
    worker.join()
    for _ in range(1000):  # join returns as the thread's Python ends: its task may linger a moment on a busy machine
        if not os.path.exists(f"/proc/self/task/{ended[0]}"):
            break
        time.sleep(0.01)
    mine, open_before = threading.get_native_id(), len(os.listdir("/proc/self/fd"))
    monkeypatch.setattr(memory.threading, "get_native_id", lambda: ended[0])  # this thread now has the ended one's id
    assert ended[1] == ended[0] and thread_id() == mine
    assert len(os.listdir("/proc/self/fd")) == open_before  # the ended thread's descriptor given back, not left open


def thread_id() -> int:
    return int(memory.own_proc_text("stat", thread=True).split()[0])  # a thread's stat begins with its id


@linux
def test_a_threads_own_proc_file_is_the_calling_threads_while_both_run():
    found: list[int] = []
    main_read = threading.Event()

    def read_around_the_main_threads() -> None:
        found.extend([threading.get_native_id(), thread_id()])
        main_read.wait(timeout=60)
        found.append(thread_id())  # from the descriptor kept, with the main thread's kept beside it

    worker = threading.Thread(target=read_around_the_main_threads)
    worker.start()
    while len(found) < 2:
        worker.join(timeout=0.01)
    mine = [thread_id(), thread_id()]
    main_read.set()
    worker.join()
    assert found[0] == found[1] == found[2] != threading.get_native_id()
    assert mine == [threading.get_native_id()] * 2
