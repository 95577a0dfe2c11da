"""mnistperf tune on a Lightning project that is not the lab's: its config, its names, its loader, its Python objects.

The project is tests/foreign_project (slowshelf): a dataset whose items sleep, so that workers help; a model whose
step can sleep, so that input does not bound it; a DataModule with its own option names and one with none. The
tests that train in fresh processes decide from those controlled delays; the others feed the search measurements.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
from pathlib import Path

import pytest
import torch
import yaml
from lightning.fabric.utilities.data import _replace_dunder_methods
from torch.utils.data import DataLoader, RandomSampler, TensorDataset

from mnistperf.cli import main
from mnistperf.errors import ConfigError
from mnistperf.tune import end_to_end, knobs, tune_loaders
from mnistperf.tune.search import Run
from mnistperf.upstream import rebuilt_dataloader

FOREIGN = Path(__file__).parent / "foreign_project"
# Short trials: two epochs (the first a warm-up) of eight steps; batches of four items that take 25 ms each to
# read, 100 ms a batch, so that two workers read about twice as fast, far beyond a loaded machine's jitter.
SHORT = ("--steps", "8", "--epochs", "2", "--budget-s", "150")
SLOW_ITEMS = ("--set", "data.init_args.delay_ms=25", "--set", "data.init_args.batch=4")


@pytest.fixture
def shelf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The project's config in a working folder of its own, its modules importable as they are from its folder."""
    monkeypatch.syspath_prepend(str(FOREIGN))
    monkeypatch.chdir(tmp_path)
    return Path(shutil.copy(FOREIGN / "shelf.yaml", tmp_path / "shelf.yaml"))


@pytest.fixture(scope="module")
def helper():
    """One trial helper for the tests that train (each tune run starts its own; its imports take seconds)."""
    from mnistperf.tune.launcher import Launcher

    with Launcher([str(FOREIGN)]) as launcher:
        yield launcher


@pytest.fixture
def trials(helper, monkeypatch: pytest.MonkeyPatch) -> None:
    """Trials in fresh processes, forked from the module's one helper."""

    class Shared:
        def __init__(self, import_paths, preload=None):
            pass

        def __enter__(self):
            return helper

        def __exit__(self, *exc):
            return None

    monkeypatch.setattr(end_to_end, "Launcher", Shared)


def tune(*args: str) -> None:
    main(["tune", "--config", "shelf.yaml", *args])


class FakeLauncher:
    """Stands in for the fresh processes: each trial's samples/s from the worker count its config gives the data."""

    def __init__(self, rates: dict[int, list[float]], wait: float = 0.6):
        self.rates, self.wait, self.configs = rates, wait, []

    def __call__(self, import_paths, preload=None):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def measure(self, spec, timeout_s) -> Run:
        config = yaml.safe_load(Path(spec.config).read_text())
        config = config.get("fit", config)  # (a config nested under fit:)
        self.configs.append(config)
        workers = config["data"]["init_args"].get("workers", 0)
        return Run([self.rates[workers].pop(0)], wait=self.wait if workers == 0 else 0.3, seconds=0.1)


@pytest.mark.slow
@pytest.mark.usefixtures("trials")
def test_tune_finds_workers_for_a_slow_dataset_and_the_projects_own_cli_runs_its_config(shelf, capsys):
    tune(*SHORT, *SLOW_ITEMS, "--import-path", str(FOREIGN))
    out = capsys.readouterr().out
    assert "[trial 1] workers=0 keep_workers=False" in out and "input-bound" in out  # progress, and the bound
    text = (shelf.parent / "tuned.yaml").read_text()
    assert text.startswith("# mnistperf tune: tuned from shelf.yaml") and "# Every trial: tuned.trials.md." in text
    tuned = yaml.safe_load(text)
    assert tuned["data"]["init_args"]["workers"] > 0, out  # under the project's own name
    assert tuned["model"] == yaml.safe_load(shelf.read_text())["model"]
    assert "| 1 | workers=0 keep_workers=False |" in (shelf.parent / "tuned.trials.md").read_text()
    from slowshelf.cli import main as their_main

    their_main(["fit", "--config", "tuned.yaml", "--trainer.max_epochs=1", "--trainer.limit_train_batches=2"])


@pytest.fixture
def linked(shelf: Path) -> Path:
    """The project's config for its own CLI subclass, which links the model's features from the data."""
    return Path(shutil.copy(FOREIGN / "linked.yaml", shelf.parent / "linked.yaml"))


@pytest.mark.usefixtures("trials")
def test_a_project_training_through_its_own_cli_subclass_is_tuned_through_it(linked, capsys):
    """Every trial reads the config through the project's ShelfCLI, whose link gives the model its argument; without
    --cli the untouched settings cannot train, and the line says to give it."""
    base = ("tune", "--config", "linked.yaml", *SHORT, *SLOW_ITEMS, "--knob", "data.init_args.workers=0,2")
    with pytest.raises(SystemExit):
        main([*base])
    err = capsys.readouterr().err
    assert "the untouched settings do not train" in err and "--cli myproj.cli.MyCLI" in err, err
    main([*base, "--cli", "slowshelf.cli.ShelfCLI"])
    tuned = yaml.safe_load((linked.parent / "tuned.yaml").read_text())
    assert tuned["data"]["init_args"]["workers"] == 2 and "features" not in tuned["model"]["init_args"]
    from slowshelf.cli import linked_main

    linked_main(["fit", "--config", "tuned.yaml", "--trainer.max_epochs=1", "--trainer.limit_train_batches=2"])


@pytest.mark.usefixtures("trials")
def test_a_slow_step_is_not_input_bound_and_keeps_the_settings(shelf, capsys):
    # a step of 60 ms beside a fetch of under 1 ms: the host waits about 1 % of train time, a fifth of the 5 % noise
    # floor; with a step of 30 ms the margin was half that, and one run beside three other test runs read it over
    tune(*SHORT, "--set", "model.init_args.step_delay_ms=60", "--set", "data.init_args.delay_ms=0")
    out = capsys.readouterr().out
    assert "not input-bound: the host waited for data" in out and "EpochTimer's ceiling" in out
    assert "chosen: the untouched settings, kept: no other setting was tried" in out and "[trial 2]" not in out
    assert yaml.safe_load((shelf.parent / "tuned.yaml").read_text())["data"]["init_args"]["workers"] == 0


@pytest.mark.usefixtures("trials")
def test_a_config_of_plain_keys_is_tuned_with_the_classes_its_script_fixes_and_written_back_plain(shelf):
    from lightning.pytorch.cli import LightningCLI
    from slowshelf.data import ShelfData
    from slowshelf.model import ShelfModel

    config = yaml.safe_load(shelf.read_text())
    for section in ("model", "data"):  # as a script running LightningCLI(ShelfModel, ShelfData) reads it
        config[section] = config[section]["init_args"]
    shelf.write_text(yaml.safe_dump(config, sort_keys=False))
    fixed = ("--model", "slowshelf.model.ShelfModel", "--data", "slowshelf.data.ShelfData")
    tune(*SHORT, *fixed, "--set", "model.step_delay_ms=60", "--set", "data.delay_ms=0")
    tuned = yaml.safe_load((shelf.parent / "tuned.yaml").read_text())
    assert tuned["model"] == {**config["model"], "step_delay_ms": 60}  # plain keys, --set among them
    assert tuned["data"] == {**config["data"], "delay_ms": 0}
    cli = LightningCLI(ShelfModel, ShelfData, args=["--config", "tuned.yaml"], run=False)  # the script's own parser
    assert (cli.datamodule.hparams.workers, cli.model.hparams.step_delay_ms) == (0, 60)


@pytest.mark.slow
@pytest.mark.usefixtures("trials")
def test_a_datamodule_without_knobs_is_tuned_through_python_by_rebuilding_its_loader(shelf):
    from slowshelf.data import FixedShelfData
    from slowshelf.model import ShelfModel

    lines: list[str] = []
    result = tune_loaders(
        ShelfModel(),
        FixedShelfData(delay_ms=12),  # batches of eight: about 100 ms a batch
        {"accelerator": "cpu"},
        budget_s=150,
        steps=8,
        epochs=2,
        log=lines.append,
    )
    assert result.rebuilt and result.settings == {}  # no argument of the DataModule to change
    assert result.loader_args["num_workers"] > 0, "\n".join(lines)
    said = "\n".join(result.findings)
    assert "every trial rebuilt the DataLoader of tune_loaders's datamodule (" in said
    assert "need a code change, in train_dataloader: DataLoader(..., num_workers=" in said
    assert "| 1 | num_workers=0 " in result.table and result.speedup > 1


@pytest.mark.usefixtures("trials")
def test_a_loader_tune_cannot_rebuild_is_one_line_naming_it_and_the_fix(shelf):
    from slowshelf.data import PairedShelfData
    from slowshelf.model import ShelfModel

    with pytest.raises(ValueError) as error:
        tune_loaders(ShelfModel(), PairedShelfData(), {"accelerator": "cpu"}, budget_s=60, log=lambda line: None)
    assert str(error.value) == (
        "tune_loaders: PairedShelfData.train_dataloader returns dict, not one DataLoader, so tune cannot make it "
        "again; give the DataModule arguments for the loader's settings and name them with --knob"
    )


def test_a_knob_named_on_the_command_line_is_tried_with_its_values(shelf, monkeypatch, capsys):
    fake = FakeLauncher({0: [100.0, 100.0, 100.0], 3: [300.0, 310.0]})
    monkeypatch.setattr(end_to_end, "Launcher", fake)
    checkpoint = "[{class_path: lightning.pytorch.callbacks.ModelCheckpoint}]"
    tune("--knob", "data.workers=0,3", "--set", f"trainer.callbacks={checkpoint}")
    out = capsys.readouterr().out
    assert "tuning shelf.yaml: data.init_args.workers;" in out and "keep_workers=" not in out  # only the knob named
    assert [c["data"]["init_args"]["workers"] for c in fake.configs] == [0, 0, 3, 3, 0]  # untouched beside the best
    trial = fake.configs[-1]
    assert trial["trainer"]["limit_train_batches"] == 20 and trial["trainer"]["callbacks"] == []  # short, unsaved
    assert trial["seed_everything"] == 7  # the config's own seed, in every trial
    tuned = yaml.safe_load((shelf.parent / "tuned.yaml").read_text())
    assert tuned["data"]["init_args"]["workers"] == 3 and "chosen: workers=3: 305 samples/s, 3.05x" in out


def test_a_config_nested_under_fit_is_tuned_and_written_back_nested(shelf, monkeypatch, capsys):
    flat = yaml.safe_load(shelf.read_text())
    shelf.write_text(yaml.safe_dump({"fit": flat}))
    fake = FakeLauncher({0: [100.0, 100.0, 100.0], 3: [300.0, 310.0]})
    monkeypatch.setattr(end_to_end, "Launcher", fake)
    tune("--knob", "data.workers=0,3")
    assert [c["data"]["init_args"]["workers"] for c in fake.configs] == [0, 0, 3, 3, 0]  # read inside fit:
    tuned = yaml.safe_load((shelf.parent / "tuned.yaml").read_text())
    assert list(tuned) == ["fit"] and tuned["fit"]["data"]["init_args"]["workers"] == 3
    assert tuned["fit"]["model"] == flat["model"]
    # LightningCLI reads a config nested under fit: before the subcommand (after it, it refuses the key fit)
    assert "written: tuned.yaml (your project's `--config tuned.yaml fit` runs it)" in capsys.readouterr().out
    from mnistperf.tune import project

    found = project.load(shelf, ["fit.trainer.max_epochs=1", "model.lr=0.5"])  # --set's keys: with fit. or without
    assert found.fit["trainer"]["max_epochs"] == 1 and found.fit["model"]["init_args"]["lr"] == 0.5
    assert "fit" not in found.fit


def test_a_batch_size_tune_chose_is_said_to_change_the_training_not_only_its_speed(shelf, monkeypatch, capsys):
    class ByBatch(FakeLauncher):  # samples/s grow with the batch; the workers change nothing
        def measure(self, spec, timeout_s) -> Run:
            config = yaml.safe_load(Path(spec.config).read_text())
            self.configs.append(config)
            return Run([100.0 * config["data"]["init_args"]["batch"]], wait=0.1, seconds=0.1)

    fake = ByBatch({})
    monkeypatch.setattr(end_to_end, "Launcher", fake)
    tune("--tune-batch-size")
    out = capsys.readouterr().out
    assert sorted({c["data"]["init_args"]["batch"] for c in fake.configs}) == [8, 16, 32]  # 2x and 4x tried
    assert yaml.safe_load((shelf.parent / "tuned.yaml").read_text())["data"]["init_args"]["batch"] == 32
    assert "the batch size changed: that changes the training (the optimisation), not only its speed" in out


@pytest.mark.parametrize(
    "ending, said",
    [
        ("timed_out", "stopped: the budget ended during a trial, which was stopped: the best found so far is kept"),
        ("ctrl_c", "stopped: interrupted (Ctrl-C): the best found so far is kept"),
    ],
)
def test_a_trial_run_the_budget_or_ctrl_c_stops_counts_nothing_and_the_best_so_far_is_written(
    shelf, monkeypatch, capsys, ending, said
):
    class StoppedInTheFourth(FakeLauncher):  # the fourth trial runs past the budget, or meets Ctrl-C
        def measure(self, spec, timeout_s) -> Run:
            if len(self.configs) == 3:  # after workers=0 twice (the noise), then 3
                self.configs.append(None)
                if ending == "ctrl_c":
                    raise KeyboardInterrupt
                return Run(seconds=timeout_s, timed_out=True)
            return super().measure(spec, timeout_s)

    monkeypatch.setattr(end_to_end, "Launcher", StoppedInTheFourth({0: [100.0, 100.0], 3: [300.0]}))
    with pytest.raises(SystemExit) if ending == "ctrl_c" else contextlib.nullcontext() as stop:
        tune("--knob", "data.workers=0,3")
    assert stop is None or stop.value.code == 130  # cut short by Ctrl-C: the status says so
    out = capsys.readouterr().out
    assert said in out
    tuned = yaml.safe_load((shelf.parent / "tuned.yaml").read_text())
    assert tuned["data"]["init_args"]["workers"] == 3, out  # the best of the three runs that ended
    trials = (shelf.parent / "tuned.trials.md").read_text()
    assert "| 2 | workers=3 | 300 | 300 | 3.00x |" in trials  # its stopped second run not counted
    if ending == "timed_out":  # but said
        assert "[trial 2.2] workers=3: failed: stopped after" in out and ": the budget ended" in out


def test_a_setting_the_budget_ended_inside_is_listed_as_stopped_and_the_stop_said(shelf, monkeypatch, capsys):
    """Three workers hang: their trial is stopped at the budget's end and listed, so the user sees it."""

    class Hangs(FakeLauncher):
        def measure(self, spec, timeout_s) -> Run:
            if yaml.safe_load(Path(spec.config).read_text())["data"]["init_args"].get("workers") == 3:
                return Run(seconds=timeout_s, timed_out=True)
            return super().measure(spec, timeout_s)

    monkeypatch.setattr(end_to_end, "Launcher", Hangs({0: [100.0, 100.0, 100.0], 2: [300.0, 300.0]}))
    tune("--knob", "data.workers=0,2,3")
    out = capsys.readouterr().out
    assert "[trial 3] workers=3: failed: stopped after" in out
    assert "stopped: the budget ended during a trial, which was stopped" in out
    trials = (shelf.parent / "tuned.trials.md").read_text()
    assert "| 3 | workers=3 | - | - | - | - |" in trials and "failed: stopped after" in trials
    assert yaml.safe_load((shelf.parent / "tuned.yaml").read_text())["data"]["init_args"]["workers"] == 2


def test_where_every_other_setting_failed_the_untouched_ones_are_kept_for_that_reason(shelf, monkeypatch, capsys):
    class Fails(FakeLauncher):
        def measure(self, spec, timeout_s) -> Run:
            if yaml.safe_load(Path(spec.config).read_text())["data"]["init_args"].get("workers"):
                return Run(seconds=0.1, error="ValueError: cannot read in a worker")
            return super().measure(spec, timeout_s)

    monkeypatch.setattr(end_to_end, "Launcher", Fails({0: [100.0, 100.0]}))
    tune("--knob", "data.workers=0,2,3")
    assert "kept: every other setting failed (the table says why)" in capsys.readouterr().out


def test_a_trials_long_error_keeps_its_end_where_a_loader_workers_error_names_the_original():
    from mnistperf.tune.trial import ONE_LINE_CHARS, one_line

    worker = ValueError(
        "Caught ValueError in DataLoader worker process 0.\n" + "  File x, line 1\n" * 60 + "ValueError: bad row 7"
    )
    said = one_line(worker)
    assert said.startswith("ValueError: Caught ValueError in DataLoader worker") and said.endswith(
        "ValueError: bad row 7"
    )
    assert len(said) <= ONE_LINE_CHARS + len("ValueError: ")


def test_within_the_noise_the_current_settings_stay(shelf, monkeypatch, capsys):
    fake = FakeLauncher({0: [100.0, 120.0], 1: [115.0], 2: [121.0]})
    monkeypatch.setattr(end_to_end, "Launcher", fake)
    tune()
    out = capsys.readouterr().out
    assert "noise 18%" in out and "chosen: the untouched settings, kept: nothing beat them by more than" in out
    assert "hides smaller gains" not in out  # under the 25 % that says the machine was busy
    tuned = yaml.safe_load((shelf.parent / "tuned.yaml").read_text())
    assert tuned["data"] == yaml.safe_load(shelf.read_text())["data"]


def test_a_machine_that_sped_up_during_the_search_is_caught_by_the_untouched_settings_measured_again(
    shelf, monkeypatch, capsys
):
    """Three workers read 1.3x the untouched settings' first two runs, but measured again beside them the untouched
    settings read 1.4x their first: a spread of 40 % that 1.3x does not beat, so they stay, and that noise is said."""
    fake = FakeLauncher({0: [100.0, 100.0, 140.0], 3: [130.0, 130.0]})
    monkeypatch.setattr(end_to_end, "Launcher", fake)
    tune("--knob", "data.workers=0,3")
    out = capsys.readouterr().out
    assert "[trial 1.3] workers=0: 140 samples/s" in out
    assert "the best did not beat the untouched settings by more than the noise" in out
    assert "untouched settings: 100 samples/s (3 run(s), noise 40%)" in out  # the noise it was judged by
    assert "the noise (40%) hides smaller gains: more repeats or steps, or a quieter machine" in out
    assert yaml.safe_load((shelf.parent / "tuned.yaml").read_text())["data"]["init_args"]["workers"] == 0


def test_a_spent_budget_keeps_the_best_so_far(shelf, monkeypatch, capsys):
    class SlowTrials(FakeLauncher):
        def measure(self, spec, timeout_s) -> Run:
            return Run([100.0], wait=0.6, seconds=1e6)  # a trial 'took' longer than the budget has left

    monkeypatch.setattr(end_to_end, "Launcher", SlowTrials({}))
    tune()
    out = capsys.readouterr().out
    assert "kept: no other setting was tried" in out  # not that nothing beat them: nothing ran beside them
    assert "stopped: the budget is spent: the best found so far is kept" in out


@pytest.mark.parametrize(
    "setup, argv, expected",
    [
        (
            lambda p: p.write_text("trainer: [unclosed\n"),
            [],
            "shelf.yaml: not a config tune can read (",
        ),
        (
            lambda p: p.write_text(p.read_text().replace("slowshelf.data.ShelfData", "shelfdata.ShelfData")),
            [],
            "shelf.yaml: data.class_path 'shelfdata.ShelfData' cannot be imported (No module named 'shelfdata'); "
            "run from the project's folder or add it: PYTHONPATH=/path/to/project python -m mnistperf tune",
        ),
        (
            None,
            ["--knob", "data.init_args.wrkers=0,2"],
            "--knob data.init_args.wrkers: shelf.yaml's data (ShelfData) takes no such argument; did you mean "
            "data.init_args.workers? Its arguments are data.init_args.rows, data.init_args.batch",
        ),
        (None, ["--knob", "data.init_args.workers"], "--knob data.init_args.workers: give the option and the values"),
        (None, ["--budget", "0.1"], "--budget 0.1: too small to measure anything; give at least 0.25 minutes"),
        (None, ["--budget-s", "-5"], "--budget-s -5: too small to measure anything; give at least 15 seconds"),
        (None, ["--budget-s", "inf"], "--budget-s inf: give a finite budget, at least 15 seconds"),
        (
            None,
            ["--import-path", "slowshelf-project"],
            "--import-path slowshelf-project: no such folder; give the folder your project's packages are in",
        ),
        (
            None,
            ["--out", "shelf.yaml"],
            "--out shelf.yaml: the config tuned from, which the tuned config would replace; give another file for "
            "the tuned config, e.g. --out shelf.tuned.yaml",
        ),
        (None, ["--budget", "nan"], "--budget nan: give a finite budget, at least 0.25 minutes"),
        (
            None,
            ["--cli", "slowshelf.data.ShelfData"],
            "--cli slowshelf.data.ShelfData: ShelfData is not a LightningCLI subclass; name the class your project's "
            "entry point makes",
        ),
        (None, ["--cli", "slowshelf.cli.MissingCLI"], "--cli slowshelf.cli.MissingCLI cannot be imported"),
        (
            None,
            ["--cli", "slowshelf.cli.FixedCLI"],
            "--cli slowshelf.cli.FixedCLI: FixedCLI's __init__ does not take LightningCLI's arguments (args, run, "
            "save_config_callback, trainer_defaults, parser_kwargs), which every trial gives it; let it take them and "
            "pass them on (def __init__(self, *args, **kwargs): super().__init__(*args, **kwargs)), or leave --cli out",
        ),
        (
            None,
            ["--set", "data.wrkers=2"],
            "--set data.wrkers=2: shelf.yaml's data (ShelfData) takes no such argument; did you mean "
            "data.init_args.workers? Its arguments are data.init_args.rows, data.init_args.batch",
        ),
        (
            None,
            ["--set", "trainer.max_epoch=2"],
            "--set trainer.max_epoch=2: Lightning's Trainer takes no such argument; did you mean trainer.max_epochs?",
        ),
        (
            None,
            ["--set", "trainer.max_epochs=0"],
            "--set: trainer.max_epochs is 0, so your project's fit would train nothing, nor would the tuned config's; "
            "raise it or remove the option",
        ),
        (
            lambda p: p.write_text(p.read_text().replace("max_epochs: 3", "max_epochs: 0")),
            [],
            "shelf.yaml: trainer.max_epochs is 0, so your project's fit would train nothing",
        ),
        *(
            (
                lambda p, text=text: p.write_text(text),
                [],
                f"shelf.yaml: {at}data.workers is no option of this lab's stages, and {at}data names no class; for "
                "your own project's config, name its classes as LightningCLI does where any class may be given (data: "
                "{class_path: myproj.data.MyData, init_args: {workers: ...}}); or, where your script runs "
                "LightningCLI(MyModel, MyData) with the config as it is, give those classes: --model "
                "myproj.main.MyModel --data myproj.main.MyData",
            )
            for at, text in (
                ("", "model:\n  lr: 0.05\ndata:\n  workers: 0\n"),
                ("fit.", "fit:\n  model:\n    lr: 0.05\n  data:\n    workers: 0\n"),
            )
        ),
        (  # names the lab's classes take too (lr, batch_size), beside one of its own
            lambda p: p.write_text("model:\n  lr: 0.05\n  width: 16\ndata:\n  batch_size: 8\n  num_workers: 0\n"),
            [],
            "shelf.yaml: model.width is no option of this lab's stages, and model names no class; for your own "
            "project's config, name its classes",
        ),
        (
            None,
            ["--data", "slowshelf.data.ShelfData"],
            "--data: shelf.yaml names data's class_path, so the class is not the script's to fix; leave --data out",
        ),
        (
            lambda p: p.write_text("model:\n  lr: 0.05\ndata:\n  workers: 0\n"),
            ["--model", "slowshelf.model.ShelfModel", "--cli", "slowshelf.cli.ShelfCLI"],
            "--model: --cli reads the config, so the class is not the script's to fix; leave --model out",
        ),
        (
            lambda p: p.write_text("model: 5\n"),
            ["--model", "slowshelf.model.ShelfModel"],
            "shelf.yaml: model is 5, not the arguments of --model's class as plain keys",
        ),
        (
            lambda p: p.write_text("model:\n  lr: 0.05\n"),
            ["--model", "slowshelf.model.ShelfModle"],
            "--model slowshelf.model.ShelfModle cannot be imported: slowshelf.model has no ShelfModle; did you mean "
            "slowshelf.model.ShelfModel?",
        ),
        (
            lambda p: p.write_text("model:\n  lr: 0.05\ndata:\n  workers: 0\n"),
            ["--cli", "slowshelf.cli.ShelfCLI"],
            "shelf.yaml: no model.class_path; a LightningCLI config of your project names its LightningModule there "
            "(model: {class_path: myproj.model.MyModel, init_args: {...}}); or, where your script runs "
            "LightningCLI(MyModel, MyData) with the config as it is, give those classes",
        ),
    ],
)
def test_a_config_knob_or_class_tune_cannot_use_is_one_line_in_the_projects_terms(shelf, capsys, setup, argv, expected):
    if setup is not None:
        setup(shelf)
    with pytest.raises(SystemExit) as exit_info:
        tune(*argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and expected in err and len(err.strip().splitlines()) == 1
    assert "lists the options" not in err and "data.pipeline" not in err  # never the lab's options


def test_a_misspelt_config_is_named_before_the_options_only_another_projects_config_takes(shelf, capsys):
    with pytest.raises(SystemExit):
        main(["tune", "--config", "shelff.yaml", "--knob", "data.workers=0,2", "--cli", "slowshelf.cli.ShelfCLI"])
    said = "mnistperf: error: --config shelff.yaml: no such file; did you mean shelf.yaml? The YAML files in ./ are"
    assert capsys.readouterr().err == f"{said} shelf.yaml\n"
    with pytest.raises(SystemExit):
        main(["tune", "--config", "shelff.yaml", "--knob", "data.workers=0,2"])
    assert "--config shelff.yaml: no such file; did you mean shelf.yaml?" in capsys.readouterr().err


def test_a_training_script_given_as_the_config_is_pointed_to_tune_from_python(shelf, capsys):
    script = shelf.with_name("train.py")
    script.write_text("from lightning import Trainer\n\nif __name__ == '__main__':\n    Trainer().fit(model)\n")
    with pytest.raises(SystemExit):
        main(["tune", "--config", "train.py"])
    err = capsys.readouterr().err
    assert "train.py: a Python file, not a config; give the YAML config your project's `fit --config` takes, " in err
    assert "from mnistperf.tune import tune_loaders" in err and "YAML there" not in err


def test_a_set_option_is_taken_as_the_projects_cli_takes_it(shelf):
    from mnistperf.tune import project

    found = project.load(shelf, ["model.lr=0.5", "data.init_args.batch=4", "trainer.max_epochs=1"])
    assert found.fit["model"]["init_args"]["lr"] == 0.5 and "lr" not in found.fit["model"]  # as --model.lr takes it
    assert found.fit["data"]["init_args"]["batch"] == 4 and found.fit["trainer"]["max_epochs"] == 1


def test_a_class_tune_cannot_import_is_named_with_the_fix_from_elsewhere(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # not the project's folder, and not on the path
    monkeypatch.setattr(sys, "path", [p for p in sys.path if "foreign_project" not in p])
    for name in [m for m in sys.modules if m.split(".")[0] == "slowshelf"]:
        monkeypatch.delitem(sys.modules, name)
    shutil.copy(FOREIGN / "shelf.yaml", tmp_path / "shelf.yaml")
    with pytest.raises(SystemExit):
        tune()
    assert "model.class_path 'slowshelf.model.ShelfModel' cannot be imported" in capsys.readouterr().err


def test_python_objects_another_process_cannot_make_are_named_with_the_fix(shelf):
    from lightning import LightningModule
    from slowshelf.data import ShelfData
    from slowshelf.model import ForgetfulModel, ShelfModel

    class Local(LightningModule):
        pass

    with pytest.raises(ValueError, match=r"the model's Local is defined in a function, so a fresh process cannot"):
        tune_loaders(Local(), ShelfData())
    Local.__module__, Local.__qualname__ = "__main__", "Local"  # as a script run directly, or a notebook, makes it
    with pytest.raises(ValueError, match=r"the model's Local is defined in __main__ \(a script run directly, or a"):
        tune_loaders(Local(), ShelfData())
    with pytest.raises(ValueError, match=r"ForgetfulModel does not keep its arguments width.*save_hyperparameters"):
        tune_loaders(ForgetfulModel(3), ShelfData())
    with pytest.raises(
        ValueError, match=r"^knobs={'wrkers': \.\.\.}: tune_loaders's datamodule \(ShelfData\) takes no such"
    ):
        tune_loaders(ShelfModel(), ShelfData(), knobs={"wrkers": [0, 2]})  # named as Python names it, not --knob
    for values in (2, "0,2"):
        with pytest.raises(
            ValueError, match=r"^tune_loaders: knobs={'workers': .*}: give the values to try as a list, e\.g"
        ):
            tune_loaders(ShelfModel(), ShelfData(), knobs={"workers": values})
    made = "or a class or function making one, not"
    with pytest.raises(ValueError, match=rf"^tune_loaders: the model must be a LightningModule, {made} a Linear$"):
        tune_loaders(torch.nn.Linear(2, 2), ShelfData())
    with pytest.raises(
        ValueError, match=rf"^tune_loaders: the datamodule must be a LightningDataModule, {made} a Shelf"
    ):
        tune_loaders(ShelfModel(), ShelfModel())
    with pytest.raises(
        ValueError, match=rf"the datamodule must be a LightningDataModule, {made} the class ShelfModel$"
    ):
        tune_loaders(ShelfModel, ShelfModel)
    with pytest.raises(ValueError, match=r"^tune_loaders: budget_s=0: too small to measure anything; give at least 15"):
        tune_loaders(ShelfModel(), ShelfData(), budget_s=0)


def test_the_loaders_settings_are_found_under_the_projects_own_names():
    found = knobs.found_knobs({"rows": 1, "batch": 8, "workers": 0, "keep_workers": False}, "data.init_args", False)
    assert [(k.setting, k.key, k.current) for k in found.knobs] == [
        ("num_workers", "data.init_args.workers", 0),
        ("persistent_workers", "data.init_args.keep_workers", False),
    ]
    with_batch = knobs.found_knobs({"batch": 8, "workers": 0}, "", True)
    assert with_batch.by_setting("batch_size").key == "batch"
    none = knobs.found_knobs({"rows": 1}, "data.init_args", False)
    assert none.rebuilt and none.by_setting("num_workers").key == "loader.num_workers"
    both = knobs.found_knobs({"train_num_workers": 2, "val_num_workers": 2}, "", False)
    assert "could each be num_workers" in both.notes[0] and both.rebuilt
    assert "name one with knobs={'train_num_workers': [VALUES]}" in both.notes[0]  # from Python: no --knob there
    of_config = knobs.found_knobs({"train_num_workers": 2, "val_num_workers": 2}, "data.init_args", False)
    assert "name one with --knob data.init_args.train_num_workers=VALUES" in of_config.notes[0]


def test_a_loader_setting_named_is_tried_through_the_datamodules_own_argument_for_it():
    """``--knob num_workers=0,2`` on a DataModule taking ``workers``: the trials change ``workers``, which the config
    written keeps; a rebuilt loader would leave the user a code change to make."""
    currents = {"rows": 1, "workers": 0, "keep_workers": False}
    for key in ("num_workers", "loader.num_workers"):
        [knob] = knobs.named_knobs([(key, [0, 2])], currents, "data.init_args", "ShelfData")
        assert (knob.setting, knob.key, knob.via, knob.values, knob.current) == (
            "num_workers",
            "data.init_args.workers",
            knobs.ARG,
            [0, 2],
            0,
        )
    [rebuilt] = knobs.named_knobs([("num_workers", [0, 2])], {"rows": 1}, "data.init_args", "ShelfData")
    assert (rebuilt.key, rebuilt.via) == ("loader.num_workers", knobs.REBUILD)  # no argument for it: rebuilt


@pytest.mark.parametrize(
    "key, values, said",
    [
        ("num_workers", ["a", "b"], "--knob num_workers=a,b: num_workers takes whole numbers, not 'a'"),
        (
            "keep_workers",
            [1, True],
            "--knob keep_workers=1,True: persistent_workers takes true or false, not 1",
        ),
    ],
)
def test_values_a_loader_setting_cannot_take_are_one_line_before_any_trial(key, values, said):
    currents = {"rows": 1, "workers": 0, "keep_workers": False}
    with pytest.raises(ConfigError) as raised:
        knobs.named_knobs([(key, values)], currents, "data.init_args", "ShelfData")
    assert str(raised.value).startswith(said)
    assert knobs.named_knobs([("prefetch_factor", [None, 2])], currents, "data.init_args", "ShelfData")  # None: its own


def test_a_rebuilt_loader_keeps_everything_it_was_made_with_but_the_settings_tried():
    data = TensorDataset(torch.arange(12.0))
    sampler = RandomSampler(data)

    def collate(items):
        return torch.stack([i[0] for i in items])

    with _replace_dunder_methods(DataLoader, "dataset"):  # as Lightning asks a DataModule for its loader
        loader = DataLoader(data, 4, sampler=sampler, collate_fn=collate, drop_last=True)
        rebuilt = rebuilt_dataloader(loader, {"num_workers": 2, "persistent_workers": True, "prefetch_factor": 4})
    assert (rebuilt.num_workers, rebuilt.persistent_workers, rebuilt.prefetch_factor) == (2, True, 4)
    assert rebuilt.dataset is data and rebuilt.sampler is sampler and rebuilt.collate_fn is collate
    assert rebuilt.batch_size == 4 and rebuilt.drop_last
    plain = rebuilt_dataloader(DataLoader(data, batch_size=3, shuffle=True), {"num_workers": 1})
    assert plain.num_workers == 1 and plain.batch_size == 3 and isinstance(plain.sampler, RandomSampler)


def test_more_workers_that_buy_nothing_twice_stop_the_sweep():
    rates = {0: [100.0, 100.0], 1: [100.0], 2: [101.0], 4: [400.0]}
    found = knobs.found_knobs({"workers": 0}, "", False)

    def measure(trial, timeout_s) -> Run:
        return Run([rates[trial.settings["workers"]].pop(0)], wait=0.6, seconds=0.1)

    outcome = end_to_end.outcome(found, measure, 60, lambda line: None, 8, "test")
    assert [t.settings["workers"] for t in outcome.trials] == [0, 1, 2]
    assert outcome.kept


def test_the_help_for_another_projects_config_gives_every_option_a_line_and_a_default(shelf, capsys):
    with pytest.raises(SystemExit):
        tune("--help")
    text = " ".join(capsys.readouterr().out.split())
    assert "naming its classes (model.class_path, data.class_path)" in text and "rebuilt" in text
    options = text.split("options:", 1)[1]
    for option in ("--knob", "--set", "--budget", "--budget-s", "--out", "--import-path", "--steps", "--epochs"):
        entry = options.split(f" {option} ", 1)[1].split(" --", 1)[0]
        assert "(default: " in entry, f"{option} gives no default: {entry}"


class SleepsWhenRead:
    """A trial's spec whose reading sleeps a minute: a trial still running at its time limit."""

    def __reduce__(self):
        import time

        return (time.sleep, (60,))


def test_where_forking_is_not_safe_each_trial_is_a_new_interpreter_stopped_at_its_limit(tmp_path, monkeypatch):
    import os
    import pickle

    from mnistperf.tune import launcher

    monkeypatch.delattr(os, "fork")  # as on a platform without it: no helper to fork from
    failing, sleeping = tmp_path / "failing" / "spec.pkl", tmp_path / "sleeping" / "spec.pkl"
    for path, spec in ((failing, b"not a spec"), (sleeping, pickle.dumps(SleepsWhenRead()))):
        path.parent.mkdir()
        path.write_bytes(spec)
    with launcher.Launcher([]) as trials:
        assert trials.helper is None
        ended = trials.run(failing, 300.0)
        assert ended.code == 1 and launcher.result_path(failing).exists()  # python -m mnistperf.tune.trial ran
        assert trials.run(sleeping, 2.0).code is None  # stopped at its limit


def test_the_trial_helper_has_a_session_of_its_own_so_a_terminals_ctrl_c_reaches_tune_alone():
    """A terminal's Ctrl-C goes to its foreground process group: the helper there died and tune ran on without it."""
    import os

    from mnistperf.tune import launcher

    with launcher.Launcher([]) as trials:
        if trials.helper is None:
            pytest.skip("no fork here: each trial is a new interpreter, in a session of its own")
        assert os.getsid(trials.helper.pid) == trials.helper.pid != os.getsid(0)


@pytest.mark.parametrize("monitor", ["LearningRateMonitor", "DeviceStatsMonitor"])
def test_a_callback_that_writes_to_the_logger_trials_leave_out_does_not_stop_them(shelf, monitor):
    from mnistperf.tune import project, trial

    config = yaml.safe_load(shelf.read_text())
    config["trainer"]["logger"] = {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": "."}}
    config["trainer"]["callbacks"] = [{"class_path": f"lightning.pytorch.callbacks.{monitor}"}]
    shelf.write_text(yaml.safe_dump(config))
    found = project.load(shelf, ["data.init_args.delay_ms=0"])
    root = shelf.parent / "trial"
    root.mkdir()
    (root / "config.yaml").write_text(yaml.safe_dump(found.trial_config({}, found.knobs([], False), 2, 2, str(root))))
    figures = trial.fit(trial.TrialSpec(str(root), 2, 2, 7, config=str(root / "config.yaml")))  # trains, as it would
    assert figures["samples_per_s"] > 0
