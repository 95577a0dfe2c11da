"""What the window over an epoch of one step costs a full-batch fit, and what it reads: one process, three arms.

Full-batch training (one step an epoch, as a graph library's node classification trains): an MLP on 2,708 random rows
of 64 features in one batch, 200 epochs. The arms alternate round by round, each fit built afresh: no callbacks, both
callbacks with no profiled window (``EpochTimer(busy_window_steps=0)``: no epoch of one step had one before 9b8b764),
and both as they come (the third epoch's step profiled, priced as any window). Run in the project's environment:

    .venv/bin/python docs/results/cpu-2core-compat-cost/full_batch.py [ROUNDS]

Prints and writes full-batch.json beside this file: each fit's wall seconds, the median pair ratios with 95 %
intervals, and the verdict and window each fit with the window read.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer, seed_everything
from torch.utils.data import DataLoader, TensorDataset

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from bootstrap import median_interval  # noqa: E402  # docs/results/bootstrap.py

from mnistperf.diagnosis import EpochTimer, SampleAudit  # noqa: E402

ARMS = ("none", "unwindowed", "both")
ROWS, FEATURES, EPOCHS = 2708, 64, 200


class Nodes(LightningModule):
    """A two-layer MLP over every row at once, its loss logged every step."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(FEATURES, 64), torch.nn.ReLU(), torch.nn.Linear(64, 7))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        """Cross-entropy over the batch's rows."""
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """Adam, as a node classifier's tutorial trains."""
        return torch.optim.Adam(self.parameters(), lr=0.01)


def fit(arm: str, read: list[dict[str, Any]]) -> float:
    """One fit of the arm, built afresh, its output discarded: its wall seconds (``read``: the window's answer)."""
    seed_everything(0, verbose=False)
    data = TensorDataset(torch.randn(ROWS, FEATURES), torch.randint(0, 7, (ROWS,)))
    loader = DataLoader(data, batch_size=ROWS)
    timer = EpochTimer(busy_window_steps=0) if arm == "unwindowed" else EpochTimer()
    callbacks = [] if arm == "none" else [timer, SampleAudit()]
    quiet = contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO())
    with tempfile.TemporaryDirectory() as root, quiet[0], quiet[1]:
        trainer = Trainer(
            accelerator="cpu",
            max_epochs=EPOCHS,
            default_root_dir=root,
            callbacks=callbacks,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            enable_checkpointing=False,
        )
        start = time.perf_counter()
        trainer.fit(Nodes(), loader)
        took = time.perf_counter() - start
    if arm == "both":
        read.append({"verdict": timer.clock.summary()["verdict"], "busy_window": timer.busy_window})
    return took


def main(rounds: int) -> None:
    """Warm up each arm once, then alternate the arms' order round by round; print and write the ratios."""
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    read: list[dict[str, Any]] = []
    for arm in ARMS:
        fit(arm, [])
    seconds: dict[str, list[float]] = {arm: [] for arm in ARMS}
    load = [os.getloadavg()[0]]
    for turn in range(rounds):
        for arm in ARMS if turn % 2 == 0 else ARMS[::-1]:
            seconds[arm].append(fit(arm, read))
        load.append(os.getloadavg()[0])
    found: dict[str, object] = {"rounds": rounds, "load_average_1min": load, "fit_s": seconds, "read": read}
    for arm, base in (("unwindowed", "none"), ("both", "none"), ("both", "unwindowed")):
        ratios = [a / b for a, b in zip(seconds[arm], seconds[base], strict=True)]
        low, high = median_interval(ratios)
        found[f"{arm}_over_{base}"] = {"median_pair_ratio": statistics.median(ratios), "95": [low, high]}
        print(f"{arm} over {base}: {statistics.median(ratios):.3f}x (95 % {low:.3f}-{high:.3f}x)")
    verdicts = sorted({r["verdict"] for r in read})
    windows = sorted({(r["busy_window"] or {}).get("first_step") is not None for r in read})
    print(f"verdicts {verdicts}; window read {windows}; load {min(load):.2f}-{max(load):.2f}")
    (HERE / "full-batch.json").write_text(json.dumps(found, indent=1) + "\n")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
