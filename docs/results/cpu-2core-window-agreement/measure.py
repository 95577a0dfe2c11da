"""The CPU window without Kineto against the Kineto window it replaced: the same share, and what each costs.

Three training steps, each on its own model: the lab's v2 step (SimpleCNN, a batch of 512, Adam), the newcomer's
small MLP (examples' kind, a batch of 16, SGD) and a step of many small operators (30 blocks of a 16-wide linear
layer, LayerNorm and GELU, a batch of 4, Adam: the profiler's worst case). In one process, after warm-up, each
round times six unprofiled steps, then records six steps under Kineto's CPU activity (after its two warm-up steps,
as the window did) and six under the autograd profiler without Kineto (as the window does now), in alternating
order. Each window's share is read as the diagnosis reads it (``device_work.profiled_events``, ``work_of``,
``busy_share``); its cost is its recorded steps' time beyond as many unprofiled steps, reading its events
included, in unprofiled steps per recorded step. The first use of each profiler in the process is timed apart.

    .venv/bin/python docs/results/cpu-2core-window-agreement/measure.py [ROUNDS]

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
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule

from mnistperf.diagnosis.measure.device_work import busy_share, profiled_events, work_of
from mnistperf.model.network import SimpleCNN

HERE = Path(__file__).resolve().parent
STEPS, WARMUP = 6, 2


def workload(name: str):
    """One training step of ``name``'s model, as a function."""
    torch.manual_seed(0)
    if name == "v2 step (SimpleCNN, batch 512)":
        model, x, y = SimpleCNN(), torch.randn(512, 1, 28, 28), torch.randint(0, 10, (512,))
        opt = torch.optim.Adam(model.parameters(), 1e-3)
    elif name == "newcomer MLP (batch 16)":
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        x, y = torch.randn(16, 16), torch.randint(0, 4, (16,))
        opt = torch.optim.SGD(model.parameters(), 0.01)
    else:
        blocks = [m for _ in range(30) for m in (nn.Linear(16, 16), nn.LayerNorm(16), nn.GELU())]
        model, x, y = nn.Sequential(*blocks, nn.Linear(16, 10)), torch.randn(4, 16), torch.randint(0, 10, (4,))
        opt = torch.optim.Adam(model.parameters(), 1e-3)

    def step() -> None:
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step


def share_of(profiler) -> float | None:
    """A stopped profiler's busy share, read as the diagnosis reads it."""
    return busy_share((start, end) for _, start, end in work_of(profiled_events(profiler, "cpu"), "cpu"))


def kineto(step) -> tuple[float | None, float]:
    """Kineto's CPU window: two warm-up steps, six recorded; (share, seconds of the recorded steps and reading)."""
    p = profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=WARMUP, active=STEPS, repeat=1))
    p.start()
    for _ in range(WARMUP):
        step()
        p.step()
    start = time.perf_counter()
    for _ in range(STEPS):
        step()
        p.step()
    p.stop()
    share = share_of(p)
    return share, time.perf_counter() - start


def autograd(step) -> tuple[float | None, float]:
    """The autograd profiler without Kineto over six steps; (share, seconds of the recorded steps and reading)."""
    start = time.perf_counter()
    p = torch.autograd.profiler.profile(use_kineto=False)
    p.__enter__()
    for _ in range(STEPS):
        step()
    p.__exit__(None, None, None)
    share = share_of(p)
    return share, time.perf_counter() - start


def plain(step) -> float:
    """Seconds of six unprofiled steps."""
    start = time.perf_counter()
    for _ in range(STEPS):
        step()
    return time.perf_counter() - start


def main(rounds: int) -> None:
    """Every workload, ``rounds`` rounds each; the table printed and results.json written."""
    results = {"rounds": rounds, "load_before": os.getloadavg()[0], "workloads": {}}
    first_use = {}
    for name in ("v2 step (SimpleCNN, batch 512)", "newcomer MLP (batch 16)", "many small operators (batch 4)"):
        step = workload(name)
        for _ in range(10):
            step()
        if not first_use:  # the first use of each profiler in this process, the autograd one first
            for method, window in (("autograd", autograd), ("kineto", kineto)):
                base = plain(step)
                _, seconds = window(step)
                first_use[method] = seconds - base
        rows = {"plain_s": [], "kineto": [], "autograd": []}
        for number in range(rounds):
            base = plain(step)
            rows["plain_s"].append(base)
            order = (("kineto", kineto), ("autograd", autograd))
            for method, window in order if number % 2 == 0 else order[::-1]:
                share, seconds = window(step)
                rows[method].append({"share": share, "cost_steps": (seconds - base) / base})
        step_s = statistics.median(rows["plain_s"]) / STEPS
        summary = {"step_ms": step_s * 1e3}
        for method in ("kineto", "autograd"):
            summary[f"{method}_share"] = statistics.median(r["share"] for r in rows[method])
            summary[f"{method}_cost_steps"] = statistics.median(r["cost_steps"] for r in rows[method])
        pairs = [abs(a["share"] - b["share"]) for a, b in zip(rows["kineto"], rows["autograd"], strict=True)]
        summary["median_abs_difference"] = statistics.median(pairs)
        results["workloads"][name] = {"summary": summary, "rounds": rows}
        print(
            f"{name}: step {step_s * 1e3:.2f} ms; share Kineto {summary['kineto_share']:.3f}, without Kineto "
            f"{summary['autograd_share']:.3f} (median |difference| {summary['median_abs_difference']:.3f}); "
            f"cost per recorded step: Kineto {summary['kineto_cost_steps']:.2f} steps, "
            f"without Kineto {summary['autograd_cost_steps']:.2f}",
            flush=True,
        )
    results["first_use_s"] = first_use
    results["load_after"] = os.getloadavg()[0]
    results["environment"] = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    print(
        f"first use in the process, beyond its steps: {first_use}; load {results['load_before']:.2f} -> "
        f"{results['load_after']:.2f}"
    )
    (HERE / "results.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10)
