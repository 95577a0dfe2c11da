"""The audit's hash of its held steps, this code beside an earlier commit's, in one process, the two alternating.

Each round flushes the same held steps through both codes' ``HeldSteps`` (measure/fingerprint.py): 30 steps of 64
rows of 32 floats and a label (the small MLP's epoch), and 16 steps of 256 rows of 784 floats and a label (4,096
MNIST-shaped samples, what the audit hashes at once). Checks that both give the same fingerprints; prints and writes
held-hash-BEFORE.json beside this file with each code's median flush and the one-minute load average.

    .venv/bin/python docs/results/cpu-2core-fresh-cost/held_hash.py BEFORE [ROUNDS]
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from mnistperf.diagnosis.measure import fingerprint

HERE = Path(__file__).resolve().parent
BEFORE = sys.argv[1]
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 40
SHAPES = {"small": (32, 64, 30), "mnist": (784, 256, 16)}  # a sample's floats, rows a step, steps held


def module_at(revision: str) -> Any:
    """measure/fingerprint.py as it was at ``revision``, imported apart."""
    path = "src/mnistperf/diagnosis/measure/fingerprint.py"
    source = subprocess.run(["git", "show", f"{revision}:{path}"], cwd=HERE, check=True, capture_output=True).stdout
    with tempfile.NamedTemporaryFile("wb", suffix=".py", delete=False) as file:
        file.write(source)
    spec = importlib.util.spec_from_file_location(f"fingerprint_{revision}", file.name)
    assert spec is not None and spec.loader is not None
    found = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(found)
    os.unlink(file.name)
    return found


def flush(held: Any, steps: list[list[torch.Tensor]], rows: int) -> list[torch.Tensor]:
    """Hold every step, then hash them all: one code's fingerprints of them."""
    for step in steps:
        held.hold(0, step, rows)
    return held.flush()[0]


def main() -> None:
    """Flush each shape's held steps through both codes, alternating, ROUNDS times; print and write the medians."""
    codes = {BEFORE: module_at(BEFORE), "this": fingerprint}
    generator = torch.Generator().manual_seed(0)
    result: dict[str, Any] = {"before": BEFORE, "load_average_1min": [os.getloadavg()[0]]}
    for name, (width, rows, count) in SHAPES.items():
        steps = [
            [torch.randn(rows, width, generator=generator), torch.randint(0, 10, (rows,), generator=generator)]
            for _ in range(count)
        ]
        held = {code: module.HeldSteps(module.Fingerprinter()) for code, module in codes.items()}
        found = {code: torch.cat(flush(held[code], steps, rows)) for code in codes}
        assert torch.equal(*found.values()), "the two codes' fingerprints differ"
        seconds: dict[str, list[float]] = {code: [] for code in codes}
        for round_ in range(ROUNDS):
            for code in codes if round_ % 2 else reversed(codes):
                start = time.perf_counter()
                flush(held[code], steps, rows)
                seconds[code].append(time.perf_counter() - start)
        result[name] = {code: statistics.median(values) for code, values in seconds.items()}
        print(f"{name}: " + ", ".join(f"{code} {value * 1e6:,.0f} us" for code, value in result[name].items()))
    result["load_average_1min"].append(os.getloadavg()[0])
    (HERE / f"held-hash-{BEFORE}.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
