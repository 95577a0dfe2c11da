"""``mnistperf tune`` on a project that is not the lab's, then its untouched and its tuned config fitted side by side.

The project is tests/foreign_project (slowshelf): its own LightningCLI entry point, model and DataModule, with
option names that are not the lab's (``workers``, ``keep_workers``, ``batch``) and a dataset whose items take
DELAY_MS each to read, with no workers in its config.

1. ``python -m mnistperf tune --config shelf.yaml`` with tune's defaults (5 minutes of budget at most), its wall
   seconds timed as a whole: tune.log, tuned.yaml and tuned.trials.md land beside this file.
2. PAIRS pairs of whole fits through the project's own entry point (``python -m slowshelf.cli fit``), each a fresh
   process: one of the untouched config, one of the tuned, their order alternating from pair to pair so that the
   machine's drift falls on both. Each fit has EpochTimer attached from the command line; its timing.json gives
   the fit's train seconds (every epoch, the first included) and the steady epochs' samples/s.

Prints and writes results.json beside this file: tune's wall seconds and choice, every fit's figures, and the
median of the pairs' ratios (untouched train seconds over tuned: the speed-up; tuned samples/s over untouched)
with its 95 % interval. Run on a quiet machine, from the checkout's root:

    .venv/bin/python docs/results/cpu-2core-tune-any-project/measure.py [PAIRS] [EPOCHS] [ROWS] [DELAY_MS]

(defaults 6 pairs of 3-epoch fits over 1,024 rows of 2 ms each, in batches of 8: about 2 s an epoch untouched).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
PROJECT = ROOT / "tests" / "foreign_project"
sys.path.insert(0, str(HERE.parent))
from bootstrap import median_interval  # noqa: E402  # docs/results/bootstrap.py

PAIRS = int(sys.argv[1]) if len(sys.argv) > 1 else 6
EPOCHS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
ROWS = int(sys.argv[3]) if len(sys.argv) > 3 else 1024
DELAY_MS = float(sys.argv[4]) if len(sys.argv) > 4 else 2.0
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PROJECT), os.environ.get("PYTHONPATH", "")])}


def untouched_config(folder: Path) -> Path:
    """The project's config with this measurement's data size and delay: what tune starts from."""
    config = yaml.safe_load((PROJECT / "shelf.yaml").read_text())
    config["data"]["init_args"].update(rows=ROWS, delay_ms=DELAY_MS)
    path = folder / "untouched.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def tune(config: Path) -> tuple[float, str]:
    """Run tune on the config; its wall seconds and its log."""
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "mnistperf", "tune", "--config", str(config), "--out", str(HERE / "tuned.yaml")],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=config.parent,
    )
    seconds = time.perf_counter() - began
    if done.returncode:
        raise SystemExit(f"tune failed:\n{done.stdout}\n{done.stderr}")
    return seconds, done.stdout


def fit(config: Path, folder: Path) -> dict:
    """One whole fit of a config through the project's own CLI, EpochTimer attached: its timing.json's figures."""
    began = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "slowshelf.cli",
            "fit",
            "--config",
            str(config),
            "--trainer.max_epochs",
            str(EPOCHS),
            "--trainer.default_root_dir",
            str(folder),
            "--trainer.enable_progress_bar",
            "false",
            "--trainer.callbacks+=mnistperf.diagnosis.EpochTimer",
        ],
        check=True,
        capture_output=True,
        env=ENV,
    )
    summary = json.loads((folder / "timing.json").read_text())
    return {
        "wall_s": time.perf_counter() - began,
        "train_s": summary["total_train_s"],
        "samples_per_s": summary["samples_per_s"],
        "input_wait_share": summary["input_wait_share"],
    }


def ratio_summary(ratios: list[float]) -> dict:
    """The median of the pairs' ratios and its 95 % interval."""
    low, high = median_interval(ratios)
    return {"median": statistics.median(ratios), "low": low, "high": high, "ratios": ratios}


def main() -> None:
    """Tune, then the pairs of fits; print and write results.json."""
    with tempfile.TemporaryDirectory(prefix="tune-any-project-") as work:
        folder = Path(work)
        untouched = untouched_config(folder)
        tune_s, log = tune(untouched)
        (HERE / "tune.log").write_text(log)
        tuned = HERE / "tuned.yaml"
        print(log)
        print(f"tune took {tune_s:.1f} s of wall time")
        fits: list[dict] = []
        for pair in range(PAIRS):
            arms = [("untouched", untouched), ("tuned", tuned)]
            row = {}
            for name, config in arms if pair % 2 == 0 else arms[::-1]:
                row[name] = fit(config, folder / f"pair-{pair}-{name}")
            fits.append(row)
            before, after = row["untouched"]["train_s"], row["tuned"]["train_s"]
            print(f"pair {pair + 1}: untouched {before:.2f} s, tuned {after:.2f} s of training: {before / after:.2f}x")
    results = {
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "python": platform.python_version(),
        },
        "settings": {"pairs": PAIRS, "epochs": EPOCHS, "rows": ROWS, "delay_ms": DELAY_MS},
        "tune_wall_s": tune_s,
        "tuned_data": yaml.safe_load(tuned.read_text())["data"]["init_args"],
        "fits": fits,
        "speedup_train_s": ratio_summary([f["untouched"]["train_s"] / f["tuned"]["train_s"] for f in fits]),
        "speedup_samples_per_s": ratio_summary(
            [f["tuned"]["samples_per_s"] / f["untouched"]["samples_per_s"] for f in fits]
        ),
    }
    (HERE / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    for key, label in (("speedup_train_s", "train seconds"), ("speedup_samples_per_s", "steady samples/s")):
        found = results[key]
        print(
            f"speed-up by {label}: {found['median']:.2f}x (95 % interval {found['low']:.2f}-{found['high']:.2f}x, "
            f"{PAIRS} pairs)"
        )
    print(f"tuned settings: {results['tuned_data']}; tune took {tune_s:.1f} s")


if __name__ == "__main__":
    main()
