"""A run's report to look at: one self-contained HTML file beside timing.json, opened in a real headless browser."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import torch
from conftest import fit_module
from lightning import LightningModule
from torch.utils.data import DataLoader, TensorDataset

from mnistperf.cli import main
from mnistperf.diagnosis import EpochTimer
from mnistperf.diagnosis.report import REPORT_FILE, html_report

BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
browser = pytest.mark.skipif(BROWSER is None, reason="no chromium here (Debian: apt-get install chromium)")


class Small(LightningModule):
    """A tiny model; epoch 2's step 5 sleeps, a spike the report shows."""

    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 2)

    def training_step(self, batch, batch_idx):
        if (self.current_epoch, batch_idx) == (1, 4):
            time.sleep(0.3)
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def fitted(folder: Path) -> Path:
    """Fit the small model for three epochs into ``folder``; the timing.json written."""
    data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    timer = EpochTimer()
    fit_module(Small(), DataLoader(data, batch_size=4), callbacks=[timer], max_epochs=3, default_root_dir=folder)
    assert timer.summary_path is not None
    return timer.summary_path


def self_contained(text: str) -> bool:
    """Nothing in the page is fetched or run: no script, stylesheet link, image source or remote address but SVG's."""
    outside = re.findall(r"<script|<link|\bsrc=|url\(|https?://(?!www\.w3\.org/2000/svg)", text)
    return not outside


def test_the_fit_writes_its_report_beside_timing_json(tmp_path, capsys):
    path = fitted(tmp_path)
    printed = capsys.readouterr().out
    assert f"timing summary written to {path}" in printed
    assert f"timing report written to {path.with_name(REPORT_FILE)}" in printed
    report = path.with_name(REPORT_FILE).read_text()
    summary = json.loads(path.read_text())
    assert self_contained(report)
    assert f"Verdict: {summary['verdict']}" in report
    assert report.count("<svg role=") == 3  # step times, split, memory
    assert 'aria-label="step times per epoch"' in report and 'aria-label="memory per epoch"' in report


def test_the_report_command_writes_one_run_or_two_compared(tmp_path, capsys):
    a, b = fitted(tmp_path / "a"), fitted(tmp_path / "b")
    main(["report", str(a.parent), "--html", "--out", str(tmp_path / "one.html")])
    assert "report written to" in capsys.readouterr().out and (tmp_path / "one.html").exists()
    main(["report", str(a), str(b), "--html", "--out", str(tmp_path / "two.html")])
    two = (tmp_path / "two.html").read_text()
    assert 'id="comparison"' in two and ("B saves" in two or "B takes" in two)
    assert two.count('class="verdict"') == 2 and self_contained(two)
    main(["report", str(a)])
    assert "Verdict:" in capsys.readouterr().out


def test_a_run_without_the_newer_figures_still_reports():
    old = {"verdict": "input-bound", "verdict_reason": "r", "avg_train_s": 1.0, "epochs": [{"epoch": 1, "train_s": 1}]}
    text = html_report([("old", old)])
    assert "step times per epoch: not measured" in text and "memory per epoch: not measured" in text


@browser
def test_a_headless_browser_shows_the_verdict_and_the_charts(tmp_path):
    path = fitted(tmp_path)
    report = path.with_name(REPORT_FILE)
    summary = json.loads(path.read_text())
    flags = ["--headless", "--disable-gpu", "--no-sandbox", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run(
        [BROWSER, *flags, "--dump-dom", report.as_uri()], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert f"Verdict: {summary['verdict']}" in dom
    assert dom.count("<polyline") >= 2 and dom.count("<rect") >= 3  # lines of step times and memory, the split's bars
    shot = tmp_path / "report.png"
    subprocess.run(
        [BROWSER, *flags, f"--screenshot={shot}", "--window-size=1200,1600", report.as_uri()],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
