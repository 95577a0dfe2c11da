"""The model the ladder trains: the reference's SimpleCNN inside a small LightningModule.

A step adds its summed loss, its correct predictions and its sample count to three numbers
kept on the device (:class:`EpochSums`), and the module logs loss and accuracy once per epoch
from them. Nothing in a step logs, syncs, allocates a metric state or walks Lightning's result
collection: on a fast GPU a single ``self.log`` per step costs more host time than the step's
own kernels. Mixed precision is Lightning's ``trainer.precision`` (``bf16-mixed``), not this
module's business.

With ``cuda_graph`` the module optimizes manually: each training step hands Lightning's
optimizer wrapper a closure that runs the whole step (zeroing gradients, forward, loss,
backward, Adam's update, the sums) through :class:`mnistperf.graphed_step.StepGraphs`, which
captures it as one CUDA graph per batch shape and replays it (eagerly off CUDA and under DDP).
Handed a group of batches (``data.batches_per_step``), it runs one such step per batch of the
group, so Lightning's loop, hooks and callbacks run once per group.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Callable, Literal, Optional

import torch
import torch.nn.functional as F
from lightning import LightningModule
from lightning.pytorch.utilities import rank_zero_info
from torch import nn

from mnistperf.data.pipelines.base import step_batches
from mnistperf.data.schema import NUM_CLASSES
from mnistperf.errors import ConfigError
from mnistperf.graphed_step import GraphedAdam, StepGraphs, step_state

FUSED_ADAM_DEVICES = ("cpu", "cuda")
CompileMode = Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]


class EpochSums:
    """Summed loss, correct predictions and samples of one stage's epoch, as three numbers on the device.

    ``add`` is three in-place additions (no allocation beyond the step's own, no sync);
    ``means`` adds the figures of every process first, so loss and accuracy are per sample
    over the whole epoch, whatever the number of processes or the size of the last batch.
    """

    def __init__(self, device: torch.device):
        self.totals = torch.zeros(3, device=device)  # loss x samples, correct, samples

    def reset(self) -> None:
        """Zero in place: the same tensor serves the next epoch (a captured graph keeps adding into it)."""
        self.totals.zero_()

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
        compile_mode: ``torch.compile``'s mode (``default``, ``reduce-overhead``: CUDA graphs of the
            network, ``max-autotune``, ``max-autotune-no-cudagraphs``); None is torch's default.
        channels_last: keep images and conv weights in NHWC layout.
        fused_adam: use the fused Adam kernel (on CPU and CUDA, where torch has one; ignored elsewhere).
        cuda_graph: run the whole training step as one CUDA graph per batch shape, replayed (on a
            single CUDA device; elsewhere the same step runs eagerly, and the run says so).
    """

    def __init__(
        self,
        lr: float = 1e-3,
        compile: bool = False,
        compile_on_cpu: bool = False,
        compile_mode: Optional[CompileMode] = None,
        channels_last: bool = False,
        fused_adam: bool = False,
        cuda_graph: bool = False,
    ):
        super().__init__()
        if compile_mode is not None and not compile:
            raise ConfigError(f"model.compile_mode {compile_mode!r} applies only with model.compile true; set it, "
                              "or compile_mode null.")
        if cuda_graph and compile:
            raise ConfigError("model.compile and model.cuda_graph both capture the step: choose one "
                              "(cuda_graph captures the optimizer's update too).")
        self.save_hyperparameters()
        self.net = SimpleCNN()
        self.sums: dict[str, EpochSums] = {}  # per stage; made by its first step, zeroed in place after each epoch
        self.automatic_optimization = not cuda_graph
        self.graphs = StepGraphs(self._whole_step, self._step_state)
        self._graphing = False  # decided in configure_model, once the device and the process count are known

    def _run_device(self) -> torch.device:
        """The device training runs on. configure_model is called before the module is moved there,
        so ask the trainer's strategy rather than self.device."""
        return self._trainer.strategy.root_device if self._trainer is not None else self.device

    def configure_model(self) -> None:
        hp = self.hparams
        device = self._run_device()
        on_cuda = device.type == "cuda"
        if hp.cuda_graph:
            world_size = self._trainer.world_size if self._trainer is not None else 1
            self._graphing = on_cuda and world_size == 1
            if not self._graphing:
                why = f"on {device.type} (a CUDA graph needs a CUDA device)" if not on_cuda else \
                    f"under {world_size} processes (the gradients' all-reduce is not captured)"
                rank_zero_info(f"model.cuda_graph: skipped {why}; the same whole step runs eagerly.")
        if hp.channels_last:
            self.net = self.net.to(memory_format=torch.channels_last)
        if hp.compile and not isinstance(self.net, torch._dynamo.eval_frame.OptimizedModule):
            if on_cuda or hp.compile_on_cpu:
                self.net = torch.compile(self.net, mode=hp.compile_mode)
            else:
                rank_zero_info(f"model.compile: skipped on {device.type} (set model.compile_on_cpu true to force it).")

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if self.hparams.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        return self.net(images)

    def _sums(self, stage: str) -> EpochSums:
        sums = self.sums.get(stage)
        if sums is None or sums.totals.device != self.device:  # the first step (or the first after a move)
            sums = self.sums[stage] = EpochSums(self.device)
        return sums

    def _step(self, batch: dict[str, torch.Tensor], stage: str) -> torch.Tensor:
        logits = self(batch["image"])
        loss = F.cross_entropy(logits, batch["label"])
        self._sums(stage).add(loss, logits, batch["label"])
        return loss

    def _log_epoch(self, stage: str) -> None:
        """Loss and accuracy of the epoch, logged once. Every process takes part (the sums are gathered),
        also one that had no batch."""
        sums = self._sums(stage)
        means = sums.means(self.all_gather)  # new tensors: the reset below does not touch them
        self.log_dict({f"{stage}/{name}": value for name, value in means.items()}, prog_bar=stage != "train")
        sums.reset()

    # ------------------------------------------------------------------ the whole step (cuda_graph)
    def _whole_step(self, batch: dict[str, torch.Tensor]) -> None:
        """Everything one training step changes, in place: what :class:`StepGraphs` captures and replays.
        Graphed, the backward is autograd's own: Lightning's backward hooks run Python a replay would skip."""
        backward = torch.Tensor.backward if self._graphing else self.manual_backward
        whole_training_step(self, self.optimizers().optimizer, batch, self._sums("train"), backward)

    def _step_state(self) -> list[torch.Tensor]:
        """The tensors the whole step changes: weights, buffers, Adam's state and the training sums."""
        sums = [self.sums["train"].totals] if "train" in self.sums else []
        return step_state(self, self.optimizers().optimizer, *sums)

    def on_load_checkpoint(self, checkpoint) -> None:
        self.graphs.reset()  # the optimizer's state is about to be new tensors: capture again

    def training_step(self, batch, batch_idx):
        if self.automatic_optimization:
            return self._step(batch, "train")
        optimizer_steps(self.optimizers(), batch, self.graphs if self._graphing else self._whole_step)

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

    def samples_in_batch(self, batch: dict[str, torch.Tensor]) -> int:
        """Samples in what the loader yielded, a group of k batches (data.batches_per_step) counting all k."""
        return batch["label"].numel()

    def predict_step(self, batch, batch_idx):
        return self(batch["image"]).argmax(dim=1)

    def configure_optimizers(self):
        hp = self.hparams
        return adam(self.parameters(), hp.lr, hp.fused_adam, self._run_device(), graphed=hp.cuda_graph)


def optimizer_steps(optimizer, batch: dict[str, torch.Tensor], run: Callable[[dict[str, torch.Tensor]], None]) -> None:
    """Under manual optimization, one step of Lightning's optimizer wrapper per training batch of what the loader
    yielded (one, or the k of a group: ``data.batches_per_step``), each running ``run(batch)`` as its closure.
    Lightning counts every one, so ``global_step`` is the number of optimizer steps whatever the grouping."""
    for step_batch in step_batches(batch):
        optimizer.step(closure=lambda b=step_batch: run(b))


def whole_training_step(forward: Callable[[torch.Tensor], torch.Tensor], optimizer: GraphedAdam,
                        batch: dict[str, torch.Tensor], sums: Optional[EpochSums] = None,
                        backward: Callable[[torch.Tensor], None] = torch.Tensor.backward) -> None:
    """One optimizer step of cross-entropy training that changes everything in place and returns nothing, so
    that :class:`~mnistperf.graphed_step.StepGraphs` can capture and replay it: the gradients are zeroed inside
    (a graph replays the zeroing; nothing runs between replays), Adam's update is the graph's
    (:meth:`GraphedAdam.update`), and loss and correct predictions go to ``sums`` on the device. The stage's
    module, the bench's bare-Lightning module and its plain loop all run this one step."""
    optimizer.zero_grad(set_to_none=False)
    logits = forward(batch["image"])
    loss = F.cross_entropy(logits, batch["label"])
    backward(loss)
    optimizer.update()
    if sums is not None:
        sums.add(loss, logits, batch["label"])


class StandaloneStep:
    """The stage's training step outside Lightning's loop: the bench's plain-PyTorch loop and tune's probes.

    The stage's Adam and precision (bf16 autocast where fit runs ``bf16-mixed``); for a graphed stage
    (``cuda_graph``) the whole step replayed as one CUDA graph per batch shape (eagerly off CUDA), otherwise
    the reference's eager step. Loss and correct predictions go to ``sums`` when given.
    """

    def __init__(self, model: ImageClassifier, precision: str = "32-true", sums: Optional[EpochSums] = None):
        hp = model.hparams
        device = next(model.parameters()).device
        self.model, self.sums = model, sums
        bf16 = str(precision).startswith("bf16")
        self.autocast = torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else nullcontext()
        self.optimizer = adam(model.parameters(), hp.lr, hp.fused_adam, device, graphed=hp.cuda_graph)
        extra = [sums.totals] if sums is not None else []
        self.graphs = StepGraphs(lambda batch: whole_training_step(model, self.optimizer, batch, sums),
                                 lambda: step_state(model, self.optimizer, *extra)) if hp.cuda_graph else None

    def __call__(self, batch: dict[str, torch.Tensor]) -> None:
        with self.autocast:  # graphed: over the whole step, as Lightning's precision runs a manual step
            if self.graphs is not None:
                self.graphs(batch)
                return
            logits = self.model(batch["image"])
            loss = F.cross_entropy(logits, batch["label"])
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        if self.sums is not None:
            self.sums.add(loss, logits, batch["label"])


def adam(params, lr: float, fused_adam: bool, device: torch.device, graphed: bool = False) -> torch.optim.Adam:
    """The stages' optimizer: Adam, fused where asked and torch has the kernel; for a graphed step a
    :class:`GraphedAdam`, capturable on CUDA (its step count lives on the device, where a replay advances it).
    The plain and bare-Lightning loops of the bench build theirs here too (ungraphed)."""
    fused = (fused_adam and device.type in FUSED_ADAM_DEVICES) or None
    if graphed:
        return GraphedAdam(params, lr=lr, fused=fused, capturable=device.type == "cuda")
    return torch.optim.Adam(params, lr=lr, fused=fused)
