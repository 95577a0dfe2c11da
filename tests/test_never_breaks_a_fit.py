"""The diagnosis never breaks the fit it watches: what it meets is one warning line, and the fit ends as without it."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import fit_module
from lightning import Callback, LightningModule, Trainer
from lightning.pytorch.loggers import CSVLogger, Logger
from torch.utils.data import DataLoader, Dataset

from mnistperf.diagnosis import EpochTimer, SampleAudit
from mnistperf.diagnosis.guard import jsonable
from mnistperf.diagnosis.record import epoch_text

ROWS, BATCH, EPOCHS = 12, 4, 2


class Normalizer:
    """An object of the kind real libraries keep in their hyperparameters (JSON cannot hold it)."""

    def __init__(self, scale: float):
        self.scale = scale

    def __repr__(self) -> str:
        return f"Normalizer(scale={self.scale})"


class Rows(Dataset):
    def __init__(self):
        generator = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(ROWS, 3, generator=generator), torch.randint(0, 2, (ROWS,), generator=generator)

    def __len__(self) -> int:
        return ROWS

    def __getitem__(self, index):
        return {"x": self.x[index], "y": self.y[index], "index": index}


class Odd(LightningModule):
    """A module whose hyperparameters, metrics and batch counting are what published libraries hand a callback."""

    def __init__(self, normalizer=None, loss=None, kind=dict, table=None, count=3, broken_count=False):
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(3, 2)
        self.broken_count = broken_count

    def samples_in_batch(self, batch) -> int:
        if self.broken_count:
            raise KeyError("label")
        return len(batch["y"])

    def _loss(self, batch):
        return torch.nn.functional.cross_entropy(self.layer(batch["x"]), batch["y"])

    def training_step(self, batch, batch_idx):
        return self._loss(batch)

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self._loss(batch))

    def on_validation_epoch_end(self):
        metrics = self.trainer.callback_metrics
        metrics["val_histogram"] = torch.arange(3.0)  # a metric that is not a scalar
        metrics["val_note"] = "fine"  # nor a number

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Elsewhere(Logger):
    """A logger writing nowhere, whose folder is ``save_dir`` (any folder: missing, or one nobody can write)."""

    def __init__(self, save_dir: Path, refuse: tuple[str, ...] = ()):
        super().__init__()
        self._save_dir, self.refuse = save_dir, refuse
        self.logged: list[dict] = []
        self.steps: list[int | None] = []  # each call's

    @property
    def name(self):
        return "elsewhere"

    @property
    def version(self):
        return 0

    @property
    def save_dir(self):
        return str(self._save_dir)

    def log_hyperparams(self, params, *args, **kwargs):
        pass

    def log_metrics(self, metrics, step=None):
        if any(key.startswith(self.refuse) for key in metrics) and self.refuse:
            raise RuntimeError("this logger refuses those keys")
        self.logged.append(dict(metrics))
        self.steps.append(step)


def watched(module: LightningModule, tmp_path: Path, **trainer_options) -> tuple[Trainer, EpochTimer, SampleAudit]:
    """``module`` fitted on shuffled Rows, validated on Rows, with an EpochTimer and a SampleAudit watching, logging
    to a CSVLogger in ``tmp_path`` unless ``trainer_options`` say otherwise."""
    timer, audit = EpochTimer(), SampleAudit()
    options = {"num_sanity_val_steps": 0, "default_root_dir": tmp_path, "logger": CSVLogger(tmp_path, name="odd")}
    trainer = fit_module(
        module,
        DataLoader(Rows(), batch_size=BATCH, shuffle=True),
        DataLoader(Rows(), batch_size=BATCH),
        callbacks=[timer, audit],
        max_epochs=EPOCHS,
        **{**options, **trainer_options},
    )
    return trainer, timer, audit


def problems(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "mnistperf.diagnosis"]


def clean(trainer: Trainer, timer: EpochTimer, audit: SampleAudit) -> None:
    """The fit finished and was timed and audited as if nothing odd had happened."""
    assert trainer.state.finished and trainer.global_step == EPOCHS * ROWS // BATCH
    assert [row["samples"] for row in timer.epochs] == [ROWS] * EPOCHS
    assert [(row["seen"], row["distinct"], row["missing"]) for row in audit.epochs] == [(ROWS, ROWS, 0)] * EPOCHS


def test_hyperparameters_json_cannot_hold_are_written_as_their_repr(tmp_path, caplog):
    module = Odd(Normalizer(2.0), torch.nn.CrossEntropyLoss(), dict, {("a", 1): [Normalizer(1.0)]}, np.int64(3))
    trainer, timer, audit = watched(module, tmp_path)
    clean(trainer, timer, audit)
    written = json.loads(timer.summary_path.read_text())
    assert written["model"] == {
        "normalizer": "Normalizer(scale=2.0)",
        "loss": "CrossEntropyLoss()",
        "kind": "<class 'dict'>",
        "table": {"('a', 1)": ["Normalizer(scale=1.0)"]},
        "count": 3,
        "broken_count": False,
    }
    assert written["problems"] == [] and problems(caplog) == []


def test_metrics_that_are_not_scalars_are_left_out_of_the_epochs_row(tmp_path):
    trainer, timer, audit = watched(Odd(), tmp_path)
    clean(trainer, timer, audit)
    for row in timer.epochs:
        assert "val_loss" in row and "val_histogram" not in row and "val_note" not in row


def test_without_a_logger_timing_json_goes_to_the_root_folder(tmp_path):
    trainer, timer, audit = watched(Odd(), tmp_path, logger=False)
    clean(trainer, timer, audit)
    assert timer.summary_path == tmp_path / "timing.json" and timer.summary_path.is_file()


def test_the_headline_names_a_log_folder_as_a_shell_reads_it(tmp_path, capsys):
    folder = tmp_path / "my runs" / "exp (1)"
    watched(Odd(), tmp_path, logger=Elsewhere(folder))
    assert f"`mnistperf report {shlex.quote(str(folder))}` prints it" in capsys.readouterr().out


def test_a_missing_log_folder_is_made(tmp_path):
    folder = tmp_path / "not" / "yet"
    trainer, timer, audit = watched(Odd(), tmp_path, logger=Elsewhere(folder))
    clean(trainer, timer, audit)
    assert json.loads((folder / "timing.json").read_text())["config"] == "elsewhere"


def test_a_log_folder_nobody_can_write_is_one_warning_line(tmp_path, caplog, capsys):
    folder = Path("/proc/mnistperf-cannot-write-here")  # not writable, whoever runs the test
    trainer, timer, audit = watched(Odd(), tmp_path, logger=Elsewhere(folder))
    clean(trainer, timer, audit)
    assert timer.summary_path is None
    (line,) = problems(caplog)
    assert line.startswith(f"EpochTimer: writing {folder / 'timing.json'} failed (") and "fit goes on" in line
    out = capsys.readouterr().out
    assert "\nPer epoch (epoch" in out  # the summary is still printed, pointing at no file
    assert f"not written ({folder / 'timing.json'} could not be written, as said above)" in out
    assert "mnistperf report" not in out and "timing summary written" not in out


def test_a_logger_that_refuses_the_figures_and_a_failing_part_of_the_report_are_warnings(tmp_path, caplog, monkeypatch):
    def broken(device):
        raise OSError("no /proc here")

    monkeypatch.setattr("mnistperf.diagnosis.record.run.environment", broken)
    logger = Elsewhere(tmp_path / "logs", refuse=("timing/", "audit/"))
    trainer, timer, audit = watched(Odd(), tmp_path, logger=logger)
    clean(trainer, timer, audit)
    said = problems(caplog)
    assert said == [
        "EpochTimer: logging the epoch's figures to Elsewhere failed (RuntimeError: this logger refuses those keys); "
        "the fit goes on without it",
        "SampleAudit: logging the epoch's counts to Elsewhere failed (RuntimeError: this logger refuses those keys); "
        "the fit goes on without it",
        "EpochTimer: reading the environment failed (OSError: no /proc here); the fit goes on without it",
    ]  # each once, over two epochs
    written = json.loads(timer.summary_path.read_text())
    assert "device" not in written and len(written["epochs"]) == EPOCHS and written["verdict"]
    assert written["problems"] == [said[0], said[2]]
    assert any("val_loss" in logged for logged in logger.logged)  # the run's own metrics still reach it


def test_a_samples_in_batch_that_raises_leaves_samples_uncounted(tmp_path, caplog):
    trainer, timer, _ = watched(Odd(broken_count=True), tmp_path)
    assert trainer.state.finished and [row["samples"] for row in timer.epochs] == [None] * EPOCHS
    assert problems(caplog) == [
        "EpochTimer: counting a step's samples failed (KeyError: 'label'); the fit goes on without it"
    ]


@pytest.mark.parametrize(
    "given",
    [-1, 2.5, "4", None, True, torch.tensor(True)],
    ids=["negative", "a float", "a string", "None", "a bool", "a bool tensor"],
)
def test_a_samples_in_batch_returning_no_count_is_named_with_its_value_and_counts_nothing(given, caplog, capsys):
    timer = EpochTimer(samples_in_batch=lambda batch: given)
    trainer = fit_module(Odd(), DataLoader(Rows(), batch_size=BATCH), callbacks=[timer], max_epochs=EPOCHS)
    assert trainer.state.finished and [row["samples"] for row in timer.epochs] == [None] * EPOCHS
    assert problems(caplog) == [
        f"EpochTimer: counting a step's samples failed (ValueError: samples_in_batch returned {given!r}, not the "
        "batch's samples (an int, 0 or more)); the fit goes on without it"
    ]
    assert "pass EpochTimer(samples_in_batch=...)" not in capsys.readouterr().out  # it was passed


def test_a_sample_id_the_batch_lacks_leaves_the_epochs_not_audited(tmp_path, caplog, capsys):
    audit = SampleAudit(sample_id="idx")
    trainer = fit_module(Odd(), DataLoader(Rows(), batch_size=BATCH), callbacks=[audit], max_epochs=EPOCHS)
    assert trainer.state.finished and trainer.global_step == EPOCHS * ROWS // BATCH
    (line,) = problems(caplog)
    assert "sample_id 'idx': the batch has no such field" in line
    assert [row["audited"] for row in audit.epochs] == [False] * EPOCHS
    assert "sample audit, epoch 2: not audited (fingerprinting a training batch failed" in capsys.readouterr().out


def test_a_fit_that_fails_gets_its_profiler_back_and_no_flop_count_left_running(tmp_path, capsys):
    """Lightning calls no teardown after an exception: the timer tears down in on_exception."""

    class FailingStep(Odd):
        def training_step(self, batch, batch_idx):
            raise RuntimeError("the step fails")

    timer, audit = EpochTimer(), SampleAudit()
    options = {"enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False}
    trainer = Trainer(accelerator="cpu", max_epochs=1000, logger=False, callbacks=[timer, audit], **options)
    profiler = trainer.profiler
    with pytest.raises(RuntimeError, match="the step fails"):
        trainer.fit(FailingStep(), DataLoader(Rows(), batch_size=BATCH))
    assert trainer.profiler is profiler
    assert not timer._flops.due and timer._flops.counting is None  # the first step's count begun, then stopped
    out = capsys.readouterr().out
    assert epoch_text.NOTHING_TIMED in out and "epoch 1:" not in out  # no step of its epoch trained: none to close
    assert not timer.epochs and timer.summary_path is None
    assert not audit.epochs and "sample audit" not in out  # nor an audit of no sample

    class FailsFirst(Callback):  # before the epoch's first step: no epoch to close (as under DDP, where none is)
        def on_train_epoch_start(self, trainer, pl_module):
            raise RuntimeError("the fit fails first")

    with pytest.raises(RuntimeError, match="the fit fails first"):
        fit_module(Odd(), DataLoader(Rows(), batch_size=BATCH), callbacks=[EpochTimer(), FailsFirst()])
    assert epoch_text.NOTHING_TIMED in capsys.readouterr().out  # nothing to write, and said so

    class FailsInSanityCheck(Odd):  # (Ctrl-C there reads the same)
        def validation_step(self, batch, batch_idx):
            raise RuntimeError("the sanity check fails")

    with pytest.raises(RuntimeError, match="the sanity check fails"):
        loader = DataLoader(Rows(), batch_size=BATCH)
        fit_module(FailsInSanityCheck(), loader, loader, callbacks=[EpochTimer()], num_sanity_val_steps=1)
    assert epoch_text.NOTHING_TIMED in capsys.readouterr().out


def test_the_callbacks_log_each_epoch_at_the_step_and_with_the_epoch_lightning_logs_its_epoch_metrics(tmp_path):
    """So a logger that drops a step below its last (as some services do) keeps Lightning's metrics and theirs."""

    class Logs(Odd):
        def training_step(self, batch, batch_idx):
            loss = self._loss(batch)
            self.log("train_loss", loss, on_step=True, on_epoch=True)
            return loss

    logger = Elsewhere(tmp_path / "logs")
    watched(Logs(), tmp_path, logger=logger, log_every_n_steps=1)
    calls = list(zip(logger.steps, logger.logged, strict=True))
    lightnings = [(step, m["epoch"]) for step, m in calls if "train_loss_epoch" in m]
    timers = [(step, m["epoch"]) for step, m in calls if "timing/train_s" in m]
    audits = [(step, m["epoch"]) for step, m in calls if "audit/duplicates" in m]
    assert len(lightnings) == EPOCHS and timers == audits == lightnings
    assert logger.steps == sorted(logger.steps)  # never a step below one already logged


def test_a_callback_reading_its_profilers_own_attributes_during_the_fit_reads_them_beside_the_timer(tmp_path):
    """While the timer times the fetches, the trainer's profiler is its clock around the user's, read through."""
    from lightning.pytorch.profilers import SimpleProfiler

    fetches = []

    class ReadsProfiler(Callback):
        def on_train_epoch_end(self, trainer, pl_module):
            fetches.append(len(trainer.profiler.recorded_durations["[_TrainingEpochLoop].train_dataloader_next"]))

    options = {"enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False}
    profiler = SimpleProfiler()
    trainer = Trainer(
        accelerator="cpu", max_epochs=2, logger=False, profiler=profiler, default_root_dir=tmp_path,
        callbacks=[EpochTimer(), ReadsProfiler()], **options,
    )  # fmt: skip
    trainer.fit(Odd(), DataLoader(Rows(), batch_size=BATCH))
    assert fetches[0] > 0 and fetches[1] > fetches[0] and trainer.profiler is profiler


def test_values_json_cannot_hold_become_their_repr_and_numbers_stay_numbers():
    assert jsonable({"a": (1, 2.5, None), 3: np.float32(0.5), "t": torch.zeros(1)}) == {
        "a": [1, 2.5, None],
        3: 0.5,
        "t": repr(torch.zeros(1)),
    }
