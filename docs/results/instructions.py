"""Instructions a command executes, counted by Valgrind's cachegrind: a cost figure the machine's drift does not move.

Every instruction of the process, in every thread, is counted. The environment pins what would make two counts of
the same run differ: Python's string hashing, and one thread for OpenMP and MKL (a waiting thread spins).
cpu-2core-diagnosis-cost/count.py imports it.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path


def instructions(command: list[str], out: Path) -> int:
    """The instructions ``command`` executes, counted by cachegrind into ``out``."""
    env = {**os.environ, "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    subprocess.run(
        ["valgrind", "--tool=cachegrind", "--cache-sim=no", f"--cachegrind-out-file={out}", *command],
        check=True,
        capture_output=True,
        env=env,
    )
    summary = re.search(r"^summary: (\d+)", out.read_text(), re.MULTILINE)
    assert summary is not None, f"no summary line in {out}"
    return int(summary.group(1))


def valgrind() -> str:
    """Valgrind's version, for a result's environment."""
    return subprocess.run(["valgrind", "--version"], capture_output=True, text=True, check=True).stdout.strip()
