"""What the ``least`` arm's step hooks take inside a fit, beside the same read of a batch in a loop of its own.

Times each call of the two least callbacks' step hooks (../idle_callbacks.py) over FITS fits of WORKLOAD (pairs.py's,
3 epochs) in this process after a warm-up fit, then the shared reader's read of one such batch, 20,000 times in a loop.
Prints and writes least-hooks-WORKLOAD.json beside this file: each hook's median call and its total per fit (medians
over the fits), and the loop's time a read. Run it with nothing else running:

    .venv/bin/python docs/results/cpu-2core-fresh-cost/least_hooks.py [WORKLOAD] [FITS]
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import timeit
from collections import defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
WORKLOAD = sys.argv[1] if len(sys.argv) > 1 else "long"
FITS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
HOOKS = {"LeastTimer": ("on_train_batch_start", "on_train_batch_end"), "LeastAudit": ("on_train_batch_start",)}


def main() -> None:
    """Time the hooks, then the read alone; print and write both."""
    import idle_callbacks
    import pairs
    import torch
    from hook_clock import time_calls  # docs/results/hook_clock.py

    from mnistperf.diagnosis.measure.batches import Recent

    calls: dict[str, list[float]] = {}
    for owner, names in HOOKS.items():
        for name in names:
            time_calls(getattr(idle_callbacks, owner), name, calls)  # as "Class.name"
    load = [os.getloadavg()[0]]
    pairs.timed(WORKLOAD, 1, "least")  # warm-up
    per_call: dict[str, list[float]] = defaultdict(list)
    per_fit: dict[str, list[float]] = defaultdict(list)
    for _ in range(FITS):
        calls.clear()
        pairs.timed(WORKLOAD, 3, "least")
        for name, seconds in calls.items():
            per_call[name].append(statistics.median(seconds))
            per_fit[name].append(sum(seconds))
    batch, recent, reads = (torch.randn(64, 32), torch.randint(0, 10, (64,))), Recent(), 20000

    def read_afresh() -> Any:  # a step's first read: nothing kept
        recent.forget()
        return recent.read(batch)

    alone = timeit.timeit(read_afresh, number=reads) / reads
    load.append(os.getloadavg()[0])
    result = {
        "workload": WORKLOAD,
        "fits": FITS,
        "median_call_us": {name: statistics.median(v) * 1e6 for name, v in per_call.items()},
        "per_fit_ms": {name: statistics.median(v) * 1e3 for name, v in per_fit.items()},
        "read_alone_us": alone * 1e6,
        "load_average_1min": load,
    }
    (HERE / f"least-hooks-{WORKLOAD}.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
