"""A run's report to look at: one self-contained HTML file beside timing.json, opened in a real headless browser."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from html import escape
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch
from conftest import fails_in_one_line, fit_module
from lightning import LightningModule
from torch.utils.data import DataLoader, TensorDataset

from mnistperf.cli import main
from mnistperf.diagnosis import EpochTimer
from mnistperf.diagnosis.figures import SPLIT
from mnistperf.diagnosis.record.text import format_summary
from mnistperf.diagnosis.show.report import REPORT_FILE, WHOLE, WHOLE_COLOUR, html_report, tick_label, ticks

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


class Charts(HTMLParser):
    """What a page's charts show: each chart's y-axis labels and bar heights, and the page's headings."""

    def __init__(self, text: str):
        super().__init__()
        self.labels: list[list[str]] = []  # per chart, in the page's order
        self.bars: list[float] = []  # per chart: its bars' heights added up
        self.names: list[str] = []  # per chart: its aria-label
        self.headings: list[str] = []
        self._in: str | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        found = dict(attrs)
        if tag == "svg" and found.get("role") == "img":
            self.labels.append([])
            self.bars.append(0.0)
            self.names.append(found["aria-label"] or "")
        elif tag == "rect" and self.names and found.get("height") and "width" in found and "x" in found:
            self.bars[-1] += float(found["height"] or 0)
        self._in = "tick" if tag == "text" and found.get("class") == "tick" else tag

    def handle_endtag(self, tag):
        self._in = None

    def handle_data(self, data):
        if self._in == "tick":
            self.labels[-1].append(data)
        elif self._in in ("h1", "h2", "h3"):
            self.headings.append(data)


SHARES = (0.1, 0.3, 0.4, 0.15, 0.05)  # of train time: input wait, forward, backward, optimizer, rest


def summary(train_s: float, rss_mb: float) -> dict:
    """A run's summary with three epochs, their steps, split and memory: the figures the charts draw."""
    epochs = [
        {
            "epoch": n,
            "train_s": train_s,
            **{key: train_s * share for key, share in zip(SPLIT, SHARES, strict=True)},
            "step_median_s": train_s / 100,
            "step_max_s": train_s / 50,
            "rss_mb": rss_mb * (0.9 + 0.05 * (n - 1)),  # rss_mb at most
        }
        for n in (1, 2, 3)
    ]
    return {"verdict": "compute-bound", "verdict_reason": "r", "avg_train_s": train_s, "epochs": epochs}


PLAIN = re.compile(r"^\d{1,3}(,\d{3})*(\.\d+)? (ms|s|MB)$")


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
    assert summary["advice"]["hints"] and all(
        f"<li>{escape(hint)}</li>" in report for hint in summary["advice"]["hints"]
    )
    assert report.count('role="img"') == 3  # step times, split, memory
    assert 'aria-label="step times per epoch"' in report and 'aria-label="memory per epoch"' in report


def test_the_report_command_writes_one_run_or_two_compared(tmp_path, capsys):
    a, b = fitted(tmp_path / "a"), fitted(tmp_path / "b")
    main(["report", str(a.parent), "--html", "--out", str(tmp_path / "one.html")])
    assert "report written to" in capsys.readouterr().out and (tmp_path / "one.html").exists()
    main(["report", str(a), str(b), "--html", "--out", str(tmp_path / "two.html")])
    two = (tmp_path / "two.html").read_text()
    assert 'id="comparison"' in two and ("B saves" in two or "B takes" in two)
    assert two.count('class="verdict"') == 2 and self_contained(two)
    capsys.readouterr()
    main(["report", str(a)])  # at a glance first, the fit's headline without its pointer to the report, then all
    glance, everything = capsys.readouterr().out.split("\n\n")
    assert glance.startswith("Verdict: ") and "\nPer epoch (" in glance and "mnistperf report" not in glance
    assert everything.startswith("Average Train Time per Epoch: ") and "\nVerdict: " in everything


def test_a_folder_of_several_runs_reports_its_newest_naming_it_and_one_of_none_names_the_newest_beside(
    tmp_path, capsys
):
    older, newer = fitted(tmp_path / "a"), fitted(tmp_path / "b")
    capsys.readouterr()
    main(["report", str(tmp_path)])
    assert capsys.readouterr().out.startswith(f"run: {newer} (the newest timing.json under {tmp_path})\n")
    main(["report", str(older.parent)])  # the run's own folder: nothing to name
    assert not capsys.readouterr().out.startswith("run:")
    evaluated = older.parent / "version_9"  # as a test or predict run's folder holds no timing.json
    evaluated.mkdir()
    said = f"the newest under {older.parent}: {older}\n"
    fails_in_one_line(capsys, ["report", str(evaluated)], "no timing.json under this folder", said)


def test_a_report_piped_to_a_reader_that_went_away_ends_quietly(tmp_path, capsys, monkeypatch):
    run = fitted(tmp_path / "a")
    capsys.readouterr()
    read, write = os.pipe()
    os.close(read)  # the reader went away (``| head``): every write to the pipe fails
    with os.fdopen(write, "w") as pipe:
        monkeypatch.setattr(sys, "stdout", pipe)
        with pytest.raises(SystemExit) as ended:
            main(["report", str(run)])
    assert ended.value.code == 1 and capsys.readouterr().err == ""  # no traceback


def test_a_broken_pipe_that_is_not_standard_outputs_is_not_taken_for_a_reader_gone(tmp_path, monkeypatch):
    """A worker's or a child process's pipe breaking is an error of the run, raised as it is."""
    run = fitted(tmp_path / "a")

    def broken(*args, **kwargs):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr("mnistperf.diagnosis.show.commands.format_summary", broken)
    with pytest.raises(BrokenPipeError):
        main(["report", str(run)])


def test_a_run_without_the_newer_figures_still_reports():
    old = {"verdict": "input-bound", "verdict_reason": "r", "avg_train_s": 1.0, "epochs": [{"epoch": 1, "train_s": 1}]}
    text = html_report([("old", old)])
    assert "step times per epoch: not measured" in text and "memory per epoch: not measured" in text
    printed = format_summary(old)  # read into the same typed summary as a new run's
    assert "Verdict: input-bound (r)" in printed and "Average Train Time per Epoch: 1.00 s" in printed


@pytest.mark.parametrize(
    ("peak", "marks", "top"),
    [(5950.0, 7, "6,000 MB"), (12_100.0, 4, "15,000 MB"), (0.37, 5, "0.4 MB"), (0.0, 6, "1.0 MB"), (48.0, 6, "50 MB")],
)
def test_the_ticks_run_from_zero_to_a_round_top_at_or_over_the_peak(peak, marks, top):
    found = ticks(peak)
    step = found[1] - found[0]
    assert found[0] == 0 and found[-1] >= peak and len(found) == marks
    assert tick_label(found[-1], step, "MB") == top and tick_label(found[0], step, "MB") == "0 MB"


def test_the_axes_read_from_zero_in_plain_numbers_with_their_unit():
    charts = Charts(html_report([("run", summary(train_s=12.3, rss_mb=5950.0))]))
    assert charts.names == ["step times per epoch", "train time split per epoch", "memory per epoch"]
    for labels, unit in zip(charts.labels, ("ms", "s", "MB"), strict=True):
        assert labels[0] == f"0 {unit}" and len(labels) >= 3
        assert all(PLAIN.match(label) and label.endswith(f" {unit}") for label in labels), labels
    assert charts.labels[2][-1] == "6,000 MB"  # 5,950 MB at most, not "5.95e+03 MB"


def test_one_run_is_titled_once():
    charts = Charts(html_report([("v2_pinned", summary(train_s=10.0, rss_mb=800.0))]))
    assert [h for h in charts.headings if "v2_pinned" in h] == ["Timing: v2_pinned"]


def test_the_fits_report_is_titled_as_the_report_command_titles_it(tmp_path):
    """Lightning's default logger name (lightning_logs) names no run: the report the fit writes and the one
    ``mnistperf report RUN --html`` writes for it both call the run by its folder, as compare does."""
    data = TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,)))
    timer = EpochTimer()
    fit_module(Small(), DataLoader(data, batch_size=4), callbacks=[timer], logger=True, default_root_dir=tmp_path)
    assert timer.summary_path is not None
    written = Charts(timer.summary_path.with_name(REPORT_FILE).read_text()).headings[0]
    main(["report", str(timer.summary_path.parent), "--html", "--out", str(tmp_path / "again.html")])
    assert written == Charts((tmp_path / "again.html").read_text()).headings[0] == "Timing: version_0"


def test_two_runs_charts_of_a_kind_share_one_scale():
    slow, fast = summary(train_s=36.0, rss_mb=5950.0), summary(train_s=10.0, rss_mb=800.0)
    charts = Charts(html_report([("slow", slow), ("fast", fast)]))
    assert len(charts.names) == 6 and charts.names[0::2] == charts.names[1::2]  # A's and B's, kind by kind
    for a, b in zip(charts.labels[0::2], charts.labels[1::2], strict=True):
        assert a == b  # the same ticks to the same top
    split_a, split_b = charts.bars[2], charts.bars[3]
    assert split_b / split_a == pytest.approx(10 / 36, rel=0.02)  # bars 3.6x apart look it


def test_an_epoch_not_split_is_drawn_whole_in_a_colour_the_legend_names_and_each_bar_says_its_part():
    run = summary(train_s=10.0, rss_mb=800.0)
    run["epochs"][1] = {key: value for key, value in run["epochs"][1].items() if key not in SPLIT}
    page = html_report([("run", run)])
    assert page.count(f'fill="{WHOLE_COLOUR}"') == 2 and f"</svg> {WHOLE}</span>" in page  # its bar, its legend
    assert "<title>epoch 2 train time, not split" in page and "<title>epoch 1 forward 3.000 s</title>" in page
    assert WHOLE not in html_report([("split", summary(train_s=10.0, rss_mb=800.0))])  # every epoch split: none


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
    labels = Charts(dom).labels
    assert len(labels) == 3
    assert all(chart[0].split()[0] == "0" and all(PLAIN.match(label) for label in chart) for chart in labels), labels
    shot = tmp_path / "report.png"
    subprocess.run(
        [BROWSER, *flags, f"--screenshot={shot}", "--window-size=1200,1600", report.as_uri()],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


def test_the_fits_end_is_a_headline_and_at_most_three_short_lines_the_rest_left_to_the_report():
    from mnistperf.diagnosis.record.text import format_headline

    held = (
        "its own DataLoader workers held the cores (the training thread waited for one 29% of train time, the workers "
        "using 70% of them): cheaper batches could make training up to 2.3x faster"
    )
    summary = {
        "verdict": "compute-bound",
        "verdict_figure": "CPU inside tensor operations 87%",
        "verdict_reason": f"CPU inside tensor operations 87% of the time, host waited for the next batch 49%; {held}",
        "advice": {"ceiling": "up to 2.3x faster: what the training thread's wait costs", "hints": ["a", "b", "c"]},
        "avg_train_s": 1.0,
        "avg_eval_s": 0.1,
        "samples_per_s": 100.0,
        "steady_epochs": [2, 3],
        "warmup": {"epoch": 1, "train_s": 2.0, "eval_s": 0.2},
        "device": "cpu (x86_64, 2 logical cores)",
        "precision": "32-true",
    }
    lines = format_headline(summary, "runs/version_0").splitlines()
    assert lines == [
        "Verdict: compute-bound (CPU inside tensor operations 87%)",
        "  why: its own DataLoader workers held the cores (the training thread waited for one 29% of train time, the "
        "workers using 70% of them)",
        "  fix: a; b",
        "  could buy: up to 2.3x faster (the report says why)",
        "Per epoch (epochs 2-3; warm-up epoch 1: 2.00 s): train 1.00 s, eval 0.10 s, 100 samples/s; cpu (x86_64, 2 "
        "logical cores), 32-true",
        "The rest (the split, stalls, memory, the profiled window): `mnistperf report runs/version_0` prints it, "
        "timing.html shows it",
    ]
    old = {**summary, "verdict_figure": None, "verdict_reason": "r", "advice": None}  # an older timing.json
    assert format_headline(old).splitlines()[0] == "Verdict: compute-bound (r)"


def test_a_short_fits_times_are_said_in_ms_one_unit_a_line_where_seconds_would_read_zero():
    from mnistperf.diagnosis.record.advice import advice
    from mnistperf.diagnosis.record.epoch_text import format_epoch
    from mnistperf.diagnosis.record.run import RunSummary
    from mnistperf.diagnosis.record.text import format_headline, format_split
    from mnistperf.diagnosis.record.units import seconds

    assert (seconds(2.0), seconds(0.0123), seconds(0.0), seconds(None)) == ("2.00 s", "12.30 ms", "0.00 ms", "-")
    assert seconds(0.0123, 2.0) == "0.01 s"  # the line's unit is its largest time's
    short_fit = {"verdict": "overhead-bound", "avg_train_s": 0.09, "avg_eval_s": 0.0, "cpu_busy_share": 0.3}
    found = advice(short_fit)
    assert found is not None and found["ceiling"].endswith("(at most 63.00 ms less per epoch)")
    row = {"epoch": 2, "train_s": 0.0077, "eval_s": 0.0, "samples_per_s": 6500.0, "verdict": "v", "verdict_figure": "f"}
    assert format_epoch({**row, "eval_s": 0.0004}).startswith("epoch 2: train 7.70 ms, eval 0.40 ms, 6,500 samples/s")
    assert format_epoch({**row, "train_s": 1.5, "eval_s": 0.0004}).startswith("epoch 2: train 1.50 s, eval 0.00 s,")
    assert format_epoch(row).startswith("epoch 2: train 7.70 ms, 6,500 samples/s")  # no validation ran: none said
    summary = {
        "verdict": "overhead-bound",
        "verdict_figure": "f",
        "avg_train_s": 0.012,
        "avg_eval_s": 0.002,
        "samples_per_s": 6500.0,
        "steady_epochs": [2, 3],
        "warmup": {"epoch": 1, "train_s": 0.03, "eval_s": 0.002},
        "advice": {
            "ceiling": "c",
            "hints": [],
            "culprit": {"part": "callback C", "s": 0.003, "share": 0.2, "per": "epoch"},
        },
        "between_epochs": {"epochs": 2, "epoch_s": 0.003, "parts": {"callback C": 0.003}},
    }
    lines = format_headline(summary).splitlines()
    assert lines[1] == "  why: callback C took 3.00 ms between epochs, of each 15.00 ms epoch"
    for gap, said in ((0.0006, False), (0.0008, True)):  # the line's cut: 5 % of the 14.6 and 14.8 ms epochs
        unnamed = {**summary, "advice": None, "between_epochs": {"epochs": 2, "epoch_s": gap, "parts": {}}}
        assert ("between epochs" in format_headline(unnamed).splitlines()[-2]) is said
    assert "(epochs 2-3; warm-up epoch 1: 30.00 ms): train 12.00 ms, eval 2.00 ms, between epochs 3.00 ms" in lines[-2]
    split = {figure.name: 0.002 for figure in SPLIT}
    short = format_split(RunSummary.of({**summary, "split": split}), "epochs 2-3")
    assert short is not None and short.startswith(
        "Train time per epoch (epochs 2-3): waiting for data 2.00 ms, forward"
    )
    long = format_split(RunSummary.of({**summary, "split": {**split, "forward_s": 0.2}}), "epochs 2-3")
    assert long is not None
    assert long.startswith(
        "Train time per epoch (epochs 2-3): waiting for data 0.00 s, forward 0.20 s, backward 0.00 s"
    )


def test_a_verdict_near_its_line_says_so_in_the_headlines_why():
    from mnistperf.diagnosis.record.text import format_headline
    from mnistperf.diagnosis.record.verdict import bound

    figures = {"input_wait_share": 0.02, "cpu_busy_share": 0.78, "busy_margin": 0.07}
    verdict, reason = bound(figures, 0.5)
    summary = {"verdict": verdict, "verdict_figure": "CPU inside tensor operations 78%, in doubt"}
    lines = format_headline({**summary, "verdict_reason": reason, "avg_train_s": 1.0, "steady_epochs": [2, 2]})
    assert verdict == "overhead-bound" and lines.splitlines()[1] == "  why: near the line, 78% within 7% of 80%"


def test_the_windows_line_says_where_no_trace_was_written_and_why():
    from mnistperf.diagnosis.measure.window_reading import WindowReading
    from mnistperf.diagnosis.record.text import format_window

    unread = WindowReading("cpu", reason="its steps ran no torch operator")
    assert format_window(unread) == (
        "CPU inside tensor operations: not measured (its steps ran no torch operator); no trace written"
    )
    read = WindowReading("cpu", share=0.5, margin=0.01, epoch=2, first_step=3, last_step=4, kernels=40)
    assert format_window(read).endswith("in a steady epoch, kept out of its timing; no trace written)")
    skipped = WindowReading(**{**read.__dict__, "trace_skipped": "its 9,000 operations pass trace_limit 5,000"})
    assert format_window(skipped).endswith("; no trace written: its 9,000 operations pass trace_limit 5,000)")
    traced = WindowReading(**{**read.__dict__, "trace": "busy_window_trace.json"})
    assert format_window(traced).endswith("; trace busy_window_trace.json)")


def test_a_run_without_validation_says_none_ran_not_zero_seconds_an_epoch():
    from mnistperf.diagnosis.record.text import format_summary

    run = {"epochs": [{"epoch": e, "train_s": 1.0, "eval_s": 0.0} for e in (1, 2)], "avg_train_s": 1.0,
           "avg_eval_s": 0.0, "total_train_s": 2.0, "total_eval_s": 0.0, "steady_epochs": [2, 2], "verdict": "x",
           "verdict_reason": "y"}  # fmt: skip
    said = format_summary(run)
    assert "Average Validation Time per Epoch: none ran" in said and "Total Validation Time: none ran" in said
    said = format_summary({**run, "avg_eval_s": 0.5, "total_eval_s": 1.0})
    assert "Average Validation Time per Epoch: 0.50 s (epoch 2" in said


def test_a_split_rests_on_the_steady_epochs_split_whole_and_names_them_where_others_were_not():
    """An epoch whose sampled steps were profiled has no split: the run's rests on those that have one, and says so,
    where it was lost whole."""
    from mnistperf.diagnosis.record.run import RunSummary
    from mnistperf.diagnosis.record.summary import RUN_READERS
    from mnistperf.diagnosis.record.text import format_split

    split = {"input_wait_s": 0.1, "forward_s": 0.3, "backward_s": 0.2, "optimizer_s": 0.1, "rest_s": 0.3}
    unsplit = {**dict.fromkeys(split), "input_wait_s": 0.5}
    rows = [{"epoch": 1, **split}, {"epoch": 2, **unsplit}, {"epoch": 3, **split}]
    found = {figure.name: RUN_READERS["split"](rows[1:], figure.name) for figure in SPLIT}
    assert found == split  # epoch 3's parts, its wait with them: they add up to its train time
    run = RunSummary.of({"avg_train_s": 1.0, "split": found, "epochs": rows, "steady_epochs": [2, 3]})
    line = format_split(run, "epochs 2-3")
    assert line is not None and line.startswith("Train time per epoch (epoch 3 of epochs 2-3, the others' steps split")
    assert RUN_READERS["split"]([{"epoch": 2, **unsplit}], "forward_s") is None  # none split: not measured
