"""Every script in examples/ runs to its end with small settings, writes only where it is told, and prints the
lines its docs page explains."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

EXAMPLES = REPO / "examples"
VERDICT = r"(input-bound|overhead-bound|compute-bound|undetermined)"
# name: (small settings, lines the output must hold)
RUNS = {
    "diagnose_your_run.py": (
        ["--samples", "256", "--batch-size", "32", "--epochs", "2", "--slow-ms", "0.1"],
        [
            rf"^epoch 1: train .*{VERDICT}",
            rf"^epoch 2: train .*{VERDICT}",
            r"^sample audit, epoch 1: 256 samples seen, 256 distinct of 256: 0 duplicates, 0 missing$",
            r"^sample audit, epoch 2: 256 samples seen, 256 distinct of 256: 0 duplicates, 0 missing$",
        ],
    ),
}


def test_every_example_is_run_by_this_suite():
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(RUNS)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_the_example_runs_and_prints_its_diagnosis(name: str, tmp_path: Path):
    settings, lines = RUNS[name]
    cwd, out = tmp_path / "cwd", tmp_path / "out"
    cwd.mkdir()
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *settings, "--out", str(out)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for line in lines:
        assert re.search(line, result.stdout, re.MULTILINE), f"{line!r} not in:\n{result.stdout[-3000:]}"
    assert list(out.rglob("timing.json")) and not list(cwd.iterdir())  # everything under --out
