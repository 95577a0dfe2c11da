"""The training thread's seconds in the epochs' memory readings, over stage v2_pinned's fit (4 workers).

Wraps the timer's EpochMemory calls (``read``, and ``settle`` where the code has it, and ``largest``) with a clock
read on the calling thread, fits the stage for 3 epochs of 20 batches, and appends a line to results.jsonl beside
this file: the total, the calls, the longest, the code's commit and the one-minute load average.

    python docs/results/cpu-2core-memory-reading/check.py [RUNS]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIT = ["fit", "--config", "configs/v2_pinned.yaml", "--trainer.max_epochs", "3", "--trainer.limit_train_batches", "20"]


def child() -> None:
    """One fit, the memory's calls timed; its figures as the last line printed."""
    sys.path.insert(0, str(HERE.parent))
    from hook_clock import time_calls  # docs/results/hook_clock.py

    import mnistperf.diagnosis.measure.memory as memory
    from mnistperf.cli import main

    calls: dict[str, list[float]] = {}
    for name in ("read", "settle", "largest"):
        if hasattr(memory.EpochMemory, name):  # settle: only where the code has it
            time_calls(memory.EpochMemory, name, calls)
    main(FIT)
    spent = [seconds for each in calls.values() for seconds in each]
    print(json.dumps({"total_s": sum(spent), "calls": len(spent), "longest_s": max(spent)}))


def main() -> None:
    """Run the fits, each a fresh process, and keep each one's figures."""
    if sys.argv[1:2] == ["--child"]:
        child()
        return
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    for _ in range(runs):
        load = os.getloadavg()[0]
        ran = subprocess.run([sys.executable, __file__, "--child"], capture_output=True, text=True, check=True)
        found = {**json.loads(ran.stdout.strip().splitlines()[-1]), "commit": commit, "load_average_1min": load}
        print(found)
        with (HERE / "results.jsonl").open("a") as results:
            results.write(json.dumps(found) + "\n")


if __name__ == "__main__":
    main()
