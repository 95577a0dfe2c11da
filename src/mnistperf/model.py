"""The model the ladder trains: the reference's SimpleCNN inside a small LightningModule.

The module logs loss and accuracy once per epoch (accumulated on the device) rather than
per step, and its accuracy metrics skip torchmetrics' argument checks (which call
``torch.unique`` on every update), so nothing in a step makes the host wait for the device.
Mixed precision is Lightning's ``trainer.precision`` (``bf16-mixed``), not this module's business.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from lightning import LightningModule
from lightning.pytorch.utilities import rank_zero_info
from torch import nn
from torchmetrics.classification import MulticlassAccuracy

from mnistperf.data.schema import NUM_CLASSES

FUSED_ADAM_DEVICES = ("cpu", "cuda")


def accuracy_metric() -> MulticlassAccuracy:
    """Top-1 accuracy accumulated on the device, without the per-update argument checks that sync it."""
    return MulticlassAccuracy(NUM_CLASSES, average="micro", validate_args=False)


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
        self.train_acc, self.val_acc, self.test_acc = (accuracy_metric() for _ in range(3))

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

    def _step(self, batch: dict[str, torch.Tensor], stage: str, accuracy: MulticlassAccuracy) -> torch.Tensor:
        logits = self(batch["image"])
        loss = F.cross_entropy(logits, batch["label"])
        accuracy.update(logits, batch["label"])
        sync = stage != "train"  # evaluation figures are averaged over all ranks; training ones need not be
        self.log(f"{stage}/loss", loss, on_step=False, on_epoch=True, prog_bar=stage != "train", sync_dist=sync)
        self.log(f"{stage}/acc", accuracy, on_step=False, on_epoch=True, prog_bar=stage != "train")
        return loss

    def training_step(self, batch, batch_idx):
        return self._step(batch, "train", self.train_acc)

    def validation_step(self, batch, batch_idx):
        self._step(batch, "val", self.val_acc)

    def test_step(self, batch, batch_idx):
        self._step(batch, "test", self.test_acc)

    def predict_step(self, batch, batch_idx):
        return self(batch["image"]).argmax(dim=1)

    def configure_optimizers(self):
        fused = self.hparams.fused_adam and self._run_device().type in FUSED_ADAM_DEVICES
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr, fused=fused or None)
