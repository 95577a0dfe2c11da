"""The audit's hash of an epoch's held rows, on a quiet and on a busy machine: torch's way, as it was, and NumPy's.

In one process, the two ways alternating. The rows are held steps hashed at once, as the audit does at an epoch's end
or every 4,096 samples: ``small``, the small MLP's epoch (30 steps of 64 rows of 32 floats and their labels), ROUNDS
times each way; ``mnist``, a flush of MNIST's rows (16 steps of 256 rows of 784 floats and their labels), a tenth as
many. Each call comes 1 ms after the last (so it meets the caches as a hook does, after other work), quiet first, then
beside two busy processes (one per core here, as a loader's workers keep a machine):

    .venv/bin/python docs/results/cpu-2core-busy-hash/busy_hash.py [ROUNDS]

Then the epoch's count of distinct fingerprints, ``torch.unique`` as it was against NumPy's sort now
(:func:`~mnistperf.diagnosis.measure.sample_counts.distinct`), on the small epoch's 1,920 and an MNIST epoch's 60,000.
Prints each way's median, 90th percentile and longest call, and writes busy-hash.json beside this file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from mnistperf.diagnosis.measure.fingerprint import LANES, PRIME, Fingerprinter
from mnistperf.diagnosis.measure.held_steps import HeldSteps, Rows
from mnistperf.diagnosis.measure.sample_counts import distinct

HERE = Path(__file__).resolve().parent
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 200


class TorchFingerprinter(Fingerprinter):
    """The hash as it was made: each layout's weights split once, every product and sum in torch."""

    def __init__(self) -> None:
        super().__init__()
        self._split: dict[tuple[Any, ...], torch.Tensor] = {}

    def lanes(self, tensors: Sequence[torch.Tensor], samples: int, offset: int = 0) -> torch.Tensor:
        """The lanes as torch's float64 matmul on the weights' 16-bit halves made them."""
        words = [self.words(tensor, samples) for tensor in tensors]
        key = (offset, tuple(part.shape[1] for part in words))
        if key not in self._split:
            weights = torch.cat(
                [self.weights(offset + at, part.shape[1], part.device) for at, part in enumerate(words)]
            )
            self._split[key] = torch.cat([weights & 0xFFFF, weights >> 16], dim=1).to(torch.float64)
        values = torch.cat([part.to(torch.int16) for part in words], dim=1)
        total = torch.zeros(samples, LANES, dtype=torch.int64)
        sums = (self._split[key].T @ values.to(torch.float64).T).T.to(torch.int64)  # the fastest orientation in torch
        return (total + (sums[:, LANES:] % PRIME) * (1 << 16) + sums[:, :LANES]) % PRIME

    def __call__(self, tensors: Sequence[torch.Tensor], samples: int) -> torch.Tensor:
        """The fingerprints, combined in torch."""
        lanes = self.lanes(tensors, samples)
        return lanes[:, 0] * PRIME + lanes[:, 1]

    def steps_lanes(self, steps: Sequence[tuple[Sequence[torch.Tensor], int]], offset: int = 0) -> torch.Tensor:
        """Held steps as they were hashed then: joined, then :meth:`lanes` (HeldSteps calls this since 96be4b5)."""
        columns = [torch.cat(column) for column in zip(*(tensors for tensors, _ in steps), strict=True)]
        return self.lanes(columns, sum(samples for _, samples in steps), offset)


def epoch_hash(hash_: Fingerprinter, steps: list) -> torch.Tensor:
    """The epoch's fingerprints, its steps held and hashed at once."""
    held = HeldSteps(hash_, 1)
    for rows, samples in steps:
        held.hold(0, Rows(rows, samples))
    return torch.cat(held.flush()[0])


def held_steps(steps: int, rows: int, floats: int) -> list:
    """``steps`` steps of ``rows`` random rows of ``floats`` floats and their labels, as the audit holds them."""
    generator = torch.Generator().manual_seed(0)
    return [
        ([torch.randn(rows, floats, generator=generator), torch.randint(0, 10, (rows,), generator=generator)], rows)
        for _ in range(steps)
    ]


WORKLOADS = {"small": (held_steps(30, 64, 32), 1), "mnist": (held_steps(16, 256, 784), 10)}  # and the rounds' divisor


def timed(ways: dict, steps: list, rounds: int) -> dict[str, dict[str, float]]:
    """Each way's median, 90th percentile and longest hash, in microseconds."""
    return timed_calls({name: (lambda hash_=hash_: epoch_hash(hash_, steps)) for name, hash_ in ways.items()}, rounds)


def counted(fingerprints: torch.Tensor, rounds: int) -> dict[str, dict[str, float]]:
    """The count of distinct fingerprints as it was and as it is, timed as :func:`timed` times the hash."""
    assert torch.unique(fingerprints).numel() == distinct(fingerprints)
    ways = {"torch": lambda: torch.unique(fingerprints).numel(), "now": lambda: distinct(fingerprints)}
    return timed_calls(ways, rounds)


def timed_calls(ways: dict, rounds: int) -> dict[str, dict[str, float]]:
    """Each call's median, 90th percentile and longest time, in microseconds, the ways alternating 1 ms apart."""
    seconds: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(rounds):
        for name, call in ways.items():
            time.sleep(0.001)
            start = time.perf_counter()
            call()
            seconds[name].append(time.perf_counter() - start)
    figures = {}
    for name, found in seconds.items():
        found.sort()
        figures[name] = {
            "median_us": found[len(found) // 2] * 1e6,
            "p90_us": found[len(found) * 9 // 10] * 1e6,
            "max_us": found[-1] * 1e6,
        }
    return figures


def main() -> None:
    """Time both ways quiet, then beside two busy processes; print and write the figures."""
    ways = {"torch": TorchFingerprinter(), "now": Fingerprinter()}
    for steps, _ in WORKLOADS.values():  # the same fingerprints either way
        assert torch.equal(epoch_hash(ways["torch"], steps), epoch_hash(ways["now"], steps))
    result = {
        "rounds": ROUNDS,
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "load_average_1min": [os.getloadavg()[0]],
    }
    generator = torch.Generator().manual_seed(1)
    epochs = {f"count{n}": torch.randint(0, 2**62, (n,), generator=generator) for n in (1920, 60000)}
    for workload, (steps, fewer) in WORKLOADS.items():
        result[f"{workload}_quiet"] = timed(ways, steps, ROUNDS // fewer)
    for workload, fingerprints in epochs.items():
        result[f"{workload}_quiet"] = counted(fingerprints, ROUNDS // 4)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        time.sleep(2)
        result["load_average_1min"].append(os.getloadavg()[0])
        for workload, (steps, fewer) in WORKLOADS.items():
            result[f"{workload}_busy"] = timed(ways, steps, ROUNDS // fewer)
        for workload, fingerprints in epochs.items():
            result[f"{workload}_busy"] = counted(fingerprints, ROUNDS // 4)
        result["load_average_1min"].append(os.getloadavg()[0])
    finally:
        for process in busy:
            process.kill()
    for case in (f"{workload}_{machine}" for workload in [*WORKLOADS, *epochs] for machine in ("quiet", "busy")):
        for name, figures in result[case].items():
            print(f"{case:11s} {name:5s} " + ", ".join(f"{k} {v:,.0f}" for k, v in figures.items()))
    (HERE / "busy-hash.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
