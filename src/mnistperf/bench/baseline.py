"""The same training without Lightning, so the bench can show what Lightning costs.

With ``--loader-only`` it only draws the training batches onto the device, timing the input
pipeline alone (the bench uses it to show the stream pipeline's memory staying bounded).

It reads a stage config, builds the same DataModule (same dataset, pipeline and DataLoader
settings), the same SimpleCNN and Adam, and runs a plain loop timed exactly as
:class:`~mnistperf.timing.EpochTimer` times a Lightning run: device synchronized at the
epoch's ends, input wait measured between steps. It writes the same ``timing.json``.

    python -m mnistperf.bench.baseline --config configs/v2_pinned.yaml --out plain.json
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
import yaml

from mnistperf.data import MNISTDataModule
from mnistperf.model import SimpleCNN
from mnistperf.timing import aggregate, environment, epoch_row, synchronize, write_summary


def _to(batch: dict, device: torch.device, non_blocking: bool) -> dict:
    return {k: v.to(device, non_blocking=non_blocking) for k, v in batch.items()}


def run(config: dict, epochs: int, limit_train_batches: Optional[int], device: torch.device,
        loader_only: bool = False) -> dict:
    """Train (or, with loader_only, only draw the training batches onto the device) and time every epoch."""
    torch.manual_seed(config.get("seed_everything", 42))
    datamodule = MNISTDataModule(**config.get("data", {}))
    datamodule.device = device
    datamodule.prepare_data()
    datamodule.setup("fit")
    train_loader, val_loader = datamodule.train_dataloader(), datamodule.val_dataloader()
    non_blocking = bool(datamodule.hparams.pin_memory)
    model = SimpleCNN().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.get("model", {}).get("lr", 1e-3))
    rows = []
    for epoch in range(1, epochs + 1):
        model.train()
        synchronize(device)
        start = last_end = time.perf_counter()
        wait = 0.0
        samples = 0
        train_correct = torch.zeros((), device=device)  # the module's per-step metric work, kept on the device
        for step, batch in enumerate(train_loader):
            if limit_train_batches is not None and step >= limit_train_batches:
                break
            batch = _to(batch, device, non_blocking)
            wait += time.perf_counter() - last_end
            samples += len(batch["label"])
            if loader_only:
                last_end = time.perf_counter()
                continue
            logits = model(batch["image"])
            loss = F.cross_entropy(logits, batch["label"])
            train_correct += (logits.argmax(1) == batch["label"]).sum()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            last_end = time.perf_counter()
        synchronize(device)
        eval_start = time.perf_counter()
        train_s = eval_start - start
        if loader_only:
            rows.append(epoch_row(epoch, train_s, 0.0, samples, wait / train_s, {}))
            print(f"epoch {epoch}: {samples:,} samples drawn in {train_s:.2f} s", flush=True)
            continue
        model.eval()
        correct = total = 0
        with torch.no_grad():
            for batch in val_loader:
                batch = _to(batch, device, non_blocking)
                correct += (model(batch["image"]).argmax(1) == batch["label"]).sum()
                total += len(batch["label"])
        accuracy = (correct / total).item()
        synchronize(device)
        eval_s = time.perf_counter() - eval_start
        metrics = {"train/acc": (train_correct / max(samples, 1)).item(), "val/acc": accuracy}
        rows.append(epoch_row(epoch, train_s, eval_s, samples, wait / train_s, metrics))
        print(f"epoch {epoch}: train {train_s:.2f} s, eval {eval_s:.2f} s, val/acc {accuracy:.4f}", flush=True)
    return {
        "config": config.get("trainer", {}).get("logger", {}).get("init_args", {}).get("name"),
        "runner": "loader" if loader_only else "plain",
        "data": datamodule.loader_settings(),
        "world_size": 1,
        **environment(device),
        **aggregate(rows, 0.5),
    }


def main(args: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m mnistperf.bench.baseline", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, type=Path)
    parser.add_argument("--epochs", type=int, default=None, help="default: the config's trainer.max_epochs")
    parser.add_argument("--limit-train-batches", type=int, default=None)
    parser.add_argument("--data", action="append", default=[], metavar="KEY=VALUE", help="override a data option")
    parser.add_argument("--loader-only", action="store_true", help="only draw batches: the input pipeline alone")
    parser.add_argument("--out", type=Path, required=True, help="where to write the timing summary (JSON)")
    opts = parser.parse_args(args)
    config = yaml.safe_load(opts.config.read_text())
    for item in opts.data:
        key, _, value = item.partition("=")
        config.setdefault("data", {})[key] = yaml.safe_load(value)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    print(f"mnistperf: plain PyTorch loop on {environment(device)['device']}", flush=True)
    epochs = opts.epochs or config.get("trainer", {}).get("max_epochs", 5)
    summary = run(config, epochs, opts.limit_train_batches, device, opts.loader_only)
    write_summary(summary, opts.out)


if __name__ == "__main__":
    main()
