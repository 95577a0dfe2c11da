"""Where both callbacks' time goes in a process's first fit, as pairs.py's fresh processes meet it: hook by hook.

../cpu-2core-compat-cost/hooks.py times the hooks in one warm process, after a warm-up fit; a user's script, and
pairs.py, fit once in a fresh process, where every code path runs for the first time. Each of FITS fresh processes
here imports the diagnosis, builds pairs.py's WORKLOAD fit with both callbacks and times every hook of both around
its call (Lightning's dispatch of it outside), and inside them the audit's hash of the epoch's samples
(``SampleAudit._local``) and the timer's files at the fit's end (``RunFiles.write``). Prints and writes
first-fit-WORKLOAD.json beside this file: per hook, the median over the processes of its milliseconds per fit and of
each of its calls in order (an epoch hook's first call is the first epoch's); the load before and after.

    python docs/results/cpu-2core-fresh-cost/first_fit.py [FITS] [WORKLOAD]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
INSIDE = {"SampleAudit._local": "the audit's hash", "RunFiles.write": "the timer's files"}


def child(workload: str) -> None:
    """One fresh process's first fit with both callbacks, each hook's calls timed; JSON on stdout's last line."""
    import contextlib
    import io
    import logging
    import tempfile

    import pairs  # this folder's
    from hook_clock import time_calls, time_hooks  # docs/results/hook_clock.py

    from mnistperf.diagnosis import EpochTimer, SampleAudit
    from mnistperf.diagnosis.callbacks.run_files import RunFiles

    calls: dict[str, list[float]] = {}
    time_hooks((EpochTimer, SampleAudit), calls)
    time_calls(SampleAudit, "_local", calls)
    time_calls(RunFiles, "write", calls)
    logging.getLogger("lightning").setLevel(logging.ERROR)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    quiet = contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO())
    with tempfile.TemporaryDirectory() as scratch, quiet[0], quiet[1]:
        run = pairs.fit(workload, pairs.EPOCHS[workload], "both", Path(scratch))
        start = time.perf_counter()
        run()
        fit_ms = (time.perf_counter() - start) * 1e3
    print(json.dumps({"fit_ms": fit_ms, "calls_ms": {key: [s * 1e3 for s in each] for key, each in calls.items()}}))


def main() -> None:
    """Run the fresh processes; print and write the medians."""
    fits = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    workload = sys.argv[2] if len(sys.argv) > 2 else "small"
    load = [os.getloadavg()[0]]
    runs = []
    for _ in range(fits):
        done = subprocess.run(
            [sys.executable, __file__, "--child", workload], capture_output=True, text=True, check=True, cwd=HERE
        )
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    load.append(os.getloadavg()[0])
    hooks = sorted({key for run in runs for key in run["calls_ms"]})
    per_fit = {key: statistics.median(sum(run["calls_ms"].get(key, [])) for run in runs) for key in hooks}
    few = {key for key in hooks if len(runs[0]["calls_ms"].get(key, [])) <= 6}  # each call apart: the epoch hooks
    each = {key: zip(*(run["calls_ms"][key] for run in runs), strict=True) for key in few}  # the n-th calls together
    in_order = {key: [statistics.median(calls) for calls in nth] for key, nth in each.items()}
    outside = [key for key in hooks if key not in INSIDE]
    result = {
        "what": f"each hook's ms in a fresh process's first fit of pairs.py's {workload} fit, both callbacks",
        "fits": fits,
        "median_fit_ms": statistics.median(run["fit_ms"] for run in runs),
        "hooks_ms_per_fit": statistics.median(sum(sum(run["calls_ms"][k]) for k in outside) for run in runs),
        "hook_ms_per_fit": dict(sorted(per_fit.items(), key=lambda item: -item[1])),
        "calls_in_order_ms": in_order,
        "inside": INSIDE,
        "runs": runs,
        "load_average_1min": load,
    }
    (HERE / f"first-fit-{workload}.json").write_text(json.dumps(result, indent=1) + "\n")
    for key, value in result["hook_ms_per_fit"].items():
        order = ", ".join(f"{ms:.2f}" for ms in in_order.get(key, []))
        print(f"{key:40s} {value:6.2f} ms per fit{f' (calls in order: {order})' if order else ''}")
    print(f"all hooks: {result['hooks_ms_per_fit']:.2f} ms of a {result['median_fit_ms']:.1f} ms fit; load {load}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        sys.path.insert(0, str(HERE.parent))
        child(sys.argv[2])
    else:
        main()
