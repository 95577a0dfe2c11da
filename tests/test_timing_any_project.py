"""EpochTimer on Lightning projects that are not this lab's: their batches, optimization, data and profiler."""

from __future__ import annotations

import collections
import dataclasses
import json
import re
import time
from pathlib import Path

import pytest
import torch
import yaml
from conftest import FailAt, ForbidSyncs, fit_module
from lightning import LightningDataModule, LightningModule, Trainer
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.loggers import CSVLogger, Logger, TensorBoardLogger
from lightning.pytorch.profilers import SimpleProfiler
from lightning.pytorch.utilities.data import extract_batch_size
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch.utils.data import DataLoader, Dataset, TensorDataset

from mnistperf import upstream
from mnistperf.diagnosis import EpochTimer, SampleAudit
from mnistperf.diagnosis.callbacks.project_reader import project_hints, project_terms
from mnistperf.diagnosis.figures import FIGURES
from mnistperf.diagnosis.measure import phases
from mnistperf.diagnosis.measure.busy_window import PROFILER_WARMUP_STEPS
from mnistperf.diagnosis.measure.samples import read
from mnistperf.diagnosis.record.advice import WORKERS
from mnistperf.diagnosis.record.window_keeper import PROFILE_ANYWAY

ROWS, BATCH, EPOCHS = 24, 4, 2
SCALARS = (  # the few an epoch hands the loggers by default
    "timing/train_s",
    "timing/eval_s",
    "timing/samples_per_s",
    "timing/input_wait_share",
    "timing/step_median_s",
)


def features(rows: int = ROWS) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return torch.randn(rows, 3, generator=generator), torch.randint(0, 2, (rows,), generator=generator)


class TupleBatches(LightningModule):
    """(x, y) batches from a plain DataLoader, a self.log every step, automatic optimization."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(3, 2)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.layer(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class BareTensorsManual(LightningModule):
    """Bare tensor batches, manual optimization."""

    def __init__(self):
        super().__init__()
        self.automatic_optimization = False
        self.layer = torch.nn.Linear(3, 1)

    def training_step(self, batch, batch_idx):
        optimizer = self.optimizers()
        optimizer.zero_grad()
        self.manual_backward(self.layer(batch).pow(2).mean())
        optimizer.step()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Pairs(Dataset):
    def __init__(self):
        self.x, self.y = features()

    def __len__(self) -> int:
        return ROWS

    def __getitem__(self, index):
        return {"pair": (self.x[index], self.y[index]), "index": index}


class PairData(LightningDataModule):
    """Dict-of-tuple batches, for training and validation."""

    def train_dataloader(self):
        return DataLoader(Pairs(), batch_size=BATCH)

    def val_dataloader(self):
        return DataLoader(Pairs(), batch_size=BATCH)


class DictOfTuples(LightningModule):
    def __init__(self, lr: float = 0.1):
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(3, 2)

    def _loss(self, batch):
        x, y = batch["pair"]
        return torch.nn.functional.cross_entropy(self.layer(x), y)

    def training_step(self, batch, batch_idx):
        return self._loss(batch)

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self._loss(batch))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def timed(
    module: LightningModule, tmp_path: Path, data=None, datamodule=None, timer=None, **trainer_options
) -> tuple[EpochTimer, Trainer]:
    """``module`` fitted under an EpochTimer (``timer``, or a new one profiling however short the fit), logging to
    TensorBoard in ``tmp_path``."""
    timer = timer or EpochTimer(window_share=None)
    trainer = fit_module(
        module,
        *([data] if data is not None else []),
        datamodule=datamodule,
        callbacks=[timer],
        max_epochs=EPOCHS,
        num_sanity_val_steps=0,
        logger=TensorBoardLogger(tmp_path, name="foreign"),
        **trainer_options,
    )
    return timer, trainer


def check_reported(timer: EpochTimer, trainer: Trainer, with_eval: bool = False, short: bool = False) -> dict:
    """Every epoch timed and counted, timing.json written beside the logs, the scalars in TensorBoard.

    ``short``: the timer kept its default share of the fit for the window, which a fit of a few steps may be too
    short for: its verdict is then undetermined and says how to profile it anyway."""
    assert [e["samples"] for e in timer.epochs] == [ROWS] * EPOCHS
    for number, row in enumerate(timer.epochs, 1):
        assert row["train_s"] > 0 and row["samples_per_s"] == pytest.approx(ROWS / row["train_s"])
        # The warm-up epoch waits for the steady epoch's window, unless its wait for data decides it.
        verdicts = ("input-bound", "overhead-bound", "compute-bound", *(("undetermined",) if number == 1 else ()))
        if short and number > 1 and row["verdict"] == "undetermined":
            assert PROFILE_ANYWAY in row["verdict_reason"]
        else:
            assert row["verdict"] in verdicts, row["verdict_reason"]
        assert (row["eval_s"] > 0) is with_eval
    summary = json.loads((Path(trainer.log_dir) / "timing.json").read_text())
    assert summary["epochs"] == json.loads(json.dumps(timer.epochs))
    assert summary["config"] == "foreign" and summary["runner"] == "lightning" and "data" not in summary
    events = EventAccumulator(trainer.log_dir)
    events.Reload()
    for tag in SCALARS:
        assert len(events.Scalars(tag)) == EPOCHS, tag
    assert {tag for tag in events.Tags()["scalars"] if tag.startswith("timing/")} == set(SCALARS)
    assert [s.value for s in events.Scalars("timing/samples_per_s")] == pytest.approx(
        [e["samples_per_s"] for e in timer.epochs]
    )
    return summary


def test_tuple_batches_with_a_log_per_step_and_no_datamodule_keep_the_users_profiler(tmp_path):
    profiler = SimpleProfiler(dirpath=tmp_path, filename="profile")
    timer, trainer = timed(
        TupleBatches(), tmp_path, DataLoader(TensorDataset(*features()), batch_size=BATCH), profiler=profiler
    )
    check_reported(timer, trainer)
    assert trainer.profiler is profiler
    report = (tmp_path / "fit-profile.txt").read_text()
    assert "train_dataloader_next" in report and "run_training_batch" in report


class TimerWatchingBackward(EpochTimer):
    """A user's EpochTimer that also uses one of the hooks the timer leaves to Lightning to skip."""

    def __init__(self):
        super().__init__(window_share=None)
        self.backwards = 0

    def on_after_backward(self, trainer, pl_module):
        self.backwards += 1


def test_lightning_dispatches_only_the_batch_hooks_the_timer_uses_and_a_subclass_keeps_its_own(tmp_path):
    profiler = SimpleProfiler(dirpath=tmp_path, filename="profile")
    data = DataLoader(TensorDataset(*features()), batch_size=BATCH)
    timer, trainer = timed(TupleBatches(), tmp_path, data, profiler=profiler)
    check_reported(timer, trainer)
    report = (tmp_path / "fit-profile.txt").read_text()
    calls = dict(re.findall(r"\[Callback\]EpochTimer\.(\w+)\s*\|\s*\S+\s*\|\s*(\d+)", report))
    steps = EPOCHS * ROWS // BATCH
    sampled = sum(phases.sampled(i, 1, e) for e in range(EPOCHS) for i in range(ROWS // BATCH))  # index 1 of 6
    window = timer.busy_window  # its steps run under the profiler: none of them is a sample
    sampled -= sum(
        phases.sampled(i, 1, window["epoch"] - 1)
        for i in range(window["first_step"] - 1 - PROFILER_WARMUP_STEPS, window["last_step"])
    )
    assert int(calls["on_train_batch_start"]) == int(calls["on_train_batch_end"]) == steps
    for phase_hook in ("on_before_backward", "on_after_backward", "on_before_optimizer_step"):
        assert int(calls[phase_hook]) == sampled  # dispatched on the sampled steps only
    assert not {"on_before_zero_grad", "on_validation_batch_end"} & set(calls)

    watching, trainer = timed(TupleBatches(), tmp_path / "subclass", data, timer=TimerWatchingBackward())
    check_reported(watching, trainer)
    assert watching.backwards == EPOCHS * ROWS // BATCH


class LogsTimingItself(TupleBatches):
    def on_train_epoch_end(self):
        self.log("timing/train_s", 123.0)


def test_a_figure_the_module_logs_under_the_same_name_is_left_to_the_module_said_once(tmp_path, capsys):
    """Two series under one name would interleave in every logger: the module's own is kept."""
    from lightning.pytorch.loggers import CSVLogger

    data = DataLoader(TensorDataset(*features()), batch_size=BATCH)
    logger = CSVLogger(tmp_path, name="run")
    fit_module(LogsTimingItself(), data, callbacks=[EpochTimer()], max_epochs=3, logger=logger)
    rows = (Path(logger.log_dir) / "metrics.csv").read_text().splitlines()
    column = rows[0].split(",").index("timing/train_s")
    values = [row.split(",")[column] for row in rows[1:] if row.split(",")[column]]
    assert values[-2:] == ["123.0", "123.0"] and values.count("123.0") == 3  # the timer's first alone beside them
    out = capsys.readouterr().out
    said = "EpochTimer: the module logs timing/train_s itself, so EpochTimer from now on logs its own figure of that"
    assert out.count(said) == 1


@pytest.mark.parametrize("logged", [False, True, "fixed"], ids=["logger=False", "a logger", "a logger's own folder"])
def test_a_trainer_fitted_again_says_its_timing_json_took_the_place_of_the_first_fits(tmp_path, capsys, logged):
    """Lightning keeps a Trainer's log folder for its next fit: the second timing.json replaces the first, said so
    with what would keep both (without a logger, a new Trainer writes to the same root; a logger of a fixed folder,
    as some libraries make, gives a new Trainer's fit that folder too)."""
    data = DataLoader(TensorDataset(*features()), batch_size=BATCH)
    logger = {False: False, True: TensorBoardLogger(tmp_path, "run"), "fixed": CSVLogger(tmp_path, "", version="")}
    logger = logger[logged]
    trainer = fit_module(
        TupleBatches(), data, callbacks=[EpochTimer()], max_epochs=1, logger=logger, default_root_dir=tmp_path
    )
    first = capsys.readouterr().out
    trainer.fit_loop.max_epochs = 2
    trainer.fit(trainer.lightning_module, data)
    second = capsys.readouterr().out
    assert "timing summary written" in first and "in place of an earlier fit's" not in first
    keeps = {False: "another default_root_dir", True: "a new Trainer, or a logger version of its own,"}.get(
        logged, "a logger folder (save_dir, name or version) of each fit's own, as its logger gives every fit this one,"
    )
    assert f"in place of an earlier fit's there; {keeps} keeps each fit's" in second
    folder = Path(trainer.log_dir) if logged else tmp_path
    assert [row["epoch"] for row in json.loads((folder / "timing.json").read_text())["epochs"]] == [2]


def test_a_timer_listed_twice_stands_aside_saying_so_and_the_first_times_the_fit_as_alone(tmp_path, capsys):
    """Two timers would each read the other's hooks inside their steps and windows: the second does nothing."""
    first, second = EpochTimer(window_share=None), EpochTimer(window_share=None)
    data = DataLoader(TensorDataset(*features()), batch_size=BATCH)
    trainer = fit_module(
        TupleBatches(),
        data,
        callbacks=[first, second],
        max_epochs=EPOCHS,
        logger=TensorBoardLogger(tmp_path, "foreign"),
    )
    check_reported(first, trainer)
    assert first.busy_window is not None and first.busy_window.get("share") is not None  # the window read a share
    assert second.epochs == [] and second.summary_path is None
    out = capsys.readouterr().out
    assert out.count("EpochTimer: listed twice among the trainer's callbacks") == 1
    assert out.count("Verdict:") == 1 and out.count("timing summary written") == 1

    alone, trainer = timed(TupleBatches(), tmp_path / "alone", data, timer=second)  # its hooks back for its next fit
    check_reported(alone, trainer)

    third = EpochTimer(window_share=None)  # standing aside in a fit an error stops, which Lightning tears not down
    with pytest.raises(RuntimeError, match="a step failed"):
        fit_module(TupleBatches(), data, callbacks=[EpochTimer(), third, FailAt(3)], max_epochs=EPOCHS)
    alone, trainer = timed(TupleBatches(), tmp_path / "after an error", data, timer=third)
    check_reported(alone, trainer)
    capsys.readouterr()
    evaluating = Trainer(callbacks=[EpochTimer(), EpochTimer()], logger=False, enable_progress_bar=False)
    evaluating.validate(Validated(), data, verbose=False)  # an evaluation is no fit to stand aside from: nothing said
    assert "listed twice" not in capsys.readouterr().out


def test_a_timer_whose_hooks_another_callback_calls_is_not_among_the_trainers_and_stands_aside_from_nothing():
    """As a wrapping callback would call it: the trainer's callbacks hold no EpochTimer, and nothing is amiss."""
    timer = EpochTimer()
    timer.setup(Trainer(callbacks=[], logger=False), TupleBatches(), "fit")
    assert timer._aside == []


def test_bare_tensor_batches_under_manual_optimization(tmp_path):
    timer, trainer = timed(BareTensorsManual(), tmp_path, DataLoader(features()[0], batch_size=BATCH))
    check_reported(timer, trainer)
    assert trainer.global_step == EPOCHS * ROWS // BATCH


def test_dict_of_tuple_batches_from_a_datamodule_with_validation(tmp_path):
    profiler = SimpleProfiler(dirpath=tmp_path, filename="profile")
    timer, trainer = timed(DictOfTuples(), tmp_path, datamodule=PairData(), profiler=profiler)
    summary = check_reported(timer, trainer, with_eval=True)
    assert summary["model"] == {"lr": 0.1}
    report = (tmp_path / "fit-profile.txt").read_text()
    assert "[Callback]EpochTimer.on_validation_start" in report  # used: dispatched
    assert "[Callback]EpochTimer.on_validation_batch_end" not in report  # unused per-batch hook: skipped
    assert all(isinstance(row["val_loss"], float) for row in summary["epochs"])


def test_one_line_under_trainer_callbacks_of_any_lightningcli_config(tmp_path, capsys):
    config = {
        "seed_everything": 1,
        "trainer": {
            "accelerator": "cpu",
            "max_epochs": EPOCHS,
            "enable_progress_bar": False,
            "enable_checkpointing": False,
            "enable_model_summary": False,
            "num_sanity_val_steps": 0,
            "logger": {
                "class_path": "lightning.pytorch.loggers.TensorBoardLogger",
                "init_args": {"save_dir": str(tmp_path), "name": "foreign"},
            },
            "callbacks": [{"class_path": "mnistperf.diagnosis.EpochTimer"}],
        },
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    cli = LightningCLI(DictOfTuples, PairData, args=["fit", "--config", str(path)])
    (timer,) = [c for c in cli.trainer.callbacks if isinstance(c, EpochTimer)]
    check_reported(timer, cli.trainer, with_eval=True, short=True)
    printed = capsys.readouterr().out
    assert printed.count("epoch 1: train") == 1 and "\nPer epoch (epoch" in printed


class Words(Dataset):
    def __len__(self) -> int:
        return ROWS

    def __getitem__(self, index):
        return f"word {index}"


class WordModule(LightningModule):
    """Batches of strings: no tensor in them says how many samples they hold."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(torch.full((len(batch), 1), 1.0)).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class CountedWords(WordModule):
    def samples_in_batch(self, batch) -> int:
        return len(batch)


def test_what_no_batch_shows_it_says_once_and_a_module_can_say_its_batch_size(tmp_path, capsys):
    timer, trainer = timed(WordModule(), tmp_path, DataLoader(Words(), batch_size=BATCH))
    printed = capsys.readouterr().out
    assert printed.count("EpochTimer: no tensor in a training batch (list) gives its samples") == 1
    assert "samples_in_batch" in printed
    assert all(e["samples"] is None and e["samples_per_s"] is None for e in timer.epochs)
    summary = json.loads((Path(trainer.log_dir) / "timing.json").read_text())
    assert summary["samples_per_s"] is None and "s, not measured (samples not counted); " in printed

    timer, _ = timed(CountedWords(), tmp_path / "counted", DataLoader(Words(), batch_size=BATCH))
    assert [e["samples"] for e in timer.epochs] == [ROWS] * EPOCHS


Pair = collections.namedtuple("Pair", "x y")


@dataclasses.dataclass
class Fields:
    label: str
    x: torch.Tensor


@pytest.mark.parametrize(
    "batch",
    [
        torch.zeros(5, 3),
        torch.tensor(2.0),
        (torch.zeros(5, 3), torch.zeros(5)),
        [torch.zeros(5), torch.zeros(5)],
        {"image": torch.zeros(5, 1, 2, 2), "label": torch.zeros(5)},
        {"pair": (torch.zeros(5), torch.zeros(5))},
        ({"x": torch.zeros(5)}, [torch.zeros(5)]),
        Pair(torch.zeros(5), torch.zeros(5)),
        Fields("a", torch.zeros(5)),
        (["a", "b"], torch.zeros(5)),
        ((), torch.zeros(5)),
    ],
    ids=lambda batch: type(batch).__name__,
)
def test_the_samples_counted_are_those_lightnings_extract_batch_size_finds(batch):
    """Where Lightning reads a batch right, the two agree (where it does not: tests/test_batches.py)."""
    assert read(batch).samples == extract_batch_size(batch) == upstream.lightning_batch_size(batch)


def test_a_batch_with_no_tensor_counts_none_and_an_empty_one_holds_none():
    assert read(["a", "b"]).samples is None and read({}).samples == read([]).samples == 0


@pytest.mark.cuda
def test_a_foreign_module_trains_without_a_single_sync_between_its_steps(tmp_path):
    """Tuple batches already on the GPU, a self.log per step: nothing EpochTimer does between the first and the
    last training step of an epoch may wait for the device."""

    class QuietLog(TupleBatches):
        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self.layer(x), y)
            self.log("train_loss", loss, on_step=False, on_epoch=True)  # prog_bar on a step would .item() it
            return loss

    x, y = (t.cuda() for t in features(64))
    timer = ForbidSyncs()
    try:
        fit_module(
            QuietLog(),
            DataLoader(TensorDataset(x, y), batch_size=BATCH),
            callbacks=[timer],
            accelerator="cuda",
            devices=1,
            max_epochs=EPOCHS,
        )
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert [e["samples"] for e in timer.epochs] == [64] * EPOCHS
    assert not [line for line in timer.problems.lines if "synchroniz" in line]  # caught inside the timer, said there


def test_beside_a_progress_bar_the_timer_says_where_its_epochs_start(tmp_path, capsys):
    fit_module(
        TupleBatches(),
        DataLoader(TensorDataset(*features()), batch_size=BATCH),
        callbacks=[EpochTimer()],
        enable_progress_bar=True,
        enable_model_summary=True,
        default_root_dir=tmp_path,
    )
    out = capsys.readouterr().out
    assert out.count("epoch 1 (bar: Epoch 0): train") == 1  # the bar counts from 0, the timer from 1
    assert "epoch 2: train" in out


# ---------------------------------------------------------------- advice in the project's own terms
class SlowItems(Dataset):
    """Items that take 50 ms each to read: a trivial step waits for them, so the run is input-bound.

    The margin holds on a busy machine: the sleep does not slow with the load, and a step slowed tenfold by waiting
    for a core still takes under a fifth of the 100 ms a batch waits.
    """

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index):
        time.sleep(0.05)
        return torch.randn(3), index % 2


class WorkersData(LightningDataModule):
    """A DataModule with its own names for the loader's settings: ``n_workers``, ``pin``."""

    def __init__(self, n_workers: int = 0, pin: bool = False):
        super().__init__()
        self.save_hyperparameters()

    def train_dataloader(self):
        return DataLoader(SlowItems(), batch_size=2, num_workers=self.hparams.n_workers, pin_memory=self.hparams.pin)


def input_bound_advice(how: str, tmp_path: Path) -> tuple[list[str], Path]:
    """The advice of an input-bound fit of WorkersData: through a config naming its classes, through a CLI of fixed
    classes, or through a plain Trainer; and the config."""
    trainer_config = {
        "accelerator": "cpu",
        "max_epochs": EPOCHS,
        "enable_progress_bar": False,
        "enable_checkpointing": False,
        "enable_model_summary": False,
        "logger": False,
        "default_root_dir": str(tmp_path),
        "callbacks": [{"class_path": "mnistperf.diagnosis.EpochTimer"}],
    }
    path = tmp_path / "their.yaml"
    if how == "plain Trainer":
        timer = EpochTimer()
        trainer = fit_module(TupleBatches(), datamodule=WorkersData(), callbacks=[timer], default_root_dir=tmp_path)
    elif how == "config naming its classes":
        classes = {
            "model": {"class_path": f"{__name__}.TupleBatches"},
            "data": {"class_path": f"{__name__}.WorkersData", "init_args": {"n_workers": 0}},
        }
        path.write_text(yaml.safe_dump({"trainer": trainer_config, **classes}))
        trainer = LightningCLI(args=["fit", "--config", str(path)]).trainer
    else:
        path.write_text(yaml.safe_dump({"trainer": trainer_config, "data": {"n_workers": 0}}))
        trainer = LightningCLI(TupleBatches, WorkersData, args=["fit", "--config", str(path)]).trainer
    (timer,) = [c for c in trainer.callbacks if isinstance(c, EpochTimer)]
    summary = json.loads(timer.summary_path.read_text())
    assert summary["verdict"] == "input-bound", summary["verdict_reason"]
    return summary["advice"]["hints"], path


def test_an_input_bound_cli_run_is_told_its_own_option_and_the_tune_command_for_its_config(tmp_path):
    from mnistperf.tune.project import load

    hints, config = input_bound_advice("config naming its classes", tmp_path)
    assert hints[:2] == [
        "more DataLoader workers (data.init_args.n_workers)",
        "workers kept alive between epochs (persistent_workers=True on the DataLoader)",
    ]
    assert f"`mnistperf tune --config {config}` trains short fits with each" in hints[2]
    assert not [hint for hint in hints if "pin" in hint]  # a CPU run: pinned batches would buy nothing
    knobs = load(config, []).knobs([], batch_size=False)  # the same discovery: tune changes the option named
    assert knobs.by_setting("num_workers").key == "data.init_args.n_workers"


@pytest.mark.parametrize(
    "how, workers, tune",
    [
        ("CLI of fixed classes", "data.n_workers", "tune_loaders(TupleBatches(...), WorkersData(...), trainer_kwargs)"),
        ("plain Trainer", "WorkersData(n_workers=...)", "tune_loaders(TupleBatches(...), WorkersData(...), "),
    ],
)
def test_a_run_tune_cannot_read_the_config_of_is_pointed_at_tunes_python_call(tmp_path, how, workers, tune):
    hints, _ = input_bound_advice(how, tmp_path)
    assert hints[0] == f"more DataLoader workers ({workers})"
    assert tune in hints[2] and "--config" not in hints[2]
    assert not [hint for hint in hints if "pin" in hint]


def test_a_loader_handed_to_fit_is_not_pointed_at_tune_which_cannot_make_it_again(tmp_path):
    timer = EpochTimer()
    fit_module(TupleBatches(), DataLoader(SlowItems(), batch_size=2), callbacks=[timer], default_root_dir=tmp_path)
    hints = json.loads(timer.summary_path.read_text())["advice"]["hints"]
    assert hints[0] == "more DataLoader workers (num_workers)" and not [hint for hint in hints if "tune" in hint]


def test_a_project_whose_terms_cannot_be_read_gets_anyones_advice_and_one_problem_line(tmp_path, monkeypatch):
    def unreadable(trainer):
        raise RuntimeError("no signature")

    monkeypatch.setattr("mnistperf.diagnosis.callbacks.epoch_timer.project_terms", unreadable)
    timer = EpochTimer()
    fit_module(TupleBatches(), datamodule=WorkersData(), callbacks=[timer], default_root_dir=tmp_path)
    summary = json.loads(timer.summary_path.read_text())
    assert summary["advice"]["hints"][0] == "more DataLoader workers (num_workers)"
    assert [line for line in summary["problems"] if "naming the advice in the project's terms failed" in line]


def test_a_config_saver_holding_no_config_leaves_the_advice_in_the_projects_terms_without_a_problem(tmp_path):
    from lightning.pytorch.cli import LightningArgumentParser, SaveConfigCallback

    class SavesElsewhere(SaveConfigCallback):
        def save_config(self, trainer, pl_module, stage):
            pass

    saver = SavesElsewhere(LightningArgumentParser(), None, save_to_log_dir=False)  # type: ignore[arg-type]
    timer = EpochTimer()
    fit_module(TupleBatches(), datamodule=WorkersData(), callbacks=[timer, saver], default_root_dir=tmp_path)
    summary = json.loads(timer.summary_path.read_text())
    assert not summary["problems"], summary["problems"]
    assert summary["advice"]["hints"][0] == "more DataLoader workers (WorkersData(n_workers=...))"


def test_a_plain_trainer_run_loads_no_lightning_cli_for_the_diagnosis():
    """jsonargparse and LightningCLI take a tenth of a second to load: the diagnosis reads them only where loaded."""
    import subprocess
    import sys

    script = (
        "import sys, torch, lightning as L\n"
        "from torch.utils.data import DataLoader, TensorDataset\n"
        "from lightning.pytorch.demos.boring_classes import BoringModel\n"
        "from mnistperf.diagnosis import EpochTimer, SampleAudit\n"
        "timer = EpochTimer()\n"
        "L.Trainer(max_epochs=2, callbacks=[timer, SampleAudit()], logger=False, enable_progress_bar=False,\n"
        "          enable_checkpointing=False).fit(BoringModel())\n"
        "print('loaded' if 'jsonargparse' in sys.modules else 'not loaded', timer.clock.summary()['verdict'])\n"
    )
    found = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert found.stdout.splitlines()[-1].startswith("not loaded"), found.stdout[-2000:]


class Calls(Logger):
    """A logger that keeps every call to ``log_metrics``, as a logger that writes a row per call would pay for it."""

    def __init__(self):
        super().__init__()
        self.calls: list[dict[str, float]] = []

    name, version = "calls", 0

    def log_metrics(self, metrics, step=None):
        self.calls.append(dict(metrics))

    def log_hyperparams(self, params, *args, **kwargs):
        pass


@pytest.mark.parametrize("log_all", [False, True])
def test_each_callback_hands_a_logger_one_call_an_epoch_the_few_plotted_or_every_figure(tmp_path, log_all):
    logger = Calls()
    timer, audit = EpochTimer(log_all=log_all), SampleAudit(log_all=log_all)
    loader = DataLoader(TensorDataset(*features()), batch_size=BATCH)
    fit_module(TupleBatches(), loader, callbacks=[timer, audit], logger=logger, default_root_dir=tmp_path)
    ours = [call for call in logger.calls if any(key.startswith(("timing/", "audit/")) for key in call)]
    assert len(ours) == 2 * EPOCHS  # one call a callback an epoch
    keys = set().union(*ours)
    timing = {key for key in keys if key.startswith("timing/")}
    every = {
        f"timing/{key}" for row in timer.epochs for key, value in row.items() if key in FIGURES and value is not None
    }
    assert timing == (every if log_all else set(SCALARS) & every) and len(every) > len(SCALARS)
    counts = {"audit/duplicates", "audit/missing"}
    assert {key for key in keys if key.startswith("audit/")} == (
        counts | {"audit/seen", "audit/distinct"} if log_all else counts
    )


class Validated(TupleBatches):
    """TupleBatches with a validation that logs ``val/loss`` and ``val/acc``."""

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self.layer(x)
        self.log("val/loss", torch.nn.functional.cross_entropy(logits, y))
        self.log("val/acc", (logits.argmax(1) == y).float().mean())


def test_a_monitor_never_logged_is_named_at_the_fits_end_with_the_metrics_that_were(tmp_path, capsys):
    timer = EpochTimer(monitor="val/acx")
    loader = DataLoader(TensorDataset(*features()), batch_size=BATCH)
    fit_module(Validated(), loader, loader, callbacks=[timer], default_root_dir=tmp_path)
    said = capsys.readouterr().out
    reason = json.loads(timer.summary_path.read_text())["final_metric_reason"]
    assert reason.startswith("monitor='val/acx' was never logged by a validation")
    assert "the metrics logged: train_loss, val/acc, val/loss; did you mean val/acc?" in reason
    assert said.count(f"EpochTimer: {reason}.") == 1


def test_a_monitor_logged_is_reported_with_no_word_of_it_missing(tmp_path, capsys):
    timer = EpochTimer(monitor="val/acc")
    loader = DataLoader(TensorDataset(*features()), batch_size=BATCH)
    fit_module(Validated(), loader, loader, callbacks=[timer], default_root_dir=tmp_path)
    summary = json.loads(timer.summary_path.read_text())
    assert summary["final_metric"] is not None and "final_metric_reason" not in summary
    assert "never logged" not in capsys.readouterr().out


def test_a_last_epoch_without_a_validation_reports_the_last_validations_metric(tmp_path, capsys):
    """Validated every second epoch (as an interrupted fit's last epoch ends without one): epoch 2's value is final."""
    timer = EpochTimer(monitor="val/acc")
    loader = DataLoader(TensorDataset(*features()), batch_size=BATCH)
    fit_module(
        Validated(),
        loader,
        loader,
        callbacks=[timer],
        default_root_dir=tmp_path,
        max_epochs=3,
        check_val_every_n_epoch=2,
    )
    assert [row.get("val/acc") is not None for row in timer.epochs] == [False, True, False]
    assert json.loads(timer.summary_path.read_text())["final_metric"] == timer.epochs[1]["val/acc"]
    assert "never logged" not in capsys.readouterr().out


def test_input_bound_advice_leaves_out_what_the_loader_already_sets(tmp_path):
    """The input bound's advice, in the terms the fit's trainer gives, names no option its loader already sets.

    Read for the input bound whatever the fit measured: on a busy machine its own worker may hold the cores.
    """
    loader = DataLoader(SlowItems(), batch_size=2, num_workers=1, persistent_workers=True)
    timer = EpochTimer()
    trainer = fit_module(TupleBatches(), loader, callbacks=[timer], default_root_dir=tmp_path)
    hints = project_hints(None, project_terms(trainer), cuda=False)["input-bound"]
    assert hints[0] == "more DataLoader workers (num_workers)" and not [h for h in hints if "persistent" in h]
    assert timer._project_hints["input-bound"] == hints  # what the timer's advice gives an input bound


def test_input_bound_advice_for_items_already_tensors_in_memory_slices_batches_and_names_no_workers(tmp_path):
    """A TensorDataset's batch costs its items gathered one by one: workers add a copy between processes to that."""
    data = TensorDataset(torch.randn(16, 3), torch.randint(0, 2, (16,)))
    for dataset in (data, torch.utils.data.Subset(data, range(8))):
        trainer = fit_module(TupleBatches(), DataLoader(dataset, batch_size=4), default_root_dir=tmp_path)
        hints = project_hints(None, project_terms(trainer), cuda=False)["input-bound"]
        assert hints[0].startswith("batches sliced from the dataset's tensors in one call")
        assert "BatchSampler" in hints[0]
        assert not [hint for hint in hints if "workers" in hint and "more workers would add" not in hint]
        held = project_hints(None, project_terms(trainer), cuda=False)[WORKERS]  # its own workers held the cores
        assert held[0] == hints[0]  # the same fix, not per-item work done once: there is none
    batches = torch.utils.data.BatchSampler(torch.utils.data.RandomSampler(data), 4, drop_last=False)
    trainer = fit_module(TupleBatches(), DataLoader(data, sampler=batches, batch_size=None), default_root_dir=tmp_path)
    hints = project_hints(None, project_terms(trainer), cuda=False)["input-bound"]
    assert hints == ["the dataset kept on the device as tensors, batches sliced there"]  # already sliced
    for items in (dict(batch_sampler=batches), dict(batch_size=None)):  # each item fetched alone all the same
        trainer = fit_module(TupleBatches(), DataLoader(data, **items), default_root_dir=tmp_path, max_steps=2)
        assert project_hints(None, project_terms(trainer), cuda=False)["input-bound"][0].startswith("batches sliced")


class Stream:
    """A loader that is no DataLoader: a generator of slow batches, as a library's stream of transformations is."""

    def __iter__(self):
        for _ in range(4):
            time.sleep(0.1)
            yield torch.randn(2, 3), torch.tensor([0, 1])

    def __len__(self) -> int:
        return 4


def test_a_loader_that_is_no_dataloader_is_told_no_dataloader_option(tmp_path):
    timer = EpochTimer()
    fit_module(TupleBatches(), Stream(), callbacks=[timer], default_root_dir=tmp_path)
    summary = json.loads(timer.summary_path.read_text())
    assert summary["verdict"] == "input-bound", summary["verdict_reason"]
    hints = summary["advice"]["hints"]
    assert hints[0].startswith("a loader that reads ahead in parallel: the training loader is a Stream, not a torch")
    assert not [h for h in hints if "num_workers" in h or "persistent" in h or "__getitem__" in h]


def test_beside_a_librarys_own_bar_the_timer_claims_no_bar_number(tmp_path, capsys):
    """A library's bar (a subclass, here one that counts from 1) may show any number: the line names none."""
    from lightning.pytorch.callbacks import TQDMProgressBar

    class FromOne(TQDMProgressBar):
        def on_train_epoch_start(self, trainer, *args):
            super().on_train_epoch_start(trainer, *args)
            self.train_progress_bar.set_description(f"Epoch {trainer.current_epoch + 1}/{trainer.max_epochs}")

    fit_module(
        TupleBatches(),
        DataLoader(TensorDataset(*features()), batch_size=BATCH),
        callbacks=[EpochTimer(), FromOne()],
        enable_progress_bar=True,
        default_root_dir=tmp_path,
    )
    out = capsys.readouterr().out
    assert "epoch 1: train" in out and "(bar: Epoch" not in out


class ValidatedOnAClock(TupleBatches):
    """Its validation steps move the timer's emulated clock: 100 s each in the sanity check, 1 ms each after it."""

    def __init__(self, clock: list[float]):
        super().__init__()
        self.clock = clock

    def validation_step(self, batch, batch_idx):
        self.clock[0] += 100.0 if self.trainer.sanity_checking else 0.001


def test_the_sanity_checks_validation_is_not_an_epochs_eval_time(monkeypatch):
    """Lightning's sanity check runs validation before the first epoch: the timer counts none of it."""
    from types import SimpleNamespace

    from mnistperf.diagnosis.record import clock as clock_module

    offset = [0.0]  # what the validation steps added to the timer's clock
    monkeypatch.setattr(clock_module, "time", SimpleNamespace(perf_counter=lambda: time.perf_counter() + offset[0]))
    x, y = features()
    loader = DataLoader(TensorDataset(x, y), batch_size=16)
    timer = EpochTimer(window_share=None)
    fit_module(ValidatedOnAClock(offset), loader, loader, callbacks=[timer], num_sanity_val_steps=2)
    assert offset[0] >= 200.0  # the sanity check ran its two steps
    validation_steps = len(loader) * 0.001
    assert [row["eval_s"] >= validation_steps for row in timer.epochs] == [True, True]
    assert [row["eval_s"] < 100.0 for row in timer.epochs] == [True, True], timer.epochs


def test_a_trainers_own_pytorch_profiler_leaves_the_busy_share_unmeasured_said_once(tmp_path, capsys):
    """Only one torch profiler can run: beside the trainer's PyTorchProfiler the window reads nothing, and says why."""
    from lightning.pytorch.profilers import PyTorchProfiler

    x, y = features()
    timer = EpochTimer(window_share=None)
    profiler = PyTorchProfiler(dirpath=tmp_path, filename="profile")
    fit_module(TupleBatches(), DataLoader(TensorDataset(x, y), batch_size=16), callbacks=[timer], profiler=profiler)
    why = "the trainer's PyTorchProfiler holds torch's profiler, and only one can run"
    assert timer.busy_window is not None and timer.busy_window["share"] is None
    assert why in timer.busy_window["reason"]
    assert capsys.readouterr().out.count(f"EpochTimer: busy share not measured: {why}.") == 1
