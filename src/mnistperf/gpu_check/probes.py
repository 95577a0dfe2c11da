"""The probes parts run in processes of their own: the diagnosis's cost in whole fits, and its syncs on the GPU."""

from __future__ import annotations

import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mnistperf.diagnosis.figures import DEVICE_BUSY_SHARE, SAMPLES
from mnistperf.diagnosis.record.run import SUMMARY_FILE, RunSummary, write_summary

EXAMPLE_BATCH = 64


def timer_cost(target: Path, rounds: int = 2, epochs: int = 3) -> None:
    """The default fit of v2_pinned as a user runs it, whole processes with and without EpochTimer, taking turns.

    Then the newcomer's short fit (examples/diagnose_your_run.py) with and without both callbacks alike.
    """
    timer_cost_of(target, rounds, [sys.executable, "-m", "mnistperf", "fit", "--config", "configs/v2_pinned.yaml",
                  "--trainer.max_epochs", str(epochs), "--trainer.logger.init_args.save_dir", "{out}"],
                  {"with EpochTimer": [], "without": ["--trainer.callbacks=[]"]},
                  f"configs/v2_pinned.yaml, {epochs} epochs, whole processes")  # fmt: skip
    timer_cost_of(target.with_name(f"{target.stem}-short{target.suffix}"), rounds + 1,
                  [sys.executable, "examples/diagnose_your_run.py", "--epochs", str(epochs), "--out", "{out}"],
                  {"with both callbacks": [], "without": ["--bare"]},
                  f"examples/diagnose_your_run.py, {epochs} epochs, whole processes")  # fmt: skip


def timer_cost_of(target: Path, rounds: int, fit: list[str], arms: dict[str, list[str]], what: str) -> None:
    """``fit`` (its ``{out}`` a scratch folder) in whole processes, each of ``arms`` added in turn; the ratios."""
    seconds: dict[str, list[float]] = {arm: [] for arm in arms}
    with_it, without = arms
    with tempfile.TemporaryDirectory(prefix="timer-cost-") as scratch:
        for turn in range(rounds):
            order = list(arms) if turn % 2 == 0 else list(arms)[::-1]
            for arm in order:
                command = [word.replace("{out}", scratch) for word in fit] + arms[arm]
                began = time.perf_counter()
                done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                if done.returncode != 0:
                    raise SystemExit(f"timer cost: {shlex.join(command)} failed:\n{done.stderr[-2000:]}")
                seconds[arm].append(time.perf_counter() - began)
                print(f"timer cost: {arm}, turn {turn + 1}: {seconds[arm][-1]:.2f} s", flush=True)
        # what each diagnosed fit read, in the order the fits wrote them
        found = sorted(Path(scratch).rglob(SUMMARY_FILE), key=lambda path: path.stat().st_mtime_ns)
        answers = [{"file": str(path.relative_to(scratch)), **answer(path)} for path in found]
    ratios = [a / b for a, b in zip(seconds[with_it], seconds[without], strict=True)]
    result = {"fit": what, "seconds": seconds, "ratios": ratios, "median_ratio": statistics.median(ratios)}
    result["answers"] = answers
    write_summary(result, target)
    print(f"timer cost: {what}: {with_it} {result['median_ratio']:.3f}x the same fit without")


def answer(path: Path) -> dict[str, Any]:
    """A diagnosed fit's verdict, its window's share and, where the window read none, why (from its timing.json)."""
    run = RunSummary.of(json.loads(path.read_text()))
    window = run.busy_window
    return {"verdict": run.verdict, "share": window and window.share, "reason": window and window.reason}


def sync_probe(folder: Path) -> None:
    """Run the diagnosis example with torch's sync debug mode on; count the syncs made inside the diagnosis.

    Mode ``warn`` rather than ``error``: Lightning itself syncs when it logs the example's loss, which would end
    the run; each warning's Python stack says whether a frame of the diagnosis made it.
    """
    import runpy
    import traceback
    import warnings

    import torch

    from mnistperf.diagnosis.record.verdict import classify

    folder.mkdir(parents=True, exist_ok=True)
    syncs: list[list[str]] = []
    show = warnings.showwarning

    def record(message, category, filename, lineno, file=None, line=None):
        if "synchroniz" in str(message):
            syncs.append([f"{f.filename}:{f.lineno}" for f in traceback.extract_stack()[:-1]])
        else:
            show(message, category, filename, lineno, file, line)

    warnings.showwarning = record
    warnings.simplefilter("always")
    on_cuda = torch.cuda.is_available()  # on a CPU the probe runs as a rehearsal: nothing can sync there
    if on_cuda:
        torch.cuda.set_sync_debug_mode("warn")
    sys.argv = [
        "diagnose_your_run.py",
        "--out",
        str(folder / "run"),
        "--epochs",
        "3",
        "--samples",
        "8192",
        "--batch-size",
        str(EXAMPLE_BATCH),
    ]
    runpy.run_path("examples/diagnose_your_run.py", run_name="__main__")
    if on_cuda:
        torch.cuda.set_sync_debug_mode("default")
    ours = [stack for stack in syncs if any("mnistperf/diagnosis" in frame for frame in stack)]
    [summary_path] = sorted((folder / "run").rglob(SUMMARY_FILE))
    summary = json.loads(summary_path.read_text())
    window = RunSummary.of(summary).busy_window
    trace = window and window.trace
    trace_opens = False
    if trace:
        with open(summary_path.parent / trace) as handle:
            trace_opens = bool(json.load(handle).get("traceEvents"))
    verdict, _ = classify(summary, summary["input_bound_share"])
    steps = sum((e[SAMPLES] or 0) // EXAMPLE_BATCH for e in summary["epochs"])
    result = {
        "syncs_in_all": len(syncs),
        "syncs_by_the_diagnosis": len(ours),
        "epochs": len(summary["epochs"]),
        "train_steps": steps,
        "where_the_diagnosis_synced": sorted({next(f for f in s[::-1] if "mnistperf/diagnosis" in f) for s in ours}),
        DEVICE_BUSY_SHARE: summary.get(DEVICE_BUSY_SHARE),
        "verdict": summary["verdict"],
        "verdict_from_the_busy_share": verdict,
        "trace": trace,
        "trace_opens": trace_opens,
    }
    write_summary(result, folder / "sync-probe.json")
    print(json.dumps(result, indent=2))
