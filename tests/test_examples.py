"""Every script in examples/ runs to its end with small settings, writes only where it is told, and prints the
lines its docs page explains."""

from __future__ import annotations

import re
import runpy
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import REPO

from mnistperf.cli import main

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


@pytest.mark.parametrize("run", ["in this process", pytest.param("as a script", marks=pytest.mark.slow)])
@pytest.mark.parametrize("name", sorted(RUNS))
def test_the_example_runs_and_prints_its_diagnosis(name: str, run: str, tmp_path: Path, monkeypatch, capsys):
    """Run as its page says (``python examples/NAME``), or by this interpreter as ``__main__``."""
    settings, lines = RUNS[name]
    cwd, out = tmp_path / "cwd", tmp_path / "out"
    cwd.mkdir()
    argv = [str(EXAMPLES / name), *settings, "--out", str(out)]
    if run == "as a script":
        result = subprocess.run(
            [sys.executable, *argv], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
        )
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        printed = result.stdout
    else:
        monkeypatch.chdir(cwd)
        monkeypatch.setattr(sys, "argv", argv)
        runpy.run_path(argv[0], run_name="__main__")
        printed = capsys.readouterr().out
    for line in lines:
        assert re.search(line, printed, re.MULTILINE), f"{line!r} not in:\n{printed[-3000:]}"
    assert list(out.rglob("timing.json")) and not list(cwd.iterdir())  # everything under --out


def test_the_report_the_example_points_at_is_there_after_it_ends(tmp_path: Path, monkeypatch, capsys):
    """Without --out the example logs to a temporary folder; the `mnistperf report RUN` its fit's end names is run
    after the script has ended, so that folder must outlive it."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the script's temporary folder goes
    settings, _ = RUNS["diagnose_your_run.py"]
    monkeypatch.setattr(sys, "argv", [str(EXAMPLES / "diagnose_your_run.py"), *settings])
    runpy.run_path(sys.argv[0], run_name="__main__")
    named = re.search(r"`mnistperf report (\S+)` prints it", capsys.readouterr().out)
    assert named, "the fit's end names no run to report"
    assert (Path(named[1]) / "timing.json").is_file()
    main(["report", named[1]])
    assert "\n\nAverage Train Time per Epoch" in capsys.readouterr().out  # the headline, then every figure
