"""The verdict a user can act on: read in a steady epoch, kept out of its timing, in doubt where the machine
was crowded, undetermined with the true reason where nothing was read, quiet and small."""

from __future__ import annotations

import math
import subprocess
import sys
import time

import pytest
import torch
from conftest import fit_module, run_stage
from lightning import LightningModule
from lightning.pytorch.callbacks import Callback
from torch.utils.data import DataLoader, TensorDataset

from mnistperf.diagnosis import EpochTimer
from mnistperf.diagnosis.figures import CORE_WAIT_SHARE
from mnistperf.diagnosis.measure import busy_window as window_module
from mnistperf.diagnosis.measure import window_price
from mnistperf.diagnosis.measure.window_reading import WindowReading
from mnistperf.diagnosis.record import verdict as verdict_module
from mnistperf.diagnosis.record.advice import REMEASURE, SHARED_THREADS, advice
from mnistperf.diagnosis.record.text import format_headline
from mnistperf.diagnosis.record.verdict import FIT_ENDED
from mnistperf.diagnosis.record.window_keeper import WindowKeeper, unread_said


class Newcomer(LightningModule):
    """A newcomer's first model: a small MLP on random rows, its loss logged every step."""

    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def rows(count: int = 1024, batch_size: int = 16) -> DataLoader:
    generator = torch.Generator().manual_seed(0)
    features = torch.randn(count, 16, generator=generator)
    labels = torch.randint(0, 4, (count,), generator=generator)
    return DataLoader(TensorDataset(features, labels), batch_size=batch_size)


def window_cost_is_its_steps_excess(profiled: dict) -> bool:
    """A window's cost is what its profiled steps took beyond as many of the epoch's typical steps: a part of their
    own time, never more (a cost of the whole epoch, or of steps it did not profile, would be)."""
    return profiled["steps"] >= 1 and 0 <= profiled["cost_s"] <= profiled["seconds"] and profiled["seconds"] > 0


def fit(epochs: int = 3, **options) -> EpochTimer:
    """A fit of the newcomer's model with an EpochTimer (whose window profiles however short the fit, unless told)."""
    timer = EpochTimer(**{"window_share": None, **options.pop("timer", {})})
    fit_module(Newcomer(), rows(), callbacks=[timer], max_epochs=epochs, **options)
    return timer


def test_the_share_is_read_in_the_first_steady_epoch_and_kept_out_of_its_timing():
    timer = fit(epochs=3)
    window = timer.busy_window
    assert window["epoch"] == 2 and window["share"] is not None and "in_warmup" not in window
    profiled = timer.epochs[1]["profiled"]
    assert profiled["steps"] == window["last_step"] - window["first_step"] + 1 + window_module.PROFILER_WARMUP_STEPS
    assert profiled["of_steps"] == 64 and profiled["extrapolated"]
    assert "profiled" not in timer.epochs[0] and "profiled" not in timer.epochs[2]
    warmup = timer.epochs[0]  # its line does not borrow a later share: undetermined, or bounded by its own phases
    assert warmup["verdict"] == "undetermined" or "(the profiled window did not run:" in warmup["verdict_reason"]


def test_the_profiled_steps_stand_in_as_the_others_typical_step_not_as_a_slow_first_steps_share():
    """25 steps: the first 0.3 s (a cache filled), 20 of 10 ms, 4 profiled of 50 ms. Without the window the epoch
    took 0.3 + 24 x 0.01 = 0.54 s; the others' mean with the first step in would make it 0.5 x 25 / 21 = 0.595 s."""
    keeper = WindowKeeper("cpu", 4, True, None, None, None, False)
    keeper.cost = (0.2, 0.0, 0.0, 4)
    intervals, waits = [0.3] + [0.01] * 20 + [math.nan] * 4, [(0.0, 0.0)] * 25
    train, _, _ = keeper.without((0.7, 0.0, 0.0), 25, None, intervals, waits)
    assert train == pytest.approx(0.54)
    keeper.reading = WindowReading("cpu")
    profiled = keeper.profiled((0.7, 0.0, 0.0), 25, None, intervals, waits)  # the window's cost: what was taken out
    assert profiled is not None and profiled["cost_s"] == pytest.approx(0.7 - 0.54)
    assert keeper.without((0.7, 0.0, 0.0), 25)[0] == pytest.approx(0.5 * 25 / 21)  # the steps' times not known


def test_profiled_steps_faster_than_the_typical_one_leave_the_epoch_as_measured():
    """The profiler only adds time: where the window's 4 steps ran faster than the others (0.1 s against 0.16 s
    each), the epoch is not made longer than it was measured, nor its waits."""
    keeper = WindowKeeper("cpu", 4, True, None, None, None, False)
    keeper.cost = (0.1, 0.05, 0.06, 4)
    intervals, waits = [0.1] + [0.16] * 5 + [math.nan] * 4, [(0.05, 0.06)] + [(0.1, 0.12)] * 5 + [(0.0, 0.0)] * 4
    assert keeper.without((1.0, 0.6, 0.72), 10, None, intervals, waits) == (1.0, 0.6, 0.72)


def test_a_first_steps_wait_for_its_batch_does_not_stand_in_for_each_profiled_step():
    """10 steps: the first 4.6 s, 4.5 of it waiting for its batch (workers starting), 4 more of 0.225 s waiting 0.1 s,
    5 profiled (their time and wait taken out with them). Scaled up whole, the wait would be 2 x 4.9 s = 9.8 s, more
    than the 7 s trained."""
    keeper = WindowKeeper("cpu", 5, True, None, None, None, False)
    keeper.cost = (1.5, 0.5, 0.65, 5)
    intervals = [4.6] + [0.225] * 4 + [math.nan] * 5
    waits = [(4.5, 4.55)] + [(0.1, 0.125)] * 4 + [(0.1, 0.13)] * 5
    train, fetch, host = keeper.without((7.0, 5.4, 5.7), 10, None, intervals, waits)
    assert train == pytest.approx(5.5 + 5 * 0.225) and fetch == pytest.approx(4.9 + 5 * 0.1)  # the first's once
    assert host == pytest.approx(5.05 + 5 * 0.125)  # as the wait for data: scaled up whole, it would be train time
    train, fetch, _ = keeper.without((7.0, 5.4, 0.0), 10)  # the steps not known: scaled, and held inside train
    assert fetch <= train


@pytest.mark.parametrize("inside", ["nothing", "an evaluation", "a spike outside", "spikes that recur"])
def test_an_epoch_with_the_window_keeps_its_own_train_time_and_wait(inside, monkeypatch):
    """30 steps of 1 s after a wait of 1 s for their batch, on an emulated clock: the window's 4 steps stand in as
    any other. Its first step's wait lies inside it; an evaluation inside it is not train time; a 30 s stall in a
    step outside it is that step's alone, not each profiled step's as well; a stall every third step is each step's
    share."""
    from mnistperf.diagnosis.record.clock import EpochClock

    now = [0.0]
    monkeypatch.setattr("mnistperf.diagnosis.record.clock.time.perf_counter", lambda: now[0])
    monkeypatch.setattr("mnistperf.diagnosis.measure.window_price.operator_s", lambda: 1e-6)
    clock = EpochClock(torch.device("cpu"), busy_window_steps=2, window_share=None)
    for _ in range(2):  # the warm-up, then the window's epoch
        clock.epoch_start(30)
        window = clock.windows.window
        for index in range(30):
            now[0] += 1.0
            clock.step_start(index, 1.0)
            spiked = window and (
                index == 10 if inside == "a spike outside" else inside == "spikes that recur" and index % 3 == 1
            )
            now[0] += 31.0 if spiked else 1.0
            clock.step_end(index)
            if inside == "an evaluation" and window is not None and index == window.opens + 1:
                clock.eval_start()
                now[0] += 100.0
                clock.eval_end()
        row = clock.epoch_end()
    assert window is not None and row["profiled"]["steps"] == 4 and window.opens > 10  # the spike lies outside
    # (after an evaluation, train time resumes as its next step starts: that step's wait for its batch lies outside it)
    truth = {"a spike outside": 90.0, "spikes that recur": 360.0, "an evaluation": 59.0}.get(inside, 60.0)
    assert row["train_s"] == pytest.approx(truth, rel=0.05 if inside == "spikes that recur" else 1e-6)
    assert row["input_wait_s"] == pytest.approx(30.0) and row["eval_s"] == (100.0 if inside == "an evaluation" else 0)
    assert row["host_wait_s"] == pytest.approx(29.0 if inside == "an evaluation" else 30.0)


def test_a_one_epoch_run_says_its_verdict_rests_on_the_warm_up():
    timer = fit(epochs=1)
    summary = timer.clock.summary()
    assert timer.busy_window["in_warmup"] and timer.busy_window["epoch"] == 1
    assert "rests on the warm-up epoch" in summary["verdict_reason"]
    why = next(line for line in format_headline(summary).splitlines() if line.startswith("  why: "))
    assert "it rests on the warm-up epoch, the only one of this run" in why  # at a glance too, not only in the report


def test_a_fit_that_ends_before_the_window_is_undetermined_with_the_true_reason():
    timer = fit(epochs=3, max_steps=20)  # 64 steps an epoch: the first ends at 20, before the window
    summary = timer.clock.summary()
    # no share was read: undetermined, or overhead-bound where the step's own phases bound it
    assert summary["verdict"] in ("undetermined", "overhead-bound")
    assert "ended after 20 of its steps" in summary["verdict_reason"], summary["verdict_reason"]


def test_early_stopping_after_the_warm_up_says_the_fit_ended_first():
    class StopAfterFirst(Callback):
        def on_train_epoch_end(self, trainer, pl_module):
            trainer.should_stop = True

    timer = EpochTimer(window_share=None)
    fit_module(Newcomer(), rows(), callbacks=[timer, StopAfterFirst()], max_epochs=3)
    summary = timer.clock.summary()
    assert summary["verdict"] in ("undetermined", "overhead-bound") and FIT_ENDED in summary["verdict_reason"]
    assert summary["busy_window"]["reason"] == FIT_ENDED  # the headline's why: not "read in the first steady epoch"


def test_an_undetermined_verdict_beside_a_crowded_window_that_read_no_share_has_no_advice():
    """A window may time its wait for a core and still read no share (its steps ran no operator): nothing is in doubt,
    and an undetermined verdict has nothing to advise, whatever the cores did."""
    crowded = {"verdict": "undetermined", "avg_train_s": 1.0, "input_wait_share": 0.0, "waited_for_a_core": 0.6}
    assert advice(crowded) is None


def test_a_crowded_window_says_the_verdict_is_in_doubt_and_states_no_bound(monkeypatch):
    waits = iter(range(0, 10**6))
    # Every read of the thread's schedule has waited a further hour for a core: a machine full of other work.
    monkeypatch.setattr(window_module, "thread_wait_s", lambda: 3600.0 * next(waits))
    timer = fit(epochs=2)
    summary = timer.clock.summary()
    assert timer.busy_window["waited_for_a_core"] == 1.0
    assert "in doubt: the training thread waited for a core 100%" in summary["verdict_reason"]
    assert summary["advice"]["ceiling"].startswith("none stated")
    assert summary["advice"]["hints"][0] == REMEASURE  # the headline's fix: the verdict first


@pytest.mark.slow
@pytest.mark.skipif(window_module.thread_wait_s() is None, reason="needs Linux's per-thread schedule")
def test_the_same_run_beside_busy_processes_gives_the_same_verdict_or_says_why_not():
    quiet = fit(epochs=2).clock.summary()
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(max(2, torch.get_num_threads()) + 1)
    ]
    try:
        busy = fit(epochs=2).clock.summary()
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    assert busy["verdict"] == quiet["verdict"] or "in doubt" in busy["verdict_reason"], busy["verdict_reason"]


def test_the_profilers_own_lines_do_not_reach_the_terminal(capfd):
    fit(epochs=2)
    assert "USDT" not in capfd.readouterr().err
    import os

    from mnistperf.diagnosis.measure.busy_window import profiler_lines_dropped

    with profiler_lines_dropped():  # what torch's native profiler writes on start and stop, beside a line of another
        os.write(2, b"USDT: profiler started\nsomething else, kept\nUSDT: profiler stopped\n")
    assert capfd.readouterr().err == "something else, kept\n"


def test_a_large_trace_is_not_written_unless_asked_for(tmp_path):
    from lightning.pytorch.loggers import CSVLogger

    timer = fit(epochs=2, timer={"trace_limit": 10}, logger=CSVLogger(tmp_path))
    window = timer.busy_window
    assert "trace" not in window and "trace_limit=None" in window["trace_skipped"]
    assert not list(tmp_path.rglob("*.pt.trace.json"))
    unlimited = fit(epochs=2, timer={"trace_limit": None}, logger=CSVLogger(tmp_path / "all"))
    assert list((tmp_path / "all").rglob("*.pt.trace.json")) and unlimited.busy_window.get("trace")


@pytest.mark.parametrize("used", [1, 2])
def test_a_cpu_run_other_work_crowded_is_told_fewer_threads_and_a_culprits_gain_is_up_to(monkeypatch, used):
    """Beside other work a step's threads wait for each other; a step rid of its culprit competes harder for cores."""
    from mnistperf.diagnosis.record import advice as advice_module

    monkeypatch.setattr(advice_module, "usable_cpus", lambda: 2)
    monkeypatch.setattr(advice_module.torch, "get_num_threads", lambda: used)
    run = {"verdict": "overhead-bound", "avg_train_s": 1.0, "input_wait_share": 0.0, "cpu_busy_share": 0.3}
    parts = {"step_parts": {"steps": 8, "step_s": 0.004, "parts": {"callback Slow": 0.002, "training_step": 0.001}}}
    crowded = advice({**run, **parts, "waited_for_a_core": 0.5})
    assert crowded["hints"][0] == REMEASURE
    threads = [hint for hint in crowded["hints"] if hint.startswith("fewer torch threads while other work")]
    assert (
        threads == ([SHARED_THREADS.format(used=2)] if used > 1 else [])
        and crowded["hints"][1 : 1 + len(threads)] == threads
    )
    assert "a step could be up to 2.00x faster" in crowded["ceiling"]
    headline = format_headline({**run, "verdict_figure": "x", "advice": crowded, "steady_epochs": [2, 2]})
    assert f"fix: {REMEASURE}; {crowded['culprit']['fix']}" in headline  # the culprit why: names keeps its fix
    computing = {**run, "verdict": "compute-bound", "cpu_busy_share": 0.9, "waited_for_a_core": 0.5}
    monkeypatch.setattr(advice_module, "usable_cpus", lambda: 4)  # more cores than threads, beside other work:
    hints = advice(computing)["hints"]  # fewer threads, not also more
    assert not [hint for hint in hints if "matched to the cores" in hint] or used == 1
    quiet = advice({**run, **parts, "waited_for_a_core": 0.0})
    assert "a step could be about 2.00x faster" in quiet["ceiling"] and not [
        h for h in quiet["hints"] if "fewer torch" in h
    ]


@pytest.mark.parametrize("used", [1, 2, 3])
def test_a_compute_bound_cpu_step_is_told_what_the_cpu_can_do_before_a_gpu(monkeypatch, used):
    from mnistperf.diagnosis.record import advice as advice_module

    monkeypatch.setattr(advice_module, "usable_cpus", lambda: 2)
    monkeypatch.setattr(advice_module.torch, "get_num_threads", lambda: used)
    found = advice({"verdict": "compute-bound", "avg_train_s": 1.0, "input_wait_share": 0.0, "cpu_busy_share": 0.9})
    assert "GPU" in found["hints"][-1]
    threads = [hint for hint in found["hints"] if "threads" in hint]
    if used == 2:  # already matched to the cores: no hint to match them
        assert not threads, found["hints"]
    else:
        said = f"this run used {used} thread{'s' if used > 1 else ''} on 2 usable cores"
        assert threads == [found["hints"][0]] and said in threads[0]
    # a core left idle is what could still be bought; more threads than cores buy nothing
    assert found["ceiling"].endswith(
        ", on 1 of the 2 cores it may use (up to 2.0x faster on all of them)" if used == 1 else "arithmetic"
    )
    # two DDP ranks on this machine share its cores: one thread each is matched, on one node, not on two
    ranks = {"world_size": 2, "ranks": [{"rank": 0}, {"rank": 1}]}
    run = {"verdict": "compute-bound", "avg_train_s": 1.0, "input_wait_share": 0.0, "cpu_busy_share": 0.9, **ranks}
    threads = [hint for hint in advice({**run, "num_nodes": 1})["hints"] if "threads" in hint]
    assert (not threads) if used == 1 else "on 2 usable cores, shared by 2 ranks: 1 each" in threads[0]
    threads = [hint for hint in advice({**run, "num_nodes": 2})["hints"] if "threads" in hint]
    assert (not threads) if used == 2 else "shared" not in threads[0]
    # as the fit's own summary has it, before what ran it (world_size, num_nodes) is added: its ranks' figures
    live = advice({k: v for k, v in run.items() if k != "world_size"})
    threads = [hint for hint in live["hints"] if "threads" in hint]
    assert (not threads) if used == 1 else "on 2 usable cores, shared by 2 ranks: 1 each" in threads[0]
    assert "cores it may use" not in live["ceiling"]  # one thread each of 2 ranks on 2 cores: none idle


def test_a_two_epoch_cpu_fit_gets_a_bound_at_the_windows_default_share():
    timer = EpochTimer()
    fit_module(Newcomer(), rows(count=8192), callbacks=[timer], max_epochs=2)
    summary = timer.clock.summary()
    assert summary["verdict"] in ("input-bound", "overhead-bound", "compute-bound"), summary["verdict_reason"]
    assert timer.busy_window["share"] is not None and window_cost_is_its_steps_excess(timer.epochs[1]["profiled"])


@pytest.mark.usefixtures("phases_undecided")
def test_a_fit_too_short_for_the_window_to_cost_its_share_is_undetermined_and_says_how_to_profile_it(tmp_path):
    from lightning.pytorch.loggers import CSVLogger

    timer = fit(epochs=3, timer={"window_share": 1e-9}, logger=CSVLogger(tmp_path))
    summary = timer.clock.summary()
    assert summary["verdict"] == "undetermined"
    assert "is too short for one profiled step" in summary["verdict_reason"], summary["verdict_reason"]
    assert "EpochTimer(window_share=None)" in summary["verdict_reason"]
    assert "--trainer.callbacks.init_args.window_share=null" in summary["verdict_reason"]
    assert (
        len(timer.epochs) == 3
        and not any("profiled" in row for row in timer.epochs)
        and not list(tmp_path.rglob("*.pt.trace.json"))
    )


@pytest.mark.usefixtures("phases_undecided")
class SlowNewcomer(Newcomer):
    """The newcomer's step taking 20 ms more: its batch's fetch is a small share of it however busy the machine."""

    def training_step(self, batch, batch_idx):
        time.sleep(0.02)
        return super().training_step(batch, batch_idx)


def test_an_undetermined_headline_says_why_the_window_did_not_run_and_what_it_needs(tmp_path, capsys):
    fit_module(SlowNewcomer(), rows(count=16), callbacks=[EpochTimer(window_share=None)], default_root_dir=tmp_path)
    headline = capsys.readouterr().out.split("Verdict: ")[1].splitlines()
    assert headline[0].startswith("undetermined (waiting for data")
    assert headline[1].startswith(f"  why: {verdict_module.ONE_STEP_ENDED}")  # two epochs of one step: read in a third


def test_a_cpu_epoch_of_one_step_is_profiled_whole_in_the_third_epoch_with_the_seconds_figures_standing_in(tmp_path):
    """Full-batch training (one step an epoch): the third epoch's step is profiled, and its train time and waits are
    the second epoch's, the profiler's own time kept out of them."""
    timer = EpochTimer(window_share=None)
    fit_module(Newcomer(), rows(count=16), callbacks=[timer], default_root_dir=tmp_path, max_epochs=4)
    window, second, third = timer.busy_window, timer.epochs[1], timer.epochs[2]
    assert (window["epoch"], window["first_step"], window["last_step"]) == (3, 1, 1), window
    assert window["share"] is not None and all(e["verdict"] != "undetermined" for e in timer.epochs[2:])
    assert third["profiled"]["of_steps"] == third["profiled"]["steps"] == 1
    for figure in ("train_s", "input_wait_s", "host_wait_s"):
        assert third[figure] == pytest.approx(second[figure]), figure
    assert "profiled" not in timer.epochs[3] and timer.epochs[3]["train_s"] != second["train_s"]


@pytest.mark.parametrize("steps", [2, 3, 5])
def test_a_cpu_epoch_too_short_for_the_warmed_up_window_profiles_the_steps_between_its_first_and_last(steps, tmp_path):
    """A CPU's profiler records from its first step: an epoch of 2-5 steps (a library whose epoch is a few batches of
    series) is read from its steps after the first and before the last (of two, the last), and the verdict is not left
    undetermined."""
    timer = EpochTimer(window_share=None)
    fit_module(Newcomer(), rows(count=16 * steps), callbacks=[timer], default_root_dir=tmp_path)
    window = timer.busy_window
    assert (window["epoch"], window["first_step"], window["last_step"]) == (2, 2, max(2, steps - 1)), window
    assert window["share"] is not None and timer.epochs[1]["verdict"] != "undetermined"
    assert timer.epochs[1]["profiled"]["steps"] == max(1, steps - 2)  # kept out of the epoch's figures, as any window's


def test_an_epoch_of_one_step_prices_its_window_by_the_whole_fit_its_time_between_epochs_in(tmp_path, monkeypatch):
    """Full-batch training spends much of each epoch outside its one step: the fit a window is weighed against counts
    each epoch left at the last one's whole period, not at its step's time alone (which would decline the window)."""

    class Between(Callback):
        def on_train_epoch_end(self, trainer, pl_module):
            time.sleep(0.02)  # at least this between two epochs' steps

    weighed, real = [], WindowKeeper.weigh

    def weigh(keeper: WindowKeeper, step_s: float, fit_s: float, unknown: bool) -> bool:
        weighed.append(fit_s)
        return real(keeper, step_s, fit_s, unknown)

    monkeypatch.setattr(WindowKeeper, "weigh", weigh)
    callbacks = [EpochTimer(), Between()]
    fit_module(Newcomer(), rows(count=16), callbacks=callbacks, default_root_dir=tmp_path, max_epochs=10)
    assert len(weighed) == 1 and weighed[0] >= 8 * 0.02  # weighed at the third epoch's step: 8 epochs left


def test_a_short_cpu_window_lies_between_the_epochs_first_and_last_steps_and_holds_at_most_its_steps():
    assert [window_module.short_cpu_window(n) for n in (1, 2, 3, 4, 5)] == [None, (1, 1), (1, 1), (1, 2), (1, 3)]
    assert window_module.short_cpu_window(5, steps=1) == (1, 1)


def split_of(forward: float, rest: float) -> dict:
    """An epoch's figures with no window read and train time split: ``forward`` s in the step, ``rest`` s around it."""
    from mnistperf.diagnosis.figures import CPU_BUSY_SHARE, INPUT_WAIT_SHARE, SPLIT

    wait, *step, around = SPLIT
    return {
        INPUT_WAIT_SHARE: 0.0,
        CPU_BUSY_SHARE: None,
        wait: 0.0,
        step[0]: forward,
        step[1]: 0.0,
        step[2]: 0.0,
        around: rest,
    }


def test_without_a_window_a_cpu_step_whose_phases_leave_most_time_around_them_is_overhead_bound():
    verdict, reason = verdict_module.bound(split_of(forward=0.5, rest=0.5), 0.5, "too short")
    assert verdict == "overhead-bound" and "took 50% of the rest, so at most that" in reason, reason
    assert "(the profiled window did not run: too short)" in reason
    assert advice({"verdict": verdict, "avg_train_s": 1.0, **split_of(0.5, 0.5)})["ceiling"].startswith("none stated")
    # a step that fills train time could be either: only a window tells
    assert verdict_module.bound(split_of(forward=0.9, rest=0.1), 0.5, "too short")[0] == "undetermined"


class Wide(Newcomer):
    """A step whose arithmetic fills it: three 2048-wide layers on batches of 128 rows."""

    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(16, 2048),
            torch.nn.ReLU(),
            torch.nn.Linear(2048, 2048),
            torch.nn.ReLU(),
            torch.nn.Linear(2048, 4),
        )


class Dawdler(Callback):
    """A callback that spends 20 ms after each step outside any tensor operation: many times the step, so that a busy
    machine stretching the step's operators leaves its phases far below the line."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        time.sleep(0.02)


@pytest.mark.parametrize(
    ("module", "count", "batch_size", "callbacks", "above"),
    [(Wide, 2048, 128, [], True), (Newcomer, 1024, 16, [Dawdler()], False)],
    ids=["arithmetic fills the step", "a callback dawdles around it"],
)
def test_the_phases_bound_agrees_with_the_window_where_both_run(module, count, batch_size, callbacks, above):
    # Each far from the line: only a machine crowded enough to say so (the window's wait for a core, the epoch's)
    # moves a reading past it.
    timer = EpochTimer(window_share=None)
    fit_module(module(), rows(count, batch_size), callbacks=[timer, *callbacks], max_epochs=2)
    steady, window, line = timer.epochs[1], timer.busy_window, verdict_module.COMPUTE_BOUND_BUSY
    most = verdict_module.step_share(steady)
    assert most is not None and window["share"] is not None, (steady, window)
    window_crowded = (window.get("waited_for_a_core") or 0.0) >= window_module.CROWDED
    epoch_crowded = (steady.get(CORE_WAIT_SHARE) or 0.0) >= window_module.CROWDED
    assert window["share"] <= most + 0.1 or window_crowded, (window, most)  # within the phases' bound
    assert (window["share"] >= line) == above or window_crowded, window
    assert (most >= line) == above or epoch_crowded, (most, steady.get(CORE_WAIT_SHARE))
    expected = "compute-bound" if above else "overhead-bound"
    assert steady["verdict"] == expected or "in doubt" in steady["verdict_reason"], steady["verdict_reason"]


@pytest.mark.usefixtures("phases_undecided")
def test_the_command_line_remedy_for_a_fit_too_short_profiles_it_through_fit(workdir):
    share = "--trainer.callbacks.init_args.window_share"
    short = run_stage("v3_resident", "--data.batch_size", "16", share, "1e-9", epochs=2)
    assert short is not None and short["verdict"] == "undetermined"
    remedy = f"{share}=null"
    assert remedy in short["verdict_reason"], short["verdict_reason"]
    anyway = run_stage("v3_resident", "--data.batch_size", "16", *remedy.split("="), epochs=2)
    assert anyway is not None and anyway["verdict"] in ("input-bound", "overhead-bound", "compute-bound")
    assert anyway["busy_window"]["share"] is not None


def test_on_a_cpu_the_window_records_only_the_steps_the_fit_can_pay_for(monkeypatch):
    monkeypatch.setattr(window_price, "affordable_steps", lambda *weighed: 2.05)
    timer = fit(epochs=3, timer={"window_share": 0.01})
    window = timer.busy_window
    assert window["share"] is not None and 1 <= window["last_step"] - window["first_step"] + 1 <= 2
    assert window_cost_is_its_steps_excess(timer.epochs[1]["profiled"])


@pytest.mark.parametrize("compiled", [False, True])
def test_a_fit_whose_share_pays_for_no_step_gets_one_step_at_the_larger_share(monkeypatch, compiled):
    """Clocked, or profiled where the clock may not run (torch.compile has compiled code in the process)."""
    from mnistperf.diagnosis.record import window_keeper

    monkeypatch.setattr(window_keeper, "dynamo_compiled", lambda: compiled)
    share = 0.004
    # Whatever the machine's load: the share pays for half a step, the one-step share for more than one.
    weighed = []
    monkeypatch.setattr(
        window_price,
        "affordable_steps",
        lambda fit_s, step_s, given, price, start_s=0.0: weighed.append(given) or (0.5 if given == share else 3.0),
    )
    timer = fit(epochs=3, timer={"window_share": share})
    window = timer.busy_window
    assert weighed[-1] == pytest.approx(share * window_price.ONE_STEP_FACTOR)
    assert window["share"] is not None and ("operator_clock" in window) != compiled, window
    assert window["first_step"] == window["last_step"]  # one step, though the larger share would pay for three
    assert timer.clock.summary()["verdict"] in ("input-bound", "overhead-bound", "compute-bound")


def test_the_windows_price_takes_the_least_of_a_tiny_operators_times_at_the_epochs_starts(monkeypatch):
    readings = iter([3e-6, 1e-6, 2e-6, 5e-6])
    monkeypatch.setattr(window_price, "operator_s", lambda: next(readings))
    timer = fit(epochs=3, timer={"window_share": 0.004})
    assert timer.clock.windows.op_s == 1e-6  # epoch 1's and epoch 2's readings; none after the window's epoch
    assert next(readings) == 2e-6


def test_a_fit_that_pays_for_no_clocked_step_even_at_the_larger_share_names_that_share(monkeypatch):
    from mnistperf.diagnosis.record import window_keeper

    monkeypatch.setattr(window_keeper, "dynamo_compiled", lambda: False)
    monkeypatch.setattr(window_price, "affordable_steps", lambda *weighed: 0.5)
    timer = fit(epochs=3, timer={"window_share": 0.004})
    assert timer.busy_window["share"] is None
    assert "torch calls timed) to cost under 2.0% of its time" in timer.busy_window["reason"], timer.busy_window


def test_a_cpu_window_costs_a_share_of_the_whole_fit_each_recorded_step_at_its_worst():
    cost = window_price.CPU_WINDOW_COST
    assert window_price.affordable_steps(100.0, 0.1, 0.02, cost) == pytest.approx(2.0 / (cost * 0.1))
    assert window_price.affordable_steps(1.0, 0.1, 0.02, cost) < 1  # not even one step
    assert window_price.affordable_steps(1.0, 0.1, None, cost) == float("inf")
    # priced by its own graph at a tenth of a step, less the profiler's start, stop and reading
    fixed = window_price.START_COST * 1e-4
    assert window_price.affordable_steps(100.0, 0.1, 0.02, 0.1, fixed) == pytest.approx((2.0 - fixed) / (0.1 * 0.1))


def test_the_fit_a_window_is_priced_against_counts_its_steps_left_at_their_pace_or_its_epochs_whole_period():
    ahead = window_price.fit_estimate
    # 4 steps done in 0.4 s, 2 s into the fit, 10 steps left this epoch's included: 6 more at 0.1 s
    assert ahead((4, 0.4, 2.0), None, 10, 20) == pytest.approx((0.1, 2.6, False))
    # the fit's length not known: this epoch's 8 expected steps stand for it; none expected, nothing ahead
    assert ahead((4, 0.4, 2.0), None, math.nan, 8) == pytest.approx((0.1, 2.4, True))
    assert ahead((4, 0.4, 2.0), None, math.nan, math.inf) == pytest.approx((0.1, 2.0, True))
    # at an epoch's only step: the last steady epoch's step, each step left at its epoch's whole period
    assert ahead((0, 0.0, 2.0), (0.01, 0.03), 5, 1) == pytest.approx((0.01, 2.15, False))
    assert ahead((0, 0.0, 2.0), (0.01, None), 5, 1) == pytest.approx((0.01, 2.05, False))
    assert ahead((0, 0.0, 2.0), None, 5, 1) is None  # nothing ran to price it by


def test_a_window_priced_too_low_stops_once_its_steps_took_what_they_were_allowed():
    window = window_module.BusyWindow(3, 8, device_type="cpu")
    window.cap(4, 0.01, 0.005)  # four steps of 10 ms, allowed 5 ms more
    assert window.last == 6 and window.budget == (0.01, 0.005)
    window.cap(100, 0.01, 0.005)  # no more steps than the window has
    assert window.last == 6

    def recorded_steps(allowed_s: float) -> int:
        window = window_module.BusyWindow(3, 8, device_type="cpu")
        window.cap(6, 0.0, allowed_s)  # steps priced at nothing
        for index in range(9):
            window.step_start(index)
            window.step_end(index)
        assert window.done
        return window.last - window.first + 1

    assert recorded_steps(0.0) == 1  # the first step took more than nothing: the window ends there
    assert recorded_steps(60.0) == 6


def test_a_window_leaves_a_torch_profiler_the_user_runs_alone():
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as users:
        window = window_module.BusyWindow(3, 5, device_type="cpu")
        for index in range(7):
            window.step_start(index)
            torch.ones(4).sum()
            window.step_end(index)
        torch.ones(4).sum()  # still recorded by the user's profiler
    assert window.done and window.busy is None and "another torch profiler" in unread_said(window.unread)
    assert any(event.name == "aten::sum" for event in users.events())


def test_a_step_is_priced_by_the_operators_of_its_graph_and_at_its_worst_where_the_graph_is_unread():
    weight = torch.ones(3, requires_grad=True)
    assert window_price.graph_nodes((weight * 2).sum()) == 3  # the sum, the product, the weight's gradient
    chain = weight
    for _ in range(20):
        chain = chain * 2
    assert window_price.graph_nodes(chain.sum(), limit=5) == 5
    assert window_price.graph_nodes(torch.ones(3).sum()) is None  # no graph
    price = window_price.step_price(10, 1e-6, 0.01)
    assert price == pytest.approx(10 * window_price.EVENTS_PER_NODE * window_price.EVENT_COST * 1e-6 / 0.01)
    worst = window_price.CPU_WINDOW_COST
    assert window_price.step_price(None, 1e-6, 0.01) == worst
    assert window_price.step_price(window_price.GRAPH_LIMIT, 1e-6, 0.01) == worst
    assert window_price.step_price(10, 0.0, 0.01) == worst  # the operator's time not read
    assert window_price.step_price(1_000, 1e-3, 0.01) == worst  # capped
    assert 0 < window_price.operator_s() < 1e-2


def test_a_short_fit_whose_step_records_cheaply_gets_its_window_at_the_default_share(monkeypatch):
    from mnistperf.diagnosis.record import window_keeper

    monkeypatch.setattr(window_price, "operator_s", lambda: 1e-9)  # whatever the machine's load
    monkeypatch.setattr(window_keeper, "dynamo_compiled", lambda: False)  # whatever an earlier test compiled
    timer = EpochTimer()
    fit_module(Newcomer(), rows(count=480), callbacks=[timer], max_epochs=2)  # two epochs of 30 steps
    assert timer.clock.windows.nodes is not None and timer.clock.windows.nodes > 3
    assert timer.busy_window["share"] is not None, timer.busy_window
    assert timer.clock.summary()["verdict"] in ("input-bound", "overhead-bound", "compute-bound")
    one = EpochTimer()  # a one-epoch fit weighs its window before its first epoch ends: priced by its graph too
    fit_module(Newcomer(), rows(count=480), callbacks=[one], max_epochs=1)
    assert one.busy_window["share"] is not None and one.busy_window["in_warmup"], one.busy_window
    # the same fit without its graph read is priced at the worst, which a share this small cannot pay for, nor the
    # operator clock's worst, the cheaper price the reason then gives (the fit's length is measured, and a busy
    # machine's slow first epoch lengthens it: the share leaves room for a fit some 10**5 steps long)
    monkeypatch.setattr(window_price, "graph_nodes", lambda loss: None)
    worst = EpochTimer(window_share=1e-6)
    fit_module(Newcomer(), rows(count=480), callbacks=[worst], max_epochs=2)
    assert worst.busy_window["share"] is None
    assert f"{window_price.CLOCK_WORST:.2g} times that to record" in worst.busy_window["reason"]


def test_steps_left_follow_the_fits_limits():
    from types import SimpleNamespace

    from mnistperf.diagnosis.callbacks.project_reader import steps_left

    def trainer(**limits):
        found = {"max_epochs": 3, "max_steps": -1, "current_epoch": 1, "global_step": 64, "accumulate_grad_batches": 1}
        return SimpleNamespace(num_training_batches=64, **{**found, **limits})

    assert steps_left(trainer()) == 128
    assert steps_left(trainer(max_steps=100, accumulate_grad_batches=2)) == 72
    assert steps_left(trainer(max_epochs=-1)) == float("inf")


def test_a_wait_for_data_near_its_line_names_both_bounds_whichever_side_it_falls():
    from mnistperf.diagnosis.figures import CPU_BUSY_SHARE, INPUT_WAIT_SHARE
    from mnistperf.diagnosis.record.verdict import classify, deciding

    above, below = ({INPUT_WAIT_SHARE: wait, CPU_BUSY_SHARE: 0.3} for wait in (0.51, 0.48))
    assert classify(above, 0.5)[0] == "input-bound" and classify(below, 0.5)[0] == "overhead-bound"
    assert "a close call: waiting for data 51% is within 5 points of the 50%" in classify(above, 0.5)[1]
    assert classify(above, 0.5)[1].endswith("so it is as much overhead-bound")
    assert classify(below, 0.5)[1].endswith("so it is as much input-bound")
    assert deciding(above, "input-bound", 0.5) == "waiting for data 51%, a close call: as much overhead-bound"
    far = {INPUT_WAIT_SHARE: 0.2, CPU_BUSY_SHARE: 0.3}
    assert "close call" not in classify(far, 0.5)[1] and deciding(far, "overhead-bound") == (
        "CPU inside tensor operations 30%"
    )


def test_an_epoch_mostly_its_validation_is_told_to_validate_less_before_the_trainings_fixes():
    run = {"verdict": "overhead-bound", "avg_train_s": 1.0, "input_wait_share": 0.0, "cpu_busy_share": 0.3}
    heavy = advice({**run, "avg_eval_s": 2.0})
    assert heavy["hints"][0].startswith("validation less often or shorter (Trainer(check_val_every_n_epoch=N)")
    assert "it takes 67% of each epoch" in heavy["hints"][0]
    assert not [hint for hint in advice({**run, "avg_eval_s": 0.5})["hints"] if hint.startswith("validation less")]
