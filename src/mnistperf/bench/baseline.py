"""The same training without Lightning's loop, or in Lightning's bare loop, so the bench can show what each costs.

It parses a ``fit`` command line into the same DataModule, model and trainer settings and trains them in a
plain loop, or with ``--bare-lightning`` in the smallest LightningModule and Trainer that can. It is timed
as :class:`~mnistperf.timing.EpochTimer` times a run and writes the same ``timing.json``; a graphed stage
replays its graphed step here too. ``--loader-only`` times the input pipeline alone.
See docs/timing.md#the-bench.

    python -m mnistperf.bench.baseline --out plain.json --config configs/v2_pinned.yaml [fit overrides]
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from lightning.pytorch import Callback, LightningModule, Trainer

from mnistperf.console import calm_library_noise
from mnistperf.data.pipelines.base import step_batches
from mnistperf.graphed_step import StepGraphs, step_state
from mnistperf.lightning_cli import MnistperfCLI, parse_fit_config
from mnistperf.step import StandaloneStep, adam, optimizer_steps, whole_training_step
from mnistperf.sums import EpochSums
from mnistperf.timing import synchronize
from mnistperf.timing.kernel_busy import KernelWindow, window_steps
from mnistperf.timing.summary import aggregate, environment, epoch_row, write_summary


def _batch_limit(limit, batches: int) -> int:
    """The trainer's limit_train_batches (a count or a fraction) as a number of batches."""
    if isinstance(limit, float) and limit <= 1.0:
        return int(batches * limit) if limit < 1.0 else batches
    return min(int(limit), batches)


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
    train_sums = EpochSums(device)  # zeroed in place every epoch: a captured step keeps adding into this tensor
    # The stage's step; a graphed stage's replays its whole step as a graph (eagerly off CUDA), as the stage does.
    train_step = StandaloneStep(model, str(trainer.precision), train_sums)
    limit = _batch_limit(trainer.limit_train_batches, len(train_loader))
    busy_window = {"share": None} if device.type == "cuda" and not loader_only else None
    steps = window_steps(limit) if busy_window is not None else None
    window = KernelWindow(*steps) if steps else None
    threshold = 0.5
    rows = []
    for epoch in range(1, trainer.max_epochs + 1):
        model.train()
        synchronize(device)
        start = last_end = time.perf_counter()
        wait = fetch_wait = 0.0
        samples = 0
        train_sums.reset()
        batches = iter(train_loader)
        for step in range(limit):
            fetch_start = time.perf_counter()
            batch = next(batches, None)
            fetch_wait += time.perf_counter() - fetch_start
            if batch is None:
                break
            batch = datamodule.to_device(batch, device)
            wait += time.perf_counter() - last_end
            samples += batch["label"].numel()  # a group of batches (data.batches_per_step) counts all of them
            if window is not None and epoch == 1:
                window.step_start(step)
            for step_batch in ([] if loader_only else step_batches(batch)):
                train_step(step_batch)
            if window is not None and epoch == 1:
                window.step_end(step)
                if window.busy is not None:
                    busy_window = window.result(epoch)
            last_end = time.perf_counter()
        del batches  # as a for loop would: a non-persistent loader's workers stop at the epoch's end
        synchronize(device)
        eval_start = time.perf_counter()
        train_s = eval_start - start
        if loader_only:
            rows.append(epoch_row(epoch, train_s, 0.0, samples, fetch_wait, wait, None, {}, threshold))
            print(f"epoch {epoch}: {samples:,} samples drawn in {train_s:.2f} s", flush=True)
            continue
        model.eval()
        val_sums = EpochSums(device)
        with torch.no_grad(), train_step.autocast:  # the stage's precision
            for batch in val_loader:
                batch = datamodule.to_device(batch, device)
                logits = model(batch["image"])
                val_sums.add(F.cross_entropy(logits, batch["label"]), logits, batch["label"])
        metrics = {f"{stage}/{name}": value.item() for stage, sums in (("train", train_sums), ("val", val_sums))
                   for name, value in sums.means().items()}
        accuracy = metrics["val/acc"]
        synchronize(device)
        eval_s = time.perf_counter() - eval_start
        row = epoch_row(epoch, train_s, eval_s, samples, fetch_wait, wait, busy_window, metrics, threshold)
        rows.append(row)
        print(f"epoch {epoch}: train {train_s:.2f} s, eval {eval_s:.2f} s, val/acc {accuracy:.4f}, {row['verdict']}",
              flush=True)
    return summary("loader" if loader_only else "plain", trainer, datamodule, device, aggregate(rows, threshold, busy_window))


def summary(runner: str, trainer, datamodule, device: torch.device, figures: dict) -> dict:
    """timing.json of a plain or bare run: what ran, where, and its figures, as EpochTimer writes them."""
    return {
        "config": getattr(trainer.logger, "name", None),
        "runner": runner,
        "data": datamodule.loader_settings(),
        "precision": str(trainer.precision),
        "world_size": 1,
        **environment(device),
        **figures,
    }


class BareStep(LightningModule):
    """Forward and cross-entropy on the stage's network; Lightning does the rest. Nothing logged, nothing summed.

    For a graphed stage (``cuda_graph``) it optimizes manually and runs the stage's whole step as one CUDA
    graph per batch shape (eagerly off CUDA), one optimizer step per batch of a group, as the stage does.
    """

    def __init__(self, net: torch.nn.Module, channels_last: bool, make_optimizer, graphed: bool = False):
        super().__init__()
        self.net = net
        self.channels_last = channels_last
        self.make_optimizer = make_optimizer
        self.automatic_optimization = not graphed
        self.graphs = StepGraphs(self._whole_step, lambda: step_state(self, self.optimizers().optimizer))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if self.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        return self.net(images)

    def training_step(self, batch, batch_idx):
        if self.automatic_optimization:
            return F.cross_entropy(self(batch["image"]), batch["label"])
        optimizer_steps(self.optimizers(), batch, self.graphs)

    def _whole_step(self, batch) -> None:
        whole_training_step(self, self.optimizers().optimizer, batch)

    def configure_optimizers(self):
        return self.make_optimizer(self.parameters())


class EpochClock(Callback):
    """Train seconds per epoch, device synchronized at both ends; samples counted as batches start."""

    def __init__(self):
        self.rows: list[tuple[float, int]] = []

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        synchronize(pl_module.device)
        self._samples = 0
        self._start = time.perf_counter()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._samples += batch["label"].numel()

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        synchronize(pl_module.device)
        self.rows.append((time.perf_counter() - self._start, self._samples))


def run_bare(cli: MnistperfCLI) -> dict:
    """Train in Lightning's bare loop (see the module docstring) and time every epoch."""
    config, model, datamodule = cli.trainer, cli.model, cli.datamodule
    device = config.strategy.root_device
    model.to(device)
    model.configure_model()  # channels_last and compile as the stage has them, for this device
    hp = model.hparams
    bare = BareStep(model.net, hp.channels_last, lambda params: adam(params, hp.lr, hp.fused_adam, device,
                                                                     graphed=hp.cuda_graph), graphed=hp.cuda_graph)
    clock = EpochClock()
    trainer = Trainer(accelerator=device.type, devices=1, precision=config.precision, max_epochs=config.max_epochs,
                      limit_train_batches=config.limit_train_batches, limit_val_batches=0, num_sanity_val_steps=0,
                      logger=False, enable_progress_bar=False, enable_model_summary=False,
                      enable_checkpointing=False, callbacks=[clock])
    trainer.fit(bare, datamodule=datamodule)
    threshold = 0.5
    rows = []
    for epoch, (train_s, samples) in enumerate(clock.rows, 1):
        rows.append(epoch_row(epoch, train_s, 0.0, samples, 0.0, 0.0, None, {}, threshold))
        print(f"epoch {epoch}: train {train_s:.2f} s, {samples / train_s:,.0f} samples/s", flush=True)
    return summary("bare", config, datamodule, device, aggregate(rows, threshold))


def main(args: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m mnistperf.bench.baseline", description=__doc__.splitlines()[0])
    parser.add_argument("--loader-only", action="store_true", help="only draw batches: the input pipeline alone")
    parser.add_argument("--bare-lightning", action="store_true",
                        help="train in Lightning's bare loop (no logger, bar, checkpoints, metrics or self.log)")
    parser.add_argument("--out", type=Path, required=True, help="where to write the timing summary (JSON)")
    opts, fit_args = parser.parse_known_args(args)
    calm_library_noise()
    runner = "bare Lightning" if opts.bare_lightning else "input pipeline alone" if opts.loader_only else "plain PyTorch"
    cli = parse_fit_config(fit_args, announce=runner)
    if not math.isfinite(cli.trainer.max_epochs or math.inf) or cli.trainer.max_epochs < 1:
        parser.error("trainer.max_epochs must be set to a positive number for a plain run")
    if opts.bare_lightning:
        write_summary(run_bare(cli), opts.out)
    else:
        write_summary(run(cli, opts.loader_only), opts.out)


if __name__ == "__main__":
    main()
