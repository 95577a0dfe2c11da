"""A user in a hurry: every mistake ends in one line naming the option or file, exit status 2, nothing trusted later."""

from __future__ import annotations

import builtins
import errno
import json
import os
import re
import runpy
import shlex
import shutil
import signal
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
import yaml
from conftest import CONFIGS, NO_WORKERS, damage, fails_in_one_line, random_split, stage_argv

from mnistperf import cli
from mnistperf.bench import runner
from mnistperf.cli import main
from mnistperf.data import schema
from mnistperf.install_check import litdata_install
from mnistperf.lightning_cli.configs import given_configs


def fit_args(*extra: str) -> list[str]:
    """One epoch of v2_pinned loading in the main process, then ``extra``."""
    return stage_argv("v2_pinned", *NO_WORKERS, *extra, epochs=1)


# ---------------------------------------------------------------- doing nothing is an error
@pytest.mark.parametrize("command", ["fit", "test"])
def test_a_command_given_no_stages_config_is_refused_naming_one(workdir, capsys, command):
    """Without a config the model and data have their defaults, which are no stage, and nothing is timed."""
    printed = fails_in_one_line(
        capsys,
        [command, "--trainer.max_epochs", "1"],
        f"{command} runs a stage: give its config, e.g. python -m mnistperf {command} --config configs/v2_pinned.yaml",
    )
    assert not (workdir / "lightning_logs").exists() and printed.out == ""  # no device line of a run that is none


@pytest.mark.parametrize("given", [["-c", "CONFIG"], ["-c=CONFIG"], ["--config=CONFIG"]])
def test_a_config_given_in_the_parsers_other_spellings_is_read_as_given(given):
    config = str(CONFIGS / "v2_pinned.yaml")
    assert given_configs(["fit", *(part.replace("CONFIG", config) for part in given)]) == [Path(config)]


@pytest.mark.parametrize("option", ["--trainer.limit_train_batches", "--trainer.max_epochs", "--trainer.max_steps"])
def test_options_that_train_nothing_are_refused(workdir, capsys, option):
    fails_in_one_line(capsys, fit_args(option, "0"), f"{option.removeprefix('--')} is 0, so fit would train nothing")


@pytest.mark.parametrize("setting", ["trainer.limit_train_batches=0.0", "trainer.max_epochs=0"])
def test_tune_refuses_a_config_that_would_train_nothing_before_measuring(tmp_path, capsys, setting):
    out = tmp_path / "tuned.yaml"
    argv = ["tune", "--config", str(CONFIGS / "v2_pinned.yaml"), "--set", setting, "--out", str(out)]
    fails_in_one_line(capsys, argv, f"{setting.partition('=')[0]} is 0, so fit would train nothing")
    assert not out.exists()


def test_a_bench_whose_every_run_failed_fails(workdir, capsys, monkeypatch):
    monkeypatch.setattr(runner, "run_process", lambda command, label: (1, "RuntimeError: boom", {}))
    argv = ["bench", "--stages", "v2_pinned", "--baseline", "none", "--config-dir", str(CONFIGS), "--out", "out"]
    fails_in_one_line(capsys, argv, "every run failed, so nothing was measured")
    assert (workdir / "out" / "results.md").read_text().startswith("# mnistperf bench (incomplete)")


@pytest.mark.parametrize("limit", ["0", "-3"])
def test_a_bench_limit_of_no_batches_is_refused_not_run_as_whole_epochs(capsys, monkeypatch, limit):
    monkeypatch.setattr(runner, "run_process", lambda command, label: pytest.fail("the bench ran"))
    argv = ["bench", "--config-dir", str(CONFIGS), "--stages", "v2_pinned", "--limit-train-batches", limit]
    fails_in_one_line(capsys, argv, f"--limit-train-batches {limit}: give at least 1, or leave it out for whole epochs")


@pytest.mark.parametrize(
    "flag, key", [("--set", "data.num_wokers=2"), ("--sweep", "model.learning_rate=1,2"), ("--set", "optimizer.lr=1")]
)
def test_a_bench_key_no_config_has_is_refused_before_anything_runs(capsys, flag, key):
    fails_in_one_line(capsys, ["bench", "--config-dir", str(CONFIGS), flag, key], "no stage config has this option")


def test_a_misspelt_required_option_is_answered_with_the_one_meant_not_as_missing(capsys):
    printed = fails_in_one_line(capsys, ["tune", "--confg", "x.yaml", "--budget-s", "20"], "did you mean --config")
    assert "required" not in printed.err and "--budget-s" not in printed.err


@pytest.mark.parametrize("given", [["--data.dataset", "tiny"], ["--data.dataset=tiny"]])
def test_a_fits_override_given_to_tune_is_answered_with_its_set(capsys, given):
    command = ["tune", "--config", str(CONFIGS / "v1_bs512.yaml"), *given]
    fails_in_one_line(capsys, command, "did you mean --set data.dataset=tiny?")


def test_a_bench_out_folder_holding_an_earlier_benchs_results_is_refused_before_anything_runs(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr(runner, "run_process", lambda command, label: pytest.fail("the bench ran"))
    (tmp_path / "results.json").write_text("{}")
    argv = ["bench", "--config-dir", str(CONFIGS), "--stages", "v2_pinned", "--out", str(tmp_path)]
    fails_in_one_line(capsys, argv, f"--out {tmp_path}: it holds an earlier bench's results", f"--out {tmp_path}-2")


@pytest.mark.parametrize(
    "argv, meant",
    [
        (["--stages", "v1_bs51"], "; did you mean v1_bs512?"),
        (["--sweep", "data.batchsize=64,128"], "no stage config has this option (did you mean data.batch_size?)"),
    ],
)
def test_a_bench_stage_or_key_misspelt_is_answered_with_the_one_meant(capsys, argv, meant):
    fails_in_one_line(capsys, ["bench", "--config-dir", str(CONFIGS), *argv], meant)


@pytest.mark.parametrize(
    "flag, setting, expected",
    [
        (
            "--set",
            "data.batch_size=abc",
            "data.batch_size takes a whole number, not 'abc' (`python -m mnistperf fit --help",
        ),
        ("--sweep", "data.batch_size=64,abc", "data.batch_size takes a whole number, not 'abc'"),
        ("--set", "data.pipeline=v9", "data.pipeline: unknown pipeline 'v9'; choose one of v1, v2,"),
        ("--set", "data.batch_size=-3", "data.batch_size must be at least 1 (got -3): give --set data.batch_size=64"),
        ("--sweep", "data.batch_size=0,16", "data.batch_size must be at least 1 (got 0)"),  # beside a good one
        ("--set", "data.dataset=fashion_mnst", "data.dataset 'fashion_mnst' is no built-in dataset (did you mean"),
    ],
)
def test_a_bench_value_every_run_would_fail_on_is_refused_before_anything_runs(
    tmp_path, capsys, monkeypatch, flag, setting, expected
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(runner, "run_process", lambda command, label: pytest.fail("the bench ran"))
    argv = ["bench", "--config-dir", str(CONFIGS), "--stages", "v1_naive,v2_pinned", flag, setting, "--out", "out"]
    fails_in_one_line(capsys, argv, expected)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    "config, lacks",
    [
        ("data:\n  batch_size: 256\n", "it names no trainer.logger class nor EpochTimer;"),
        ("trainer:\n  logger:\n    class_path: lightning.pytorch.loggers.CSVLogger\n", "it names no EpochTimer;"),
    ],
)
def test_a_bench_config_whose_runs_write_no_timing_json_is_refused_before_anything_runs(
    tmp_path, capsys, monkeypatch, config, lacks
):
    """Before, each run failed alike (the parser's error on the logger's folder, or a row 'failed (exit 0)')."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(runner, "run_process", lambda command, label: pytest.fail("the bench ran"))
    (tmp_path / "mine.yaml").write_text(config)
    argv = ["bench", "--config-dir", ".", "--stages", "mine", "--out", "out"]
    fails_in_one_line(capsys, argv, "mine.yaml: the bench reads each run's timing.json", lacks, "my_stage.yaml")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "timers",
    [lambda timer: [{**timer, "class_path": "conftest.ForbidSyncs"}], lambda timer: timer],
    ids=["a subclass of EpochTimer", "EpochTimer as the one callback, not in a list"],
)
def test_a_bench_config_whose_timer_writes_timing_json_as_epoch_timer_does_is_run(tmp_path, monkeypatch, timers):
    """Before, the bench refused both configs as naming no EpochTimer."""
    monkeypatch.chdir(tmp_path)
    ran = []
    monkeypatch.setattr(runner, "run_process", lambda command, label: (ran.append(label), (1, "boom", {}))[1])
    config = yaml.safe_load((CONFIGS / "v2_pinned.yaml").read_text())
    (timer,) = config["trainer"]["callbacks"]
    config["trainer"]["callbacks"] = timers(timer)
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(SystemExit):  # (every run failed: none ran here)
        main(["bench", "--config-dir", ".", "--stages", "mine", "--reference-rows", "none", "--out", "out"])
    assert ran == ["mine"]


def test_a_bench_begins_with_its_device_line_not_lightnings_on_the_trainer_its_check_builds(
    tmp_path, monkeypatch, caplog
):
    """The check of the runs' arguments builds a trainer to throw away: Lightning's own lines on it are not said."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(runner, "run_process", lambda command, label: (1, "boom", {}))
    with pytest.raises(SystemExit):  # (every run failed: none ran here)
        main(["bench", "--config-dir", str(CONFIGS), "--stages", "v2_pinned", "--reference-rows", "none"])
    assert "GPU available" not in caplog.text


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--stages", ""], "--stages '' names no stage; give one or more, e.g. --stages v2_pinned."),
        (["--stages", ","], "--stages ',' names no stage"),
        (["--stages", "v2_pinned", "--reference-rows", "v2_pined"], "--reference-rows: no config"),
        (["--stages", "v2_pinned", "--config-dir", "confgs"], "--config-dir confgs: no such folder; give the folder"),
        (
            ["--stages", f"v2_pinned,v3_resident,{CONFIGS / 'v2_pinned.yaml'}"],
            "--stages names v2_pinned twice; give each stage once: --stages v2_pinned,v3_resident; --repeats N runs",
        ),
        (["--reference-rows", "v2_pinned,v2_pinned"], "give each stage once: --reference-rows v2_pinned."),
    ],
)
def test_a_bench_that_names_no_stage_it_can_run_is_refused_naming_the_option(
    tmp_path, capsys, monkeypatch, argv, expected
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(runner, "run_process", lambda command, label: pytest.fail("the bench ran"))
    config_dir = [] if "--config-dir" in argv else ["--config-dir", str(CONFIGS)]
    fails_in_one_line(capsys, ["bench", *config_dir, *argv], expected)
    assert not any(tmp_path.iterdir())


# ---------------------------------------------------------------- checkpoints
def test_a_missing_checkpoint_says_what_to_give(workdir, capsys):
    fails_in_one_line(capsys, fit_args("--ckpt_path", "nowhere.ckpt"), "--ckpt_path nowhere.ckpt: no such file")


@pytest.mark.parametrize("content", [b"", b"not a checkpoint at all", b"PK\x03\x04 truncated zip"])
def test_a_corrupt_checkpoint_says_so(workdir, capsys, content):
    (workdir / "broken.ckpt").write_bytes(content)
    for command in ("fit", "validate", "test"):
        epochs = 1 if command == "fit" else None
        argv = stage_argv("v2_pinned", *NO_WORKERS, "--ckpt_path", "broken.ckpt", command=command, epochs=epochs)
        fails_in_one_line(capsys, argv, "--ckpt_path broken.ckpt is not a readable checkpoint")


@pytest.mark.parametrize("command", ["validate", "test", "predict", "fit --ckpt_path last"])
def test_a_corrupt_newest_checkpoint_is_named_before_lightning_loads_it(workdir, capsys, command):
    newest = workdir / "lightning_logs" / "v2_pinned" / "version_0" / "checkpoints" / "epoch=0-step=1.ckpt"
    newest.parent.mkdir(parents=True)
    newest.write_bytes(b"PK\x03\x04 truncated zip")
    command, *resumed = command.split()
    argv = stage_argv("v2_pinned", *NO_WORKERS, *resumed, command=command, epochs=1 if resumed else None)
    fails_in_one_line(capsys, argv, f"the newest checkpoint {newest.relative_to(workdir)} is not a readable checkpoint")
    assert [p.name for p in (workdir / "lightning_logs" / "v2_pinned").iterdir()] == ["version_0"]


def test_a_checkpoint_of_something_else_is_refused(workdir, capsys):
    import torch

    torch.save({"weights": torch.zeros(3)}, workdir / "other.ckpt")
    fails_in_one_line(capsys, fit_args("--ckpt_path", "other.ckpt"), "holds no model state_dict")


@pytest.mark.parametrize("refused", [errno.EACCES, errno.EROFS])
def test_a_folder_the_system_refuses_is_one_line_naming_it(monkeypatch, capsys, refused):
    """Root writes anywhere, so the refusal is raised where prepare would have met it (a read-only mount's, another
    user's folder)."""

    def refusing(argv):
        raise OSError(refused, os.strerror(refused), "/mnt/ro/data/MNIST")

    monkeypatch.setattr(cli, "prepare_command", refusing)
    with pytest.raises(SystemExit) as stop:
        main(["prepare", "--data-dir", "/mnt/ro/data"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.splitlines()) == 1
    assert err.startswith(f"mnistperf: error: /mnt/ro/data/MNIST: {os.strerror(refused)}; give a path you may read and")


def test_a_bench_out_folder_the_system_refuses_is_said_before_any_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(runner, "run_process", lambda command, label: pytest.fail("the bench ran"))
    refused = tmp_path / "readonly" / "out"
    made = Path.mkdir

    def mkdir(self, *args, **kwargs):
        if self == refused:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))
        return made(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    with pytest.raises(SystemExit) as stop:
        main(["bench", "--config-dir", str(CONFIGS), "--stages", "v2_pinned", "--out", str(refused)])
    assert stop.value.code == 2 and f"mnistperf: error: {refused}: {os.strerror(errno.EROFS)}; give a path" in (
        capsys.readouterr().err
    )


# ---------------------------------------------------------------- Ctrl-C
def test_a_ctrl_c_while_the_libraries_import_lets_them_finish_then_ends_in_one_line(tmp_path, monkeypatch, capsys):
    finished = []

    def importing():  # a Ctrl-C halfway through an import, which a library could catch and leave half made
        os.kill(os.getpid(), signal.SIGINT)
        finished.append("the import's other half")

    monkeypatch.setattr(cli, "check_torchvision", importing)
    with pytest.raises(SystemExit) as stop:
        main(["report", str(tmp_path)])
    assert stop.value.code == 130 and finished == ["the import's other half"]
    assert capsys.readouterr().err == "mnistperf: interrupted; what was being written is not kept\n"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_ctrl_c_before_the_command_line_is_read_ends_in_one_line(monkeypatch, capsys):
    imported = builtins.__import__

    def cut(name, *args, **kwargs):
        if name == "mnistperf.cli":
            raise KeyboardInterrupt
        return imported(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", cut)
    with pytest.raises(SystemExit) as stop:
        runpy.run_module("mnistperf", run_name="__main__")
    assert stop.value.code == 130
    assert capsys.readouterr().err == "mnistperf: interrupted\n"


# ---------------------------------------------------------------- paths
@pytest.mark.parametrize(
    "argv, expected",
    [
        (fit_args("--data.data_dir", "notes.txt"), "data.data_dir notes.txt: a file; give the folder"),
        (
            fit_args("--data.data_dir", "notes.txt/data"),
            "data.data_dir notes.txt/data: notes.txt is a file, not a folder",
        ),
        (
            ["prepare", "--data-dir", "notes.txt"],
            "--data-dir notes.txt: a file; give a folder you may write in, e.g. --data-dir data",
        ),
        (["prepare", "--data-dir", "notes.txt/data"], "--data-dir notes.txt/data: notes.txt is a file, not a folder"),
        (
            ["bench", "--stages", "v2_pinned", "--config-dir", str(CONFIGS), "--out", "notes.txt"],
            "--out notes.txt: a file; give a folder for the results, e.g. --out notes.txt-results",
        ),
        (
            fit_args("--trainer.logger.init_args.save_dir", "notes.txt"),
            "the runs' folder notes.txt/v2_pinned: notes.txt is a file, not a folder; give trainer.logger",
        ),
        (
            ["tune", "--config", str(CONFIGS / "v2_pinned.yaml"), "--out", "data"],
            "--out data: a folder; give a file for the tuned config, e.g. --out data/tuned.yaml",
        ),
        (
            ["tune", "--config", str(CONFIGS / "v2_pinned.yaml"), "--out", "notes.txt/tuned.yaml"],
            "--out notes.txt/tuned.yaml: notes.txt is a file, not a folder; give a file for the tuned config",
        ),
    ],
    ids=[
        "fit",
        "fit-below-a-file",
        "prepare",
        "prepare-below-a-file",
        "bench",
        "fit-runs",
        "tune-folder",
        "tune-below-a-file",
    ],
)
def test_a_place_to_write_that_cannot_be_is_said_before_any_work(workdir, capsys, monkeypatch, argv, expected):
    """A folder where a file goes, a file where a folder goes, or a file on the way: one line before anything runs."""
    monkeypatch.setattr(runner, "run_process", lambda command, label: pytest.fail("the bench ran"))
    (workdir / "notes.txt").write_text("x")
    before = sorted(workdir.rglob("*"))
    fails_in_one_line(capsys, argv, expected)
    assert sorted(workdir.rglob("*")) == before


def test_a_named_source_root_that_does_not_exist_is_not_passed_over(tmp_path, capsys, fake_raw):
    fails_in_one_line(
        capsys,
        [
            "prepare",
            "--dataset",
            "mnist",
            "--source-root",
            str(tmp_path / "typo"),
            "--data-dir",
            str(tmp_path / "data"),
        ],
        f"--source-root {tmp_path / 'typo'}: no such folder",
    )
    assert not (tmp_path / "data" / "MNIST" / "train.parquet").exists()


def test_an_import_folder_that_does_not_exist(tmp_path, capsys):
    fails_in_one_line(capsys, ["prepare", "--from", str(tmp_path / "nowhere"), "--name", "mine"], "no such folder")


@pytest.mark.parametrize("name", ["fashion_mnist", "FashionMNIST", "mnist", "synthetic", "../escape", ".hidden"])
def test_an_import_named_as_a_built_in_datasets_folder_or_outside_the_data_dir_is_refused(tmp_path, capsys, name):
    """Such a name would overwrite a built-in dataset's files, or write outside --data-dir: refused before any is
    read, with a name of its own to paste."""
    folder = tmp_path / "download"
    folder.mkdir()
    for split, rows in (("train", 64), ("test", 16)):
        pq.write_table(schema.build_table(*random_split(rows, seed=3)), folder / f"{split}.parquet")
    data = tmp_path / "data"
    data.mkdir()
    err = fails_in_one_line(capsys, ["prepare", "--from", str(folder), "--name", name, "--data-dir", str(data)]).err
    assert f"--name {name!r}" in err and "give your data a name of its own" in err
    assert list(data.iterdir()) == [] and not (tmp_path / "escape").exists()
    command = err.split("`")[1].split()
    assert command[:3] == ["python", "-m", "mnistperf"]
    main(command[3:])  # the command said works as pasted
    assert [path.name for path in data.iterdir()] == [command[command.index("--name") + 1]]


def test_a_runs_folder_this_process_may_not_write_in_is_said_first_with_the_option_to_change(
    workdir, capsys, monkeypatch
):
    import os

    access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: Path(path).name != "ro" and access(path, mode, **kw))
    (workdir / "ro").mkdir()  # ... as a read-only mount answers
    argv = [*stage_argv("v2_pinned", epochs=1), "--trainer.logger.init_args.save_dir", "ro"]
    fails_in_one_line(
        capsys, argv, "ro is a folder this process may not write in", "add --trainer.logger.init_args.save_dir"
    )


def test_name_without_from(capsys):
    fails_in_one_line(capsys, ["prepare", "--name", "mine"], "--name goes with --from DIR")


def test_an_official_dataset_beside_an_import_is_refused_not_ignored(capsys, tmp_path):
    argv = ["prepare", "--from", str(tmp_path), "--name", "mine", "--dataset", "mnist"]
    fails_in_one_line(capsys, argv, "--dataset mnist prepares an official dataset, --from imports your own: give one")


# ---------------------------------------------------------------- options, values, types
@pytest.mark.parametrize(
    "override, expected",
    [
        (["--data.batch_size", "-1"], "data.batch_size must be at least 1"),
        (["--data.num_workers", "-2"], "data.num_workers cannot be negative"),
        (["--data.prefetch_factor", "2"], "data.prefetch_factor needs worker processes"),
        (["--data.val_source", "2"], "data.val_source must be 'test' or a fraction"),
        (["--data.pipeline", "stream", "--data.val_source", "0.2"], "the stream pipeline never holds the training set"),
        (["--data.dataset", "../elsewhere"], "is neither a built-in dataset"),
        (["--data.data_dir", "s3://bucket/x"], "is remote, and the v2 pipeline reads local files only"),
        (["--data.dataset", "mine"], "data.dataset 'mine' is a dataset of your own"),
        (["--data.dataset", "fashion"], "data.dataset 'fashion' is no built-in dataset (did you mean fashion_mnist?)"),
        (["--data.dataset", "Fashion_MNIST"], "is no built-in dataset (did you mean fashion_mnist?)"),  # in any case
        (["--data.dataset", "my_cvs"], "data.dataset 'my_cvs' is a dataset of your own (did you mean my_csv, beside"),
    ],
)
def test_wrong_values_end_in_one_line(workdir, capsys, override, expected):
    (workdir / "data" / "my_csv" / "train").mkdir(parents=True)  # a dataset of the user's own, beside the one asked
    fails_in_one_line(capsys, fit_args(*override), expected)
    assert not (workdir / "lightning_logs").exists(), "a fit that never started left a run folder"


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--data.batch_size", "abc"], "data.batch_size takes a whole number, not 'abc'"),
        (["--data.batchsize", "3"], "unrecognized arguments: --data.batchsize 3; did you mean --data.batch_size"),
        (["--data.foo", "3"], "unrecognized arguments: --data.foo 3 (`python -m"),  # near none of data's keys
        (["--trainr.max_epochs", "3"], "did you mean --trainer.max_epochs for --trainr.max_epochs?"),
        (["--model.batch_size", "3"], "did you mean --data.batch_size for --model.batch_size?"),  # the key elsewhere
    ],
)
def test_parser_errors_are_one_line_not_the_whole_usage(workdir, capsys, argv, expected):
    err = fails_in_one_line(capsys, fit_args(*argv), expected).err
    assert "`python -m mnistperf fit --help` lists the options" in err


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--data.num_workers", "abc"], "data.num_workers takes a whole number, not 'abc'"),
        (["--data.num_workers=1.5"], "data.num_workers takes a whole number, not '1.5'"),
        (["--data.pin_memory", "maybe"], "data.pin_memory takes true or false, not 'maybe'"),
        (["--model.lr", "fast"], "model.lr takes a number, not 'fast'"),
        (["--trainer.max_epochs", "two"], "trainer.max_epochs takes a whole number or null, not 'two'"),
        (["--data.val_source", "train"], "data.val_source takes test or a number, not 'train'"),
        (
            ["--model.compile_mode", "reduce-overhed"],
            "model.compile_mode takes default, reduce-overhead, max-autotune, max-autotune-no-cudagraphs or null, "
            "not 'reduce-overhed'; did you mean reduce-overhead?",
        ),
    ],
)
def test_a_value_of_the_wrong_type_is_named_in_the_users_words(workdir, capsys, argv, expected):
    err = fails_in_one_line(capsys, fit_args(*argv), expected).err
    assert "<class" not in err and "Parser key" not in err and "Union" not in err


@pytest.mark.parametrize(
    "hints, expected",
    [
        ("mnistperf.lab_hints.LAB_HINT", "has no attribute 'LAB_HINT'); give package.module.NAME."),
        ("mnistperf.lab_hints.annotations", "is a _Feature, not a mapping of verdicts to hints"),
    ],
)
def test_hints_named_by_a_path_that_holds_none_are_one_line(workdir, capsys, hints, expected):
    err = fails_in_one_line(capsys, fit_args("--trainer.callbacks.init_args.hints", hints), expected).err
    assert err.startswith(f"mnistperf: error: EpochTimer's hints {hints!r}"), err


@pytest.mark.parametrize(
    "options, expected",
    [
        (
            ["--trainer.callbacks.init_args.input_bound_share", "2"],
            "EpochTimer(input_bound_share=2.0): input_bound_share takes a share above 0 and at most 1",
        ),
        (
            ["--trainer.callbacks.init_args.busy_window_steps", "-1"],
            "EpochTimer(busy_window_steps=-1): busy_window_steps takes a count of steps, 0 or more",
        ),
        (
            ["--trainer.callbacks+=mnistperf.diagnosis.SampleAudit", "--trainer.callbacks.init_args.sample_dims", "0"],
            "SampleAudit(sample_dims=0): sample_dims takes a count of leading dimensions, 1 or more",
        ),
    ],
)
def test_a_callback_argument_out_of_range_in_a_config_is_one_line(workdir, capsys, options, expected):
    fails_in_one_line(capsys, fit_args(*options), expected)
    assert not (workdir / "lightning_logs").exists()


TIMER_HELP = "(`python -m mnistperf fit --trainer.callbacks.help mnistperf.diagnosis.EpochTimer` lists the options)"


@pytest.mark.parametrize(
    "option, value, expected, in_a_file",
    [
        ("input_bound_share", "abc", "input_bound_share takes a number, not 'abc'", True),
        ("input_bound_shar", "0.3", "it has no argument 'input_bound_shar'; did you mean input_bound_share?", True),
        ("log_all", "maybe", "log_all takes true or false, not 'maybe'", False),  # a file's: jsonargparse's reading
    ],
)
def test_a_callback_argument_of_the_wrong_type_or_name_is_one_line_with_that_callbacks_help(
    workdir, capsys, option, value, expected, in_a_file
):
    """Said with the whole key and the class, and the command that lists that class's arguments (which works)."""
    err = fails_in_one_line(capsys, fit_args(f"--trainer.callbacks.init_args.{option}", value)).err
    assert err == f"mnistperf: error: trainer.callbacks mnistperf.diagnosis.EpochTimer: {expected} {TIMER_HELP}\n"
    if in_a_file:  # the same in a config file
        config = (CONFIGS / "v2_pinned.yaml").read_text().replace("input_bound_share: 0.5", f"{option}: {value}")
        (workdir / "mine.yaml").write_text(config)
        err = fails_in_one_line(capsys, ["fit", "--config", "mine.yaml"]).err
        assert err == f"mnistperf: error: trainer.callbacks mnistperf.diagnosis.EpochTimer: {expected} {TIMER_HELP}\n"
    with pytest.raises(SystemExit) as help_exit:
        main(["fit", "--trainer.callbacks.help", "mnistperf.diagnosis.EpochTimer"])
    assert help_exit.value.code == 0 and "--trainer.callbacks.input_bound_share" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["fit", "validate"])
def test_a_value_of_the_wrong_type_in_a_config_file_is_named_the_same_way_with_its_file(workdir, capsys, command):
    config = (CONFIGS / "v1_workers4.yaml").read_text()
    (workdir / "mine.yaml").write_text(re.sub(r"num_workers: \d+", "num_workers: four", config))
    said = "data.num_workers takes a whole number, not 'four'"
    fails_in_one_line(capsys, [command, "--config", "mine.yaml"], f"mnistperf: error: mine.yaml: {said}")
    # the file's own value right, the command line's wrong: no file is named
    argv = ["fit", "--config", str(CONFIGS / "v1_workers4.yaml"), "--data.num_workers", "four"]
    assert fails_in_one_line(capsys, argv, said).err.startswith(f"mnistperf: error: {said}")


@pytest.mark.parametrize(
    "argv, meant",
    [
        (fit_args("--trainer.max_epoch", "2"), "--trainer.max_epochs for --trainer.max_epoch"),
        (fit_args("--data.num_worker", "0"), "--data.num_workers for --data.num_worker"),
        (["bench", "--config-dir", str(CONFIGS), "--epoch", "2"], "--epochs for --epoch"),
        (["tune", "--config", str(CONFIGS / "v1_bs512.yaml"), "--budg", "1"], "--budget for --budg"),
        (["prepare", "--data-d", "mine"], "--data-dir for --data-d"),
    ],
)
def test_a_prefix_of_an_option_is_answered_like_a_typo_not_taken(workdir, capsys, argv, meant):
    given = next(word for word in argv if word.startswith("--") and meant.endswith(word))
    err = fails_in_one_line(capsys, argv, f"unrecognized arguments: {given}").err
    assert f"did you mean {meant}?" in err
    assert not (workdir / "lightning_logs").exists() and not (workdir / "bench_results").exists()


@pytest.mark.parametrize(
    "section, wrong, meant",
    [("data", "num_worker", "data.num_workers"), ("trainer", "max_epoch", "trainer.max_epochs")],
)
def test_a_misspelt_key_in_a_config_file_gets_the_key_meant_and_fits_help(workdir, capsys, section, wrong, meant):
    config = (CONFIGS / "v2_pinned.yaml").read_text()
    assert f"\n{section}:\n" in config
    (workdir / "mine.yaml").write_text(config.replace(f"\n{section}:\n", f"\n{section}:\n  {wrong}: 1\n", 1))
    err = fails_in_one_line(capsys, ["fit", "--config", "mine.yaml"], f"option '{section}.{wrong}'").err
    assert f"did you mean {meant}?" in err and "`python -m mnistperf fit --help` lists the options" in err
    assert err.startswith("mnistperf: error: mine.yaml: ")  # the file that holds it
    (workdir / "first.yaml").write_text("seed_everything: 1\n")
    err = fails_in_one_line(capsys, ["fit", "--config=first.yaml", "--config", "mine.yaml"], "option").err
    assert err.startswith("mnistperf: error: mine.yaml: ")  # of two files given, the one that holds it
    err = fails_in_one_line(capsys, ["tune", "--config", "mine.yaml", "--budget-s", "15"], "option").err
    assert err.startswith("mnistperf: error: mine.yaml: ")  # tune's reading of the stage names it too
    assert given_configs(["--config=mine.yaml", "--config", "first.yaml"]) == [Path("mine.yaml"), Path("first.yaml")]
    # a misspelt section: its keys are near no option, the section is near one
    (workdir / "section.yaml").write_text(config.replace(f"\n{section}:\n", f"\n{section[:-1]}:\n", 1))
    err = fails_in_one_line(capsys, ["fit", "--config", "section.yaml"], f"option '{section[:-1]}.").err
    assert re.search(rf"did you mean {section}(\.\w+)?\?", err)  # the key meant where near, else the section
    (workdir / "deeper.yaml").write_text(f"{section}:\n  foo:\n    bar: 1\n")  # a section of no option: no guess
    err = fails_in_one_line(capsys, ["fit", "--config", "deeper.yaml"], f"option '{section}.foo.bar'").err
    assert "did you mean" not in err


@pytest.mark.parametrize(
    "argv, expected",
    [
        (
            ["prepare", "--data_dir", "mine"],
            "unrecognized arguments: --data_dir mine; did you mean --data-dir for --data_dir?",
        ),
        (["prepare", "--dataset", "fashion"], "invalid choice: 'fashion'"),
        (["bench", "--epochz", "2"], "unrecognized arguments: --epochz 2; did you mean --epochs for --epochz?"),
        (["tune", "--config", str(CONFIGS / "v2_pinned.yaml"), "--budjet", "1"], "did you mean --budget for --budjet?"),
        (["bench", "--repeats", "two"], "argument --repeats: invalid int value: 'two'"),
        (["bench", "--baselne", "x"], "unrecognized arguments: --baselne x (`"),  # no hidden old name offered
    ],
)
def test_prepare_bench_and_tune_answer_a_wrong_option_in_one_line_with_the_one_meant(capsys, argv, expected):
    err = fails_in_one_line(capsys, argv, expected).err
    assert f"`python -m mnistperf {argv[0]} --help` lists the options" in err
    if "fashion" in argv:
        assert "did you mean fashion_mnist?" in err


def test_a_tune_set_value_the_stage_refuses_points_to_the_help_that_lists_that_option(capsys):
    argv = ["tune", "--config", str(CONFIGS / "v2_pinned.yaml"), "--set", "data.batch_size=abc"]
    fails_in_one_line(
        capsys, argv, "data.batch_size takes a whole number, not 'abc' (`python -m mnistperf fit --help` lists"
    )


@pytest.mark.parametrize("command", ["fit", "validate"])
def test_a_missing_config_names_the_configs_that_exist(workdir, capsys, command):
    shutil.copytree(CONFIGS, workdir / "configs")
    err = fails_in_one_line(capsys, [command, "--config", "configs/v2_pinnned.yaml"], "configs/v2_pinnned.yaml").err
    assert "no such file; did you mean configs/v2_pinned.yaml?" in err
    assert "v1_naive.yaml, " in err and "streaming" in err


@pytest.mark.parametrize("command", ["fit", "validate", "tune"])
@pytest.mark.parametrize(
    "name, content, expected",
    [
        ("configs", None, "--config configs: a folder, not a config file; give one of its YAML files (configs/a.yaml)"),
        ("model.ckpt", b"PK\x03\x04\xff\xfe", "--config model.ckpt: not text, so no YAML config"),
        ("broken.yaml", b"trainer: [1\n", "broken.yaml: not a config {command} can read ("),
        ("empty.yaml", b"", "empty.yaml: holds nothing, not the mapping of a LightningCLI config"),
        ("list.yaml", b"- 1\n", "list.yaml: holds list, not the mapping of a LightningCLI config"),
    ],
    ids=["folder", "binary", "bad-yaml", "empty", "list"],
)
def test_a_config_that_is_no_yaml_mapping_is_named_in_one_line(
    tmp_path, monkeypatch, capsys, command, name, content, expected
):
    monkeypatch.chdir(tmp_path)
    if content is None:
        (tmp_path / name).mkdir()
        (tmp_path / name / "a.yaml").write_text("trainer: {}\n")
    else:
        (tmp_path / name).write_bytes(content)
    fails_in_one_line(capsys, [command, "--config", name], expected.format(command=command))
    assert not (tmp_path / "lightning_logs").exists()


@pytest.mark.parametrize("command", ["fit", "tune"])
def test_a_misspelt_config_in_a_project_of_ones_own_is_answered_with_its_yaml_files(
    tmp_path, monkeypatch, capsys, command
):
    monkeypatch.chdir(tmp_path)
    for name in ("config.yaml", "other.yml", ".pre-commit-config.yaml"):
        (tmp_path / name).write_text("trainer: {}\n")
    err = fails_in_one_line(
        capsys,
        [command, "--config", "confg.yaml"],
        "--config confg.yaml: no such file; did you mean config.yaml? The YAML files in ./ are config.yaml, other.yml",
    ).err
    assert "configs/" not in err and ".pre-commit" not in err and "v1_bs512" not in err


@pytest.mark.parametrize("command", ["fit", "tune"])
def test_a_misspelt_stage_in_the_labs_checkout_is_answered_with_the_stage(monkeypatch, capsys, command):
    monkeypatch.chdir(CONFIGS.parent)  # whose own YAML files are hidden ones: .pre-commit-config.yaml
    fails_in_one_line(
        capsys, [command, "--config", "v1_bs12.yaml"], "no such file; did you mean configs/v1_bs512.yaml?"
    )


def test_a_missing_config_where_no_yaml_file_is_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    fails_in_one_line(
        capsys, ["tune", "--config", "mine.yaml"], "no such file, and no YAML file in ./; give your config's path"
    )


@pytest.fixture
def own_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A project of the user's own in the working folder: slowmlp/model.py defines MLP, a LightningModule."""
    (tmp_path / "slowmlp").mkdir()
    (tmp_path / "slowmlp" / "__init__.py").write_text("")
    (tmp_path / "slowmlp" / "model.py").write_text(
        "from lightning import LightningModule\n\n\nclass MLP(LightningModule):\n    pass\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [name for name in sys.modules if name.split(".")[0] == "slowmlp"]:
        del sys.modules[name]


@pytest.mark.parametrize(
    "class_path, meant",
    [
        ("slowmlp.model.MPL", "slowmlp.model has no MPL; did you mean slowmlp.model.MLP?"),
        ("slowmlp.model.Zebra", "slowmlp.model has no Zebra; the classes it defines are MLP."),
        ("slowmlp.modle.MLP", "(No module named 'slowmlp.modle'); did you mean slowmlp.model?"),
        ("slowmpl.model.MLP", "(No module named 'slowmpl'); did you mean slowmlp.model, in this folder?"),
    ],
)
def test_a_misspelt_class_path_in_an_importable_project_gets_the_name_meant(own_project, capsys, class_path, meant):
    (own_project / "config.yaml").write_text(f"model:\n  class_path: {class_path}\n")
    err = fails_in_one_line(capsys, ["tune", "--config", "config.yaml"], f"model.class_path '{class_path}'", meant).err
    assert "PYTHONPATH" not in err  # the project is importable: the path is not what is wrong


def test_a_class_a_package_lacks_is_answered_with_those_its_modules_define(own_project, capsys):
    (own_project / "slowmlp" / "__init__.py").write_text("from slowmlp.model import MLP\n")
    (own_project / "config.yaml").write_text("model:\n  class_path: slowmlp.Zebra\n")
    meant = "slowmlp has no Zebra; the classes it defines are MLP."
    fails_in_one_line(capsys, ["tune", "--config", "config.yaml"], "model.class_path 'slowmlp.Zebra'", meant)


@pytest.mark.parametrize(
    "source, error",
    [("def f(:\n", "SyntaxError: "), ("raise RuntimeError('no GPU here')\n", "RuntimeError: no GPU here")],
)
def test_a_module_of_ones_own_that_fails_as_it_runs_is_one_line(own_project, capsys, source, error):
    (own_project / "slowmlp" / "broken.py").write_text(source)
    (own_project / "config.yaml").write_text("model:\n  class_path: slowmlp.broken.MLP\n")
    fails_in_one_line(
        capsys,
        ["tune", "--config", "config.yaml"],
        f"model.class_path 'slowmlp.broken.MLP' cannot be imported ({error}",
        "slowmlp.broken is found but fails to import; fix it until `python -c 'import slowmlp.broken'` works here",
    )


def test_the_debug_switch_shows_the_traceback(workdir, monkeypatch):
    from mnistperf.errors import ConfigError

    monkeypatch.setenv("MNISTPERF_DEBUG", "1")
    with pytest.raises(ConfigError):
        main(fit_args("--data.batch_size", "0"))


# ---------------------------------------------------------------- files changed between runs
def test_a_prepared_file_replaced_by_garbage_between_runs(workdir, capsys):
    main(fit_args())
    (workdir / "data" / "FashionMNIST" / "train.parquet").write_bytes(b"garbage")
    fails_in_one_line(capsys, fit_args(), "train.parquet is not a readable Parquet file")


def test_an_interrupted_bench_keeps_its_rows_and_says_it_is_incomplete(workdir, capsys, monkeypatch):
    outcomes = iter(["ok", "interrupt"])

    def run_process(command, label):
        if next(outcomes) == "interrupt":
            raise KeyboardInterrupt
        target = Path(command[command.index("--trainer.logger.init_args.save_dir") + 1])
        target = target / command[command.index("--trainer.logger.init_args.name") + 1] / "version_0" / "timing.json"
        target.parent.mkdir(parents=True)
        target.write_text(
            json.dumps(
                {
                    "avg_train_s": 1.0,
                    "avg_eval_s": 0.1,
                    "total_train_s": 2.0,
                    "total_eval_s": 0.2,
                    "samples_per_s": 1.0,
                    "input_wait_share": 0.1,
                    "verdict": "compute-bound",
                    "peak_rss_mb": {},
                    "device": "cpu",
                    "cpu_count": 2,
                    "versions": {},
                }
            )
        )
        return 0, "", {}

    monkeypatch.setattr(runner, "run_process", run_process)
    with pytest.raises(SystemExit) as stop:  # a script reads the status: cut short
        main(
            ["bench", "--stages", "v1_naive,v2_pinned", "--baseline", "none", "--config-dir", str(CONFIGS)]
            + ["--out", "out"]
        )
    assert stop.value.code == 130
    report = (workdir / "out" / "results.md").read_text()
    assert report.startswith("# mnistperf bench (incomplete)") and "no result for v2_pinned" in report


# ---------------------------------------------------------------- advice that works
def test_offline_fit_names_its_own_option_and_following_the_advice_trains(tmp_path, capsys, fake_raw):
    """No source folder, no network: the advice names fit's option (not prepare's), leaves no empty folder
    behind, and the command it describes then works."""
    args = fit_args("--data.dataset", "mnist", "--data.batch_size", "8", "--trainer.limit_val_batches", "1")
    err = fails_in_one_line(capsys, args, "pass --data.source_root DIR").err
    assert not (tmp_path / "data").exists(), "a failed preparation left folders behind"
    option = re.search(r"pass (--\S+) DIR", err).group(1)
    main([*args, option, str(fake_raw.root)])
    assert (tmp_path / "data" / "MNIST" / "train.parquet").is_file()


def test_an_empty_data_dir_offline_says_so_and_the_command_it_gives_prepares_it(tmp_path, capsys, fake_raw):
    """A data_dir with no prepared data, no source folder and no mirror answering: the device line, then one line
    saying the folder holds no prepared data and the command that prepares it there; pasted, it does."""
    empty = tmp_path / "empty"
    empty.mkdir()
    args = fit_args("--data.dataset", "mnist", "--data.data_dir", str(empty), "--data.batch_size", "8")
    out, err = fails_in_one_line(capsys, args, f"mnistperf: error: data.data_dir {empty} holds no")
    assert (
        f"in no local folder searched ({tmp_path / 'no_system_datasets' / 'mnist'}, {empty / 'MNIST' / 'raw'})" in err
    )
    assert [line.split(":")[0] for line in out.splitlines()] == ["mnistperf"] and out.startswith("mnistperf: fit on ")
    assert not any(empty.iterdir())
    command = re.search(r"Prepare it there with `([^`]+)`", err).group(1)
    assert command == f"python -m mnistperf prepare --dataset mnist --data-dir {empty} --source-root DIR"
    main(shlex.split(command.replace("DIR", str(fake_raw.root)))[3:])
    main([*args, "--trainer.limit_val_batches", "1"])
    assert (empty / "MNIST" / "train.parquet").is_file()


def test_a_source_root_without_the_files_is_named_where_the_fit_looked(tmp_path, capsys, fake_raw):
    (tmp_path / "empty").mkdir()
    args = fit_args("--data.dataset", "mnist", "--data.source_root", str(tmp_path / "empty"))
    fails_in_one_line(capsys, args, f"in no local folder searched ({tmp_path / 'empty' / 'mnist'}, ")


def test_offline_prepare_names_its_own_option_and_following_the_advice_prepares(tmp_path, capsys, fake_raw):
    args = ["prepare", "--dataset", "mnist"]
    err = fails_in_one_line(capsys, args, "pass --source-root DIR").err
    assert not (tmp_path / "data").exists(), "a failed preparation left folders behind"
    option = re.search(r"pass (--\S+) DIR", err).group(1)
    main([*args, option, str(fake_raw.root)])
    assert (tmp_path / "data" / "MNIST" / "test.parquet").is_file()


@pytest.mark.parametrize("place", ["middle", "truncated"])
def test_a_damaged_file_to_import_is_the_users_to_replace(tmp_path, capsys, place):
    folder = tmp_path / "download"
    folder.mkdir()
    for split, rows in (("train", 64), ("test", 16)):
        table = schema.build_table(*random_split(rows, seed=3))
        pq.write_table(table, folder / f"{split}.parquet", row_group_size=16, write_page_checksum=True)
    damage(folder / "train.parquet", place)
    argv = ["prepare", "--from", str(folder), "--name", "mine"]
    err = fails_in_one_line(capsys, argv, str(folder / "train.parquet")).err
    assert "replace it with a good copy and import again" in err and "prepare --force" not in err
    assert not (tmp_path / "data" / "mine").exists()


# ---------------------------------------------------------------- runs compared and reported
@pytest.mark.parametrize(
    "argv",
    [["report", "config.yaml", "--html"], ["compare", "config.yaml", "run"], ["report", "other.json"]],
    ids=["yaml", "compared", "json"],
)
def test_a_file_that_is_not_a_timing_json_is_told_what_one_is_and_how_to_get_one(tmp_path, monkeypatch, capsys, argv):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.yaml").write_text("model:\n  lr: 0.1\n")
    (tmp_path / "other.json").write_text('{"loss": 0.1}')
    (tmp_path / "run").mkdir()
    err = fails_in_one_line(
        capsys,
        argv,
        f"{argv[1]}: not a timing.json (",
        "the summary EpochTimer writes at a fit's end, in the run's log folder",
        "python -m mnistperf fit --config FILE",
    ).err
    assert "Expecting value" not in err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["config.yaml", "other.json", "run"]


SUMMARY = {  # a timing.json of two epochs, with each kind of value its readers take
    "avg_train_s": 1.0,
    "epochs": [{"epoch": 1, "train_s": 1.5, "eval_s": 0.2}, {"epoch": 2, "train_s": 1.0, "eval_s": 0.2}],
    "steady_epochs": [2, 2],
    "warmup": {"epoch": 1, "train_s": 1.5, "eval_s": 0.2},
    "stalls": {"spikes": 0, "spikes_share": 0.0, "worst_spikes": [], "slow_first_step": []},
    "busy_window": {"device": "cpu", "share": 0.9, "epoch": 2, "first_step": 1, "last_step": 2},
    "advice": {"ceiling": "what remains is the CPU's arithmetic", "hints": ["a larger batch"]},
}
DAMAGED = {  # (where, the value written there, or None to leave the key out; what the error says is wrong)
    "a string for a number": (("epochs", 1, "train_s"), "1.0", 'epochs[1].train_s is "1.0", not a number'),
    "a list for an object": (("warmup",), [1, 1.5], "warmup is [1, 1.5], not an object"),
    "a row without its epoch": (("epochs", 0, "epoch"), None, "epochs[0].epoch is missing"),
    "a pair cut short": (("steady_epochs",), [2], "steady_epochs is [2], not a list of 2"),
    "a null the runs' time": (("avg_train_s",), "null", "avg_train_s is null"),
    "an unknown device": (("busy_window", "device"), "tpu", 'busy_window.device is "tpu", not one of cpu, cuda'),
    "epochs by their number": (("epochs",), {"1": {"train_s": 1.5}}, 'epochs is {"1": {"train_s": 1.5}}, not a list'),
    "words for a list": (("advice", "hints"), "a larger batch", 'advice.hints is "a larger batch", not a list'),
}


@pytest.mark.parametrize("command", ["report", "compare"])
@pytest.mark.parametrize("damage_done", list(DAMAGED), ids=list(DAMAGED))
def test_a_timing_json_with_a_value_its_readers_cannot_take_is_named_in_one_line(
    tmp_path, monkeypatch, capsys, command, damage_done
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "good.json").write_text(json.dumps(SUMMARY))
    main(["report", "good.json"])  # the summary undamaged reads
    assert "Average Train Time per Epoch: 1.00 s" in capsys.readouterr().out
    (*keys, last), value, wrong = DAMAGED[damage_done]
    damaged = json.loads(json.dumps(SUMMARY))
    inside = damaged
    for key in keys:
        inside = inside[key]
    if value is None:
        del inside[last]
    else:
        inside[last] = None if value == "null" else value
    (tmp_path / "run.json").write_text(json.dumps(damaged))
    argv = ["report", "run.json"] if command == "report" else ["compare", "good.json", "run.json"]
    fails_in_one_line(capsys, argv, f"run.json: not a timing.json ({wrong}); ", "python -m mnistperf fit --config")


def test_a_timing_json_holding_a_slow_first_steps_share_without_the_longest_step_reports_the_share(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    edited = json.loads(json.dumps(SUMMARY))
    edited["stalls"].update(slow_first_step=[2], slow_first_share=0.3, slowest_first_s=None)  # as edited by hand
    (tmp_path / "run.json").write_text(json.dumps(edited))
    main(["report", "run.json"])
    out = capsys.readouterr().out
    assert "the first steps of epoch(s) 2 (over " in out and "took 30% of train time beyond the median" in out
    assert "the longest" not in out


@pytest.mark.parametrize("out", ["afile/sub/report.html", "afile/report.html", "run"])
def test_a_report_that_cannot_go_where_out_says_is_one_line_and_leaves_nothing(tmp_path, monkeypatch, capsys, out):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "timing.json").write_text(json.dumps({"avg_train_s": 1.0}))
    (tmp_path / "afile").write_text("a file, not a folder")
    before = sorted(str(path) for path in tmp_path.rglob("*"))
    err = fails_in_one_line(capsys, ["report", "run", "--html", "--out", out], f"--out {out}: ").err
    assert ("afile is a file, not a folder" in err) if "afile" in out else ("a folder; give --out FILE" in err)
    assert sorted(str(path) for path in tmp_path.rglob("*")) == before


def test_prepare_litdata_without_the_package_is_refused_by_its_option_before_any_file_is_written(
    tmp_path, without_litdata, capsys
):
    data = tmp_path / "data"
    argv = ["prepare", "--dataset", "synthetic", "--rows", "64", "--litdata", "--data-dir", str(data)]
    fails_in_one_line(capsys, argv, "prepare --litdata needs the litdata package", litdata_install())
    assert not data.exists()
    release, _, build = torch.__version__.partition("+")  # pinned: litdata's torchvision would bring another torch
    cpu = " torchvision --extra-index-url https://download.pytorch.org/whl/cpu" if build == "cpu" else ""
    assert litdata_install().startswith(f"pip install litdata 'torch=={release}'{cpu} (the pin keeps your torch")


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["bench", "--epochs", "0"], "--epochs must be at least 1 (got 0): give --epochs 1 or more."),
        (["bench", "--repeats", "-1"], "--repeats must be at least 1 (got -1): give --repeats 1 or more."),
        (["prepare", "--dataset", "synthetic", "--rows", "-5"], "--rows must be at least 1 (got -5): give --rows"),
    ],
)
def test_a_count_below_one_names_the_option_it_was_given_for(workdir, capsys, argv, expected):
    fails_in_one_line(capsys, argv, expected)
    assert not (workdir / "bench_results").exists() and not (workdir / "data" / "Synthetic").exists()


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--dataset", "synthetic", "--formats", "parquet,csv"], "Parquet shards alone (it is made to outgrow memory)"),
        (["--dataset", "mnist", "--rows", "100"], "--rows goes with --dataset synthetic, the random rows"),
        (["--seed", "3"], "--seed goes with --dataset synthetic, the random rows; leave it out for the official"),
    ],
)
def test_prepare_refuses_an_option_it_would_ignore(workdir, capsys, argv, expected):
    before = sorted(workdir.rglob("*"))
    fails_in_one_line(capsys, ["prepare", *argv], expected)
    assert sorted(workdir.rglob("*")) == before
