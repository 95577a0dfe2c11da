"""Where both callbacks' cost on the newcomer's 3-epoch fit goes: its instructions per arm, parts of them stubbed out.

Arms: ``imports`` (everything the fits import, nothing run), ``without``, ``both``, ``both-noread`` (SampleAudit reads
nothing per step: no copy of the rows, no hash), ``both-nohash`` (it copies the rows but hashes nothing),
``both-nowindow`` (no busy window), ``both-noflops`` (the step's FLOPs given, not counted), ``both-noreport``
(nothing printed or written at the fit's end: no summary, timing.json or report), ``audit`` (SampleAudit alone) and
``timer`` (EpochTimer alone). The fit is measure.py's ``newcomer``. Needs
``valgrind``; two arms at a time, a few minutes each:

    .venv/bin/python docs/results/cpu-2core-compat-cost/attribute.py NAME [ARM,ARM,...]

Writes NAME.json beside this file: each arm's instructions and its cost over the fit's own.
"""

from __future__ import annotations

import json
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ARMS = (
    "imports",
    "without",
    "both",
    "both-noread",
    "both-nohash",
    "both-nowindow",
    "both-noflops",
    "both-noreport",
    "audit",
    "timer",
)


def child(arm: str, root: str) -> None:
    """One arm's fit in this process: measure.py's ``newcomer`` fit of 3 epochs (after the imports every arm makes)."""
    import logging

    import torch

    sys.argv = ["measure.py", "newcomer", "1", "3"]  # measure.py reads its library and epochs on import
    import measure  # this folder's

    from mnistperf.diagnosis import EpochTimer, SampleAudit
    from mnistperf.diagnosis.callbacks.sample_audit import SampleAudit as Audit
    from mnistperf.diagnosis.measure.fingerprint import Fingerprinter

    logging.getLogger("lightning").setLevel(logging.ERROR)
    measure.load()
    if arm == "imports":
        return
    if arm == "both-noread":
        Audit._read = lambda self, part: None  # type: ignore[method-assign]
    if arm == "both-nohash":
        Fingerprinter.__call__ = lambda self, tensors, samples: torch.zeros(samples, dtype=torch.int64)  # type: ignore[method-assign]
    if arm == "both-noreport":
        EpochTimer._report = lambda self, trainer, interrupted: None  # type: ignore[method-assign]
    options = {"both-nowindow": {"busy_window_steps": 0}, "both-noflops": {"flops_per_batch": 1e6}}.get(arm, {})
    timer = [] if arm == "audit" else [EpochTimer(**options)]
    audit = [] if arm == "timer" else [SampleAudit()]
    measure.newcomer(Path(root), [] if arm == "without" else audit + timer)


def main() -> None:
    """Count every arm (two at a time) and write the counts and the costs."""
    if sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
        return
    name, arms = sys.argv[1], sys.argv[2].split(",") if len(sys.argv) > 2 else list(ARMS)
    sys.path.insert(0, str(HERE.parent))
    from instructions import instructions  # docs/results/instructions.py

    with tempfile.TemporaryDirectory() as scratch:

        def count(arm: str) -> int:
            command = [sys.executable, __file__, "--child", arm, f"{scratch}/{arm}"]
            return instructions(command, Path(scratch) / f"{arm}.cachegrind")

        with ThreadPoolExecutor(2) as pool:
            counts = dict(zip(arms, pool.map(count, arms), strict=True))
    fit = counts["without"] - counts["imports"]
    costs = {arm: 1 + (counts[arm] - counts["without"]) / fit for arm in arms if arm not in ("imports", "without")}
    result = {"counts": counts, "fit": fit, "cost": costs}
    (HERE / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
