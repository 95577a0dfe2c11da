"""Epochs of any length: a loader without ``__len__`` (Lightning's own iterable demo), a float limit_train_batches and
max_steps. Every epoch's samples are counted, and the profiled window is placed from what is known or the reason says
plainly why it could not be."""

from __future__ import annotations

import math
import re
from contextlib import nullcontext
from types import SimpleNamespace

import pytest
import torch
from conftest import fit_module
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.demos.boring_classes import BoringDataModule, BoringDataModuleNoLen, BoringModel

from mnistperf.diagnosis import EpochTimer, SampleAudit
from mnistperf.diagnosis.callbacks.project_reader import last_epoch, steps_left
from mnistperf.diagnosis.measure.busy_window import CPU_WINDOW_STEPS, PROFILER_WARMUP_STEPS
from mnistperf.diagnosis.record.clock import EpochClock
from mnistperf.diagnosis.record.window_keeper import PROFILE_ANYWAY

NO_LEN_SAMPLES = 512  # BoringDataModuleNoLen: an iterable of 512 rows, batches of one, no __len__
LEN_SAMPLES = 64  # BoringDataModule: 64 rows in a map-style dataset, batches of one


def fitted(datamodule, timer: EpochTimer | None = None, **options) -> tuple[EpochTimer, SampleAudit, object]:
    timer = timer or EpochTimer()
    audit = SampleAudit()
    trainer = fit_module(BoringModel(), datamodule=datamodule, callbacks=[timer, audit], **options)
    return timer, audit, trainer


def contradictions(reason: str) -> list[str]:
    """Where a reason says an epoch ended after N steps, before a window's last step M: each such clause with N >= M."""
    ended = re.findall(r"ended after (\d+) of its steps, before the window's last \(step (\d+)", reason)
    return [f"{n} >= {m}" for n, m in ended if int(n) >= int(m)]


def test_every_epoch_of_a_loader_without_a_length_is_counted_and_its_reason_agrees_with_itself():
    timer, audit, trainer = fitted(BoringDataModuleNoLen(), max_epochs=3)
    assert trainer.num_training_batches == math.inf
    assert [row["samples"] for row in timer.epochs] == [NO_LEN_SAMPLES] * 3
    assert [row["seen"] for row in audit.epochs] == [NO_LEN_SAMPLES] * 3
    assert list(timer.problems.lines) == [] and list(audit.problems.lines) == []
    window = timer.busy_window
    # Placed from epoch 1's 512 steps, the window's cost is weighed against the two epochs left: a reading, or the
    # fit's steps left named as taken from that length.
    assert window["share"] is not None or "is too short for one profiled step" in window["reason"], window
    assert len(timer.epochs) == 3
    for row in timer.epochs:
        assert "OverflowError" not in row["verdict_reason"] and not contradictions(row["verdict_reason"])


def test_an_epoch_of_a_loader_without_a_length_that_max_steps_or_a_limit_cut_is_no_whole_epoch():
    """max_steps ends the fit 100 steps into epoch 2: the timer's row is partial, of epoch 1's length, and strict counts
    no missing samples (the audit cannot know them); a limit of 100 batches cuts every epoch, said as at most."""
    timer, audit = EpochTimer(), SampleAudit(dataset_size=NO_LEN_SAMPLES, strict=True)  # a missing sample would raise
    steps = NO_LEN_SAMPLES + 100
    fit_module(
        BoringModel(), datamodule=BoringDataModuleNoLen(), callbacks=[timer, audit], max_epochs=3, max_steps=steps
    )
    assert [row.get("partial") for row in timer.epochs] == [None, {"steps": 100, "batches": NO_LEN_SAMPLES}]
    assert audit.epochs[1]["missing"] is None
    assert "max_steps=612: the fit ended after 100 batches of a loader of no length" in audit.epochs[1]["limited"]
    timer, audit, _ = fitted(BoringDataModuleNoLen(), max_epochs=2, limit_train_batches=100)
    assert [row.get("partial") for row in timer.epochs] == [None, None]  # each epoch as Lightning runs it: whole
    assert audit.epochs[0]["limited"] == (
        "limit_train_batches=100: the epoch trains at most 100 batches, its loader having no length"
    )


def test_a_stop_after_a_whole_epoch_of_a_loader_without_a_length_leaves_that_epoch_whole():
    """EarlyStopping stops at an epoch's end, after its loader ran out: its samples are all due, and counted."""

    class StopAfterSecond(Callback):
        def on_train_epoch_end(self, trainer, pl_module):
            trainer.should_stop = trainer.current_epoch == 1

    timer, audit = EpochTimer(), SampleAudit(dataset_size=NO_LEN_SAMPLES, strict=True)
    callbacks = [StopAfterSecond(), timer, audit]  # the stop set before the audit reads the epoch
    fit_module(BoringModel(), datamodule=BoringDataModuleNoLen(), callbacks=callbacks, max_epochs=4)
    assert [row["missing"] for row in audit.epochs] == [0, 0] and "limited" not in audit.epochs[1]
    assert [row.get("partial") for row in timer.epochs] == [None, None]


def test_a_loader_without_a_length_that_runs_out_before_the_limit_or_is_stopped_inside_is_said_as_it_ran():
    """A limit of 600 batches on a stream of 512: every epoch whole, for the timer as for the audit. A stop 50 steps
    into epoch 2: that epoch partial, of epoch 1's length, and left out of the steady averages."""
    timer, audit = EpochTimer(), SampleAudit(dataset_size=NO_LEN_SAMPLES)
    fit_module(
        BoringModel(),
        datamodule=BoringDataModuleNoLen(),
        callbacks=[timer, audit],
        max_epochs=2,
        limit_train_batches=600,
    )
    assert [row.get("partial") for row in timer.epochs] == [None, None]
    assert [row["missing"] for row in audit.epochs] == [0, 0]

    class StopInside(Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            trainer.should_stop = trainer.current_epoch == 1 and batch_idx == 49

    timer = EpochTimer()
    fit_module(BoringModel(), datamodule=BoringDataModuleNoLen(), callbacks=[StopInside(), timer], max_epochs=3)
    assert [row.get("partial") for row in timer.epochs] == [None, {"steps": 50, "batches": NO_LEN_SAMPLES}]


def test_a_window_on_a_loader_without_a_length_is_placed_by_the_last_epochs_length():
    timer, _, _ = fitted(BoringDataModuleNoLen(), EpochTimer(window_share=None), max_epochs=2)
    assert [row["samples"] for row in timer.epochs] == [NO_LEN_SAMPLES] * 2
    window = timer.busy_window
    # At the end of epoch 2, taken as epoch 1's 512 steps: clear of its last two, as in an epoch with a length.
    assert (window["epoch"], window["first_step"], window["last_step"]) == (2, 505, 510)
    assert window["share"] is not None and "in_warmup" not in window
    assert timer.epochs[1]["profiled"]["steps"] == CPU_WINDOW_STEPS + PROFILER_WARMUP_STEPS


def test_a_one_epoch_fit_of_unknown_length_says_plainly_why_the_cpu_window_was_not_placed():
    # a share so small that not even one step at the larger share is paid for, whatever the machine's pace
    timer, audit, _ = fitted(BoringDataModuleNoLen(), EpochTimer(window_share=1e-9), max_epochs=1)
    assert timer.epochs[0]["samples"] == NO_LEN_SAMPLES and audit.epochs[0]["seen"] == NO_LEN_SAMPLES
    assert timer.busy_window["share"] is None
    reason = timer.busy_window["reason"]
    assert reason.startswith(
        "the fit, of a length not known ahead (its training loader has no length and max_steps does not bound it), "
        "some "
    ), reason
    assert "is too short for one profiled step" in reason and reason.endswith(PROFILE_ANYWAY)
    assert list(timer.problems.lines) == []


def test_max_steps_ends_a_fit_of_unknown_length_inside_an_epoch_and_each_part_is_counted():
    timer, audit, trainer = fitted(
        BoringDataModuleNoLen(), EpochTimer(window_share=None), max_epochs=None, max_steps=NO_LEN_SAMPLES + 88
    )
    assert trainer.global_step == NO_LEN_SAMPLES + 88
    assert [row["samples"] for row in timer.epochs] == [NO_LEN_SAMPLES, 88]
    assert [row["seen"] for row in audit.epochs] == [NO_LEN_SAMPLES, 88]
    # Epoch 1 might have been the fit's last (max_steps could end it), so it holds the window, as a warm-up reading.
    window = timer.busy_window
    assert (window["epoch"], window["first_step"]) == (1, 13) and window["in_warmup"] and window["share"] is not None
    assert list(timer.problems.lines) == []


def test_a_float_limit_train_batches_counts_the_limited_epoch_and_fits_the_window_inside_it():
    timer, audit, trainer = fitted(BoringDataModule(), EpochTimer(window_share=None), limit_train_batches=0.5)
    assert trainer.num_training_batches == LEN_SAMPLES // 2
    assert [row["samples"] for row in timer.epochs] == [LEN_SAMPLES // 2] * 2
    assert [row["seen"] for row in audit.epochs] == [LEN_SAMPLES // 2] * 2
    window = timer.busy_window
    assert (window["epoch"], window["first_step"], window["last_step"]) == (2, 25, 30)  # 32 steps, its last two clear
    assert window["share"] is not None


def test_an_epoch_shorter_than_the_last_one_says_where_the_window_was_placed_from():
    clock = EpochClock(torch.device("cpu"), window_share=None)
    for epoch, steps in ((1, 40), (2, 20)):
        clock.epoch_start(math.inf, epoch, steps_left=math.inf)
        for index in range(steps):
            clock.step_start(index)
            clock.step_end(index)
        clock.epoch_end()
    assert clock.busy_window["reason"] == (
        "epoch 2 ended after 20 of its steps, before the window's last (step 38; an epoch taken as the last one's 40 "
        "steps: the training loader has no length): max_steps, limit_train_batches, a stop (trainer.should_stop) or "
        "the module ended it early"
    )
    assert [row["samples"] for row in clock.epochs] == [0, 0]  # nothing was counted into this bare clock
    # a fit stopped by an error or Ctrl-C inside the window: said as that, not as a limit
    stopped = EpochClock(torch.device("cpu"), window_share=None)
    for epoch, steps in ((1, 40), (2, 20)):
        stopped.epoch_start(40, epoch, steps_left=math.inf)
        for index in range(steps):
            stopped.step_start(index)
            stopped.step_end(index)
        if epoch == 1:
            stopped.epoch_end()
    stopped.fit_stopped(closing=True)
    stopped.close()
    reason = stopped.busy_window["reason"]
    assert reason.startswith("epoch 2 ended after 20 of its steps") and reason.endswith(
        ": the fit stopped (an error or Ctrl-C)"
    )


def test_a_window_the_epoch_ran_past_unrecorded_does_not_say_the_epoch_ended_before_it(monkeypatch):
    clock = EpochClock(torch.device("cpu"), window_share=None)
    clock.epoch_start(40, 1, last=True)
    monkeypatch.setattr(clock, "_weigh_window", lambda: 1 / 0)  # the window's start fails inside the timer
    opens = clock.windows.window.first - PROFILER_WARMUP_STEPS
    for index in range(40):
        with pytest.raises(ZeroDivisionError) if index == opens else nullcontext():
            clock.step_start(index)
        clock.step_end(index)
    clock.epoch_end()
    assert (
        clock.busy_window["reason"]
        == "the profiler did not record steps 33-38 of epoch 1 (the timer's problems say why)"
    )


def test_an_epoch_an_error_ends_inside_the_window_says_it_ended_before_the_windows_last_step():
    """The step that raised began and never ended: the epoch ended before the window's last, as its steps say."""
    clock = EpochClock(torch.device("cpu"), window_share=None)
    clock.epoch_start(40, 1, last=True)
    inside = clock.windows.window.first + 1
    for index in range(inside):
        clock.step_start(index)
        clock.step_end(index)
    clock.step_start(inside)  # raises inside the step: no end
    clock.epoch_end()
    assert clock.busy_window["reason"].startswith(
        f"epoch 1 ended after {inside} of its steps, before the window's last"
    )


def trainer_at(batches: float, max_epochs: int | None = 3, max_steps: int = -1, epoch: int = 0, step: int = 0):
    return SimpleNamespace(
        num_training_batches=batches,
        max_epochs=max_epochs,
        max_steps=max_steps,
        current_epoch=epoch,
        global_step=step,
        accumulate_grad_batches=1,
    )


def test_the_fits_steps_left_are_known_unbounded_or_not_known():
    assert steps_left(trainer_at(100)) == 300
    assert math.isnan(steps_left(trainer_at(math.inf)))  # max_epochs alone, epochs of unknown length
    assert steps_left(trainer_at(math.inf), batches=512) == 3 * 512  # the last epoch's length stands in
    assert steps_left(trainer_at(math.inf, max_steps=700, step=512)) == 188  # max_steps bounds it anyway
    assert steps_left(trainer_at(math.inf, max_epochs=-1)) == math.inf  # nothing bounds it
    assert last_epoch(trainer_at(math.inf, max_epochs=-1, max_steps=700), math.inf)  # max_steps may end this epoch
    assert not last_epoch(trainer_at(math.inf, max_epochs=-1, max_steps=700), batches=512)
    assert not last_epoch(trainer_at(math.inf), math.inf)


def test_a_fit_stopped_inside_a_validation_under_ddp_waits_on_no_device_to_end_it(monkeypatch):
    """Its peers' collectives may never come: the validation is not ended with a synchronization there."""
    clock = EpochClock(torch.device("cpu"), window_share=None)
    clock.epoch_start(4, 1, steps_left=math.inf)
    clock.step_start(0)
    clock.step_end(0)
    clock.eval_start()
    synced = []
    monkeypatch.setattr(clock, "_synced_now", lambda: synced.append(1) or 0.0)
    clock.fit_stopped(closing=False)  # under DDP the epoch is not closed
    assert synced == []
    clock.fit_stopped(closing=True)  # one process: its validation ends now, as far as it ran
    assert synced == [1]
