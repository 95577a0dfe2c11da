"""Where a step's time goes: every hook, logger write and self.log of a timed step, by its own time, and the part
around the step that costs most named with its fix. The parts are read by an emulated clock that a test's own work
advances, so no figure depends on how busy the machine is."""

from __future__ import annotations

import json
import re
import time
import warnings
from contextlib import contextmanager

import numpy as np
import pytest
import torch
from conftest import fit_module
from lightning import Callback, LightningModule
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.profilers import PassThroughProfiler, SimpleProfiler
from torch.utils.data import DataLoader, TensorDataset

from mnistperf import upstream
from mnistperf.diagnosis import EpochTimer
from mnistperf.diagnosis.measure import phases, step_parts
from mnistperf.diagnosis.measure.busy_window import CROWDED
from mnistperf.diagnosis.measure.drawn_steps import EVERY
from mnistperf.diagnosis.measure.step_parts import (
    CHECKPOINT_SAVES,
    LOOP,
    SYNC_WARNING,
    DeviceSyncs,
    StepParts,
    part_of,
    parts_timed,
)
from mnistperf.diagnosis.record.advice import CULPRIT_SHARE, advice, part_fix
from mnistperf.diagnosis.record.text import format_headline, format_summary
from mnistperf.diagnosis.record.verdict import WAITED_FOR_A_CORE, bound
from mnistperf.diagnosis.show.report import html_report
from mnistperf.upstream import TRAIN_STEP_LOGS, step_logs_owner

SECOND = 10.0  # what the emulated clock advances for a part said to take it
# The stated margin: a timed step's own real time, far below it on the busiest machine.
MARGIN = 0.5


class EmulatedClock:
    """The real clock plus whatever the test's parts are said to have taken."""

    def __init__(self):
        self.added = 0.0

    def __call__(self) -> float:
        return time.perf_counter() + self.added


@pytest.fixture
def clock(monkeypatch) -> EmulatedClock:
    emulated = EmulatedClock()
    monkeypatch.setattr(step_parts, "now", emulated)
    return emulated


class Costly(Callback):
    """A callback whose every on_train_batch_end takes ``seconds`` on the emulated clock."""

    def __init__(self, clock: EmulatedClock, seconds: float):
        self.clock, self.seconds = clock, seconds

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.clock.added += self.seconds


class Logged(LightningModule):
    """A tiny classifier that logs ``values`` each step, each self.log said to take ``seconds``."""

    def __init__(self, clock: EmulatedClock | None = None, values: int = 0, seconds: float = 0.0):
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)
        self.clock, self.values, self.seconds = clock, values, seconds

    def training_step(self, batch, batch_idx):
        images, labels = batch
        loss = torch.nn.functional.cross_entropy(self.layer(images), labels)
        for value in range(self.values):
            self.log(f"train/v{value}", loss)
        return loss

    def log(self, *args, **kwargs):
        super().log(*args, **kwargs)
        if self.clock is not None:
            self.clock.added += self.seconds

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def loader(steps: int = 2 * EVERY) -> DataLoader:
    return DataLoader(TensorDataset(torch.randn(4 * steps, 4), torch.arange(4 * steps) % 2), batch_size=4)


def parts_of(timer: EpochTimer) -> dict:
    summary = json.loads(timer.summary_path.read_text())
    assert summary["step_parts"]["steps"] == 2  # two timed steps an epoch of 32, over the steady epoch 2
    return summary


@pytest.mark.parametrize(("epochs", "steps"), [(1, 2), (3, 2 * 2)])
def test_the_steps_timed_by_their_parts_leave_the_warm_up_epoch_apart_where_a_steady_one_follows(epochs, steps):
    timer = EpochTimer(busy_window_steps=0)
    fit_module(Logged(), loader(), callbacks=[timer], max_epochs=epochs)
    assert timer.summary_path is not None
    assert json.loads(timer.summary_path.read_text())["step_parts"]["steps"] == steps  # two an epoch of 32


class Manual(Logged):
    """A step that updates by hand, as a GAN's two optimizers do."""

    def __init__(self):
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        optimizer = self.optimizers()
        loss = super().training_step(batch, batch_idx)
        self.manual_backward(loss)
        optimizer.step()
        optimizer.zero_grad()


def test_under_manual_optimization_each_optimizer_step_is_its_own_part():
    timer = EpochTimer(busy_window_steps=0)
    fit_module(Manual(), loader(), callbacks=[timer], max_epochs=2)
    parts = parts_of(timer)["step_parts"]["parts"]
    assert parts["optimizer step"] > 0 and "backward" not in parts  # manual_backward runs inside training_step


def test_a_callbacks_own_time_each_step_is_its_part_and_the_culprit_with_its_fix(clock):
    timer = EpochTimer(busy_window_steps=0)  # no profiled window to drop a timed step
    fit_module(Logged(), loader(), callbacks=[timer, Costly(clock, SECOND)], max_epochs=2)
    summary = parts_of(timer)
    parts, step_s = summary["step_parts"]["parts"], summary["step_parts"]["step_s"]
    assert parts["callback Costly"] == pytest.approx(SECOND, abs=MARGIN)  # its own time, every timed step
    assert step_s == pytest.approx(SECOND, abs=MARGIN) and next(iter(parts)) == "callback Costly"  # the largest first
    assert {"training_step", "backward", "optimizer step", "fetch", LOOP, "callback EpochTimer"} <= parts.keys()
    assert sum(parts.values()) == pytest.approx(step_s)  # the parts add up to the step, the loop the rest
    assert "Where a step goes (2 steps timed by their parts" in format_summary(summary)
    one = {**summary, "step_parts": {**summary["step_parts"], "steps": 1}}
    assert "Where a step goes (1 step timed by its parts" in format_summary(one)  # the words agree with the count
    assert re.search(r"callback Costly (9\d|100)%", format_summary(summary))  # its share of the step
    report = html_report([("run", summary)])
    assert "<h2>Where a step goes</h2>" in report and "<td>callback Costly</td>" in report
    assert "syncs" not in summary["step_parts"] and "device syncs" not in report  # not counted off CUDA


class OwnProfile(PassThroughProfiler):
    """A user's profiler with a ``profile`` of its own, which counts each action it holds."""

    def __init__(self):
        super().__init__()
        self.held: list[str] = []

    @contextmanager
    def profile(self, action_name):
        self.held.append(action_name)
        with super().profile(action_name):
            yield action_name


@pytest.mark.parametrize(
    ("profiler", "timers"),
    [(OwnProfile(), 1), (SimpleProfiler(), 1), (OwnProfile(), 2)],
    ids=["its own profile", "Lightning's", "its own profile under two timers"],
)
def test_a_timed_step_times_the_users_profilers_actions_and_each_still_reaches_it(clock, profiler, timers):
    hook = "[Callback]Costly.on_train_batch_end"
    timer, more = EpochTimer(busy_window_steps=0), [EpochTimer(busy_window_steps=0) for _ in range(timers - 1)]
    fit_module(Logged(), loader(), callbacks=[timer, *more, Costly(clock, SECOND)], max_epochs=2, profiler=profiler)
    assert parts_of(timer)["step_parts"]["parts"]["callback Costly"] == pytest.approx(SECOND, abs=MARGIN)
    held = profiler.held.count(hook) if isinstance(profiler, OwnProfile) else len(profiler.recorded_durations[hook])
    assert held == 2 * 2 * EVERY  # every step's, the timed ones' too


def test_a_loggers_writes_and_self_log_are_parts_of_their_own_and_nothing_stays_shadowed(clock, tmp_path):
    timer, module = EpochTimer(busy_window_steps=0), Logged(clock, values=20, seconds=SECOND / 20)
    logger = CSVLogger(tmp_path, name="run")
    trainer = fit_module(module, loader(), callbacks=[timer], max_epochs=2, logger=logger, log_every_n_steps=1)
    parts = parts_of(timer)["step_parts"]["parts"]
    assert parts["self.log"] == pytest.approx(SECOND, abs=MARGIN)  # 20 values a step, each a twentieth of it
    assert parts["logger CSVLogger"] > 0 and parts["training_step"] < SECOND / 2  # self.log's time is its own
    # what a timed step shadowed is given back: the class's own calls again
    assert TRAIN_STEP_LOGS not in vars(step_logs_owner(trainer)) and "log" not in vars(module)


def test_an_overhead_bound_runs_advice_names_the_costliest_part_around_the_step_and_what_it_could_buy():
    steps = {"steps": 8, "step_s": 0.004}
    bar = {"training_step": 0.001, "callback TQDMProgressBar": 0.0016, "backward": 0.0008, LOOP: 0.0006}
    run = {"verdict": "overhead-bound", "avg_train_s": 1.0, "input_wait_share": 0.01, "cpu_busy_share": 0.5}
    found = advice({**run, "step_parts": {**steps, "parts": bar}})
    assert found is not None and found["culprit"]["part"] == "callback TQDMProgressBar"
    assert found["hints"][0].startswith("the progress bar redrawn less often: TQDMProgressBar(refresh_rate=N)")
    assert found["culprit"]["speed_up_at_most"] == pytest.approx(0.004 / 0.0024)
    assert "without callback TQDMProgressBar (40% of each step) a step could be about 1.67x faster" in found["ceiling"]
    on_gpu = advice({**run, "device_busy_share": 0.5, "step_parts": {**steps, "parts": bar}})  # host time may hide
    assert "a step could be up to 1.67x faster" in on_gpu["ceiling"]
    headline = format_headline({**run, "verdict_figure": "x", "advice": found, "steady_epochs": [2, 2]})
    assert "why: callback TQDMProgressBar took 1.60 ms of each 4.00 ms step" in headline
    assert "could buy: without callback TQDMProgressBar (40% of each step)" in headline
    # the audit's own fix: an index or a fingerprint in place of hashing every sample's bytes
    audit = {part.replace("TQDMProgressBar", "SampleAudit"): seconds for part, seconds in bar.items()}
    hint = advice({**run, "step_parts": {**steps, "parts": audit}})["hints"][0]
    assert hint.startswith("SampleAudit(sample_id=FIELD), FIELD the batch's field holding each sample's dataset index")
    # the step's own work, the loop, or a part under CULPRIT_SHARE is no culprit; nor is any on another verdict
    small = {"training_step": 0.0038, "module hooks": 0.004 * CULPRIT_SHARE / 2, LOOP: 0.0001}
    assert "culprit" not in (advice({**run, "step_parts": {**steps, "parts": small}}) or {})
    assert "culprit" not in (advice({**run, "verdict": "compute-bound", "step_parts": {**steps, "parts": bar}}) or {})


def test_a_part_small_beside_the_steps_time_outside_tensor_operations_is_no_culprit():
    # a model whose own Python is most of its overhead: the wait for data, 6% of the step, is a fifth of the 30%
    parts = {"training_step": 0.0037, "fetch": 0.00024, LOOP: 0.00006}
    found = overhead_bound(parts, input_wait_share=0.06, cpu_busy_share=0.7)
    assert found is not None and "culprit" not in found and found["speed_up_at_most"] == pytest.approx(1 / 0.7)
    headline = format_headline({**RUN, "verdict_figure": "x", "advice": found, "steady_epochs": [2, 2]})
    assert "why:" not in headline and "could buy: the CPU spent 70% of the step inside tensor operations" in headline
    # the same part where the step's time outside tensor operations is twice it: named
    assert overhead_bound(parts, input_wait_share=0.06, cpu_busy_share=0.88)["culprit"]["part"] == "fetch"
    # where no share was measured, or the one read is in doubt (the thread waited for a core), CULPRIT_SHARE decides
    assert overhead_bound(parts, input_wait_share=0.06, cpu_busy_share=None)["culprit"]["part"] == "fetch"
    crowded = {WAITED_FOR_A_CORE: CROWDED}
    in_doubt = overhead_bound(parts, input_wait_share=0.06, cpu_busy_share=0.7, **crowded)
    assert in_doubt["culprit"]["part"] == "fetch" and "at_most_s_less" not in in_doubt  # compare holds nothing to it
    assert "faster; for the overhead as a whole, none stated: the training thread waited" in in_doubt["ceiling"]


def test_an_overhead_ceiling_keeps_the_wait_for_data_beside_the_tensor_work_where_batches_are_made_in_process():
    """No workers: the step makes its batch, then runs its tensor operations; the overhead gone leaves both."""
    run = {**RUN, "input_wait_share": 0.09, "cpu_busy_share": 0.13}
    assert advice(run)["speed_up_at_most"] == pytest.approx(1 / 0.13)  # the loader's settings not recorded
    assert advice({**run, "loader": {"num_workers": 0}})["speed_up_at_most"] == pytest.approx(1 / 0.22)
    assert advice({**run, "loader": {"num_workers": 2}})["speed_up_at_most"] == pytest.approx(1 / 0.13)  # beside it
    assert advice({**run, "data": {"num_workers": 0}})["speed_up_at_most"] == pytest.approx(1 / 0.22)  # the lab's


RUN = {"verdict": "overhead-bound", "avg_train_s": 1.0, "input_wait_share": 0.01, "cpu_busy_share": 0.5}


def overhead_bound(parts: dict[str, float], hints=None, **figures: object) -> dict:
    """An overhead-bound CPU run's advice (``hints``: the project's), its timed step of 4 ms held by ``parts``."""
    return advice({**RUN, **figures, "step_parts": {"steps": 8, "step_s": 0.004, "parts": parts}}, hints)


def test_where_the_wait_for_the_next_batch_is_the_costliest_part_the_loader_is_named_and_the_ceiling_leaves_it():
    waiting = {"fetch": 0.0016, "training_step": 0.0012, "self.log": 0.0004, LOOP: 0.0008}
    run = {"verdict": "overhead-bound", "avg_train_s": 1.0, "input_wait_share": 0.4, "cpu_busy_share": 0.3}
    found = overhead_bound(waiting, input_wait_share=0.4, cpu_busy_share=0.3)
    assert found is not None and found["culprit"]["part"] == "fetch"
    assert found["hints"][0] == found["culprit"]["fix"] and found["hints"][0].startswith("more DataLoader workers")
    assert any(hint.startswith("a larger batch size") for hint in found["hints"])  # the overhead's hints follow
    # what the Python and framework work could buy with the wait for data still there: 1 / 0.4, not 1 / 0.3
    assert found["speed_up_at_most"] == pytest.approx(2.5) and "the wait for data (40%) left" in found["ceiling"]
    headline = format_headline({**run, "verdict_figure": "x", "advice": found, "steady_epochs": [2, 2]})
    assert "why: fetch took 1.60 ms of each 4.00 ms step" in headline and "fix: more DataLoader workers" in headline
    reason = bound({"input_wait_share": 0.4, "cpu_busy_share": 0.3}, 0.5)[1]
    assert "(the rest is Python, the framework and dispatch around them, the wait for data among it)" in reason
    # where its own workers held the cores, more of them is not the fix
    held = {"by": "workers", "core_wait_share": 0.3, "workers_cpu_share": 0.5, "speed_up_at_most": 1 / 0.7}
    crowded = overhead_bound(waiting, input_wait_share=0.4, cpu_busy_share=0.3, cores_held=held)
    assert not any(hint.startswith("more DataLoader workers") for hint in crowded["hints"])


def test_the_wait_for_the_next_batch_is_read_from_every_step_not_from_the_few_timed_by_their_parts():
    """The steps timed by their parts are one in 16: two or three of a short epoch's, a spike among them turning the
    fetch's share to 57 % where the epoch's measured wait was 40 %. The culprit and what it could buy rest on 40 %."""
    sampled = {"fetch": 0.00228, "training_step": 0.0012, LOOP: 0.0005}  # 57 % of a 4 ms step
    found = overhead_bound(sampled, input_wait_share=0.4, cpu_busy_share=0.3)
    assert found["culprit"]["part"] == "fetch" and found["culprit"]["share"] == pytest.approx(0.4)
    assert found["culprit"]["speed_up_at_most"] == pytest.approx(1 / 0.6)
    headline = format_headline({**RUN, "verdict_figure": "x", "advice": found, "steady_epochs": [2, 2]})
    assert (
        "why: fetch took 1.60 ms of each 4.00 ms step (every step's wait for its batch, as the epochs measured it)"
        in headline
    )
    # where no busy share bounds the overhead, the culprit's is the train time compare holds a gain to
    assert overhead_bound(sampled, input_wait_share=0.4, cpu_busy_share=None)["at_most_s_less"] == pytest.approx(0.4)
    # where the epoch's wait is small, the few timed steps' fetch names no culprit
    assert "culprit" not in overhead_bound(sampled, input_wait_share=0.02, cpu_busy_share=0.3)


def test_where_the_step_is_an_installed_packages_the_fix_for_its_self_log_says_so(tmp_path, monkeypatch):
    from mnistperf.diagnosis.callbacks.project_reader import installed_step, project_hints
    from mnistperf.diagnosis.record.project_terms import ProjectTerms

    package = tmp_path / "lib" / "python3" / "site-packages" / "steplib"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from steplib.train import Forecaster\n")  # re-exported, as packages do
    (package / "train.py").write_text(
        "from lightning import LightningModule\n\n"
        "class Forecaster(LightningModule):\n"
        "    def training_step(self, batch, batch_idx):\n"
        "        return None\n"
    )
    monkeypatch.syspath_prepend(str(package.parent))
    from steplib import Forecaster

    class Own(Forecaster):  # the project's subclass, its step still the package's
        pass

    assert installed_step(Own()) == "steplib.train.Forecaster" and installed_step(Logged()) is None
    logging = {"training_step": 0.002, "self.log": 0.001, LOOP: 0.0005}
    found = overhead_bound(logging, hints=project_hints(None, ProjectTerms(step_from="steplib.Forecaster"), False))
    assert found["culprit"]["fix"] == found["hints"][0]
    assert found["hints"][0].startswith("less logged each step by steplib.Forecaster.training_step, an installed")
    assert overhead_bound(logging)["hints"][0] == (
        "self.log(..., on_step=False) for what need not be logged every step, and fewer values logged"
    )


class EmulatedSyncs(DeviceSyncs):
    """Torch's sync debug mode on a CPU build, which has none: the mode is only remembered."""

    mode = 0

    def debug_mode(self) -> int:
        return self.mode

    def set_debug_mode(self, mode: int) -> None:
        self.mode = mode


class Syncing(Callback):
    """A callback whose every on_train_batch_end forces one device synchronization, as torch would report it."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        warnings.warn(SYNC_WARNING, UserWarning, stacklevel=1)


def test_on_cuda_each_parts_synchronizations_are_counted_as_torch_reports_them_and_other_warnings_pass(monkeypatch):
    """Emulated: the reports torch's sync debug mode makes on CUDA, on the CPU."""
    emulated = EmulatedSyncs()
    monkeypatch.setattr("mnistperf.diagnosis.callbacks.epoch_timer.syncs_for", lambda device: emulated)

    class Warns(Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if parts_timed(batch_idx, trainer.current_epoch):  # a timed step
                warnings.warn("the user's own warning", UserWarning, stacklevel=1)

    timer = EpochTimer(busy_window_steps=0)
    with pytest.warns(UserWarning, match="the user's own warning"):  # caught meanwhile, shown after
        fit_module(Logged(), loader(), callbacks=[timer, Syncing(), Warns()], max_epochs=2)
    summary = parts_of(timer)
    assert summary["step_parts"]["syncs"] == {"callback Syncing": 1.0}  # one a step, its own
    assert "device synchronizations a step: callback Syncing 1" in format_summary(summary)
    assert "<th>device syncs a step</th>" in html_report([("run", summary)])
    assert emulated.mode == 0  # the debug mode as it was


def test_work_done_every_nth_step_is_timed_at_its_rate_whatever_its_period_and_no_epochs_first_step_is():
    """One step in EVERY is timed wherever work every Nth step falls: a flush every 16 steps, logging every 50.

    Each run of EVERY blocks times each place once, the first run's too, so work every 2, 4, 8 or 16 steps is timed
    at exactly its rate; any other period, on average over epochs. So are the split's samples, but for the epoch's
    second step, always sampled so that a short epoch has one (work falling on it is left out of the split's count).
    """
    epochs, steps = 256, 2048
    timed = np.array([[parts_timed(index, epoch) for index in range(steps)] for epoch in range(epochs)])
    split = np.array([[phases.sampled(index, 1, epoch) for index in range(steps)] for epoch in range(epochs)])
    assert (timed.sum(axis=1) == steps // EVERY).all() and (split.sum(axis=1) == steps // EVERY).all()
    assert not timed[:, 0].any() and split[:, 1].all()
    first_run = EVERY * EVERY  # steps: the split's first run holds its fixed step, each of its places once all the same
    places = split[:, :first_run].reshape(epochs, EVERY, EVERY).argmax(axis=2)
    assert (np.sort(places, axis=1) == np.arange(EVERY)).all()
    for period in (*range(2, 33), 50, 64):
        for first in range(1, period + 1):  # the work's steps: first, first + period, ... of every epoch
            later = first - (first - first_run) // period * period  # its first step past the split's first run
            parts, split_hits = timed[:, first::period], split[:, later::period]
            if EVERY % period == 0:  # each run times EVERY // period of the places the work falls on
                assert (parts.sum(axis=1) == steps // first_run * EVERY // period).all(), (period, first)
                assert (split_hits.sum(axis=1) == (steps // first_run - 1) * EVERY // period).all(), (period, first)
            for rate in (parts.mean() * EVERY, split_hits.mean() * EVERY):
                assert rate == pytest.approx(1, rel=0.2), (period, first)


@pytest.mark.parametrize(
    ("action", "part"),
    [
        ("[_TrainingEpochLoop].train_dataloader_next", "fetch"),
        ("[Callback]ModelCheckpoint{'monitor': None, 'dirpath': 'a.b'}.on_train_batch_end", "callback ModelCheckpoint"),
        ("[Callback]fit.<locals>.Costly.on_train_batch_end", "callback Costly"),
        ("[LightningModule]Net.optimizer_zero_grad", "optimizer step"),
        ("[LightningModule]Net.on_after_batch_transfer", "copy to the device"),
        ("[LightningModule]Net.on_train_batch_end", "module hooks"),
        ("[Strategy]DDPStrategy.training_step", "training_step"),
        ("optimizer_step", "optimizer step"),  # manual optimization's opt.step(), inside training_step
        ("run_training_batch", LOOP),
        ("save_checkpoint", CHECKPOINT_SAVES),
    ],
)
def test_each_action_lightning_reports_belongs_to_one_part(action, part):
    assert part_of(action) == part


def test_an_action_is_timed_by_its_own_time_and_a_dropped_cycle_keeps_nothing(clock):
    parts = StepParts()
    parts.enter("outside a cycle")  # nothing open: not timed
    parts.exit()
    parts.open()
    with parts.timed("[Strategy]S.training_step"):
        clock.added += 3.0
        with parts.timed("[LightningModule]self.log"):
            clock.added += 1.0
    parts.close()
    parts.open()
    with parts.timed("[Callback]Slow.on_train_batch_end"):
        clock.added += 5.0
    parts.abandon()  # a validation ran inside it
    found = parts.per_step()
    assert found is not None and found["steps"] == 1
    assert found["parts"]["training_step"] == pytest.approx(3.0, abs=MARGIN)
    assert found["parts"]["self.log"] == pytest.approx(1.0, abs=MARGIN)
    assert "callback Slow" not in found["parts"]


class SlowEpochEnd(Callback):
    """A callback whose every on_train_epoch_end takes ``seconds`` on the emulated clock."""

    def __init__(self, clock: EmulatedClock, seconds: float):
        self.clock, self.seconds = clock, seconds

    def on_train_epoch_end(self, trainer, pl_module):
        self.clock.added += self.seconds


class SlowValidation(Logged):
    """As Logged, with a validation whose every step takes 5 SECOND on the emulated clock, and an epoch's own log."""

    def validation_step(self, batch, batch_idx):
        self.clock.added += 5 * SECOND

    def on_train_epoch_end(self):
        self.log("train/epoch_value", 1.0)


def test_the_time_between_epochs_is_timed_by_its_parts_its_validation_apart(clock, tmp_path):
    timer, module = EpochTimer(busy_window_steps=0), SlowValidation(clock)
    trainer = fit_module(
        module,
        loader(),
        loader(2),
        callbacks=[SlowEpochEnd(clock, SECOND), timer],
        max_epochs=2,
        logger=CSVLogger(tmp_path, name="run"),
    )
    summary = json.loads(timer.summary_path.read_text())
    between = summary["between_epochs"]
    assert between["epochs"] == 2  # the first epoch's end to the second's start, and the second's to training's end
    assert between["parts"]["callback SlowEpochEnd"] == pytest.approx(SECOND, abs=MARGIN)
    assert between["epoch_s"] == pytest.approx(SECOND, abs=MARGIN)  # the validation's 10 SECOND apart
    assert {"logger CSVLogger", "self.log", "callback EpochTimer", LOOP} <= between["parts"].keys()
    assert sum(between["parts"].values()) == pytest.approx(between["epoch_s"])
    assert re.search(r"Between epochs \(2 times.*\): callback SlowEpochEnd (9\d|100)%", format_summary(summary))
    report = html_report([("run", summary)])
    assert "<h2>Between epochs</h2>" in report and "<td>callback SlowEpochEnd</td>" in report
    # what the epoch's end shadowed is given back
    assert upstream.TRAIN_EPOCH_LOGS not in vars(step_logs_owner(trainer)) and "log" not in vars(module)
    assert summary["step_parts"]["parts"]["callback SlowEpochEnd"] < MARGIN  # its steps' hooks do nothing


def test_the_part_between_epochs_that_costs_an_epoch_more_than_any_steps_part_is_the_culprit():
    steps = {"steps": 8, "step_s": 0.004, "parts": {"training_step": 0.003, "self.log": 0.001}}  # 25% of 1 s
    run = {"verdict": "overhead-bound", "avg_train_s": 1.0, "avg_eval_s": 0.0, "cpu_busy_share": 0.5}
    saves = {"epochs": 2, "epoch_s": 0.3, "parts": {CHECKPOINT_SAVES: 0.28, LOOP: 0.02}}
    found = advice({**run, "step_parts": steps, "between_epochs": saves})
    assert found is not None and found["culprit"]["part"] == CHECKPOINT_SAVES
    assert found["culprit"]["per"] == "epoch" and found["culprit"]["speed_up_at_most"] == pytest.approx(1.3 / 1.02)
    assert found["hints"][0].startswith("fewer checkpoints saved: ModelCheckpoint(every_n_epochs=N)")
    assert part_fix(CHECKPOINT_SAVES, between_epochs=False).startswith(  # saved every few steps: that option
        "fewer checkpoints saved: a larger ModelCheckpoint(every_n_train_steps=N)"
    )
    headline = format_headline({**run, "verdict_figure": "x", "advice": found, "steady_epochs": [2, 2], **saves})
    assert "why: checkpoint saves took 0.28 s between epochs, of each 1.30 s epoch" in headline
    assert (
        "could buy: without checkpoint saves between epochs (22% of each epoch) an epoch could be about 1.27x"
        in headline
    )
    # a part between epochs that costs an epoch less than the step's part does: the step's is named
    cheap = {**saves, "epoch_s": 0.2, "parts": {CHECKPOINT_SAVES: 0.2}}
    assert advice({**run, "step_parts": steps, "between_epochs": cheap})["culprit"]["part"] == "self.log"
    said = format_headline({**run, "verdict_figure": "x", "steady_epochs": [2, 2], "between_epochs": cheap})
    assert "between epochs 0.20 s" in said  # the glance's line says what the time between epochs took
    # the timer's own hooks are what measuring costs: a fit without it has none of them to take out
    timer = {**saves, "parts": {"callback EpochTimer": 0.28, LOOP: 0.02}}
    assert advice({**run, "step_parts": steps, "between_epochs": timer})["culprit"]["part"] == "self.log"


def test_a_paused_cycle_keeps_what_came_before_and_after_and_nothing_between(clock):
    parts = StepParts()
    parts.open()
    with parts.timed("[Callback]Slow.on_train_epoch_end"):
        clock.added += 3.0
    parts.pause()
    with parts.timed("[Strategy]S.validation_step"):  # a validation: not the cycle's
        clock.added += 5.0
    parts.open()
    with parts.timed("[Callback]Slow.on_train_epoch_end"):
        clock.added += 1.0
    parts.close()
    found = parts.per_epoch_end()
    assert found is not None and found["epochs"] == 1
    assert found["epoch_s"] == pytest.approx(4.0, abs=MARGIN)
    assert found["parts"]["callback Slow"] == pytest.approx(4.0, abs=MARGIN) and "strategy hooks" not in found["parts"]


def test_a_step_the_profiled_window_began_or_ran_in_is_not_kept_and_the_first_step_after_it_stands_in():
    """A step cycle over which the window's state changed is dropped; none opens while the window runs; the step
    after the window is timed in the dropped one's place (a short fit's one steady epoch keeps a timed step)."""
    from types import SimpleNamespace

    from mnistperf.diagnosis.callbacks.timed_steps import TimedSteps
    from mnistperf.diagnosis.measure.step_parts import FetchClock

    window = [(False, 1)]  # (whether the window's profiler runs, which window is pending)
    timed = TimedSteps(FetchClock(PassThroughProfiler()), lambda: window[0])
    trainer, module = SimpleNamespace(num_training_batches=10_000, current_epoch=1, loggers=[]), SimpleNamespace()
    module.log = lambda *args, **kwargs: None
    due = [index for index in range(1, 10_000) if step_parts.parts_timed(index, 1)][:3]
    timed.step_ended(trainer, module, due[0] - 1)  # the cycle of step due[0] opens as the step before ends
    window[0] = (True, 1)  # the window's profiler starts inside it
    timed.step_ended(trainer, module, due[0])
    assert timed.steps.parts.per_step() is None  # dropped
    timed.step_ended(trainer, module, due[1] - 1)  # the window still runs: no cycle opens
    assert not timed.steps.timing
    window[0] = (False, 2)  # the window ended with step due[1] + 1: the next step is timed, though not drawn
    assert not step_parts.parts_timed(due[1] + 2, 1)
    timed.step_ended(trainer, module, due[1] + 1)
    assert timed.steps.timing
    timed.step_ended(trainer, module, due[1] + 2)
    assert timed.steps.parts.per_step()["steps"] == 1 and not timed.steps.timing  # owed once, not every step after
    timed.step_ended(trainer, module, due[2] - 1)
    timed.step_ended(trainer, module, due[2])
    kept = timed.steps.parts.per_step()
    assert kept is not None and kept["steps"] == 2
