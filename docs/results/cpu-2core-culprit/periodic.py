"""Work done every Nth step: what the step parts say it costs a step, against its hooks' own time over every step.

Two such parts, on the lab's MNIST shape (``pairs.py mnist``: a linear model on 60,000 rows of 784 floats in batches
of 256, 235 steps an epoch, 3 epochs), with both callbacks: SampleAudit itself, which hashes its held rows every 16
batches of 256 (4,096 samples) inside its ``on_train_batch_start``, and a callback spending 10 ms of CPU in every
50th step's ``on_train_batch_end``. Each fit is a fresh process; inside it each of those hooks is timed around every
call (docs/results/hook_clock.py), and the truth is their total over the fit's steps. The estimate is the part's
seconds a step in the run's ``step_parts`` (one step in 16 timed by its parts). Prints and writes
results-periodic-TAG.json beside this file:

    python docs/results/cpu-2core-culprit/periodic.py [FITS] [TAG]

Run it with the code to be measured first on ``PYTHONPATH`` to compare two commits.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "cpu-2core-fresh-cost"))
EVERY, SPENT = 50, 0.010  # the user's callback: 10 ms of CPU in every 50th step
PARTS = {"callback SampleAudit": "SampleAudit.on_train_batch_start", "callback Periodic": "Periodic.on_train_batch_end"}


def fit() -> dict[str, Any]:
    """One fit: each periodic part's seconds a step, as the step parts say and as its hooks took over every step."""
    import contextlib
    import io
    import logging
    import tempfile

    import pairs  # docs/results/cpu-2core-fresh-cost/pairs.py
    from hook_clock import time_calls  # docs/results/hook_clock.py
    from lightning.pytorch import Callback

    from mnistperf.diagnosis import EpochTimer, SampleAudit

    class Periodic(Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if (batch_idx + 1) % EVERY == 0:
                end = time.perf_counter() + SPENT
                while time.perf_counter() < end:
                    pass

    calls: dict[str, list[float]] = {}
    time_calls(SampleAudit, "on_train_batch_start", calls)
    time_calls(Periodic, "on_train_batch_end", calls)
    logging.getLogger("lightning").setLevel(logging.ERROR)
    timer = EpochTimer()
    module, loader = pairs.mnist_rows()
    with tempfile.TemporaryDirectory() as scratch, contextlib.redirect_stdout(io.StringIO()):
        trainer = pairs.trainer(Path(scratch), 3, "none", logger=False)
        trainer.callbacks.extend([timer, SampleAudit(), Periodic()])
        trainer.fit(module, loader)
        summary = json.loads(Path(timer.summary_path).read_text())
    steps = len(calls[PARTS["callback Periodic"]])
    parts = summary["step_parts"]
    return {
        "timed_steps": parts["steps"],
        "estimate_s": {part: parts["parts"].get(part, 0.0) for part in PARTS},
        "truth_s": {part: sum(calls[hook]) / steps for part, hook in PARTS.items()},
    }


def main() -> None:
    """Run the fits, print and write the figures."""
    if sys.argv[1:2] == ["--child"]:
        print(json.dumps(fit()))
        return
    fits = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    tag = sys.argv[2] if len(sys.argv) > 2 else "now"
    load, found = [os.getloadavg()[0]], []
    for run in range(fits):
        done = subprocess.run([sys.executable, __file__, "--child"], capture_output=True, text=True, check=True)
        found.append(json.loads(done.stdout.strip().splitlines()[-1]))
        load.append(os.getloadavg()[0])
        ratios = {part: found[-1]["estimate_s"][part] / found[-1]["truth_s"][part] for part in PARTS}
        print(f"fit {run + 1}/{fits}: " + ", ".join(f"{part} {ratio:.2f}x" for part, ratio in ratios.items()))
    result: dict[str, Any] = {"fits": found, "load_average_1min": load}
    for part in PARTS:
        ratios = [one["estimate_s"][part] / one["truth_s"][part] for one in found]
        result[part] = {
            "median_truth_ms": 1e3 * statistics.median(one["truth_s"][part] for one in found),
            "median_estimate_ms": 1e3 * statistics.median(one["estimate_s"][part] for one in found),
            "estimate_over_truth": ratios,
            "mean_estimate_over_truth": statistics.fmean(ratios),
        }
        print(
            f"{part}: a step {result[part]['median_truth_ms']:.3f} ms over every step, "
            f"{result[part]['median_estimate_ms']:.3f} ms as the step parts say (medians); estimate / truth "
            f"{min(ratios):.2f}-{max(ratios):.2f}x, mean {result[part]['mean_estimate_over_truth']:.2f}x; "
            f"load {min(load):.2f}-{max(load):.2f}"
        )
    (HERE / f"results-periodic-{tag}.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
