"""What a CPU's window in an epoch of 3-5 steps costs N-BEATS's fit: the compatibility tier's fit in one process.

Three arms alternate round by round, each fit built afresh: no callbacks, both callbacks with the short window
switched off (as before 1fbc9d2, whose placement wanted 6 steps an epoch), and both as they come (the 5-step epochs
now profile their steps 2-4, capped by the window's price). Run in the library's environment:

    .venv-compat-forecasting/bin/python docs/results/cpu-2core-compat-cost/short_window.py [ROUNDS]

Prints and writes short-window-forecasting.json beside this file: each fit's wall seconds, each arm's median pair
ratio over the fits without callbacks and the short window's over the fits without it, with 95 % intervals.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path[:0] = [str(ROOT / "tests" / "compat"), str(HERE.parent)]
import test_pytorch_forecasting as case  # noqa: E402  # tests/compat
from bootstrap import median_interval  # noqa: E402  # docs/results/bootstrap.py

from mnistperf.diagnosis.measure import busy_window  # noqa: E402

ARMS = ("none", "long-only", "both")
SHORT = busy_window.short_cpu_window


def fit(arm: str) -> float:
    """One fit of the arm, built afresh, its output discarded: its wall seconds."""
    busy_window.short_cpu_window = SHORT if arm == "both" else lambda *args, **kwargs: None
    training, validation = case.datasets()
    train = training.to_dataloader(train=True, batch_size=case.BATCH, num_workers=0)
    val = validation.to_dataloader(train=False, batch_size=case.BATCH, num_workers=0)
    quiet = contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO())
    with tempfile.TemporaryDirectory() as root, quiet[0], quiet[1]:
        start = time.perf_counter()
        case.fit_nbeats(Path(root), training, train, val, epochs=3, diagnose=arm != "none")
        return time.perf_counter() - start


def main(rounds: int) -> None:
    """Warm up each arm once, then alternate the arms' order round by round; print and write the ratios."""
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    for arm in ARMS:
        fit(arm)
    seconds: dict[str, list[float]] = {arm: [] for arm in ARMS}
    load = [os.getloadavg()[0]]
    for turn in range(rounds):
        for arm in ARMS if turn % 2 == 0 else ARMS[::-1]:
            seconds[arm].append(fit(arm))
        load.append(os.getloadavg()[0])
    found: dict[str, object] = {"rounds": rounds, "load_average_1min": load, "fit_s": seconds}
    for arm, base in (("long-only", "none"), ("both", "none"), ("both", "long-only")):
        ratios = [a / b for a, b in zip(seconds[arm], seconds[base], strict=True)]
        found[f"{arm}_over_{base}"] = {"median_pair_ratio": statistics.median(ratios), "95": median_interval(ratios)}
        low, high = median_interval(ratios)
        print(f"{arm} over {base}: {statistics.median(ratios):.3f}x (95 % {low:.3f}-{high:.3f}x)")
    print(f"load {min(load):.2f}-{max(load):.2f}")
    (HERE / "short-window-forecasting.json").write_text(json.dumps(found, indent=1) + "\n")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)
