"""The operator clock: bounds on the time inside tensor operations, where the fit cannot pay for the profiler."""

from __future__ import annotations

import math
import time
import warnings

import pytest
import torch
from conftest import fit_module
from test_verdict import Newcomer, rows
from torch.overrides import TorchFunctionMode

from mnistperf.diagnosis import EpochTimer
from mnistperf.diagnosis.measure import busy_window as window_module
from mnistperf.diagnosis.measure import window_price
from mnistperf.diagnosis.measure.operator_clock import OperatorClock
from mnistperf.diagnosis.measure.window_reading import WindowReading
from mnistperf.diagnosis.record.text import format_window


def test_the_clock_times_top_level_calls_and_bounds_their_share_of_the_span():
    weights = torch.randn(64, 64)
    start = time.perf_counter()
    with OperatorClock(floor_s=0.0) as clock:
        torch.nn.functional.linear(weights, weights)  # one call, whatever runs inside it
        weights.sum()
        time.sleep(0.02)  # time around the calls
    span = time.perf_counter() - start
    assert clock.calls == 2
    least, most = clock.bounds(span)
    assert 0 < least == most == clock.inside / span  # no floor: both bounds are every call's time
    assert clock.inside <= span - 0.02  # the sleep lies outside the calls
    assert OperatorClock().bounds(1.0) is None  # nothing timed


def test_a_floor_per_call_and_per_backward_node_lowers_the_least_share_only():
    weight = torch.ones(8, requires_grad=True)
    with OperatorClock(floor_s=1.0, nodes=3) as clock:  # every call, the backward too, within its floor
        (weight * 2).sum().backward()
    assert clock.calls == 3 and clock.beyond == 0.0 and clock.inside > 0
    least, most = clock.bounds(clock.inside * 2)
    assert least == 0.0 and most == 0.5
    loss = (weight * 2).sum()
    with OperatorClock(floor_s=1e-9, nodes=math.inf) as uncounted:  # a graph not counted: its backward no floor
        loss.backward()
    assert uncounted.calls == 1 and uncounted.beyond == 0.0 and uncounted.inside > 0


def test_a_step_under_the_clock_computes_exactly_what_it_computes_without():
    def step() -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 2))
        optimizer = torch.optim.Adam(model.parameters())
        for _ in range(3):
            loss = torch.nn.functional.cross_entropy(model(torch.randn(4, 8)), torch.tensor([0, 1, 1, 0]))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        return [parameter.detach().clone() for parameter in model.parameters()]

    plain = step()
    with OperatorClock(floor_s=1e-6, nodes=8):
        clocked = step()
    assert all(torch.equal(a, b) for a, b in zip(plain, clocked, strict=True))


@pytest.fixture
def clock_forced(monkeypatch):
    """The profiler priced past any fit, the clock at nothing: every window is the operator clock's.

    Whatever an earlier test compiled in this process (the clock is declined once anything was).
    """
    from mnistperf.diagnosis.record import window_keeper

    def price(nodes, op_s, step_s, node_cost=window_price.NODE_COST, worst=4.0):
        return 1e6 if node_cost == window_price.NODE_COST else 1e-6

    monkeypatch.setattr(window_price, "step_price", price)
    monkeypatch.setattr(window_keeper, "dynamo_compiled", lambda: False)


def test_a_fit_that_cannot_pay_for_the_profiler_gets_its_share_from_the_clock(clock_forced):
    timer = EpochTimer()
    fit_module(Newcomer(), rows(count=480), callbacks=[timer], max_epochs=2)  # two epochs of 30 steps
    window = timer.busy_window
    least, most = window["operator_clock"]
    assert 0 <= least <= window["share"] <= most <= 1 and window["kernels"] > 0, window
    assert window["margin"] >= window_module.BASE_MARGIN + (most - least) / 2
    assert timer.clock.summary()["verdict"] in ("input-bound", "overhead-bound", "compute-bound")
    profiled = timer.epochs[1]["profiled"]
    assert 0 <= profiled["cost_s"] <= profiled["seconds"] and profiled["seconds"] > 0  # its own steps' excess
    assert timer.clock.windows.recorded is None  # no trace to write
    line = format_window(WindowReading.of(window))
    assert "torch calls timed" in line and "the profiler did not run" in line, line
    assert f"which bound it between {least:.0%} and {most:.0%}" in line, line  # the clock's bounds, said as such
    assert torch._C._is_torch_function_mode_enabled() is False  # the clock left nothing behind
    one = format_window(WindowReading.of({**window, "last_step": window["first_step"]}))
    assert f"over training step {window['first_step']} of epoch 2 " in one, one


def test_a_ddp_rank_never_gets_the_clock_where_the_profiler_costs_too_much(clock_forced, monkeypatch):
    """The clock times one process's torch calls: a rank of a process group gets no share from it (docs/timing.md)."""
    from mnistperf.diagnosis.record import window_keeper

    monkeypatch.setattr(window_keeper, "world", lambda: ("gloo", 2))  # as a rank of two sees it
    timer = EpochTimer()
    fit_module(Newcomer(), rows(count=480), callbacks=[timer], max_epochs=2)
    window = timer.busy_window
    assert "operator_clock" not in window and window["share"] is None, window
    assert "is too short for one profiled step" in window["reason"] and "torch calls timed" not in window["reason"]


def test_a_fit_that_fails_inside_the_clocks_window_leaves_no_mode_behind(clock_forced):
    class FailsInside(Newcomer):
        def training_step(self, batch, batch_idx):
            if self.current_epoch == 1 and batch_idx == 22:  # the window's first step (23)
                raise RuntimeError("the module's own error")
            return super().training_step(batch, batch_idx)

    timer = EpochTimer()
    with pytest.raises(RuntimeError, match="the module's own error"):
        fit_module(FailsInside(), rows(count=480), callbacks=[timer], max_epochs=2)
    assert torch._C._is_torch_function_mode_enabled() is False  # Lightning calls no teardown after an error
    assert timer.busy_window["share"] is None


def test_a_mode_the_users_callback_enters_and_leaves_around_each_step_voids_the_clocks_share(clock_forced):
    from lightning.pytorch import Callback

    class CountingMode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    class EveryStep(Callback):  # before EpochTimer: it leaves its mode before the timer's step ends
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            self.mode = CountingMode().__enter__()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            self.mode.__exit__(None, None, None)

    timer = EpochTimer()
    fit_module(Newcomer(), rows(count=480), callbacks=[EveryStep(), timer], max_epochs=2)
    assert timer.busy_window["share"] is None and "another torch function mode" in timer.busy_window["reason"]
    assert torch._C._is_torch_function_mode_enabled() is False


def test_once_torch_compile_has_compiled_code_the_clock_is_declined(clock_forced, monkeypatch):
    from mnistperf.diagnosis.record import window_keeper

    monkeypatch.setattr(window_keeper, "dynamo_compiled", lambda: True)  # a compiled function called inside the step
    timer = EpochTimer()
    fit_module(Newcomer(), rows(count=480), callbacks=[timer], max_epochs=2)
    assert timer.busy_window["share"] is None and "operator_clock" not in timer.busy_window
    assert "its torch calls timed" not in timer.busy_window["reason"]


def test_code_compiled_inside_the_step_is_not_timed_by_the_clock(monkeypatch):
    def price(nodes, op_s, step_s, node_cost=window_price.NODE_COST, worst=4.0):
        return 1e6 if node_cost == window_price.NODE_COST else 1e-6

    class CompiledLoss(Newcomer):  # under a function mode its compiled frame would recompile
        def __init__(self):
            super().__init__()
            self.loss = torch.compile(lambda logits, y: torch.nn.functional.cross_entropy(logits, y), backend="eager")

        def training_step(self, batch, batch_idx):
            x, y = batch
            return self.loss(self.net(x), y)

    monkeypatch.setattr(window_price, "step_price", price)  # the clock at nothing: only the compile declines it
    declined = EpochTimer()
    fit_module(CompiledLoss(), rows(count=480), callbacks=[declined], max_epochs=2)
    assert declined.busy_window["share"] is None and "operator_clock" not in declined.busy_window


def test_a_warning_a_timed_call_raises_is_shown_at_the_line_that_made_the_call_under_its_filters():
    def copied() -> torch.Tensor:
        return torch.tensor(torch.ones(3))  # warned in C++: "To copy construct from a tensor..."

    def implicit() -> torch.Tensor:
        return torch.nn.functional.softmax(torch.ones(3))  # warned in Python: "Implicit dimension choice..."

    with warnings.catch_warnings(record=True) as plain:
        warnings.simplefilter("always")
        copied(), implicit()
    with warnings.catch_warnings(record=True) as clocked:
        warnings.simplefilter("always")
        with OperatorClock() as clock:
            copied(), implicit()
    assert clock.calls >= 2
    where = [(shown.filename, shown.lineno, str(shown.message)) for shown in plain]
    assert [(shown.filename, shown.lineno, str(shown.message)) for shown in clocked] == where
    assert [filename for filename, _, _ in where] == [__file__] * 2
    with warnings.catch_warnings(record=True) as ignored:  # a filter on this module holds under the clock
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", module=__name__)
        with OperatorClock():
            copied(), implicit()
    assert ignored == []
    assert warnings.showwarning is not None and "OperatorClock" not in repr(warnings.showwarning)
