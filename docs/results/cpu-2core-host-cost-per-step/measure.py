"""Host time of Lightning's loop per Lightning step when a step does nothing on the device.

A manual-optimization module calls ``optimizer.step(closure)`` k times per Lightning step with a closure
that does nothing, over 960 tiny batches (960 / k Lightning steps per epoch), as v4_graphed does with
``data.batches_per_step`` k once its step is one replayed graph. "bare": no logger, bar, checkpoints or
callbacks; "lab": the stage's TensorBoard logger, progress bar and EpochTimer. Prints the median of
epochs 2-3 (epoch 1 is warm-up) per Lightning step and per optimizer step.

    python measure.py K bare|lab
"""

import statistics
import sys
import time

import torch
from lightning.pytorch import Callback, LightningModule, Trainer

from mnistperf.diagnosis import EpochTimer

K, LAB = int(sys.argv[1]), sys.argv[2] == "lab"
OPTIMIZER_STEPS = 960


class DoNothing(torch.optim.SGD):
    """An optimizer whose step only runs the closure."""

    def step(self, closure=None):
        """Run the closure; no update."""
        return closure()


class Steps(LightningModule):
    """Manual optimization: K optimizer steps of a closure that does nothing per Lightning step."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        """Step the optimizer K times with an empty closure."""
        optimizer = self.optimizers()
        for _ in range(K):
            optimizer.step(closure=lambda: None)

    def configure_optimizers(self):
        """The do-nothing optimizer."""
        return DoNothing(self.parameters(), lr=0.1)


class Groups:
    """OPTIMIZER_STEPS / K tiny batches, each labelled as a group of K."""

    def __len__(self):
        return OPTIMIZER_STEPS // K

    def __iter__(self):
        for _ in range(len(self)):
            yield {"image": torch.zeros(1), "label": torch.zeros(K, dtype=torch.long)}


class Clock(Callback):
    """Host seconds of every training epoch."""

    seconds: list[float] = []

    def on_train_epoch_start(self, trainer, module):
        """Note the epoch's start."""
        self.started = time.perf_counter()

    def on_train_epoch_end(self, trainer, module):
        """Keep the epoch's seconds."""
        self.seconds.append(time.perf_counter() - self.started)


clock = Clock()
trainer = Trainer(
    accelerator="cpu",
    max_epochs=3,
    logger=LAB,
    enable_progress_bar=LAB,
    enable_checkpointing=False,
    enable_model_summary=False,
    callbacks=[clock] + ([EpochTimer()] if LAB else []),
    num_sanity_val_steps=0,
    default_root_dir="/tmp/host-cost-runs",
)
trainer.fit(Steps(), Groups())
epoch = statistics.median(clock.seconds[1:])
print(
    f"RESULT k={K} {'lab' if LAB else 'bare'}: {epoch * 1e3 / len(Groups()):.3f} ms per Lightning step, "
    f"{epoch * 1e6 / OPTIMIZER_STEPS:.0f} us per optimizer step",
    flush=True,
)
