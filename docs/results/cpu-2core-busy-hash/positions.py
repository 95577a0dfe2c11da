"""A wide sample's drawn words read on a quiet and on a busy machine: indexing, as it was, and ``index_select``.

A sample wider than ``max_words`` (4,096 16-bit words: an image of more than 2,048 floats) is hashed at drawn positions
(measure/fingerprint.py, ``Fingerprinter.words``). Indexing ``words[:, positions]`` runs on torch's OpenMP threads;
``index_select`` of the same runs on the calling thread at these sizes. Cases: ``cifar``, a held step of 64 images of
3x32x32 floats (6,144 words each); ``item``, one image of 3x64x56 floats (21,504 words), as a batch of one item a
sample is read, sample by sample. In one process, the two ways alternating, each call 1 ms after the last, ROUNDS
times each, quiet first, then beside two busy processes (one per core here, as a loader's workers keep a machine):

    .venv/bin/python docs/results/cpu-2core-busy-hash/positions.py [ROUNDS]

Prints each way's median, 90th percentile and longest call (microseconds), and writes positions.json beside this file.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from mnistperf.diagnosis.measure.fingerprint import Fingerprinter
from mnistperf.diagnosis.record.run import environment

HERE = Path(__file__).resolve().parent
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 200
CASES = {"cifar": (64, 3 * 32 * 32), "item": (1, 3 * 64 * 56)}  # samples, floats a sample


def timed(samples: int, floats: int) -> dict[str, list[float]]:
    """Each way's calls on the case's words, alternating; the two ways' results checked equal."""
    words = torch.randn(samples, floats, generator=torch.Generator().manual_seed(0)).view(torch.int16)
    Fingerprinter().words(words, samples)  # the positions drawn, as the audit's first step draws them
    positions = torch.randperm(words.shape[1], generator=torch.Generator().manual_seed(1))[:4096].sort().values
    ways = {"indexing": lambda: words[:, positions], "index_select": lambda: words.index_select(1, positions)}
    assert torch.equal(ways["indexing"](), ways["index_select"]())
    calls: dict[str, list[float]] = {way: [] for way in ways}
    for _ in range(ROUNDS):
        for way, call in ways.items():
            time.sleep(0.001)
            start = time.perf_counter()
            call()
            calls[way].append(1e6 * (time.perf_counter() - start))
    return calls


def summary(calls: list[float]) -> list[float]:
    """Median, 90th percentile and longest, in microseconds."""
    ordered = sorted(calls)
    return [round(statistics.median(ordered), 1), round(ordered[int(0.9 * len(ordered))], 1), round(ordered[-1], 1)]


def main() -> None:
    """Time both ways quiet, then busy; print and write."""
    result: dict[str, object] = {"rounds": ROUNDS, "torch_threads": torch.get_num_threads()}
    load = [os.getloadavg()[0]]
    for case, shape in CASES.items():
        result[f"{case}_quiet"] = {way: summary(calls) for way, calls in timed(*shape).items()}
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        time.sleep(1)
        for case, shape in CASES.items():
            result[f"{case}_busy"] = {way: summary(calls) for way, calls in timed(*shape).items()}
    finally:
        for process in busy:
            process.kill()
    load.append(os.getloadavg()[0])
    result["load_average_1min"] = load
    result["environment"] = environment(torch.device("cpu"))
    (HERE / "positions.json").write_text(json.dumps(result, indent=1) + "\n")
    for case in (f"{case}_{machine}" for case in CASES for machine in ("quiet", "busy")):
        print(case, ", ".join(f"{way} {figures}" for way, figures in result[case].items()))  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
