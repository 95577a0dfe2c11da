"""The audit's hash of one epoch's rows, warm and as a fit meets it: after training steps, or after an idle wait.

The small MLP's epoch of 30 steps of 64 rows: 1,920 samples of a float32 [32] and an int64 label, their 68 words a
sample hashed by ``cpu_lane_sums`` (what SampleAudit's epoch end runs), timed REPEATS times in three ways: one call
after another (warm), each after 30 steps of the small MLP's training (as at an epoch's end), and each after a 20 ms
sleep. Each way also times its parts by hand, as ``cpu_lane_sums`` does them for its first block of rows: the words
made float64, the product, the sums reduced modulo the prime.

    .venv/bin/python docs/results/cpu-2core-compat-cost/cold_hash.py [REPEATS]

Prints the medians and writes cold-hash.json beside this file; run it with nothing else running.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from mnistperf.diagnosis.measure import fingerprint

HERE = Path(__file__).resolve().parent
REPEATS = int(sys.argv[1]) if len(sys.argv) > 1 else 60
SAMPLES, STEPS = 1920, 30


def main() -> None:
    """Time the hash and its parts in each of the three ways; print and write the medians in microseconds."""
    torch.manual_seed(0)
    hasher = fingerprint.Fingerprinter()
    rows, labels = torch.randn(SAMPLES, 32), torch.randint(0, 10, (SAMPLES,))
    words = [hasher.words(rows, SAMPLES).numpy(), hasher.words(labels, SAMPLES).numpy()]
    cpu = torch.device("cpu")
    split = fingerprint.halves(torch.cat([hasher.weights(0, 64, cpu), hasher.weights(1, 4, cpu)]))
    block = fingerprint.block_rows(SAMPLES, 68)
    net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    optimizer = torch.optim.Adam(net.parameters())

    def train() -> None:  # an epoch's 30 steps of the small MLP
        for _ in range(STEPS):
            loss = torch.nn.functional.cross_entropy(net(torch.randn(64, 32)), torch.randint(0, 10, (64,)))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    ways: dict[str, Callable[[], None]] = {
        "warm": lambda: None,
        "after_30_steps": train,
        "after_20_ms_sleep": lambda: time.sleep(0.02),
    }
    found: dict[str, dict[str, float]] = {}
    for way, before in ways.items():
        times: dict[str, list[float]] = {"hash": [], "float64_words": [], "product": [], "reduced": []}
        for _ in range(REPEATS):
            before()
            start = time.perf_counter()
            fingerprint.cpu_lane_sums([words], split)
            times["hash"].append(time.perf_counter() - start)
            before()
            start = time.perf_counter()
            made = np.empty((block, 68))
            np.copyto(made[:, :64], words[0][:block])
            np.copyto(made[:, 64:], words[1][:block])
            copied = time.perf_counter()
            sums = np.empty((block, 2 * fingerprint.LANES))
            np.matmul(made, split, out=sums)
            multiplied = time.perf_counter()
            fingerprint.reduced(np.zeros((block, fingerprint.LANES), dtype=np.int64), sums)
            ended = time.perf_counter()
            times["float64_words"].append(copied - start)
            times["product"].append(multiplied - copied)
            times["reduced"].append(ended - multiplied)
        found[way] = {part: statistics.median(values) * 1e6 for part, values in times.items()}
        print(way, ", ".join(f"{part} {us:.0f} us" for part, us in found[way].items()), flush=True)
    result = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, numpy {np.__version__}",
        "load": os.getloadavg(),
        "samples": SAMPLES,
        "block_rows": block,
        "repeats": REPEATS,
        "median_us": found,
    }
    (HERE / "cold-hash.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
