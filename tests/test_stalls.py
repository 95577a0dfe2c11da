"""Stalls over time: each epoch's step-time distribution, its first step apart, spikes and where they fell, drift."""

from __future__ import annotations

import math
import time

import pytest
import torch
from conftest import fit_module
from lightning import LightningModule
from torch.utils.data import DataLoader, Sampler, TensorDataset

from mnistperf.diagnosis import EpochTimer
from mnistperf.diagnosis.figures import scalars
from mnistperf.diagnosis.measure.stalls import SPIKES_WORTH, drift, percentile, stalls, step_stats
from mnistperf.diagnosis.record.text import format_stalls, format_summary

STEP_S = 0.002  # each toy step's deliberate sleep: a median far above the loop's own noise
BATCHES = 24


class Sleepy(LightningModule):
    """A tiny model whose steps sleep as ``pause(epoch, batch_idx)`` says."""

    def __init__(self, pause):
        super().__init__()
        self.pause = pause
        self.net = torch.nn.Linear(4, 2)

    def training_step(self, batch, batch_idx):
        time.sleep(self.pause(self.current_epoch + 1, batch_idx))
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class SlowStart(Sampler[int]):
    """A sampler whose every pass starts late, as a loader starting its workers does."""

    def __init__(self, count: int, start_s: float):
        self.count, self.start_s = count, start_s

    def __iter__(self):
        time.sleep(self.start_s)
        return iter(range(self.count))

    def __len__(self) -> int:
        return self.count


def rows(start_s: float = 0.0, batches: int = BATCHES) -> DataLoader:
    count = batches * 4
    data = TensorDataset(torch.randn(count, 4), torch.randint(0, 2, (count,)))
    return DataLoader(data, batch_size=4, sampler=SlowStart(count, start_s))


def fit(pause, epochs: int = 3, start_s: float = 0.0, batches: int = BATCHES) -> EpochTimer:
    """A fit of :class:`Sleepy` with no profiled window: its start and stop would be stalls of the timer's own, longer
    than a deliberate one on a busy machine."""
    timer = EpochTimer(busy_window_steps=0)
    fit_module(Sleepy(pause), rows(start_s, batches), callbacks=[timer], max_epochs=epochs)
    return timer


def test_percentiles_and_spikes_of_an_epoch_keep_its_first_step_apart():
    intervals = [0.5] + [0.01] * 18 + [0.1, math.nan]  # a slow first step, one spike, one profiled step left out
    stats = step_stats(intervals, first_index=0)
    assert stats.first_s == 0.5 and stats.median_s == 0.01 and stats.max_s == 0.1
    assert stats.spikes == 1 and stats.worst == [(20, 0.1)]  # counted from 1: the 20th step
    assert stats.excess_s == pytest.approx(0.09)  # what the spike took past the median step
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0], 0.9) == 9.0
    assert math.isnan(step_stats([], 0).median_s)


def test_drift_is_named_only_where_step_time_moves_one_way_by_enough():
    def rows_of(*medians):
        return [{"epoch": n + 2, "step_median_s": m} for n, m in enumerate(medians)]

    moved = drift(rows_of(0.010, 0.013, 0.016))
    assert moved is not None and abs(moved["per_epoch_s"] - 0.003) < 1e-9 and moved["epochs"] == [2, 4]
    assert drift(rows_of(0.010, 0.013, 0.011)) is None  # back and forth: noise, not drift
    assert drift(rows_of(0.010, 0.0105, 0.011)) is None  # one way, but by less than the line
    assert drift(rows_of(0.010, 0.020)) is None  # too few epochs to tell


def test_the_summary_says_nothing_of_stalls_where_nothing_stood_out():
    quiet = [{"epoch": n, "step_median_s": 0.01, "first_step_s": 0.012, "spikes": 0} for n in (1, 2, 3)]
    assert format_stalls(stalls(quiet), 0.01, quiet) is None


def test_a_spike_is_counted_where_it_fell_and_named_only_where_it_cost_enough():
    timer = fit(lambda epoch, index: 0.6 if (epoch, index) == (2, 10) else STEP_S)
    second = timer.epochs[1]
    assert second["worst_spikes"][0][0] == 11 and second["spikes"] >= 1, second
    assert second["spikes_s"] >= 0.6 - second["step_median_s"]  # past the median, however busy the machine
    assert second["step_max_s"] >= 0.6 > second["step_p90_s"] >= second["step_median_s"] >= STEP_S
    assert "timing/step_median_s" in scalars(second) and "timing/spikes_s" in scalars(second, every=True)
    summary = timer.clock.summary()
    assert summary["stalls"]["worst_spikes"][0]["epoch"] == 2 and summary["stalls"]["worst_spikes"][0]["step"] == 11
    share = summary["stalls"]["spikes_share"]
    assert share == pytest.approx(sum(e["spikes_s"] for e in timer.epochs) / sum(e["train_s"] for e in timer.epochs))
    line = format_summary(summary)
    assert share >= SPIKES_WORTH and f"took {share:.0%} of train time past it (the longest: epoch 2 step 11" in line
    assert "periodic work in the loop" in line


def test_many_small_spikes_that_cost_little_say_nothing():
    """On a loaded machine every other step may pass 3x a tiny median; what they cost is what matters."""
    rows = [
        {
            "epoch": n,
            "train_s": 10.0,
            "spikes": 60,
            "spikes_s": 0.2,
            "worst_spikes": [[3, 0.01]],
            "step_median_s": 0.002,
        }
        for n in (1, 2)
    ]
    found = stalls(rows)
    assert found["spikes"] == 120 and found["spikes_share"] == pytest.approx(0.02)
    assert format_stalls(found, 0.002, rows) is None


def test_a_slow_first_step_is_named_only_where_it_costs_a_share_of_train_time():
    def rows_of(steps: int) -> list[dict]:  # the steady epochs' first step at 5x a 10 ms median
        row = {"step_median_s": 0.01, "first_step_s": 0.05, "train_s": 0.01 * steps, "spikes": 0, "spikes_s": 0.0}
        return [{"epoch": n, **row} for n in (1, 2, 3)]

    short = stalls(rows_of(20))
    assert short["slow_first_step"] == [2, 3] and short["slow_first_share"] == pytest.approx(0.2)  # 0.04 s of 0.2 s
    line = format_stalls(short, 0.01, rows_of(20))
    assert (
        "the first steps of epoch(s) 2, 3 (over 3x their epoch's median, the longest 50 ms) took 20% of train time"
        in line
    )
    assert "the loader starting its epoch" in line
    long = stalls(rows_of(1000))  # the same first step in an epoch of 1,000 steps: 0.4 % of it
    assert long["slow_first_step"] == [2, 3] and format_stalls(long, 0.01, rows_of(1000)) is None
    older = {key: value for key, value in short.items() if key not in ("slow_first_share", "slowest_first_s")}
    assert format_stalls(older, 0.01, rows_of(20)) == line  # a timing.json from before the share: read from its rows
