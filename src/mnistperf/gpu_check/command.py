"""``scripts/gpu-check``: the GPU figures in order of value, each part started only if it fits the budget.

A GPU comes rarely and for minutes, so the check is one call planned on a CPU first: ``--pack`` puts what the
device lacks (wheels, FashionMNIST's official files) into ``.gpu-carry/``, ``--dry-run`` prints the device call,
what it carries and each part's planned minutes, and on the GPU ``--minutes N`` runs the parts in order, starts a
part only where its planned minutes fit what is left, interrupts a part that runs into the budget's end (a bench
keeps the rows it finished) and writes ``parts.json`` and ``parts.md`` with what finished, what was cut and the
command that runs the rest.

    scripts/gpu-check --pack [--source-root DIR]      # on the CPU, once: the carry folder
    scripts/gpu-check --dry-run --minutes 8            # on the CPU: the call, the carry, the plan
    scripts/gpu-check --minutes 8 [--parts a,b] [RESULTS_DIR]   # on the GPU
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from mnistperf.gpu_check.pack import pack
from mnistperf.gpu_check.plan import PART_NAMES, dry_run
from mnistperf.gpu_check.probes import sync_probe, timer_cost
from mnistperf.gpu_check.run import check


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The check's options."""
    parser = argparse.ArgumentParser(prog="scripts/gpu-check", description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, default=None, help="results folder (docs/results/cuda-<gpu>)")
    parser.add_argument("--minutes", type=float, default=8.0, help="the budget: no part starts that would pass it")
    parser.add_argument("--parts", default=",".join(PART_NAMES), help=f"some of {','.join(PART_NAMES)}")
    parser.add_argument("--source-root", default=None, help="the folder holding fashion-mnist/ with the .gz files")
    parser.add_argument("--dry-run", action="store_true", help="on any machine: the device call and the plan")
    parser.add_argument("--pack", action="store_true", help="on the CPU: fill .gpu-carry/ for the device call")
    parser.add_argument("--copy-to", default=None, help="also put an archive of the results here (the call's $OUT)")
    parser.add_argument("--timer-cost", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--sync-probe", type=Path, default=None, help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    unknown = [p for p in opts.parts.split(",") if p and p not in PART_NAMES]
    if unknown:
        parser.error(f"--parts {unknown[0]}: no such part; choose from {','.join(PART_NAMES)}")
    if opts.minutes <= 0:
        parser.error(f"--minutes {opts.minutes:g}: the budget must be above 0, e.g. --minutes 8")
    return opts


def main(argv: Sequence[str] | None = None) -> int:
    """Pack, plan, probe or check, as the options say."""
    opts = parse_args(sys.argv[1:] if argv is None else argv)
    if opts.timer_cost:
        timer_cost(opts.timer_cost)
        return 0
    if opts.sync_probe:
        sync_probe(opts.sync_probe)
        return 0
    if opts.pack:
        for line in pack(Path(opts.source_root or "../shared/datasets")):
            print(line)
        return 0
    if opts.dry_run:
        print("\n".join(dry_run(opts.minutes, [p for p in opts.parts.split(",") if p])))
        return 0
    import torch

    if not torch.cuda.is_available():
        print("gpu-check: no CUDA device here; run it on a machine with an NVIDIA GPU.", file=sys.stderr)
        return 2
    return check(opts)
