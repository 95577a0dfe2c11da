"""The operator clock against the profiled window: the same share where both run, and what each costs a step.

The four steps of ../cpu-2core-window-price (its ``workload``): the lab's v2 step, SimpleCNN at a batch of 64,
the newcomer's MLP and a step of many small operators. In one process, after warm-up, each round times six plain
steps, then six under the autograd profiler without Kineto (as the CPU window records them, the share read as
the diagnosis reads it) and six under the operator clock (``OperatorClock`` with the floor and graph the
diagnosis gives it: ``operator_s`` and ``graph_nodes``), the two in alternating order. Kept per round: the
window's share, the clock's two bounds and their middle, each one's cost in plain steps per recorded step, the
clock's calls per graph node and its price (``step_price`` with the clock's node cost).

    .venv/bin/python docs/results/cpu-2core-operator-clock/measure.py [ROUNDS]

Prints a table and writes results.json beside this file.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from mnistperf.diagnosis.measure.device_work import busy_share, profiled_events, work_of
from mnistperf.diagnosis.measure.operator_clock import OperatorClock
from mnistperf.diagnosis.measure.window_price import CLOCK_NODE_COST, CLOCK_WORST, operator_s, step_price

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "cpu-2core-window-price"))
from measure import WORKLOADS, workload  # noqa: E402  (the same four steps as the window's price)

STEPS = 6


def timed(work) -> float:
    """Seconds of ``work()``."""
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def six(step):
    """Six of ``step``, as one piece of work."""
    return lambda: [step() for _ in range(STEPS)]


def profiled(step) -> tuple[float | None, float]:
    """(the window's share, seconds) of six steps under the autograd profiler, its events read."""
    start = time.perf_counter()
    with torch.autograd.profiler.profile(use_kineto=False) as profiler:
        six(step)()
    share = busy_share((s, e) for _, s, e in work_of(profiled_events(profiler, "cpu"), "cpu"))
    return share, time.perf_counter() - start


def clocked(step, floor_s: float, nodes: int) -> tuple[tuple[float, float] | None, float, int]:
    """(the clock's bounds, seconds, calls) of six steps under the operator clock."""
    start = time.perf_counter()
    with OperatorClock(floor_s, nodes) as clock:
        six(step)()
    seconds = time.perf_counter() - start
    return clock.bounds(seconds), seconds, clock.calls


def round_of(step, seen, order: int) -> dict:
    """One round: plain steps, then the profiler and the clock in ``order`` (0: the profiler first)."""
    step(read=True)
    nodes, op_s = seen[-1] or 1, operator_s()
    plain_s = timed(six(step))
    step_s = plain_s / STEPS
    found: dict = {"step_s": step_s, "nodes": nodes, "operator_s": op_s}
    for method in ("profiler", "clock")[:: 1 if order == 0 else -1]:
        if method == "profiler":
            share, seconds = profiled(step)
            found["window_share"] = share
        else:
            bounds, seconds, calls = clocked(step, op_s, nodes)
            found["clock_bounds"] = bounds
            found["clock_share"] = sum(bounds) / 2 if bounds else None
            found["calls_per_node"] = calls / STEPS / nodes
            found["clock_price_steps"] = step_price(nodes, op_s, step_s, CLOCK_NODE_COST, CLOCK_WORST)
        found[f"{method}_cost_steps"] = (seconds - plain_s) / plain_s
    line = 0.8  # the verdict's line between overhead- and compute-bound
    if found["window_share"] is not None and found["clock_bounds"] is not None:
        least, most = found["clock_bounds"]
        found["window_outside_by"] = max(least - found["window_share"], found["window_share"] - most, 0.0)
        found["same_side"] = (found["window_share"] >= line) == (found["clock_share"] >= line)
    found["window_within_bounds"] = (
        found["clock_bounds"] is not None
        and found["window_share"] is not None
        and found["clock_bounds"][0] <= found["window_share"] <= found["clock_bounds"][1]
    )
    return found


def main() -> None:
    """Every workload, ``ROUNDS`` rounds in turn; the medians printed, every round kept."""
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    torch.set_num_threads(min(torch.get_num_threads(), 2))
    load_before = os.getloadavg()
    steps = {name: workload(name) for name in WORKLOADS}
    for step, _ in steps.values():
        for _ in range(5):
            step()
    found: dict[str, list[dict]] = {name: [] for name in WORKLOADS}
    for number in range(rounds):
        for name, (step, seen) in steps.items():
            found[name].append(round_of(step, seen, number % 2))
    heads = ("step ms", "window", "clock least", "clock most", "within", "calls/node", "price")
    heads += ("cost clock", "profiler")
    print(f"{'step':32}", *(f"{head:>11}" for head in heads))
    medians = {}
    for name, runs in found.items():
        med = {
            key: statistics.median(r[key] for r in runs)
            for key in ("step_s", "window_share", "clock_share", "calls_per_node", "clock_price_steps")
            + ("clock_cost_steps", "profiler_cost_steps")
        }
        med["clock_least"] = statistics.median(r["clock_bounds"][0] for r in runs)
        med["clock_most"] = statistics.median(r["clock_bounds"][1] for r in runs)
        med["rounds_within"] = sum(r["window_within_bounds"] for r in runs)
        med["rounds_same_side"] = sum(r.get("same_side", False) for r in runs)
        med["most_outside_by"] = max(r.get("window_outside_by", 0.0) for r in runs)
        medians[name] = med
        print(
            f"{name:32} {med['step_s'] * 1e3:11.3g} {med['window_share']:11.3f} {med['clock_least']:11.3f} "
            f"{med['clock_most']:11.3f} {med['rounds_within']:>8}/{len(runs)} {med['calls_per_node']:11.3g} "
            f"{med['clock_price_steps']:11.3g} {med['clock_cost_steps']:11.3g} {med['profiler_cost_steps']:11.3g}"
        )
    for name, med in medians.items():
        print(f"{name}: same side of 80 % in {med['rounds_same_side']} rounds; outside by {med['most_outside_by']:.3f}")
    print("medians of each round's figures; within: rounds whose window share fell within the clock's bounds")
    print("price and costs: steps per recorded step; load", load_before, "->", os.getloadavg())
    (HERE / "results.json").write_text(
        json.dumps(
            {
                "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
                "torch": torch.__version__,
                "threads": torch.get_num_threads(),
                "load_before": load_before,
                "load_after": os.getloadavg(),
                "rounds": found,
                "medians": medians,
            },
            indent=1,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
