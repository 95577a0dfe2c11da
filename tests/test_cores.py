"""Workers that take the cores are named: the training thread's wait for a core and its workers' CPU, per epoch."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from conftest import fit_module
from lightning import LightningModule
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

from mnistperf.diagnosis import EpochTimer
from mnistperf.diagnosis.callbacks.project_reader import project_hints
from mnistperf.diagnosis.figures import CORE_WAIT_SHARE, INPUT_WAIT_SHARE, WORKERS_CPU_SHARE, Measures, scalars
from mnistperf.diagnosis.measure import cores, memory
from mnistperf.diagnosis.measure.busy_window import thread_wait_s
from mnistperf.diagnosis.record.advice import USER_HINTS, WORKERS, advice
from mnistperf.diagnosis.record.project_terms import ProjectTerms
from mnistperf.diagnosis.record.summary import aggregate, epoch_row
from mnistperf.diagnosis.record.verdict import classify
from mnistperf.lab_hints import LAB_HINTS

linux = pytest.mark.skipif(thread_wait_s() is None, reason="read from Linux's /proc")


class Emulated:
    """Readings of /proc as a script gives them: the thread's waits in turn, each worker's CPU at each read, and the
    ended children's CPU at the epoch's start and end (``reaped``; by default none end)."""

    def __init__(self, monkeypatch, waits, workers: list[dict[int, float]], cpus: int = 2, reaped: list | None = None):
        self.waits, self.workers, self.now = iter(waits), iter(workers), {}
        monkeypatch.setattr(cores, "thread_wait_s", lambda: next(self.waits))
        monkeypatch.setattr(cores, "workers", self._workers)
        monkeypatch.setattr(cores, "cpu_s", lambda pid: self.now.get(pid))
        monkeypatch.setattr(cores, "usable_cpus", lambda: cpus)
        monkeypatch.setattr(cores, "measured", lambda: True)
        monkeypatch.setattr(cores, "reaped_cpu_s", lambda: next(self.reaped))
        self.reaped = iter(reaped or [0.0] * 2)

    def _workers(self) -> list[int]:
        self.now = next(self.workers)
        return list(self.now)


def test_the_wait_counts_train_time_only_and_a_worker_gone_counts_from_its_last_read(monkeypatch):
    # Worker 7 persists (5 s of CPU before the epoch); worker 8 starts mid-epoch and is gone by the end.
    Emulated(monkeypatch, waits=[1.0, 3.0, 3.5, 4.0], workers=[{7: 5.0}, {7: 7.0, 8: 3.0}, {7: 9.0}])
    epoch = cores.EpochCores()
    epoch.start(now=100.0)
    epoch.read_workers(now=105.0)
    epoch.train_paused()  # 2 s waited in the first stretch of train time
    epoch.train_resumed()  # an evaluation inside the epoch: its 0.5 s of waiting is not train time
    epoch.train_paused()  # 0.5 s more
    wait, used = epoch.shares(train_s=10.0, now=110.0)
    assert wait == pytest.approx(0.25)  # 2.5 s of 10 s
    assert used == pytest.approx((4.0 + 3.0) / (10.0 * 2))  # worker 7's 4 s, worker 8's 3 s, over 2 cores' 10 s


def test_workers_that_started_and_ended_between_two_reads_count_by_the_cpu_of_the_children_joined(monkeypatch):
    # A loader of no known length, its epoch shorter than a read's interval: no read finds its workers alive, but
    # their 3 s are among the ended children's once joined. Worker 7, read alive at 5 s of CPU, ends too (at 6 s).
    Emulated(monkeypatch, waits=[0.0, 0.0], workers=[{7: 5.0}, {}], reaped=[10.0, 10.0 + 3.0 + 6.0])
    epoch = cores.EpochCores()
    epoch.start(now=100.0)
    epoch.train_paused()
    _, used = epoch.shares(train_s=2.0, now=102.0)
    assert used == pytest.approx((3.0 + 1.0) / (2.0 * 2))  # the new workers' 3 s and worker 7's last 1 s


def test_off_linux_or_unreadable_neither_is_measured(monkeypatch):
    monkeypatch.setattr(cores, "thread_wait_s", lambda: None)
    monkeypatch.setattr(cores, "measured", lambda: False)
    epoch = cores.EpochCores()
    epoch.start(now=0.0)
    epoch.train_paused()
    wait, used = epoch.shares(train_s=1.0, now=1.0)
    assert wait != wait and used != used  # NaN: not measured


def test_a_process_cpu_time_is_read_from_its_stat_whatever_its_name(tmp_path, monkeypatch):
    (tmp_path / "42").mkdir()
    fields = ["S", *["0"] * 10, "250", "150", *["0"] * 30]  # utime 250 ticks, stime 150
    (tmp_path / "42" / "stat").write_text(f"42 (a (odd) name) {' '.join(fields)}\n")
    monkeypatch.setattr(memory, "PROC", tmp_path)
    monkeypatch.setattr(cores.os, "sysconf", lambda name: 100)
    assert cores.cpu_s(42) == pytest.approx(4.0)
    assert cores.cpu_s(43) is None  # gone


def figures(wait: float | None, used: float | None, **more) -> dict:
    return {INPUT_WAIT_SHARE: 0.03, CORE_WAIT_SHARE: wait, WORKERS_CPU_SHARE: used, **more}


def test_workers_holding_the_cores_are_named_with_what_helps_and_its_ceiling():
    verdict, reason = classify(figures(0.6, 0.7), 0.5)
    assert verdict == "undetermined"  # the bound is still the step's; the clause says why it ran slower
    assert "its own DataLoader workers held the cores" in reason
    assert "waited for one 60% of train time, the workers using 70% of them" in reason
    assert "pre-tensorized dataset" in reason and "fewer workers" in reason
    assert "up to 2.5x faster" in reason  # 1 / (1 - 0.6)
    assert reason.count("; its own DataLoader workers") == 1


def test_a_wait_beside_idle_workers_is_other_works_and_a_small_wait_says_nothing():
    reason = classify(figures(0.3, 0.05), 0.5)[1]
    assert "other work on this machine took the cores" in reason and "DDP" not in reason
    assert "quieter machine" in reason
    assert "pre-tensorized" not in reason
    for quiet in (figures(cores.CROWDED - 0.01, 0.9), figures(None, None)):
        assert "cores" not in classify(quiet, 0.5)[1]


def test_workers_using_as_large_a_share_of_the_cores_as_the_thread_waited_are_named_and_not_other_work():
    assert "its own DataLoader workers held the cores" in classify(figures(0.14, 0.15), 0.5)[1]
    assert "other work on this machine" in classify(figures(0.14, 0.10), 0.5)[1]


def test_under_ddp_a_wait_for_a_core_beside_idle_workers_is_put_to_the_fits_own_ranks_and_their_threads():
    """Two ranks of torch's default threads each on two cores wait for each other: no quieter machine helps."""
    from mnistperf.diagnosis.record.verdict import RANK_THREADS

    two = figures(0.3, 0.0, ranks=[{"rank": 0}, {"rank": 1}], cpu_busy_share=0.4, waited_for_a_core=0.35)
    reason = classify(two, 0.5)[1]
    assert "its own 2 ranks (and any other work) took the cores" in reason and RANK_THREADS in reason
    assert "quieter machine" not in reason
    held = cores.cores_held_by(two)
    found = advice({**two, "verdict": "overhead-bound", "avg_train_s": 1.0, "cores_held": held})
    assert found["hints"][0] == RANK_THREADS
    assert "other work on this machine" in classify(figures(0.3, 0.0, ranks=[{"rank": 0}]), 0.5)[1]  # one rank


def test_a_crowded_window_is_doubted_once_and_the_clause_says_who_held_the_cores():
    crowded = {"cpu_busy_share": 0.5, "waited_for_a_core": 0.4}
    reason = classify(figures(0.4, 0.6, **crowded), 0.5)[1]
    assert reason.count("in doubt") == 1 and "its own DataLoader workers held the cores" in reason
    assert "quieter machine" not in reason  # its own workers: a quieter machine would not help
    alone = classify({**crowded, INPUT_WAIT_SHARE: 0.03}, 0.5)[1]  # no epoch reading: the window's doubt as before
    assert "other work on this machine moved the share; measure again on a quieter machine" in alone


def test_the_run_reads_who_held_the_cores_from_its_steady_epochs():
    epoch = {
        **Measures.unmeasured(),
        "train_s": 10.0,
        "eval_s": 0.5,
        "samples": 100,
        "input_wait_s": 0.3,
        "host_wait_s": 0.4,
    }
    rows = [
        epoch_row(n, Measures({**epoch, CORE_WAIT_SHARE: w, WORKERS_CPU_SHARE: u}), None, None, {}, 0.5)
        for n, (w, u) in enumerate([(0.1, 0.2), (0.5, 0.6), (0.3, 0.4)], start=1)
    ]
    assert "its own DataLoader workers held the cores" in rows[1]["verdict_reason"]
    summary = aggregate(rows, 0.5)
    assert summary[CORE_WAIT_SHARE] == pytest.approx(0.4) and summary[WORKERS_CPU_SHARE] == pytest.approx(0.5)
    assert summary["cores_held"]["by"] == "workers"
    assert summary["cores_held"]["speed_up_at_most"] == pytest.approx(1 / 0.6)
    # The step's own bound is undetermined here, and the advice still says what freeing the cores could buy
    assert summary["verdict"] == "undetermined"
    assert "training could be up to 1.7x faster" in summary["advice"]["ceiling"]
    assert "wait for a core costs (40% of train time" in summary["advice"]["ceiling"]
    assert "fewer DataLoader workers (num_workers), where the loader still keeps pace" in summary["advice"]["hints"]


CROWDED_BY_WORKERS = {  # v1_pinned's run on the 2-core CPU: compute-bound in doubt, its own workers on the cores
    "verdict": "compute-bound",
    "avg_train_s": 28.7,
    INPUT_WAIT_SHARE: 0.17,
    "cpu_busy_share": 0.87,
    "waited_for_a_core": 0.59,
    "cores_held": {"by": "workers", CORE_WAIT_SHARE: 0.57, WORKERS_CPU_SHARE: 0.76, "speed_up_at_most": 1 / 0.43},
}


def test_the_advice_where_workers_held_the_cores_states_their_ceiling_and_what_frees_them():
    found = advice(CROWDED_BY_WORKERS)
    assert "none stated" not in found["ceiling"]  # the verdict's clause and this line agree
    assert "with its own DataLoader workers off the cores, training could be up to 2.3x faster" in found["ceiling"]
    assert found["hints"] == USER_HINTS[WORKERS] and "at_most_s_less" not in found  # not a bound compare holds B to
    assert found["hints"][0].startswith("cheaper batches: the per-item work of __getitem__")
    lab = advice(CROWDED_BY_WORKERS, LAB_HINTS)["hints"]
    assert "stage v2_pinned" in lab[0] and "data.num_workers" in lab[1] and "mnistperf tune" in lab[2]
    waiting = advice({**CROWDED_BY_WORKERS, "verdict": "input-bound"})  # the input's ceiling, the workers' beside it
    assert waiting["ceiling"].startswith("with input free") and "DataLoader workers off the cores" in waiting["ceiling"]
    # not "more DataLoader workers": they already hold the cores; nor fewer: the loader does not keep pace
    assert waiting["hints"] == [hint for hint in USER_HINTS[WORKERS] if not hint.startswith("fewer DataLoader")]
    assert len(waiting["hints"]) == len(USER_HINTS[WORKERS]) - 1
    assert advice({**CROWDED_BY_WORKERS, "verdict": "input-bound", "cores_held": None})["hints"][0].startswith("more")
    other = advice({**CROWDED_BY_WORKERS, "cores_held": {"by": "other work", CORE_WAIT_SHARE: 0.57}})
    assert other["ceiling"].startswith("none stated")  # other work: nothing of the run's own to free
    # A share the window measured quietly still bounds the step: its ceiling stands, the workers' beside it
    quiet = {"verdict": "overhead-bound", "avg_train_s": 1.0, INPUT_WAIT_SHARE: 0.02, "device_busy_share": 0.4}
    held = {"by": "workers", CORE_WAIT_SHARE: 0.3, WORKERS_CPU_SHARE: 0.5, "speed_up_at_most": 1 / 0.7}
    both = advice({**quiet, "waited_for_a_core": 0.03, "cores_held": held})
    alone = advice(quiet)
    assert both["ceiling"].startswith(alone["ceiling"] + "; with its own DataLoader workers off the cores")
    assert both["at_most_s_less"] == alone["at_most_s_less"] and both["speed_up_at_most"] == pytest.approx(2.5)
    assert both["hints"] == USER_HINTS[WORKERS] + USER_HINTS["overhead-bound"]


def test_the_advice_on_workers_names_the_projects_own_option_and_tune():
    terms = ProjectTerms(
        model="ShelfModel", datamodule="ShelfData", options={"num_workers": "n_workers"}, prefix="data.init_args."
    )
    hints = project_hints(None, replace(terms, config="shelf.yaml"), cuda=False)[WORKERS]
    assert "fewer DataLoader workers (data.init_args.n_workers), where the loader still keeps pace" in hints
    assert any("`mnistperf tune --config shelf.yaml`" in hint for hint in hints)
    python = project_hints(None, replace(terms, prefix=None), cuda=False)[WORKERS]
    assert "fewer DataLoader workers (ShelfData(n_workers=...)), where the loader still keeps pace" in python
    assert EpochTimer(hints={WORKERS: ["fewer loader processes"]}).hints == {WORKERS: ["fewer loader processes"]}


class Busy(Dataset):
    """Rows whose every item costs a Python loop, as per-row conversion does."""

    def __len__(self) -> int:
        return 96

    def __getitem__(self, index):
        spent = sum(i * i for i in range(60_000))  # some ticks of CPU time a worker even on a fast machine
        return torch.full((8,), float(spent % 7)), index % 2


class Tiny(LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(8, 2)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class BusyStream(IterableDataset):
    """Busy's rows as a stream of no known length, each worker its half."""

    def __iter__(self):
        info = get_worker_info()
        return (Busy()[index] for index in range(info.id if info else 0, 32, info.num_workers if info else 1))


@linux
def test_a_stream_whose_workers_end_before_a_read_finds_them_still_measures_their_cpu():
    timer = EpochTimer()
    fit_module(Tiny(), DataLoader(BusyStream(), batch_size=8, num_workers=2), callbacks=[timer], max_epochs=2)
    assert all(row[WORKERS_CPU_SHARE] is not None and row[WORKERS_CPU_SHARE] > 0 for row in timer.epochs)


@linux
def test_a_fit_whose_workers_do_busy_work_measures_their_cpu_and_the_threads_wait():
    timer = EpochTimer()
    loader = DataLoader(Busy(), batch_size=8, num_workers=2)  # not persistent: gone before each epoch ends
    fit_module(Tiny(), loader, callbacks=[timer], max_epochs=2)
    assert len(timer.epochs) == 2
    for row in timer.epochs:
        assert row[CORE_WAIT_SHARE] is not None and 0.0 <= row[CORE_WAIT_SHARE] <= 1.0, row
        assert row[WORKERS_CPU_SHARE] is not None and row[WORKERS_CPU_SHARE] > 0, row
        assert {f"timing/{CORE_WAIT_SHARE}", f"timing/{WORKERS_CPU_SHARE}"} <= set(scalars(row, every=True))
    summary = timer.clock.summary()
    assert summary[WORKERS_CPU_SHARE] > 0 and summary[CORE_WAIT_SHARE] is not None
