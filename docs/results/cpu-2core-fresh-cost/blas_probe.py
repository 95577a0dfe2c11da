"""Whether the audit's hash runs a second BLAS thread, and what finding the BLAS libraries costs a process.

For three shapes of held steps (the CNN's 64 images of 28x28 a step, 64 steps; the small MLP's 64 rows of 32 floats,
30 steps; MNIST's 256 rows of 784 floats, 16 steps), the audit's flush (measure/fingerprint.py's ``HeldSteps``) runs
ROUNDS times at NumPy's own BLAS threads, then the process sleeps 0.3 s, in which a BLAS worker still spinning would
show as CPU time. Where no second thread ran, the process's CPU seconds equal its wall seconds less the sleep. Then,
where threadpoolctl is installed, how long its ``ThreadpoolController()`` takes to find this process's libraries (a
process with torch, Lightning and this package loaded): what limiting the threads costs each process once.

    .venv/bin/python docs/results/cpu-2core-fresh-cost/blas_probe.py [ROUNDS]

Prints and writes blas-probe.json beside this file; run it with nothing else running.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from mnistperf.diagnosis.measure.fingerprint import Fingerprinter
from mnistperf.diagnosis.measure.held_steps import HeldSteps, Rows
from mnistperf.diagnosis.record.run import environment

HERE = Path(__file__).resolve().parent
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 20
SHAPES = {"cnn": ((1, 28, 28), 64, 64), "small": ((32,), 64, 30), "mnist": ((784,), 256, 16)}  # sample, batch, steps
IDLE_S = 0.3


def flushes(shape: tuple[int, ...], batch: int, steps: int) -> dict[str, float]:
    """ROUNDS flushes of ``steps`` held steps, then IDLE_S asleep: wall and CPU milliseconds a flush."""
    held = HeldSteps(Fingerprinter())
    data = [[torch.randn(batch, *shape), torch.randint(0, 10, (batch,))] for _ in range(steps)]
    for step in data:  # a warm-up flush: the weights made
        held.hold(0, Rows(step, batch))
    held.flush()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(ROUNDS):
        for step in data:
            held.hold(0, Rows(step, batch))
        held.flush()
    time.sleep(IDLE_S)
    wall, cpu = time.perf_counter() - wall - IDLE_S, time.process_time() - cpu
    return {"wall_ms": 1e3 * wall / ROUNDS, "cpu_ms": 1e3 * cpu / ROUNDS, "cpu_over_wall": cpu / wall}


def controller_ms() -> float | None:
    """Milliseconds for threadpoolctl to find this process's libraries; None where it is not installed."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return None
    start = time.perf_counter()
    ThreadpoolController()
    return 1e3 * (time.perf_counter() - start)


def main() -> None:
    """Probe, print and write."""
    load = [os.getloadavg()[0]]
    result: dict[str, object] = {"rounds": ROUNDS, "idle_s": IDLE_S, "numpy": np.__version__}
    result["flush"] = {name: flushes(*spec) for name, spec in SHAPES.items()}
    result["threadpoolctl_controller_ms"] = controller_ms()
    load.append(os.getloadavg()[0])
    result["load_average_1min"] = load
    result["environment"] = environment(torch.device("cpu"))
    (HERE / "blas-probe.json").write_text(json.dumps(result, indent=1) + "\n")
    for name, row in result["flush"].items():  # type: ignore[attr-defined]
        print(f"{name}: {row['wall_ms']:.2f} ms a flush, CPU over wall {row['cpu_over_wall']:.3f}")
    found = result["threadpoolctl_controller_ms"]
    print(f"threadpoolctl's controller: {found} ms; load {min(load):.2f}-{max(load):.2f}")


if __name__ == "__main__":
    main()
