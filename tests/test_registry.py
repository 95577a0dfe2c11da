"""The pipeline registry: a new pipeline is one module and one registry line, and every command takes it from there."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import CONFIGS, fails_in_one_line, run_stage, stage_argv
from throwaway_pipeline import ItemListPipeline

from mnistperf.cli import main
from mnistperf.data.pipelines import registry
from mnistperf.tune import probes

BUILT_IN = ["v1", "v2", "resident", "stream", "litdata"]


@pytest.fixture
def item_list(workdir, monkeypatch) -> Path:
    """The throwaway pipeline registered as `items` (its one line), in a folder whose data/ holds tiny Parquet."""
    monkeypatch.setitem(registry.PIPELINES, "items", ItemListPipeline)
    return workdir


def test_a_registered_pipeline_is_tuned_and_trains(item_list, monkeypatch, capsys):
    # A slow step: the first loader tune tries outruns it, and that is the new pipeline's (its tune_rank is 0).
    monkeypatch.setattr(probes, "time_step", lambda *a, **k: [10.0, 10.0])
    monkeypatch.setattr(probes, "REPEATS", 2)
    monkeypatch.setattr(probes.Probes, "batches", 4)
    main(
        [
            "tune",
            "--config",
            str(CONFIGS / "v1_naive.yaml"),
            "--set",
            "data.pipeline=items",
            "--budget",
            "2",
            "--out",
            "tuned.yaml",
        ]
    )
    out = capsys.readouterr().out
    assert "[probe 2] loader pipeline=items num_workers=0" in out and "stopped: compute-bound" in out
    assert yaml.safe_load((item_list / "tuned.yaml").read_text())["data"]["pipeline"] == "items"

    summary = run_stage("tuned.yaml", "--trainer.enable_progress_bar", "false", epochs=1, quiet=False)
    assert summary["data"]["pipeline"] == "items" and summary["epochs"][0]["samples"] > 0


def test_fit_help_and_the_docs_table_list_every_registered_pipeline(item_list, capsys):
    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    text = capsys.readouterr().out
    for name in [*BUILT_IN, "items"]:
        assert f"\n  {name:<10} {registry.summary(name)}\n" in text
    # Every stage config is named, the later rungs included.
    assert all(path.stem in text for path in CONFIGS.glob("*.yaml"))
    table = registry.pipelines_table().splitlines()
    assert len(table) == 2 + len(BUILT_IN) + 1
    assert (
        "| `items` | throwaway_pipeline.py | Items made once and kept in a Python list | yes | yes | - | - | 1 |"
        in table
    )


def test_an_unknown_pipeline_is_one_line_naming_the_registered_ones(item_list, capsys):
    choices = ", ".join([*BUILT_IN, "items"])
    fails_in_one_line(
        capsys, stage_argv("v2_pinned", "--data.pipeline", "v9"), f"unknown pipeline 'v9'; choose one of {choices}."
    )


def test_tune_tries_the_pipelines_by_their_rank():
    assert registry.tune_order() == ["resident", "v2", "litdata", "stream", "v1"]


def test_the_docs_pipeline_table_is_the_registrys():
    """docs/layout.md shows the table the registry renders: a pipeline added or changed there shows up here."""
    layout = (CONFIGS.parent / "docs" / "layout.md").read_text()
    assert registry.pipelines_table().strip() in layout
