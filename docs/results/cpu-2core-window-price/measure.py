"""The CPU window's price from the step's own graph, against what recording the step really costs.

The same three steps as ../cpu-2core-window-agreement (the lab's v2 step, the newcomer's MLP, a step of many small
operators), plus the lab's step at a batch of 64. In one process, after warm-up, each round reads the price as
the diagnosis does (``window_price.graph_nodes`` on one step's loss, ``operator_s``, ``step_price`` against the
median of twenty unprofiled steps), then times the window's profiler recording nothing (its start, stop and
reading) and recording six steps, their events read as the window reads them and written to a trace as it
writes them once a fit. The real cost is those six steps' time and their trace's beyond as many unprofiled steps,
in steps per recorded step; the predicted one is the price plus the start's priced cost over the six steps. Also
kept, in bare tiny operators' time: what each recorded event cost and what writing it to the trace cost (together,
``EVENT_COST``'s measure) and the empty window (``START_COST``'s); and the events per graph node
(``EVENTS_PER_NODE``'s).

    .venv/bin/python docs/results/cpu-2core-window-price/measure.py [ROUNDS]

Prints a table and writes results.json beside this file.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from mnistperf.diagnosis.measure.device_work import profiled_events, work_of
from mnistperf.diagnosis.measure.window_price import CPU_WINDOW_COST, START_COST, graph_nodes, operator_s, step_price
from mnistperf.model.network import SimpleCNN

HERE = Path(__file__).resolve().parent
STEPS = 6
WORKLOADS = (
    "v2 step (SimpleCNN, batch 512)",
    "SimpleCNN, batch 64",
    "newcomer MLP (batch 16)",
    "many small operators (batch 4)",
)


def workload(name: str):
    """One training step of ``name``'s model, as a function returning its loss (read before the backward)."""
    torch.manual_seed(0)
    if name.startswith("v2") or name.startswith("SimpleCNN"):
        batch = 512 if name.startswith("v2") else 64
        model, x, y = SimpleCNN(), torch.randn(batch, 1, 28, 28), torch.randint(0, 10, (batch,))
        opt = torch.optim.Adam(model.parameters(), 1e-3)
    elif name.startswith("newcomer"):
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        x, y = torch.randn(16, 16), torch.randint(0, 4, (16,))
        opt = torch.optim.SGD(model.parameters(), 0.01)
    else:
        blocks = [m for _ in range(30) for m in (nn.Linear(16, 16), nn.LayerNorm(16), nn.GELU())]
        model, x, y = nn.Sequential(*blocks, nn.Linear(16, 10)), torch.randn(4, 16), torch.randint(0, 10, (4,))
        opt = torch.optim.Adam(model.parameters(), 1e-3)
    seen: list[int | None] = []

    def step(read: bool = False) -> None:
        loss = F.cross_entropy(model(x), y)
        if read:
            seen.append(graph_nodes(loss))
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step, seen


def recorded(work, trace: bool = False) -> tuple[float, int, float]:
    """(seconds of ``work()`` recorded and its events read as the window reads them, the events, its trace's writing).

    The trace is written only where ``trace`` asks; else its seconds are 0.
    """
    start = time.perf_counter()
    with torch.autograd.profiler.profile(use_kineto=False) as profiler:
        work()
    events = len(work_of(profiled_events(profiler, "cpu"), "cpu"))
    seconds = time.perf_counter() - start
    if not trace:
        return seconds, events, 0.0
    with tempfile.TemporaryDirectory() as scratch:
        start = time.perf_counter()
        profiler.export_chrome_trace(str(Path(scratch, "window.json")))
        return seconds, events, time.perf_counter() - start


def round_of(step, seen) -> dict:
    """One round: the price as the diagnosis reads it, and the real cost of an empty window and of six steps."""
    times = []
    for _ in range(20):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    step_s = statistics.median(times)
    step(read=True)
    nodes, op_s = seen[-1], operator_s()
    price = step_price(nodes, op_s, step_s)
    empty_s, _, _ = recorded(lambda: None)
    seconds, events, trace_s = recorded(lambda: [step() for _ in range(STEPS)], trace=True)
    return {
        "step_s": step_s,
        "nodes": nodes,
        "operator_s": op_s,
        "price_steps": price,
        "predicted_steps": price + START_COST * op_s / STEPS / step_s,
        "cost_steps": (seconds + trace_s - STEPS * step_s) / STEPS / step_s,
        "events_per_node": events / STEPS / nodes if nodes else None,
        "event_cost_ops": (seconds - STEPS * step_s - empty_s) / events / op_s if events else None,
        "start_cost_ops": empty_s / op_s,
        "trace_cost_ops": trace_s / events / op_s if events else None,
    }


def main() -> None:
    """Every workload, ``ROUNDS`` rounds in turn; the medians printed, every round kept."""
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    torch.set_num_threads(min(torch.get_num_threads(), 2))
    steps = {name: workload(name) for name in WORKLOADS}
    for step, _ in steps.values():
        for _ in range(5):
            step()
    found: dict[str, list[dict]] = {name: [] for name in WORKLOADS}
    for _ in range(rounds):
        for name, (step, seen) in steps.items():
            found[name].append(round_of(step, seen))
    heads = ("nodes", "events/node", "event (ops)", "trace (ops)", "start (ops)", "predicted", "cost")
    print(f"{'step':32}", *(f"{head:>11}" for head in heads))
    medians = {}
    for name, runs in found.items():
        med = {key: statistics.median(r[key] for r in runs) for key in runs[0] if runs[0][key] is not None}
        medians[name] = med
        shown = ("nodes", "events_per_node", "event_cost_ops", "trace_cost_ops", "start_cost_ops")
        shown += ("predicted_steps", "cost_steps")
        print(f"{name:32}", *(f"{med[key]:11.3g}" for key in shown))
    print(
        "predicted (the step's price, capped at "
        f"{CPU_WINDOW_COST:g}, and its start over {STEPS} steps) and cost: steps per recorded step"
    )
    (HERE / "results.json").write_text(
        json.dumps(
            {
                "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
                "torch": torch.__version__,
                "threads": torch.get_num_threads(),
                "load_before": os.getloadavg(),
                "rounds": found,
                "medians": medians,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
