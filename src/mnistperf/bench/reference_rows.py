"""The bench's reference rows: the same training without Lightning's loop, or in Lightning's bare loop.

It takes exactly the command line of a ``fit`` run (config and every override, model and
trainer ones included) and lets LightningCLI parse it into the same DataModule, model and
trainer settings; then it trains in a plain loop in the shape of the reference's: the same
SimpleCNN and optimizer (``configure_optimizers``), the same non-blocking copies to the
device, the same precision, the same loss and correct counts summed on the device (EpochSums),
the same epochs and batch limits. It is timed by :class:`~mnistperf.diagnosis.record.clock.EpochClock`, the clock
of :class:`~mnistperf.diagnosis.EpochTimer` (device synchronized at the epoch's ends, input wait around the
fetch of each batch, host wait between steps, on CUDA the GPU's kernels profiled over the same window
of the first epoch), with the stage's own ``input_bound_share``, and writes the same ``timing.json``.
For a graphed stage (``model.cuda_graph``) the loop replays the stage's whole step as a CUDA graph, one
per batch of each group it is handed (``data.batches_per_step``), so that the row is the graphed step
without Lightning, not an eager one.

With ``--loader-only`` it only draws the training batches onto the device, timing the input
pipeline alone.

With ``--bare-lightning`` it trains the same network, optimizer, precision and DataModule (so the
same data path, finished on the device by the same hook) inside the smallest LightningModule and
Trainer that can: no logger, no progress bar, no checkpoints, no model summary, no validation,
no metrics and no ``self.log``; the same clock, told only where epochs start and end and how many
samples each batch holds (device synchronized at the epoch's ends, as everywhere; no waits timed, so
its timing.json marks the waits and the verdict not measured).
Between ``plain PyTorch`` and ``bare Lightning`` lies the cost of Lightning's loop; between
``bare Lightning`` and the stage, the cost of what the lab adds.

    python -m mnistperf.bench.reference_rows --out plain.json --config configs/v2_pinned.yaml [fit overrides]
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.cli import LightningCLI
from typing_extensions import override

from mnistperf.console import calm_library_noise
from mnistperf.diagnosis import EpochTimer
from mnistperf.diagnosis.callbacks.batch_hooks import skip_unused_batch_hooks
from mnistperf.diagnosis.callbacks.project_reader import TrainerAttributes
from mnistperf.diagnosis.figures import EVAL_S, HOST_WAIT_S, INPUT_WAIT_S, SAMPLES, SAMPLES_PER_S, TRAIN_S, WAITS
from mnistperf.diagnosis.record.clock import EpochClock
from mnistperf.diagnosis.record.run import run_summary, write_summary
from mnistperf.diagnosis.record.verdict import INPUT_BOUND_SHARE
from mnistperf.lab_hints import LAB_HINTS
from mnistperf.lightning_cli.mnistperf_cli import MnistperfCLI, parse_fit_config
from mnistperf.model.step import TrainingStep, adam, optimizer_steps, step_batches


def _batch_limit(limit, batches: int) -> int:
    """The trainer's limit_train_batches or limit_val_batches (a count or a fraction) as a number of batches."""
    if isinstance(limit, float) and limit <= 1.0:
        return int(batches * limit) if limit < 1.0 else batches
    return min(int(limit), batches)


def input_bound_share(cli: LightningCLI) -> float:
    """The threshold the stage's EpochTimer is given in its config (the default where it has none)."""
    timers = [c for c in cast(TrainerAttributes, cli.trainer).callbacks if isinstance(c, EpochTimer)]
    return timers[0].input_bound_share if timers else INPUT_BOUND_SHARE


def run(cli: MnistperfCLI, loader_only: bool = False) -> dict:
    """Train (or, with loader_only, only draw the training batches onto the device) and time every epoch."""
    trainer, model, datamodule = cli.trainer, cli.model, cli.datamodule
    device = trainer.strategy.root_device
    datamodule.device = model_device = device
    datamodule.prepare_data()
    datamodule.setup("fit")
    train_loader, val_loader = datamodule.train_dataloader(), datamodule.val_dataloader()
    model.to(model_device)
    model.configure_model()
    # The stage's step; a graphed stage's replays its whole step as a graph (eagerly off CUDA), as the stage does.
    train_step = model.standalone_step(str(trainer.precision), summed=True)
    limit = _batch_limit(trainer.limit_train_batches, len(train_loader))
    clock = EpochClock(device, input_bound_share(cli), profile_window=not loader_only, metric="val/acc")
    assert trainer.max_epochs is not None, "a plain run needs a positive trainer.max_epochs"
    for epoch in range(1, trainer.max_epochs + 1):
        model.train()
        train_step.stage_sums("train", device).reset()  # in place: a captured step keeps adding into this tensor
        clock.epoch_start(limit, last=epoch == trainer.max_epochs, steps_left=limit * (trainer.max_epochs - epoch + 1))
        batches = iter(train_loader)
        for step in range(limit):
            fetch_start = time.perf_counter()
            batch = next(batches, None)
            waited = time.perf_counter() - fetch_start
            if batch is None:
                clock.add_fetch_wait(waited)
                break
            batch = datamodule.to_device(batch, device)
            clock.step_start(step, waited)  # the step's own wait: a profiled step's stand-in reads it
            clock.count(model.samples_in_batch(batch))
            for step_batch in [] if loader_only else step_batches(batch):
                train_step(step_batch)
            clock.step_end(step)
        del batches  # as a for loop would: a non-persistent loader's workers stop at the epoch's end
        clock.train_end()
        if loader_only:
            row = clock.epoch_end()
            print(f"epoch {epoch}: {row[SAMPLES]:,} samples drawn in {row[TRAIN_S]:.2f} s", flush=True)
            continue
        model.eval()
        train_step.stage_sums("val", device).reset()
        with torch.no_grad(), train_step.autocast:  # the stage's precision, and its trainer's limit
            for batch in itertools.islice(val_loader, _batch_limit(trainer.limit_val_batches, len(val_loader))):
                train_step.loss(datamodule.to_device(batch, device), "val")
        metrics = {
            f"{phase}/{name}": value.item()
            for phase in ("train", "val")
            for name, value in train_step.stage_sums(phase, device).means().items()
        }
        clock.eval_end()
        row = clock.epoch_end(metrics)
        print(
            f"epoch {epoch}: train {row[TRAIN_S]:.2f} s, eval {row[EVAL_S]:.2f} s, "
            f"val/acc {metrics['val/acc']:.4f}, {row['verdict']}",
            flush=True,
        )
    runner = "loader" if loader_only else "plain"
    return run_summary(runner, trainer, device, lambda: clock.summary(LAB_HINTS), datamodule=datamodule)


class BareStep(LightningModule):
    """The stage's training step, loss only; Lightning does the rest. Nothing logged, nothing summed.

    For a graphed stage (``cuda_graph``) it optimizes manually and runs the stage's whole step as one CUDA
    graph per batch shape (eagerly off CUDA), one optimizer step per batch of a group, as the stage does.
    """

    def __init__(self, net: torch.nn.Module, channels_last: bool, make_optimizer, graphed: bool = False):
        super().__init__()
        self.net = net
        self.step = TrainingStep(net, channels_last, summed=False)
        self.make_optimizer = make_optimizer
        self.automatic_optimization = not graphed

    def training_step(self, batch, batch_idx):
        """The loss for Lightning to optimize, or under a graphed stage the whole step run per batch of the group."""
        if self.automatic_optimization:
            return self.step.loss(batch)
        optimizer_steps(self.optimizers(), batch, self.step)

    def configure_optimizers(self):
        """The stage's optimizer over this module's parameters."""
        optimizer = self.make_optimizer(self.parameters())
        self.step.use(optimizer, graphed=not self.automatic_optimization)
        return optimizer


class BareClock(Callback):
    """The run's clock told only where epochs start and end and how many samples each batch holds.

    Args:
        clock: the run's clock.
        samples_in_batch: the samples a training batch holds (the stage module's own count).
    """

    def __init__(self, clock: EpochClock, samples_in_batch: Callable[[Any], int]):
        self.clock = clock
        self.samples_in_batch = samples_in_batch
        skip_unused_batch_hooks(self)  # as the lab's EpochTimer does

    @override
    def on_train_epoch_start(self, trainer, pl_module) -> None:
        """Start timing the epoch."""
        self.clock.epoch_start()

    @override
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        """Count the batch's samples."""
        self.clock.count(self.samples_in_batch(batch))

    @override
    def on_train_epoch_end(self, trainer, pl_module) -> None:
        """Close the epoch's row."""
        self.clock.epoch_end()


def run_bare(cli: MnistperfCLI) -> dict:
    """Train in Lightning's bare loop (see the module docstring) and time every epoch."""
    stage_trainer, model, datamodule = cli.trainer, cli.model, cli.datamodule
    device = stage_trainer.strategy.root_device
    model.to(device)
    model.configure_model()  # channels_last and compile as the stage has them, for this device
    hp = model.hparams
    bare = BareStep(
        model.net,
        hp.channels_last,
        lambda params: adam(params, hp.lr, hp.fused_adam, device, graphed=hp.cuda_graph),
        graphed=hp.cuda_graph,
    )
    clock = EpochClock(device, input_bound_share(cli), profile_window=False)
    trainer = Trainer(
        accelerator=device.type,
        devices=1,
        precision=stage_trainer.precision,
        max_epochs=stage_trainer.max_epochs,
        limit_train_batches=stage_trainer.limit_train_batches,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        callbacks=[BareClock(clock, model.samples_in_batch)],
    )
    trainer.fit(bare, datamodule=datamodule)
    for row in clock.epochs:
        print(f"epoch {row['epoch']}: train {row[TRAIN_S]:.2f} s, {row[SAMPLES_PER_S]:,.0f} samples/s", flush=True)
    return run_summary("bare", stage_trainer, device, lambda: waits_not_timed(clock.summary()), datamodule=datamodule)


# What the bare row's clock does not time (no waits), and so cannot conclude (no verdict): not measured, not 0.
NOT_TIMED: dict[str, Any] = {
    **dict.fromkeys(WAITS),
    "verdict": "not measured",
    "verdict_reason": "the bare Lightning row times its epochs only, not the waits a verdict reads",
}


def waits_not_timed(figures: dict) -> dict:
    """A bare run's figures, per epoch and in total, with the waits and the verdict marked not measured."""
    seconds = dict.fromkeys((INPUT_WAIT_S, HOST_WAIT_S))  # (each epoch's, and the split's wait for data)
    split = {**figures.get("split", {}), INPUT_WAIT_S: None}
    epochs = [{**row, **NOT_TIMED, **seconds} for row in figures["epochs"]]
    return {**figures, **NOT_TIMED, "advice": None, "split": split, "epochs": epochs}


def main(args: Sequence[str] | None = None) -> None:
    """Parse a fit command line, run the chosen reference row and write its timing summary to ``--out``."""
    parser = argparse.ArgumentParser(
        prog="python -m mnistperf.bench.reference_rows", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--loader-only", action="store_true", help="only draw batches: the input pipeline alone")
    parser.add_argument(
        "--bare-lightning",
        action="store_true",
        help="train in Lightning's bare loop (no logger, bar, checkpoints, metrics or self.log)",
    )
    parser.add_argument("--out", type=Path, required=True, help="where to write the timing summary (JSON)")
    opts, fit_args = parser.parse_known_args(args)
    calm_library_noise()
    runner = (
        "bare Lightning" if opts.bare_lightning else "input pipeline alone" if opts.loader_only else "plain PyTorch"
    )
    cli = parse_fit_config(fit_args, announce=runner)
    if cli.trainer.max_epochs is None or cli.trainer.max_epochs < 1:
        parser.error("trainer.max_epochs must be set to a positive number for a plain run")
    if opts.bare_lightning:
        write_summary(run_bare(cli), opts.out)
    else:
        write_summary(run(cli, opts.loader_only), opts.out)


if __name__ == "__main__":
    main()
