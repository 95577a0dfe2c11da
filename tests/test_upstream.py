"""The private parts of Lightning, litdata and torch in mnistperf.upstream still do what it relies on.

So do the parsers' messages it reads and the library messages it calms by their text: each is produced here by the
installed library itself. A failure names the installed release: that release changed the part, and
mnistperf/upstream.py says why it is used and what public API would replace it.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import inspect
import logging
import platform
import re
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Literal

import jsonargparse
import lightning
import pytest
import torch
import torch.distributed.nn.functional
from conftest import fit_module, free_port
from lightning.fabric.utilities.data import has_len
from lightning.pytorch import Callback, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.demos.boring_classes import BoringModel
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.profilers import PassThroughProfiler
from lightning.pytorch.trainer.connectors.logger_connector import result as logger_result
from lightning.pytorch.utilities import CombinedLoader
from torch.utils.data import DataLoader

from mnistperf import upstream

LIGHTNING = f"Lightning {lightning.__version__}"
TORCH = f"torch {torch.__version__}"
JSONARGPARSE = f"jsonargparse {importlib.metadata.version('jsonargparse')}"
ARGPARSE = f"Python {platform.python_version()}'s argparse"


def fit(tmp_path, *callbacks: Callback, checkpoints: bool = False, **trainer_options) -> Trainer:
    """Two training steps of Lightning's own toy module, no validation."""
    return fit_module(
        BoringModel(),
        callbacks=callbacks,
        max_epochs=1,
        limit_train_batches=2,
        limit_val_batches=0,
        enable_checkpointing=checkpoints,
        default_root_dir=tmp_path,
        **trainer_options,
    )


class Counting(Callback):
    def __init__(self):
        self.calls = 0

    def on_train_batch_start(self, *args):
        self.calls += 1


def test_lightning_skips_a_hook_that_is_not_callable_and_calls_it_once_restored(tmp_path):
    counting = Counting()
    upstream.skip_hook(counting, "on_train_batch_start")
    try:
        fit(tmp_path, counting)
    except TypeError as error:
        pytest.fail(f"{LIGHTNING} calls a callback hook set to None ({error}): skip_hook no longer works")
    assert counting.calls == 0, f"{LIGHTNING} reached a skipped hook"
    upstream.restore_hook(counting, "on_train_batch_start")
    fit(tmp_path, counting)
    assert counting.calls == 2


class Recording(PassThroughProfiler):
    def __init__(self):
        super().__init__()
        self.started: list[str] = []

    def start(self, action_name: str) -> None:
        self.started.append(action_name)


class SwapsIn(Callback):
    def __init__(self, profiler):
        self.profiler, self.previous = profiler, None

    def on_fit_start(self, trainer, pl_module):
        self.previous = upstream.swap_profiler(trainer, self.profiler)


def test_lightning_reports_its_training_fetch_to_the_profiler_put_in_its_place(tmp_path):
    recording = Recording()
    swaps = SwapsIn(recording)
    fit(tmp_path, swaps)
    assert isinstance(swaps.previous, PassThroughProfiler)
    fetches = [a for a in recording.started if a.endswith(upstream.TRAIN_FETCH_ACTION)]
    assert len(fetches) >= 2, f"{LIGHTNING} no longer reports its training fetch as ...{upstream.TRAIN_FETCH_ACTION}"


class DeclinesSecond(BoringModel):
    """Declines its second step as it begins (its batch-start hook returns -1), which ends the epoch."""

    def on_train_batch_start(self, batch, batch_idx):
        return -1 if batch_idx == 1 else None


def test_lightning_counts_a_step_as_started_only_where_no_batch_start_declined_it(tmp_path):
    read = []

    class Reads(Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            read.append(upstream.steps_started(trainer))

        def on_train_epoch_end(self, trainer, pl_module):
            read.append(upstream.steps_started(trainer))

    fit_module(DeclinesSecond(), callbacks=[Reads()], max_epochs=1, limit_val_batches=0, default_root_dir=tmp_path)
    assert read == [0, 1, 1], f"{LIGHTNING} no longer counts only the steps that ran as started: {read}"


class ShadowsLogs(Callback):
    """Shadows a step's or an epoch's logging (``name``) on its owner as the timer does, counting its calls."""

    def __init__(self, name: str):
        self.name, self.calls = name, 0

    def on_fit_start(self, trainer, pl_module):
        owner = upstream.step_logs_owner(trainer)
        own = getattr(owner, self.name)

        def counted():
            self.calls += 1
            return own()

        vars(owner)[self.name] = counted


@pytest.mark.parametrize(("name", "calls"), [(upstream.TRAIN_STEP_LOGS, 2), (upstream.TRAIN_EPOCH_LOGS, 1)])
def test_lightning_hands_each_training_steps_and_epochs_metrics_to_the_loggers_through_the_call_shadowed(
    tmp_path, name, calls
):
    shadows = ShadowsLogs(name)
    fit(tmp_path, shadows, logger=CSVLogger(tmp_path), log_every_n_steps=1)
    assert shadows.calls == calls, f"{LIGHTNING} no longer logs a training step or epoch through {name}"


def test_lightningcli_takes_a_checkpoints_hyperparameters_in_the_method_the_mixin_overrides():
    source = inspect.getsource(LightningCLI)
    assert "self._parse_ckpt_path()" in source, f"{LIGHTNING}: LightningCLI no longer calls _parse_ckpt_path"
    assert "_parse_ckpt_path" in vars(upstream.KeepRunHyperparameters)


def test_a_checkpoint_counts_optimizer_steps_where_carry_step_count_reads_them(tmp_path):
    trainer = fit(tmp_path, checkpoints=True)
    (path,) = (tmp_path / "checkpoints").glob("*.ckpt")
    loop = torch.load(path, weights_only=True)["loops"]["fit_loop"]
    for kind, key in upstream.OPTIMIZER_STEP_PROGRESS.items():
        assert key in loop, f"{LIGHTNING}: the fit loop's state has no {key} ({kind} optimization)"
    steps = loop[upstream.OPTIMIZER_STEP_PROGRESS["automatic"]]["optimizer"]["step"]["total"]["completed"]
    assert steps == trainer.global_step == 2


@pytest.mark.litdata
def test_litdata_merges_one_process_index_and_takes_a_topology():
    from litdata.streaming.writer import BinaryWriter

    version = f"litdata {importlib.metadata.version('litdata')}"
    assert callable(getattr(BinaryWriter, "_merge_no_wait", None)), f"{version}: BinaryWriter has no _merge_no_wait"
    env = upstream.distributed_env(world_size=2, rank=1)
    assert (env.world_size, env.global_rank, env.num_nodes) == (2, 1, 1), f"{version}: _DistributedEnv changed"


def test_torchs_profiler_keeps_its_raw_events():
    version = TORCH
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
        torch.ones(4).sum()
    results = upstream.kineto_results(profiler)
    assert results is not None, f"{version}: the profiler keeps no kineto_results"
    kinds = {event.activity_type() for event in results.events()}
    assert "cpu_op" in kinds and all(event.end_ns() >= event.start_ns() for event in results.events())
    assert not upstream.profiler_running()
    with torch.autograd.profiler.profile(use_kineto=False):
        assert upstream.profiler_running(), f"{version}: torch.autograd.profiler._is_profiler_enabled is gone"
    assert not upstream.profiler_running()
    from torch.profiler import _utils

    assert callable(getattr(_utils, "_init_for_cuda_graphs", None)), f"{version}: no _init_for_cuda_graphs"


def test_torch_names_its_top_function_mode_and_counts_what_dynamo_compiled():
    from torch.overrides import TorchFunctionMode

    version = TORCH
    assert upstream.top_function_mode() is None
    with TorchFunctionMode() as mode:
        assert upstream.top_function_mode() is mode, f"{version}: torch.overrides reads the mode stack otherwise"
    before = upstream.dynamo_compiled()
    torch.compile(lambda x: x * 2, backend="eager")(torch.ones(2))
    assert upstream.dynamo_compiled(), f"{version}: dynamo's counters['frames']['ok'] counts compiled frames no more"
    assert before in (False, True)


def test_the_parsers_list_their_options_and_hand_out_a_subcommands_parser():
    plain = argparse.ArgumentParser()
    plain.add_argument("--data-dir")
    assert upstream.long_options(plain) == ["help", "data-dir"]
    root = jsonargparse.ArgumentParser()
    fit = jsonargparse.ArgumentParser()
    fit.add_argument("--data.batch_size", type=int)
    root.add_subcommands().add_subcommand("fit", fit)
    assert upstream.subcommand_parser(root, "fit") is fit, f"{JSONARGPARSE}: subcommands are kept elsewhere"
    assert "data.batch_size" in upstream.long_options(upstream.subcommand_parser(root, "fit"))


def test_argparse_expands_each_help_and_fills_the_description_where_the_plain_formatter_cleans_them():
    parser = argparse.ArgumentParser(description="Reads ``timing.json``.", formatter_class=upstream.PlainHelpFormatter)
    parser.add_argument("--when", help="a :class:`~datetime.timedelta`, default ``None`` (%(default)s)")
    text = " ".join(parser.format_help().split())
    assert "Reads timing.json." in text, f"{ARGPARSE}: the description is no longer filled in _format_text"
    assert "a timedelta, default None (None)" in text, f"{ARGPARSE}: a help is no longer expanded in _expand_help"


class Refused(Exception):
    pass


class Refusing(Callback):
    def __init__(self):
        raise Refused("no")


def test_jsonargparse_raises_a_callbacks_own_error_inside_its_own():
    callbacks = [{"class_path": f"{__name__}.Refusing"}]
    with pytest.raises(ValueError) as error:
        LightningCLI(BoringModel, run=False, args={"trainer": {"callbacks": callbacks, "logger": False}})
    assert isinstance(upstream.raised_inside(error.value, Refused), Refused), f"{JSONARGPARSE} lost the error"
    assert upstream.raised_inside(error.value, KeyError) is None


# ---------------------------------------------------------------- the parsers' messages, as the CLI reads them
def jsonargparse_says(tmp_path, *args: str) -> str:
    """jsonargparse's message for ``fit ARGS`` against options typed as the lab's are, on one line."""
    root = jsonargparse.ArgumentParser(exit_on_error=False)
    fit = jsonargparse.ArgumentParser(exit_on_error=False)
    fit.add_argument("--config", action=jsonargparse.ActionConfigFile)
    fit.add_argument("--data.batch_size", type=int, default=1)
    fit.add_argument("--data.val_source", type=Literal["test"] | float, default="test")
    fit.add_argument("--trainer.max_epochs", type=int | None, default=None)
    root.add_subcommands().add_subcommand("fit", fit)
    (tmp_path / "misspelt.yaml").write_text("data:\n  batch_sise: 2\n")
    with pytest.raises(jsonargparse.ArgumentError) as error:
        root.parse_args(["fit", *args])
    return upstream.parser_message(error.value)


def argparse_says(*args: str) -> str:
    """Python's argparse's message for ``ARGS`` against a parser with a ``--dataset`` of two choices."""

    class Says(argparse.ArgumentParser):
        def error(self, message):
            raise ValueError(message)

    parser = Says()
    parser.add_argument("--dataset", choices=["fashion_mnist", "mnist"])
    with pytest.raises(ValueError) as error:
        parser.parse_args(list(args))
    return upstream.parser_message(error.value)


@pytest.mark.parametrize(
    "name, args, found",
    [
        ("SUBCOMMAND", ["--config", "misspelt.yaml"], ("fit",)),
        ("UNKNOWN_KEY", ["--config", "misspelt.yaml"], ("data.batch_sise",)),
        ("MISSING_CONFIG", ["--config", "nowhere.yaml"], ("{tmp_path}/nowhere.yaml",)),
        ("WRONG_TYPE", ["--data.batch_size", "abc"], ("data.batch_size", "<class 'int'>", "abc")),
        (
            "WRONG_UNION",
            ["--trainer.max_epochs", "two"],
            ("trainer.max_epochs", "<class 'int'>, <class 'NoneType'>", "two"),
        ),
        ("UNRECOGNIZED", ["--data.batchsize", "3"], ("--data.batchsize 3",)),
    ],
)
def test_jsonargparse_says_what_the_cli_reads_from_its_messages(tmp_path, monkeypatch, name, args, found):
    monkeypatch.chdir(tmp_path)
    said = jsonargparse_says(tmp_path, *args)
    match = getattr(upstream, name).search(said)
    assert match, f"{JSONARGPARSE} no longer says what upstream.{name} reads: {said}"
    assert match.groups() == tuple(part.format(tmp_path=tmp_path) for part in found), said


def test_jsonargparse_names_a_key_below_its_group_where_the_parser_has_no_subcommands(tmp_path, monkeypatch):
    """tune's and the bench's reading of a stage: the key a config file misspells comes after its group's name."""
    monkeypatch.chdir(tmp_path)

    class Data:
        def __init__(self, batch_size: int = 1):
            self.batch_size = batch_size

    parser = jsonargparse.ArgumentParser(exit_on_error=False)
    parser.add_argument("--config", action=jsonargparse.ActionConfigFile)
    parser.add_class_arguments(Data, "data")  # a group, as LightningCLI adds its DataModule's arguments
    (tmp_path / "misspelt.yaml").write_text("data:\n  batch_sise: 2\n")
    with pytest.raises(jsonargparse.ArgumentError) as error:
        parser.parse_args(["--config", "misspelt.yaml"])
    said = upstream.parser_message(error.value)
    group, key = upstream.KEY_GROUP.search(said), upstream.UNKNOWN_KEY.search(said)
    assert group and key, f"{JSONARGPARSE} no longer says what upstream.KEY_GROUP reads: {said}"
    assert (group.group(1), key.group(1)) == ("data", "batch_sise"), said


def test_jsonargparse_lists_a_unions_types_as_the_cli_reads_them(tmp_path):
    said = jsonargparse_says(tmp_path, "--data.val_source", "train")
    match = upstream.WRONG_UNION.search(said)
    assert match, f"{JSONARGPARSE} no longer says what upstream.WRONG_UNION reads: {said}"
    subtypes = [found.groups() for found in upstream.SUBTYPE.finditer(match.group(2))]
    assert subtypes == [(None, "'test'", None), ("float", None, None)], f"{JSONARGPARSE} lists types otherwise: {said}"


def test_argparse_says_what_prepare_bench_and_tune_read_from_its_messages():
    said = argparse_says("--datset", "mnist")
    unrecognized = upstream.UNRECOGNIZED.search(said)
    assert unrecognized and unrecognized.group(1) == "--datset mnist", f"{ARGPARSE} words it otherwise: {said}"
    said = argparse_says("--dataset", "fashion")
    choice = upstream.INVALID_CHOICE.search(said)
    assert choice and choice.group(1) == "fashion", f"{ARGPARSE} words it otherwise: {said}"
    assert [name.strip("' ") for name in choice.group(2).split(",")] == ["fashion_mnist", "mnist"], said


# ---------------------------------------------------------------- the messages calmed by their text
def warned(act: Callable[[], object]) -> list[warnings.WarningMessage]:
    """Every warning ``act`` gives, none filtered."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        act()
    return seen


def ignores(message: str, category: type[Warning], warning: warnings.WarningMessage) -> bool:
    """Whether ``filterwarnings("ignore", message, category)`` ignores this warning."""
    return issubclass(warning.category, category) and bool(re.compile(message, re.I).match(str(warning.message)))


def many_workers() -> None:
    DataLoader(range(4), num_workers=4096).check_worker_number_rationality()


def short_logged_epoch(tmp_path) -> None:
    fit(tmp_path, logger=CSVLogger(tmp_path), log_every_n_steps=50)


@contextmanager
def one_rank_group() -> Iterator[None]:
    """A process group of this process alone (gloo): what Lightning and torch take for a distributed run."""
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        yield
    finally:
        torch.distributed.destroy_process_group()


def gathered_in_a_group(tmp_path) -> None:
    with one_rank_group():
        torch.distributed.nn.functional.all_gather(torch.zeros(1))


class LoggedPerEpoch(BoringModel):
    def validation_step(self, batch, batch_idx):
        self.log("val/acc", self.layer(batch).sum(), on_epoch=True)  # as the lab's module logs its gathered means


def epoch_logged_in_a_group(tmp_path) -> None:
    with one_rank_group():
        fit_module(
            LoggedPerEpoch(), max_epochs=1, limit_train_batches=1, limit_val_batches=1, default_root_dir=tmp_path
        )


class SizedStream(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter(range(4))

    def __len__(self) -> int:
        return 4


@pytest.mark.parametrize(
    "calmed, act",
    [
        (upstream.CALMED_WARNINGS[0], lambda tmp_path: many_workers()),
        (upstream.CALMED_WARNINGS[1], short_logged_epoch),
        (upstream.CALMED_WARNINGS[2], lambda tmp_path: CombinedLoader(range(4))),
        (upstream.CALMED_WARNINGS[3], gathered_in_a_group),
        (upstream.CALMED_WARNINGS[4], epoch_logged_in_a_group),
        (upstream.CALMED_WARNINGS[5], lambda tmp_path: has_len(DataLoader(SizedStream()))),
    ],
    ids=[
        "more-workers-than-cores",
        "epoch-shorter-than-logging",
        "leafspec",
        "all-gather",
        "sync-dist",
        "sized-iterable",
    ],
)
def test_each_calmed_warning_is_still_given_in_the_words_it_is_known_by(tmp_path, monkeypatch, calmed, act):
    category, message = calmed
    # Lightning says some once a process: another test in this one may have had them said already
    monkeypatch.setattr(logger_result, "warning_cache", type(logger_result.warning_cache)())
    seen = warned(lambda: act(tmp_path))
    assert any(ignores(message, category, warning) for warning in seen), (
        f"{LIGHTNING}, {TORCH}: no warning matches {message!r}: {[str(w.message) for w in seen]}"
    )


def test_an_evaluation_in_another_folder_is_warned_in_the_words_the_cli_ignores(tmp_path):
    state = ModelCheckpoint(dirpath=tmp_path / "training").state_dict()
    seen = warned(lambda: ModelCheckpoint(dirpath=tmp_path / "evaluation").load_state_dict(state))
    assert any(ignores(upstream.CHECKPOINT_FOLDER_CHANGED, Warning, warning) for warning in seen), (
        f"{LIGHTNING}: ModelCheckpoint warns otherwise: {[str(w.message) for w in seen]}"
    )


def test_lightningcli_given_args_beside_the_processs_own_warns_in_the_words_the_cli_ignores(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["mnistperf", "fit"])
    seen = warned(lambda: LightningCLI(BoringModel, args=["--trainer.logger", "false"], run=False))
    assert any(ignores(upstream.CLI_ARGS_BESIDE_ARGV, Warning, warning) for warning in seen), (
        f"{LIGHTNING}: LightningCLI warns otherwise: {[str(w.message) for w in seen]}"
    )


@contextmanager
def lightning_info() -> Iterator[list[str]]:
    """The messages Lightning's rank-zero loggers (as upstream names them) receive meanwhile, none filtered out."""
    said: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.append(str(record.msg))

    keep, loggers = Keep(), [logging.getLogger(name) for name in upstream.LIGHTNING_RANK_ZERO_LOGGERS]
    before = [(log.level, log.filters) for log in loggers]
    for log in loggers:
        log.addHandler(keep)
        log.setLevel(logging.INFO)
        log.filters = []  # the console's, where a command ran earlier in this process
    try:
        yield said
    finally:
        for log, (level, filters) in zip(loggers, before, strict=True):
            log.removeHandler(keep)
            log.setLevel(level)
            log.filters = filters


def test_lightnings_tips_are_said_in_the_words_the_console_drops(tmp_path):
    with lightning_info() as said:
        fit(tmp_path, checkpoints=True, logger=CSVLogger(tmp_path))
    tips = [message for message in said if "Tip" in message]
    assert tips, f"{LIGHTNING} gives no tips any more, or not through {upstream.LIGHTNING_RANK_ZERO_LOGGERS}: {said}"
    assert all(upstream.DROPPED_LIGHTNING_INFO[0] in tip for tip in tips), f"{LIGHTNING} words its tips otherwise"


def test_lightnings_tensor_cores_hint_is_said_in_the_words_the_console_drops(monkeypatch):
    from lightning.fabric.accelerators import cuda

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "an Ampere GPU")
    monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda: "highest")
    with lightning_info() as said:
        cuda._check_cuda_matmul_precision.__wrapped__(torch.device("cuda", 0))
    assert len(said) == 1 and upstream.DROPPED_LIGHTNING_INFO[1] in said[0], f"{LIGHTNING} hints otherwise: {said}"


def test_lightnings_batch_size_generator_reads_what_extract_batch_size_does_without_spending_its_warning():
    from lightning.pytorch.utilities.data import extract_batch_size

    ambiguous = (torch.zeros(7, 16, 2), torch.zeros(16))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert upstream.lightning_batch_size(ambiguous) == 7
    assert not caught, LIGHTNING
    with pytest.warns(UserWarning, match="ambiguous collection"):  # still Lightning's to give
        assert extract_batch_size(ambiguous) == 7
    assert upstream.lightning_batch_size(["a"]) is None


class Unlistable:
    """A batch object that cannot be iterated, as a graph library's heterogeneous batch: Lightning's reader fails."""

    def __iter__(self):
        raise NotImplementedError


def test_a_batch_lightnings_reader_fails_on_gives_no_lightning_size_and_no_failure():
    from lightning.pytorch.utilities.data import extract_batch_size

    with pytest.raises(NotImplementedError):
        extract_batch_size(Unlistable())
    assert upstream.lightning_batch_size(Unlistable()) is None


def test_lightningcli_says_whether_jsonargparse_reads_signatures_and_torch_keeps_its_dispatch_mode_and_leaves():
    from mnistperf import upstream

    assert upstream.jsonargparse_signatures_available()  # the test environment has jsonargparse[signatures]
    assert upstream.tree_leaves([1, (2, {"a": torch.ones(1)})])[:2] == [1, 2]
    assert hasattr(upstream.TorchDispatchMode, "__torch_dispatch__")
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        upstream.nothing  # type: ignore[attr-defined]  # noqa: B018


def test_no_module_but_upstream_imports_a_private_part_of_another_package():
    """A private name (a module or a name starting with _) of torch, Lightning or any other package is imported in
    upstream.py alone, where test_upstream checks each against the installed release."""
    import ast

    from conftest import REPO

    found = []
    for path in sorted((REPO / "src" / "mnistperf").rglob("*.py")):
        if path.name == "upstream.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                modules, names = [node.module], [alias.name for alias in node.names]
            elif isinstance(node, ast.Import):
                modules, names = [alias.name for alias in node.names], []
            else:
                continue
            for module in modules:
                if module.split(".")[0] in ("mnistperf", "__future__"):
                    continue
                private = [part for part in module.split(".") if part.startswith("_")]
                private += [name for name in names if name.startswith("_")]
                if private:
                    found.append(f"{path.relative_to(REPO)}:{node.lineno} {module} {private}")
    assert found == []
