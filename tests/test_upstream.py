"""The private parts of Lightning, litdata and torch in mnistperf.upstream still do what it relies on.

A failure names the installed release: that release changed the part, and mnistperf/upstream.py says why it is
used and what public API would replace it.
"""

from __future__ import annotations

import importlib.metadata
import inspect

import lightning
import pytest
import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.profilers import PassThroughProfiler
from torch.utils.data import DataLoader, TensorDataset

from mnistperf import upstream

LIGHTNING = f"Lightning {lightning.__version__}"


class Line(LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).square().mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit(tmp_path, *callbacks: Callback, checkpoints: bool = False) -> Trainer:
    trainer = Trainer(
        accelerator="cpu",
        max_epochs=1,
        limit_train_batches=2,
        callbacks=list(callbacks),
        logger=False,
        enable_checkpointing=checkpoints,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(Line(), DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4))
    return trainer


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


def test_torchs_profiler_says_when_it_runs_and_keeps_its_raw_events():
    version = f"torch {torch.__version__}"
    assert not upstream.profiler_running()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
        assert upstream.profiler_running(), f"{version}: _profiler_enabled no longer says a profiler records"
        torch.ones(4).sum()
    results = upstream.kineto_results(profiler)
    assert results is not None, f"{version}: the profiler keeps no kineto_results"
    kinds = {event.activity_type() for event in results.events()}
    assert "cpu_op" in kinds and all(event.end_ns() >= event.start_ns() for event in results.events())
    from torch.profiler import _utils

    assert callable(getattr(_utils, "_init_for_cuda_graphs", None)), f"{version}: no _init_for_cuda_graphs"


def test_the_parsers_list_their_options_and_hand_out_a_subcommands_parser():
    import argparse

    import jsonargparse

    version = f"jsonargparse {importlib.metadata.version('jsonargparse')}"
    plain = argparse.ArgumentParser()
    plain.add_argument("--data-dir")
    assert upstream.long_options(plain) == ["help", "data-dir"]
    root = jsonargparse.ArgumentParser()
    fit = jsonargparse.ArgumentParser()
    fit.add_argument("--data.batch_size", type=int)
    root.add_subcommands().add_subcommand("fit", fit)
    assert upstream.subcommand_parser(root, "fit") is fit, f"{version}: subcommands are kept elsewhere"
    assert "data.batch_size" in upstream.long_options(upstream.subcommand_parser(root, "fit"))
