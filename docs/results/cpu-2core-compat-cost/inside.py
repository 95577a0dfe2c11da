"""What the callbacks cost a short fit outside their own hooks: Lightning's step and fetch beside them, in wall seconds.

hooks.py times each hook around its call; the rest of what the callbacks cost a fit runs elsewhere. This script times
Lightning's own optimization step (``_AutomaticOptimization.run``: the forward, backward and optimizer step, with the
hooks Lightning calls inside it) and its fetch of each batch (``_PrefetchDataFetcher.__next__``) in every fit, with
and without the arm's callbacks, pairs alternating in one process after a warm-up fit, as measure.py's fits are. It
keeps each one's sum per fit, and per step index its median over the fits, so that the steps the timer times by their
parts stand out from the others. FIT and ARM as measure.py's (``small``, ``both``):

    .venv/bin/python docs/results/cpu-2core-compat-cost/inside.py [FITS] [FIT] [EPOCHS] [ARM]

Prints them and writes inside-FIT-EPOCHS-ARM.json beside this file; run it with nothing else running.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FITS = int(sys.argv[1]) if len(sys.argv) > 1 else 30
FIT = sys.argv[2] if len(sys.argv) > 2 else "small"
EPOCHS = sys.argv[3] if len(sys.argv) > 3 else "3"
ARM = sys.argv[4] if len(sys.argv) > 4 else "both"
PARTS = ("step", "fetch")


def clocked(owner: type, name: str, calls: list[float]) -> None:
    """Replace ``owner.name`` with itself timed: each call's seconds appended to ``calls``."""
    original: Callable[..., Any] = getattr(owner, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            calls.append(time.perf_counter() - start)

    setattr(owner, name, timed)


def main() -> None:
    """Time FITS pairs of fits; print and write each part's median per fit, with and without the callbacks."""
    sys.argv = ["measure.py", FIT, "1", EPOCHS, ARM]  # measure.py reads its fit, epochs and arm on import
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE.parent))
    import measure  # this folder's
    from lightning.pytorch.loops.fetchers import _PrefetchDataFetcher
    from lightning.pytorch.loops.optimization.automatic import _AutomaticOptimization

    calls: dict[str, list[float]] = {part: [] for part in PARTS}
    clocked(_AutomaticOptimization, "run", calls["step"])
    clocked(_PrefetchDataFetcher, "__next__", calls["fetch"])
    measure.load()
    fits: dict[str, dict[str, list[Any]]] = {arm: {"fit": [], **{p: [] for p in PARTS}} for arm in ("with", "without")}
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as scratch:
        measure.timed(Path(scratch) / "warm-up", diagnose=True)
        for pair in range(FITS):
            for arm in ("with", "without") if pair % 2 else ("without", "with"):
                for kept in calls.values():
                    kept.clear()
                fits[arm]["fit"].append(measure.timed(Path(scratch) / f"{pair}-{arm}", arm == "with")["wall"])
                for part in PARTS:
                    fits[arm][part].append(list(calls[part]))
            load.append(os.getloadavg()[0])
    median = statistics.median
    result: dict[str, Any] = {
        "what": f"Lightning's step and fetch in measure.py's {FIT} fit of {EPOCHS} epochs, with and without {ARM}",
        "fits": FITS,
        "median_fit_s": {arm: median(seen["fit"]) for arm, seen in fits.items()},
        "median_s_per_fit": {arm: {p: median(sum(c) for c in seen[p]) for p in PARTS} for arm, seen in fits.items()},
        "load_average_1min": load,
    }
    steps = min(len(c) for seen in fits.values() for c in seen["step"])
    by_step = {arm: [median(c[i] for c in seen["step"]) for i in range(steps)] for arm, seen in fits.items()}
    result["step_s_by_index_added"] = [a - b for a, b in zip(by_step["with"], by_step["without"], strict=True)]
    (HERE / f"inside-{FIT}-{EPOCHS}-{ARM}.json").write_text(json.dumps(result, indent=1) + "\n")
    fit = result["median_fit_s"]
    print(f"fit: {fit['with'] * 1e3:.2f} ms with, {fit['without'] * 1e3:.2f} ms without")
    for part in PARTS:
        each = {arm: result["median_s_per_fit"][arm][part] for arm in fits}
        print(f"{part}: {each['with'] * 1e3:.2f} ms with, {each['without'] * 1e3:.2f} ms without per fit")
    added = sorted(result["step_s_by_index_added"])
    print(
        f"a step's added seconds, median over the step indices: {median(added) * 1e6:.1f} us; the 10 largest sum to "
        f"{sum(added[-10:]) * 1e3:.2f} ms of {sum(added) * 1e3:.2f} ms"
    )


if __name__ == "__main__":
    main()
