"""The same training without Lightning's loop, so the bench can show what Lightning costs.

It takes exactly the command line of a ``fit`` run (config and every override, model and
trainer ones included) and lets LightningCLI parse it into the same DataModule, model and
trainer settings; then it trains in a plain loop in the shape of the reference's: the same
SimpleCNN and optimizer (``configure_optimizers``), the same non-blocking copies to the
device, the same precision, the same loss and correct counts summed on the device (EpochSums),
the same epochs and batch limits. It is timed exactly as
:class:`~mnistperf.timing.EpochTimer` times a Lightning run (device synchronized at the
epoch's ends, host wait between steps, CUDA events per step) and writes the same ``timing.json``.

With ``--loader-only`` it only draws the training batches onto the device, timing the input
pipeline alone.

    python -m mnistperf.bench.baseline --out plain.json --config configs/v2_pinned.yaml [fit overrides]
"""

from __future__ import annotations

import argparse
import contextlib
import math
import time
from pathlib import Path
from typing import Optional, Sequence

import torch
import torch.nn.functional as F

from mnistperf.fit_config import MnistperfCLI, parse_fit_config
from mnistperf.model import EpochSums
from mnistperf.timing import synchronize
from mnistperf.timing.device_clock import StepEvents
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
    optimizer = model.configure_optimizers()
    bf16 = str(trainer.precision).startswith("bf16")
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    events = StepEvents(device) if device.type == "cuda" else None
    limit = _batch_limit(trainer.limit_train_batches, len(train_loader))
    threshold = 0.5
    rows = []
    for epoch in range(1, trainer.max_epochs + 1):
        model.train()
        synchronize(device)
        start = last_end = time.perf_counter()
        if events is not None:
            events.reset()
            events.mark_origin()
        wait = 0.0
        samples = 0
        train_sums = EpochSums(device)
        for step, batch in enumerate(train_loader):
            if step >= limit:
                break
            batch = datamodule.to_device(batch, device)
            wait += time.perf_counter() - last_end
            samples += len(batch["label"])
            if events is not None:
                events.step_start()
            if not loader_only:
                with autocast:
                    logits = model(batch["image"])
                    loss = F.cross_entropy(logits, batch["label"])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                train_sums.add(loss, logits, batch["label"])
            if events is not None:
                events.step_end()
            last_end = time.perf_counter()
        synchronize(device)
        eval_start = time.perf_counter()
        train_s = eval_start - start
        figures = events.read() if events is not None else None
        if loader_only:
            rows.append(epoch_row(epoch, train_s, 0.0, samples, wait, figures, {}, threshold))
            print(f"epoch {epoch}: {samples:,} samples drawn in {train_s:.2f} s", flush=True)
            continue
        model.eval()
        val_sums = EpochSums(device)
        with torch.no_grad(), autocast:
            for batch in val_loader:
                batch = datamodule.to_device(batch, device)
                logits = model(batch["image"])
                val_sums.add(F.cross_entropy(logits, batch["label"]), logits, batch["label"])
        metrics = {f"{stage}/{name}": value.item() for stage, sums in (("train", train_sums), ("val", val_sums))
                   for name, value in sums.means().items()}
        accuracy = metrics["val/acc"]
        synchronize(device)
        eval_s = time.perf_counter() - eval_start
        row = epoch_row(epoch, train_s, eval_s, samples, wait, figures, metrics, threshold)
        rows.append(row)
        print(f"epoch {epoch}: train {train_s:.2f} s, eval {eval_s:.2f} s, val/acc {accuracy:.4f}, {row['verdict']}",
              flush=True)
    return {
        "config": getattr(trainer.logger, "name", None),
        "runner": "loader" if loader_only else "plain",
        "data": datamodule.loader_settings(),
        "precision": str(trainer.precision),
        "world_size": 1,
        **environment(device),
        **aggregate(rows, threshold),
    }


def main(args: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m mnistperf.bench.baseline", description=__doc__.splitlines()[0])
    parser.add_argument("--loader-only", action="store_true", help="only draw batches: the input pipeline alone")
    parser.add_argument("--out", type=Path, required=True, help="where to write the timing summary (JSON)")
    opts, fit_args = parser.parse_known_args(args)
    cli = parse_fit_config(fit_args)
    if not math.isfinite(cli.trainer.max_epochs or math.inf) or cli.trainer.max_epochs < 1:
        parser.error("trainer.max_epochs must be set to a positive number for a plain run")
    print(f"mnistperf: plain PyTorch loop on {environment(cli.trainer.strategy.root_device)['device']}", flush=True)
    write_summary(run(cli, opts.loader_only), opts.out)


if __name__ == "__main__":
    main()
