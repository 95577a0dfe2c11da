"""The median round ratio of each arm over the rounds of several runs of measure.py, with its 95 % interval.

Runs of the same configuration on the same code, taken at different times, pool into more rounds: each round's
ratio compares epochs seconds apart, so the machine's state on the day cancels inside it.

    python docs/results/cpu-2core-diagnosis-cost/pool.py results-audit.json results-audit-repeat.json
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from bootstrap import median_interval  # noqa: E402  # docs/results/bootstrap.py


def main(names: list[str]) -> None:
    """Print each arm's pooled median round ratio and its interval."""
    runs = [json.loads((HERE / name).read_text()) for name in names]
    settings = {(run["samples_per_epoch"], run["batch_size"]) for run in runs}
    assert len(settings) == 1, f"the runs measure different configurations: {settings}"
    arms = [arm for arm in runs[0]["epoch_s"] if arm != "without"]
    for arm in arms:
        ratios = [
            mine / plain
            for run in runs
            for mine, plain in zip(run["epoch_s"][arm], run["epoch_s"]["without"], strict=True)
        ]
        low, high = median_interval(ratios)
        median = statistics.median(ratios)
        print(f"{arm} / without over {len(ratios)} rounds: {median:.4f}x (95 % {low:.4f}-{high:.4f})")


if __name__ == "__main__":
    main([arg for arg in sys.argv[1:] if not arg.startswith("--")])
