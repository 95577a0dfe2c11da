"""Whether the audit's hash on NumPy's BLAS threads slows a fit's own tensor work: its forward, backward and update.

Fits of WORKLOAD (pairs.py's, EPOCHS epochs) in this process after a warm-up fit of each arm, the arms' order turning
round by round: ``none``, ``both`` (the hash's products on one BLAS thread, as now) and ``threaded`` (on as many as
NumPy likes, as before). Inside each fit the module's ``training_step`` (its forward and loss), Lightning's
``backward`` and the optimizer's ``step`` (which runs the other two inside it) are timed around each call and summed;
``update`` is the step less the two inside it. Prints and writes blas-threads-WORKLOAD.json beside this file: each
arm's median fit and parts, and the medians of the rounds' ratios to ``none``. Run it with nothing else running:

    .venv/bin/python docs/results/cpu-2core-fresh-cost/blas_threads.py [WORKLOAD] [ROUNDS] [EPOCHS]
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "cpu-2core-operator-clock"))
WORKLOAD = sys.argv[1] if len(sys.argv) > 1 else "cnn"
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 8
EPOCHS = int(sys.argv[3]) if len(sys.argv) > 3 else 1
ARMS = ("none", "both", "threaded")


def main() -> None:
    """Time the fits and their parts; print and write the medians."""
    import lightning
    import pairs
    import short_fits
    import torch
    from hook_clock import time_calls  # docs/results/hook_clock.py

    calls: dict[str, list[float]] = {}
    time_calls(short_fits.Small, "training_step", calls)
    time_calls(lightning.LightningModule, "backward", calls)
    time_calls(torch.optim.Adam, "step", calls)
    load = [os.getloadavg()[0]]
    for arm in ARMS:
        pairs.timed(WORKLOAD, 1, arm)  # warm-up
    runs: dict[str, list[dict[str, float]]] = {arm: [] for arm in ARMS}
    for index in range(ROUNDS):
        for arm in ARMS if index % 2 == 0 else ARMS[::-1]:
            calls.clear()
            fit = pairs.timed(WORKLOAD, EPOCHS, arm)["wall"]
            forward, backward = sum(calls["Small.training_step"]), sum(calls["LightningModule.backward"])
            parts = {"forward": forward, "backward": backward, "update": sum(calls["Adam.step"]) - forward - backward}
            runs[arm].append({"fit": fit, **parts})
        load.append(os.getloadavg()[0])
    result: dict[str, Any] = {"workload": WORKLOAD, "epochs": EPOCHS, "rounds": ROUNDS, "load_average_1min": load}
    for arm in ARMS:
        medians = {part: statistics.median(run[part] for run in runs[arm]) for part in runs[arm][0]}
        ratios = {
            part: statistics.median(run[part] / base[part] for run, base in zip(runs[arm], runs["none"], strict=True))
            for part in medians
        }
        result[arm] = {"median_s": medians, "median_ratio_to_none": ratios, "runs": runs[arm]}
        print(arm, {part: f"{medians[part]:.3f} s ({ratios[part]:.3f}x)" for part in medians})
    versions = {"torch": torch.__version__, "lightning": lightning.__version__}
    result["environment"] = {**versions, "cpu_count": os.cpu_count()}
    (HERE / f"blas-threads-{WORKLOAD}.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
