"""Host time of Lightning's loop per step when the step does nothing, with the parts of the lab's loop chosen.

A manual-optimization module steps an optimizer whose step only runs an empty closure, over 960 tiny batches a
epoch, 3 epochs; the median of epochs 2-3 per step is printed. PARTS, comma-separated: ``timer`` (EpochTimer),
``logger`` (TensorBoard), ``tqdm1`` / ``tqdm10`` (Lightning's TQDM bar redrawn every step / every 10 steps),
``bar`` (Lightning's default bar: Rich where rich is installed, else TQDM every step); ``none`` for none.

    python measure.py PARTS
"""

import statistics
import sys
import time

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import TQDMProgressBar

from mnistperf.diagnosis import EpochTimer

PARTS = set(sys.argv[1].split(","))
STEPS = 960


class DoNothing(torch.optim.SGD):
    """An optimizer whose step only runs the closure."""

    def step(self, closure=None):
        """Run the closure; no update."""
        return closure()


class Steps(LightningModule):
    """Manual optimization: one optimizer step of a closure that does nothing per Lightning step."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        """Step the optimizer with an empty closure."""
        self.optimizers().step(closure=lambda: None)

    def configure_optimizers(self):
        """The do-nothing optimizer."""
        return DoNothing(self.parameters(), lr=0.1)


class Batches:
    """STEPS tiny batches, an iterable with a length, as a DataLoader is to Lightning."""

    def __len__(self):
        return STEPS

    def __iter__(self):
        for _ in range(STEPS):
            yield {"image": torch.zeros(1)}


class Clock(Callback):
    """Host seconds of every training epoch."""

    seconds: list[float] = []

    def on_train_epoch_start(self, trainer, module):
        """Note the epoch's start."""
        self.started = time.perf_counter()

    def on_train_epoch_end(self, trainer, module):
        """Keep the epoch's seconds."""
        self.seconds.append(time.perf_counter() - self.started)


bars = [TQDMProgressBar(refresh_rate=int(p[4:])) for p in PARTS if p.startswith("tqdm")]
clock = Clock()
trainer = Trainer(
    accelerator="cpu",
    max_epochs=3,
    logger="logger" in PARTS,
    enable_progress_bar="bar" in PARTS or bool(bars),
    enable_checkpointing=False,
    enable_model_summary=False,
    callbacks=[clock, *bars, *([EpochTimer()] if "timer" in PARTS else [])],
    num_sanity_val_steps=0,
    default_root_dir="/tmp/bar-cost-runs",
)
trainer.fit(Steps(), Batches())
epoch = statistics.median(clock.seconds[1:])
print(f"RESULT {sys.argv[1]}: {epoch * 1e6 / STEPS:.0f} us per step", flush=True)
