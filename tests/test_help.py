"""Each command's --help says what the command does and what it writes, and every option with its default."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from mnistperf.cli import OVERVIEW, main

# Every command the overview lists, as a user finds them
COMMANDS = re.findall(r"^  (\w+) ", OVERVIEW, re.MULTILINE)
# reST that a reader of plain text would see raw: a literal, a role, a link, a directive
REST = re.compile(r"``|:[a-z]+(?::[a-z]+)?:`|`_|^\s*\.\. [a-z]+::", re.MULTILINE)
ANOTHER_PROJECT = Path(__file__).parent / "foreign_project" / "shelf.yaml"
REPO = Path(__file__).resolve().parents[1]


def help_text(capsys, command: str, monkeypatch, *before_help: str) -> str:
    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit) as exit_info:
        main([command, *before_help, "--help"])
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


def test_the_overview_lists_every_command():
    assert set(COMMANDS) == {"prepare", "fit", "validate", "test", "predict", "bench", "tune", "compare", "report"}


@pytest.mark.parametrize("args, status", [([], 0), (["--help"], 0), (["fir"], 2)], ids=["none", "help", "unknown"])
def test_the_overview_is_printed_before_torch_or_lightning_is_imported(args, status):
    """``mnistperf --help`` answers at once: seconds of imports are for the commands that need them."""
    shown = (
        "import sys, runpy; sys.argv = ['mnistperf', *sys.argv[1:]]\n"
        "try:\n    runpy.run_module('mnistperf', run_name='__main__')\n"
        "finally:\n    print(sorted({'torch', 'lightning'} & set(sys.modules)), file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", shown, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == status, done.stderr
    assert done.stdout == OVERVIEW
    assert done.stderr.splitlines()[-1] == "[]", done.stderr
    assert ("unknown command 'fir'; did you mean fit?" in done.stderr) == (status == 2)


def test_the_readme_names_every_command_and_links_every_document():
    readme = (REPO / "README.md").read_text()
    commands = readme.split("\n## Commands\n", 1)[1].split("\n## ", 1)[0]
    for command in COMMANDS:
        assert f"python -m mnistperf {command} " in commands or f"`{command}`" in commands, command
    documents = readme.split("\n## Documentation\n", 1)[1].split("\n## ", 1)[0]
    for document in sorted((REPO / "docs").glob("*.md")):
        assert f"(docs/{document.name})" in documents, f"the README does not link docs/{document.name}"


def test_the_layout_names_every_module_and_command():
    """docs/layout.md is the map: every module of the package is named there, in its own folder's entry."""
    layout = (REPO / "docs" / "layout.md").read_text()
    words = set(re.findall(r"[\w.]+", layout))
    src = REPO / "src" / "mnistperf"
    unnamed = [
        str(path.relative_to(src))
        for path in sorted(src.rglob("*.py"))
        if path.name != "__init__.py" and not {path.stem, path.name} & words
    ]
    assert not unnamed, f"docs/layout.md does not name {unnamed}"
    folders = [path.parent.name + "/" for path in src.rglob("__init__.py") if path.parent != src]
    assert all(folder in layout for folder in folders), [f for f in folders if f not in layout]
    cli_line = layout.split("src/mnistperf/cli.py", 1)[1].split("    src/", 1)[0]
    assert all(command in cli_line for command in COMMANDS), cli_line


@pytest.mark.parametrize(
    "command, before_help",
    [
        *(pytest.param(command, (), id=command) for command in COMMANDS),
        pytest.param("tune", ("--config", str(ANOTHER_PROJECT)), id="tune-another-project"),
    ],
)
def test_every_commands_help_reads_as_plain_text(capsys, monkeypatch, command, before_help):
    text = help_text(capsys, command, monkeypatch, *before_help)
    assert "options:" in text, text
    assert not REST.findall(text), [line for line in text.splitlines() if REST.search(line)]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_commands_help_says_what_it_does_in_whole_sentences_first(capsys, monkeypatch, command):
    text = help_text(capsys, command, monkeypatch)
    described = text.split("\n\n", 1)[1].split("\n\n", 1)[0]  # what follows the usage, to its first blank line
    said = " ".join(described.split())
    assert said.endswith((".", ":")), said  # no sentence cut where a docstring's line broke


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
