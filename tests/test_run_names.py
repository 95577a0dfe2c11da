"""Which runs a comparison holds: each named by its own folder, one run compared with itself refused, and runs of
different datasets or models compared under a line saying so."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import NO_WORKERS, fails_in_one_line, run_stage

from mnistperf.cli import main


def summary(train_s: float, config: str | None = "lightning_logs", dataset: str = "fashion_mnist", **model) -> dict:
    """A summary as EpochTimer writes it, with the logger's name, the DataModule's dataset and the model's arguments."""
    return {
        "config": config,
        "data": {"dataset": dataset, "batch_size": 512},
        "model": model or {"lr": 0.001, "compile": False},
        "avg_train_s": train_s,
        "samples_per_s": 60_000 / train_s,
        "verdict": "input-bound",
        "epochs": [{"epoch": 1}, {"epoch": 2}, {"epoch": 3}],
    }


def write(folder: Path, content: dict, age_s: float = 0.0) -> Path:
    """``folder``/timing.json, written ``age_s`` seconds ago."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "timing.json"
    path.write_text(json.dumps(content))
    when = path.stat().st_mtime - age_s
    os.utime(path, (when, when))
    return path


def compared(capsys, *runs: Path) -> list[str]:
    main(["compare", *map(str, runs)])
    return capsys.readouterr().out.splitlines()


def test_runs_of_lightnings_default_logger_are_named_by_their_version(tmp_path, capsys):
    logs = tmp_path / "lightning_logs"
    write(logs / "version_0", summary(10.0), age_s=60)
    write(logs / "version_1", summary(5.0))
    head = compared(capsys, logs / "version_0", logs / "version_1")[:5]
    assert head[0].endswith("(version_0)") and head[1].endswith("(version_1)") and head[2].startswith("B saves")
    assert head[3:] == ["changed: nothing the runs record", ""]


def test_a_named_logger_names_its_runs_and_alike_names_take_the_folders_above(tmp_path, capsys):
    a = write(tmp_path / "lightning_logs" / "v1_pinned" / "version_1", summary(10.0, "v1_pinned"))
    b = write(tmp_path / "lightning_logs" / "v2_pinned" / "version_1", summary(5.0, "v2_pinned"))
    head = compared(capsys, a, b)
    assert head[0] == f"A: {a} (v1_pinned/version_1)" and head[1] == f"B: {b} (v2_pinned/version_1)"
    first = write(tmp_path / "laptop" / "lightning_logs" / "version_0", summary(10.0))
    second = write(tmp_path / "server" / "lightning_logs" / "version_0", summary(5.0))
    head = compared(capsys, first, second)
    assert head[0].endswith("(laptop/lightning_logs/version_0)")
    assert head[1].endswith("(server/lightning_logs/version_0)")


def test_a_run_compared_with_itself_is_refused_in_one_line_naming_two_runs_to_give(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write(Path("runs/lightning_logs/version_0"), summary(10.0), age_s=60)
    write(Path("runs/lightning_logs/version_1"), summary(5.0))
    for command in (["compare"], ["report", "--html"]):
        fails_in_one_line(
            capsys,
            [*command, "runs/lightning_logs", "runs/lightning_logs/version_1"],
            "runs/lightning_logs and runs/lightning_logs/version_1 are the same run (both lead to "
            "runs/lightning_logs/version_1/timing.json, a folder standing for the newest run under it)",
            "give two runs, e.g. runs/lightning_logs/version_0 runs/lightning_logs/version_1",
        )
    Path("baseline.json").write_text(Path("runs/lightning_logs/version_0/timing.json").read_text())
    fails_in_one_line(capsys, ["compare", "baseline.json", "runs/lightning_logs/version_0"], "a copy")
    assert not list(tmp_path.rglob("*.html"))


@pytest.mark.parametrize(
    "b, said",
    [
        (summary(5.0, dataset="mnist"), "note: A trained on fashion_mnist and B on mnist: the figures compare"),
        (summary(5.0, hidden=64, lr=0.1), "note: A's model has compile and B's has hidden (other models): the"),
    ],
    ids=["datasets", "models"],
)
def test_runs_of_different_datasets_or_models_are_compared_under_a_line_saying_so(tmp_path, capsys, b, said):
    a_path = write(tmp_path / "a" / "version_0", summary(10.0))
    b_path = write(tmp_path / "b" / "version_0", b)
    lines = compared(capsys, a_path, b_path)
    assert lines[3].startswith(said) and "not what a change to one run bought" in lines[3]
    assert lines[4].startswith("changed: ") and lines[5] == ""
    main(["compare", str(a_path), str(b_path), "--json"])
    assert json.loads(capsys.readouterr().out)["mismatch"] == lines[3].removeprefix("note: ")


def test_two_fits_of_one_stage_are_named_by_version_and_compared_without_a_note(workdir, capsys):
    for _ in range(2):
        run_stage("v2_pinned", "--data.batch_size", "32", *NO_WORKERS, epochs=2)
    capsys.readouterr()
    logs = workdir / "lightning_logs" / "v2_pinned"
    head = compared(capsys, logs / "version_0", logs / "version_1")[:5]
    assert head[0].endswith("(v2_pinned/version_0)") and head[1].endswith("(v2_pinned/version_1)")
    assert head[3:] == ["changed: nothing the runs record", ""]
    fails_in_one_line(capsys, ["compare", str(logs), str(logs / "version_1")], "are the same run")


def test_the_report_of_runs_of_different_datasets_says_so_above_the_figures():
    from mnistperf.diagnosis.show.compare import compare
    from mnistperf.diagnosis.show.report import comparison_section

    section = comparison_section(compare(summary(10.0), summary(5.0, dataset="mnist")))
    assert section.index('<p class="note">note: A trained on fashion_mnist and B on mnist') < section.index("<table")
    assert "trained on" not in comparison_section(compare(summary(10.0), summary(5.0)))
