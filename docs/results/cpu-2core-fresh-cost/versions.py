"""Both callbacks' cost on the small MLP at two versions of the code: fresh processes, the four arms rotating.

Each fit is pairs.py's ``--child small 3`` (none or both callbacks) in a fresh process, the older checkout's pairs.py
on its own ``src`` or this checkout's on its own; each round runs the four, their order rotated and reversed round to
round.
Prints each version's median ratio of both callbacks to none in the same round, and both callbacks' fit at this
checkout over the older one's; writes versions-small-REV.json beside this file (REV: the older checkout's commit).
Make the older checkout with ``git worktree add /tmp/old REV``, and run with nothing else running:

    .venv/bin/python docs/results/cpu-2core-fresh-cost/versions.py /tmp/old [ROUNDS]
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from bootstrap import median_interval  # noqa: E402

CHECKOUTS = {"older": Path(sys.argv[1]).resolve(), "this": HERE.parents[2]}
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 24
PAIRS = "docs/results/cpu-2core-fresh-cost/pairs.py"  # each checkout's own, which knows its code's names
ARMS = [(version, arm) for version in CHECKOUTS for arm in ("none", "both")]


def fit_seconds(version: str, arm: str) -> float:
    """Wall seconds of one fresh process's fit of the small MLP at ``version`` with ``arm``'s callbacks."""
    checkout = CHECKOUTS[version]
    command = [sys.executable, str(checkout / PAIRS), "--child", "small", "3", arm]
    env = dict(os.environ, PYTHONPATH=str(checkout / "src"))
    found = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return json.loads(found.stdout.strip().splitlines()[-1])["wall"]


def ratio_figures(ratios: list[float], said: str) -> dict[str, object]:
    """The median of ``ratios`` and its 95 % interval, printed after ``said``."""
    low, high = median_interval(ratios)
    print(f"{said}: {statistics.median(ratios):.3f}x (95 % {low:.3f}-{high:.3f}x)")
    return {"median_pair_ratio": statistics.median(ratios), "median_pair_ratio_95": (low, high)}


def main() -> None:
    """Run the rounds, print and write the figures."""
    seconds: dict[tuple[str, str], list[float]] = {arm: [] for arm in ARMS}
    load = [os.getloadavg()[0]]
    for round_ in range(ROUNDS):
        order = ARMS[round_ % 4 :] + ARMS[: round_ % 4]
        for version, arm in order[::-1] if round_ % 2 else order:
            seconds[(version, arm)].append(fit_seconds(version, arm))
        load.append(os.getloadavg()[0])
    older = subprocess.run(["git", "-C", str(CHECKOUTS["older"]), "rev-parse", "--short", "HEAD"], capture_output=True)
    result: dict[str, object] = {"older_commit": older.stdout.decode().strip(), "rounds": ROUNDS}
    result["load_average_1min"] = load
    for version in CHECKOUTS:
        ratios = [b / n for b, n in zip(seconds[(version, "both")], seconds[(version, "none")], strict=True)]
        result[version] = ratio_figures(ratios, f"{version}: both callbacks over none")
    ratios = [b / a for b, a in zip(seconds[("this", "both")], seconds[("older", "both")], strict=True)]
    result["both_this_over_older"] = ratio_figures(ratios, "both callbacks, this checkout over the older")
    print(f"one-minute load {min(load):.2f}-{max(load):.2f}")
    result["fit_s"] = {f"{version}-{arm}": values for (version, arm), values in seconds.items()}
    result["environment"] = {"machine": platform.machine(), "cpu_count": os.cpu_count()}
    (HERE / f"versions-small-{result['older_commit']}.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
