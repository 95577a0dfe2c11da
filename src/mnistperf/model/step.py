"""The stages' one training step: forward in the stage's layout, the loss, the epoch's sums, the update.

:class:`TrainingStep` is what every trainer of the lab runs: :class:`~mnistperf.model.ImageClassifier`
(its ``loss`` under Lightning's automatic optimization, the whole step under the graphed stage's manual
one), the bench's plain and bare-Lightning rows, and tune's probes. :func:`loss` is the one loss, for
training and evaluation alike. Outside Lightning a step brings its own Adam and precision
(:meth:`ImageClassifier.standalone_step <mnistperf.model.ImageClassifier.standalone_step>`).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import torch
import torch.nn.functional as F
from torch import nn

from mnistperf.model.graphs import GraphedAdam, StepGraphs, step_state
from mnistperf.model.sums import EpochSums

Batch = dict[str, torch.Tensor]
FUSED_ADAM_DEVICES = ("cpu", "cuda")


def loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The stages' loss: cross-entropy of the logits on the labels, averaged over the batch."""
    return F.cross_entropy(logits, labels)


def step_batches(batch: Batch) -> list[Batch]:
    """The training batches of what a loader yielded.

    A group of k stacked batches (labels [k, B], ``data.batches_per_step``) gives k batches (views, no copy), a
    plain batch (labels [B]) itself.
    """
    if batch["label"].dim() == 1:
        return [batch]
    return [{name: tensor[i] for name, tensor in batch.items()} for i in range(batch["label"].shape[0])]


def optimizer_steps(optimizer, batch: Batch, run: Callable[[Batch], None]) -> None:
    """Under manual optimization, one step of Lightning's optimizer wrapper per training batch the loader yielded.

    Each step runs ``run(batch)`` as its closure. Lightning counts every one, so ``global_step`` is the number of
    optimizer steps whatever the grouping.
    """
    for step_batch in step_batches(batch):
        optimizer.step(closure=lambda b=step_batch: run(b))


class TrainingStep:
    """One optimizer step of a stage, and the loss and sums its evaluation shares.

    Args:
        net: the network (compiled in place or not).
        channels_last: feed the images in NHWC layout.
        summed: add each training batch's loss and correct predictions to the ``"train"`` sums.
    """

    def __init__(self, net: nn.Module, channels_last: bool = False, summed: bool = True):
        self.net, self.channels_last, self.summed = net, channels_last, summed
        self.sums: dict[str, EpochSums] = {}  # per stage; made by its first batch, zeroed in place after each epoch
        self.optimizer: torch.optim.Optimizer | None = None
        self.graphed = False
        self.graphs = StepGraphs(self.whole, self.state)
        self.autocast: AbstractContextManager = nullcontext()  # outside Lightning: the stage's precision
        self._backward: Callable[[torch.Tensor], None] = torch.Tensor.backward

    def use(
        self,
        optimizer: torch.optim.Optimizer,
        graphed: bool = False,
        backward: Callable[[torch.Tensor], None] = torch.Tensor.backward,
    ) -> None:
        """Step with ``optimizer`` from now on, replayed as CUDA graphs where ``graphed`` (any graph made is forgotten).

        ``backward``: Lightning's ``manual_backward`` for an eager manual step; a graphed step's backward is
        autograd's own (Lightning's backward hooks run Python a replay would skip).
        """
        self.optimizer, self.graphed, self._backward = optimizer, graphed, backward
        self.graphs.reset()

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """The network's logits, the images in NHWC layout where the stage is channels-last."""
        if self.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        return self.net(images)

    def stage_sums(self, stage: str, device: torch.device) -> EpochSums:
        """The sums of ``stage`` (``train``, ``val``, ``test``) on ``device``, made there at first use."""
        sums = self.sums.get(stage)
        if sums is None or sums.totals.device != device:  # the first batch (or the first after a move)
            sums = self.sums[stage] = EpochSums(device)
        return sums

    def loss(self, batch: Batch, stage: str | None = None) -> torch.Tensor:
        """The batch's loss, its loss and correct predictions added to ``stage``'s sums on the device."""
        logits = self.forward(batch["image"])
        value = loss(logits, batch["label"])
        if stage is not None:
            self.stage_sums(stage, logits.device).add(value, logits, batch["label"])
        return value

    def whole(self, batch: Batch) -> None:
        """One optimizer step that changes everything in place and returns nothing, as a CUDA graph captures it.

        The gradients are zeroed inside (a graph replays the zeroing; nothing runs between replays), and the
        update is the optimizer's own (:meth:`GraphedAdam.update` for a graphed stage).
        """
        optimizer = self._optimizer()
        optimizer.zero_grad(set_to_none=not self.graphed)
        with nullcontext() if self.graphed else self.autocast:  # graphed: the autocast is around the replay
            value = self.loss(batch, "train" if self.summed else None)
        self._backward(value)
        if isinstance(optimizer, GraphedAdam):
            optimizer.update()
        else:
            optimizer.step()

    def state(self) -> list[torch.Tensor]:
        """The tensors the whole step changes: weights, buffers, the optimizer's state and the training sums."""
        sums = [self.sums["train"].totals] if "train" in self.sums else []
        return step_state(self.net, self._optimizer(), *sums)

    def __call__(self, batch: Batch) -> None:
        """One training step on a batch: its shape's graph replayed where graphed (on CUDA), else eagerly."""
        if not self.graphed:
            self.whole(batch)
            return
        with self.autocast:  # as Lightning's precision runs a manual step: around the whole of it
            self.graphs(batch)

    def _optimizer(self) -> torch.optim.Optimizer:
        if self.optimizer is None:
            raise RuntimeError("TrainingStep: use(optimizer) comes before the first step")
        return self.optimizer


def adam(
    params, lr: float, fused_adam: bool, device: torch.device, graphed: bool = False, capturable: bool = True
) -> torch.optim.Adam:
    """The stages' optimizer: Adam, fused where asked and torch has the kernel.

    Args:
        params: the parameters to optimize.
        lr: the learning rate.
        fused_adam: use the fused kernel where the device has it.
        device: where the parameters live.
        graphed: a :class:`GraphedAdam`, whose update runs inside the whole step.
        capturable: whether a graph captures its update; Adam is then capturable on CUDA (its step count
            lives on the device, where a replay advances it), and only then: eagerly, capturable is slower.
    """
    fused = (fused_adam and device.type in FUSED_ADAM_DEVICES) or None
    if graphed:
        return GraphedAdam(params, lr=lr, fused=fused, capturable=capturable and device.type == "cuda")
    return torch.optim.Adam(params, lr=lr, fused=fused)
