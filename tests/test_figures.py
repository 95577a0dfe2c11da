"""The registry of figures: each declared once, and a new one reaches every record and view with no other edit."""

from __future__ import annotations

import ast
import copy
import csv
import html
import json
import pickle
from pathlib import Path

import pytest
import torch
from added_figures import ADDED, STEPS_RUN
from conftest import fit_module
from lightning import LightningModule
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset

from mnistperf.diagnosis import EpochTimer, figures
from mnistperf.diagnosis.figures import FIGURES, TRAIN_S, Figure
from mnistperf.diagnosis.show.compare import compare
from mnistperf.diagnosis.show.report import html_report


class Tiny(LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)

    def training_step(self, batch, batch_idx):
        images, labels = batch
        return torch.nn.functional.cross_entropy(self.layer(images), labels)

    def validation_step(self, batch, batch_idx):
        images, labels = batch
        self.layer(images)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def loader() -> DataLoader:
    return DataLoader(TensorDataset(torch.randn(32, 4), torch.arange(32) % 2), batch_size=4)


def fitted(folder: Path) -> Path:
    """A tiny fit's timing.json, its scalars logged to a CSV logger under ``folder``."""
    timer = EpochTimer(window_share=None, log_all=True)
    fit_module(Tiny(), loader(), loader(), callbacks=[timer], max_epochs=3, logger=CSVLogger(folder, name="run"))
    assert timer.summary_path is not None
    return timer.summary_path


@pytest.mark.parametrize("added", ADDED, ids=["derived", "measured", "per-rank"])
def test_a_figure_added_to_the_registry_reaches_timing_json_the_scalars_compare_and_the_report(
    added, tmp_path, monkeypatch
):
    """Declared once with how it is read (``derive`` from the row, or ``read`` with how the ranks combine it)."""
    monkeypatch.setattr(figures, "FIGURES", (*FIGURES, added))  # a copy of the registry, one figure more
    a, b = fitted(tmp_path / "a"), fitted(tmp_path / "b")
    summary = json.loads(a.read_text())
    per_epoch = [row[added] for row in summary["epochs"]]
    assert len(per_epoch) == 3 and all(value > 0 for value in per_epoch), per_epoch
    if added is STEPS_RUN:
        assert per_epoch == [8, 8, 8]  # 32 rows in batches of 4, counted by the figure's own read
    assert summary[added] == pytest.approx(sum(per_epoch[1:]) / 2)  # the steady epochs' mean
    with open(next(a.parent.glob("metrics.csv"))) as handle:
        logged = [row[f"timing/{added}"] for row in csv.DictReader(handle) if row.get(f"timing/{added}")]
    assert len(logged) == 3
    found = compare(summary, json.loads(b.read_text()))
    [row] = [row for row in found["rows"] if row["key"] == added]
    assert row["figure"] == added.label and row["unit"] == added.shown
    assert row["a"] == pytest.approx(added.scale * summary[added])
    report = html_report([("a", summary)], found)
    assert report.count(added.label) == 2  # in the comparison and in the run's figures
    assert html.escape(added.meaning) in report


def test_each_figure_is_declared_once_and_every_group_holds_the_registrys_own():
    names = [figure.name for figure in FIGURES]
    assert len(names) == len(set(names)), [n for n in names if names.count(n) > 1]
    groups = [
        *figures.SPLIT,
        *figures.STEPS,
        *figures.MEMORY,
        *figures.UTILIZATION,
        *figures.COMMUNICATION,
        *figures.WAITS,
        *figures.CORES,
        *figures.BUSY.values(),
    ]
    assert all(any(figure is declared for declared in FIGURES) for figure in groups)
    assert all(figure.run is None or figure.run in figures.RUN_RULES for figure in FIGURES)


def test_a_figure_is_its_key_and_travels_as_a_plain_string():
    row = {TRAIN_S: 1.5}
    assert row["train_s"] == 1.5 and json.loads(json.dumps(row)) == {"train_s": 1.5}
    for travelled in (pickle.loads(pickle.dumps(TRAIN_S)), copy.deepcopy(TRAIN_S)):
        assert travelled == "train_s" and type(travelled) is str


def test_a_figure_with_a_rule_no_run_knows_is_refused_where_it_is_declared():
    with pytest.raises(ValueError, match="run='median'"):
        Figure("x", "s", "a figure", run="median")


def test_outside_the_registry_no_figures_key_is_a_string():
    """Code names a figure by its constant, so a renamed figure cannot leave a key behind: no string of a figure's
    key, and no keyword making one (``row.update(mfu=...)``, ``dict(mfu=...)``)."""
    keys = {figure.name for figure in FIGURES}

    def makes_key(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return isinstance(node.value, str) and node.value in keys
        if isinstance(node, ast.Call) and (
            (isinstance(node.func, ast.Attribute) and node.func.attr == "update")
            or (isinstance(node.func, ast.Name) and node.func.id == "dict")
        ):
            return any(keyword.arg in keys for keyword in node.keywords)
        return False

    src = Path(figures.__file__).parent.parent
    found = [
        f"{path.relative_to(src)}:{node.lineno}"
        for path in sorted(src.rglob("*.py"))
        if path != Path(figures.__file__)
        for node in ast.walk(ast.parse(path.read_text()))
        if makes_key(node)
    ]
    assert not found, found
