"""Instructions a command executes, counted by Valgrind's cachegrind: a cost figure the machine's drift does not move.

Every instruction of the process, in every thread, is counted. The environment pins what would make two counts of
the same run differ: Python's string hashing, and one thread for OpenMP and MKL (a waiting thread spins).
cpu-2core-diagnosis-cost/count.py imports it.

Instructions weigh every instruction alike; code that runs cold (a callback's hooks between a step's tensor
operations) costs more per instruction. :func:`events` also simulates the caches and the branch predictor, and
:func:`estimated_cycles` weighs their misses as KCachegrind's cycle estimate does: a figure that still does not move
with the machine's load, and that follows wall seconds more closely.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path


def events(command: list[str], out: Path, simulate: bool = False) -> dict[str, int]:
    """Cachegrind's events of ``command``, written to ``out``: ``Ir`` (instructions), and the simulated ones.

    Where ``simulate``, the caches' and the branch predictor's misses too (``I1mr``, ``DLmr``, ``Bcm``, ...).
    """
    env = {**os.environ, "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    simulation = ["--cache-sim=yes", "--branch-sim=yes"] if simulate else ["--cache-sim=no"]
    subprocess.run(
        ["valgrind", "--tool=cachegrind", *simulation, f"--cachegrind-out-file={out}", *command],
        check=True,
        capture_output=True,
        env=env,
    )
    text = out.read_text()
    names = re.search(r"^events: (.+)$", text, re.MULTILINE)
    summary = re.search(r"^summary: (.+)$", text, re.MULTILINE)
    assert names is not None and summary is not None, f"no events or summary line in {out}"
    return dict(zip(names.group(1).split(), map(int, summary.group(1).split()), strict=True))


def instructions(command: list[str], out: Path) -> int:
    """The instructions ``command`` executes, counted by cachegrind into ``out``."""
    return events(command, out)["Ir"]


def estimated_cycles(found: dict[str, int]) -> int:
    """KCachegrind's cycle estimate of simulated :func:`events`.

    An instruction each, 10 for each first-level cache miss and mispredicted branch, 100 for each last-level one.
    """
    first = found["I1mr"] + found["D1mr"] + found["D1mw"]
    last = found["ILmr"] + found["DLmr"] + found["DLmw"]
    return found["Ir"] + 10 * (first + found["Bcm"] + found["Bim"]) + 100 * last


def valgrind() -> str:
    """Valgrind's version, for a result's environment."""
    return subprocess.run(["valgrind", "--version"], capture_output=True, text=True, check=True).stdout.strip()
