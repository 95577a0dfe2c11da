"""Where both callbacks' time goes on a short fit, in wall seconds: each of their hooks, per fit.

Instructions (count.py, attribute.py) leave out what a fit spends outside its own instructions: code that runs
cold between the step's tensor operations, the kernel's work behind ``/proc`` and file writes, and a logger's
writer thread. Whole fits timed side by side (measure.py) give the total; this script times each hook of both
callbacks around its call (Lightning's dispatch of it outside), and inside them the figures' hand-over to the
loggers (``Reporter.log``), over FITS fits in this process after one warm-up fit; it keeps the median of each one's
total per fit, and the fits' median length. Each such fit has a fit without the callbacks beside it (the order
alternating), so the hooks' share can be set against what the callbacks cost the whole fit in the same run. Each
hook's median call is kept too: a typical step's, apart from the few steps that do more.
FIT is measure.py's ``newcomer`` (the default, 3 epochs) or ``small``:

    .venv/bin/python docs/results/cpu-2core-compat-cost/hooks.py [FITS] [FIT] [EPOCHS]

Prints them and writes hooks-FIT-EPOCHS.json beside this file; run it with nothing else running.
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
from pathlib import Path

HERE = Path(__file__).resolve().parent
FITS = int(sys.argv[1]) if len(sys.argv) > 1 else 6
FIT = sys.argv[2] if len(sys.argv) > 2 else "newcomer"
EPOCHS = sys.argv[3] if len(sys.argv) > 3 else "3"


def main() -> None:
    """Time the hooks of FITS fits; print and write their medians."""
    sys.argv = ["measure.py", FIT, "1", EPOCHS, "both"]  # measure.py reads its fit, epochs and arm on import
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE.parent))
    import measure  # this folder's
    from hook_clock import time_calls, time_hooks  # docs/results/hook_clock.py

    from mnistperf.diagnosis import EpochTimer, SampleAudit
    from mnistperf.diagnosis.guard import Reporter

    logging.getLogger("lightning").setLevel(logging.ERROR)
    measure.load()
    fit_calls: dict[str, list[float]] = {}  # each call's seconds, in the fit running
    calls: dict[str, list[float]] = {}  # every call's seconds, in the timed fits

    def fit(root: Path, diagnose: bool) -> float:
        with contextlib.redirect_stdout(io.StringIO()):
            start = time.perf_counter()
            measure.FITS[FIT](root, diagnose)
            return time.perf_counter() - start

    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as scratch:
        fit(Path(scratch) / "warm-up", diagnose=True)
        time_hooks((EpochTimer, SampleAudit), fit_calls)
        time_calls(Reporter, "log", fit_calls)  # inside the hooks: the loggers' share of them
        per_fit: dict[str, list[float]] = {}
        fits: list[float] = []
        without: list[float] = []
        for run in range(FITS):
            if run % 2:
                without.append(fit(Path(scratch) / f"without-{run}", diagnose=False))
            fit_calls.clear()
            fits.append(fit(Path(scratch) / f"hooks-{run}", diagnose=True))
            for key, seconds in fit_calls.items():
                per_fit.setdefault(key, []).append(sum(seconds))
                calls.setdefault(key, []).extend(seconds)
            if not run % 2:
                without.append(fit(Path(scratch) / f"without-{run}", diagnose=False))
            load.append(os.getloadavg()[0])
    hooks = {key: statistics.median(values) for key, values in per_fit.items()}
    result = {
        "what": f"each hook's seconds per fit of measure.py's {FIT} fit of {EPOCHS} epochs with both callbacks",
        "hook_s_per_fit": dict(sorted(hooks.items(), key=lambda item: -item[1])),
        "hooks_s_per_fit": sum(value for key, value in hooks.items() if not key.startswith("Reporter")),
        # a typical call: the steps' median leaves out the few that do more (the FLOP count, the window, the reads)
        "median_call_s": {key: statistics.median(values) for key, values in calls.items()},
        "fit_s": fits,
        "median_fit_s": statistics.median(fits),
        "fit_without_s": without,
        "median_fit_without_s": statistics.median(without),
        "median_pair_ratio": statistics.median(a / b for a, b in zip(fits, without, strict=True)),
        "load_average_1min": load,
    }
    (HERE / f"hooks-{FIT}-{EPOCHS}.json").write_text(json.dumps(result, indent=1) + "\n")
    for key, value in result["hook_s_per_fit"].items():
        print(f"{key:40s} {value * 1e3:6.2f} ms per fit, {result['median_call_s'][key] * 1e6:7.1f} us a typical call")
    print(f"{'all hooks':40s} {result['hooks_s_per_fit'] * 1e3:6.2f} ms per fit of {result['median_fit_s']:.3f} s")
    print(f"fits without: {result['median_fit_without_s']:.3f} s; median pair ratio {result['median_pair_ratio']:.3f}x")


if __name__ == "__main__":
    main()
