"""A lead, not the project's hash: 4-byte values read as 32-bit words, beside the audit's 16-bit words, on one flush.

The audit's hash (measure/fingerprint.py) makes every 16-bit word of a sample float64 and multiplies it by its weight's
two 16-bit halves. Read as 32-bit words, a float32 sample has half the words, but each weight must be split in three
11-bit parts to keep the float64 sums exact (a 32-bit word times 2**11 is below 2**43; 512 of them sum below 2**52),
and the two lanes need two primes: a 32-bit word can differ from another by exactly 2**31 - 1, which one prime alone
cannot tell from no difference. This prototype does that, the products reduced once at the end as the audit's are,
checks a few samples against exact integer sums, and times it beside the audit's flush of the same 4,096 MNIST-shaped
samples (16 steps of 256 rows of 784 floats and a label), alternating, in one process. Prints and writes
wide-words.json beside this file with the one-minute load average.

    .venv/bin/python docs/results/cpu-2core-fresh-cost/wide_words.py [ROUNDS]
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from mnistperf.diagnosis.measure import fingerprint

HERE = Path(__file__).resolve().parent
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 40
PRIMES = np.array([2**31 - 1, 2**31 - 19], dtype=np.int64)  # one per lane
PART_BITS = 11  # a weight's three parts


def wide_lanes(steps: list[list[np.ndarray]], split: np.ndarray) -> np.ndarray:
    """Each sample's two lanes from its 32-bit words (every step's side by side), ``split`` the weights' parts."""
    samples, words = sum(len(step[0]) for step in steps), sum(part.shape[1] for part in steps[0])
    rows = max(1, min(samples, fingerprint.BLOCK_BYTES // (8 * words)))
    block, sums = np.empty((rows, words)), np.empty((samples, split.shape[1]))
    done = filled = 0
    for step in steps:
        first = 0
        while first < len(step[0]):
            taken, at = min(rows - filled, len(step[0]) - first), 0
            for part in step:
                np.copyto(block[filled : filled + taken, at : at + part.shape[1]], part[first : first + taken])
                at += part.shape[1]
            filled, first = filled + taken, first + taken
            if filled == rows:
                np.matmul(block, split, out=sums[done : done + rows])
                done, filled = done + rows, 0
    if filled:
        np.matmul(block[:filled], split, out=sums[done : done + filled])
    whole = sums.astype(np.int64) % np.tile(PRIMES, 3)
    shifts = [(1 << (PART_BITS * part)) % PRIMES for part in range(3)]
    return sum(whole[:, 2 * part : 2 * part + 2] * shifts[part] % PRIMES for part in range(3)) % PRIMES


def main() -> None:
    """Check the prototype on a few samples, then time both flushes, alternating; print and write the medians."""
    generator = torch.Generator().manual_seed(0)
    steps = [[torch.randn(256, 784, generator=generator), torch.randint(0, 10, (256,), generator=generator)]]
    steps += [
        [torch.randn(256, 784, generator=generator), torch.randint(0, 10, (256,), generator=generator)]
        for _ in range(15)
    ]
    held = [[rows.numpy().view(np.int32), labels.numpy().view(np.int32).reshape(256, 2)] for rows, labels in steps]
    weights = np.random.default_rng(0).integers(1, int(PRIMES.min()), size=(786, 2), dtype=np.int64)
    mask = (1 << PART_BITS) - 1
    split = np.concatenate([(weights >> (PART_BITS * part)) & mask for part in range(3)], axis=1).astype(np.float64)
    lanes = wide_lanes(held, split)
    for sample in (0, 300, 4095):
        words = np.concatenate([part[sample % 256] for part in held[sample // 256]]).astype(object)
        exact = [int(sum(words * weights[:, lane].astype(object)) % int(PRIMES[lane])) for lane in range(2)]
        assert lanes[sample].tolist() == exact, (sample, lanes[sample], exact)
    audit = fingerprint.Fingerprinter()
    runs = [(rows, 256) for rows in steps]
    ways = {
        "16-bit words (the audit's)": lambda: audit.steps_lanes(runs),
        "32-bit words": lambda: wide_lanes(held, split),
    }
    seconds: dict[str, list[float]] = {name: [] for name in ways}
    load = [os.getloadavg()[0]]
    for way in ways.values():
        way()
    for round_ in range(ROUNDS):
        for name in ways if round_ % 2 else reversed(ways):
            start = time.perf_counter()
            ways[name]()
            seconds[name].append(time.perf_counter() - start)
    load.append(os.getloadavg()[0])
    result = {
        "flush_s": {name: statistics.median(values) for name, values in seconds.items()},
        "load_average_1min": load,
    }
    for name, value in result["flush_s"].items():
        print(f"{name}: {value * 1e3:.2f} ms for 4,096 MNIST-shaped samples")
    (HERE / "wide-words.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
