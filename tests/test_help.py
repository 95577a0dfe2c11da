"""Each command's --help says what the command does and what it writes, and every option with its default."""

from __future__ import annotations

import re

import pytest

from mnistperf.cli import main


def help_text(capsys, command: str, monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def option_entries(text: str) -> dict[str, str]:
    """Each option of the help's option list, by its long name, with its help text on one line."""
    listing = text.split("\noptions:\n", 1)[1]
    entries = re.split(r"\n(?=  -)", "\n" + listing)
    return {
        re.search(r"--[\w-]+", entry).group(0): " ".join(entry.split())
        for entry in entries
        if entry.strip() and "--help" not in entry
    }


@pytest.mark.parametrize("command", ["prepare", "bench", "tune"])
def test_every_option_has_a_help_line_with_its_default(capsys, monkeypatch, command):
    text = help_text(capsys, command, monkeypatch)
    assert "``" not in text and ":class:" not in text and ":mod:" not in text
    entries = option_entries(text)
    assert len(entries) >= 5, text
    for option, entry in entries.items():
        assert len(entry.split()) > 3, f"{option} has no help line"
        assert "(default: " in entry or "(required)" in entry, f"{option} gives no default: {entry}"


def test_the_bench_help_says_what_it_runs_and_writes(capsys, monkeypatch):
    text = " ".join(help_text(capsys, "bench", monkeypatch).split())
    assert "each as its own python -m mnistperf fit process" in text
    assert "Writes results.md, results.csv, results.json and chart.png" in text
    assert "--epochs N epochs per run (default: 5)" in text and "(default: bench_results/<time>)" in text


def test_the_tune_help_says_what_is_tuned_and_what_it_writes(capsys, monkeypatch):
    text = " ".join(help_text(capsys, "tune", monkeypatch).split())
    for key in ("data.pipeline", "data.num_workers", "data.persistent_workers", "data.pin_memory"):
        assert key in text
    assert "Writes a config that fit runs as is (--out)" in text and "<out>.probes.md" in text
    assert "(default: tuned.yaml)" in text and "(default: 5)" in text
