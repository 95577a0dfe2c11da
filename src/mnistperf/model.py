"""The model the ladder trains: the reference's SimpleCNN inside a small LightningModule.

A step adds its summed loss, its correct predictions and its sample count to three numbers
kept on the device (:class:`EpochSums`), and the module logs loss and accuracy once per epoch
from them. Nothing in a step logs, syncs, allocates a metric state or walks Lightning's result
collection: on a fast GPU a single ``self.log`` per step costs more host time than the step's
own kernels. Mixed precision is Lightning's ``trainer.precision`` (``bf16-mixed``), not this
module's business.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch
import torch.nn.functional as F
from lightning import LightningModule
from lightning.pytorch.utilities import rank_zero_info
from torch import nn

from mnistperf.data.schema import NUM_CLASSES

FUSED_ADAM_DEVICES = ("cpu", "cuda")


class EpochSums:
    """Summed loss, correct predictions and samples of one stage's epoch, as three numbers on the device.

    ``add`` is three in-place additions (no allocation beyond the step's own, no sync);
    ``means`` adds the figures of every process first, so loss and accuracy are per sample
    over the whole epoch, whatever the number of processes or the size of the last batch.
    """

    def __init__(self, device: torch.device):
        self.totals = torch.zeros(3, device=device)  # loss x samples, correct, samples

    def add(self, loss: torch.Tensor, logits: torch.Tensor, labels: torch.Tensor) -> None:
        samples = len(labels)
        self.totals[0].add_(loss.detach(), alpha=samples)
        self.totals[1].add_((logits.argmax(dim=1) == labels).sum())
        self.totals[2].add_(samples)

    def means(self, gather: Optional[Callable[[torch.Tensor], torch.Tensor]] = None) -> dict[str, torch.Tensor]:
        """Per-sample loss and accuracy; ``gather`` (a LightningModule's ``all_gather``) adds every process's sums."""
        totals = self.totals if gather is None else gather(self.totals).reshape(-1, 3).sum(dim=0)
        samples = totals[2].clamp(min=1)
        return {"loss": totals[0] / samples, "acc": totals[1] / samples}


class SimpleCNN(nn.Module):
    """Two conv blocks and two linear layers: 206,922 parameters for 28x28 grayscale input."""

    def __init__(self, num_classes: int = NUM_CLASSES):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, kernel_size=3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, kernel_size=3, padding=1)
        self.fc1 = nn.Linear(32 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return self.fc2(x)


class ImageClassifier(LightningModule):
    """SimpleCNN trained with cross-entropy and Adam.

    Args:
        lr: Adam learning rate.
        compile: wrap the network in ``torch.compile`` (on CUDA; on other devices only with
            ``compile_on_cpu``, since compiling there costs more than it saves on runs this short).
        compile_on_cpu: allow ``compile`` off CUDA too.
        channels_last: keep images and conv weights in NHWC layout.
        fused_adam: use the fused Adam kernel (on CPU and CUDA, where torch has one; ignored elsewhere).
    """

    def __init__(
        self,
        lr: float = 1e-3,
        compile: bool = False,
        compile_on_cpu: bool = False,
        channels_last: bool = False,
        fused_adam: bool = False,
    ):
        super().__init__()
        self.save_hyperparameters()
        self.net = SimpleCNN()
        self.sums: dict[str, EpochSums] = {}  # per stage; made by its epoch's first step, taken at its end

    def _run_device(self) -> torch.device:
        """The device training runs on. configure_model is called before the module is moved there,
        so ask the trainer's strategy rather than self.device."""
        return self._trainer.strategy.root_device if self._trainer is not None else self.device

    def configure_model(self) -> None:
        hp = self.hparams
        device = self._run_device()
        on_cuda = device.type == "cuda"
        if hp.channels_last:
            self.net = self.net.to(memory_format=torch.channels_last)
        if hp.compile and not isinstance(self.net, torch._dynamo.eval_frame.OptimizedModule):
            if on_cuda or hp.compile_on_cpu:
                self.net = torch.compile(self.net)
            else:
                rank_zero_info(f"model.compile: skipped on {device.type} (set model.compile_on_cpu true to force it).")

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if self.hparams.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        return self.net(images)

    def _step(self, batch: dict[str, torch.Tensor], stage: str) -> torch.Tensor:
        logits = self(batch["image"])
        loss = F.cross_entropy(logits, batch["label"])
        sums = self.sums.get(stage)
        if sums is None:  # the epoch's first step (or the first after resuming mid-epoch)
            sums = self.sums[stage] = EpochSums(self.device)
        sums.add(loss, logits, batch["label"])
        return loss

    def _log_epoch(self, stage: str) -> None:
        """Loss and accuracy of the epoch, logged once. Every process takes part (the sums are gathered),
        also one that had no batch."""
        sums = self.sums.pop(stage, None) or EpochSums(self.device)
        means = sums.means(self.all_gather)
        self.log_dict({f"{stage}/{name}": value for name, value in means.items()}, prog_bar=stage != "train")

    def training_step(self, batch, batch_idx):
        return self._step(batch, "train")

    def validation_step(self, batch, batch_idx):
        self._step(batch, "val")

    def test_step(self, batch, batch_idx):
        self._step(batch, "test")

    def on_train_epoch_end(self) -> None:
        self._log_epoch("train")

    def on_validation_epoch_end(self) -> None:
        self._log_epoch("val")

    def on_test_epoch_end(self) -> None:
        self._log_epoch("test")

    def predict_step(self, batch, batch_idx):
        return self(batch["image"]).argmax(dim=1)

    def configure_optimizers(self):
        fused = self.hparams.fused_adam and self._run_device().type in FUSED_ADAM_DEVICES
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr, fused=fused or None)
