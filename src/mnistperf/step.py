"""A training step's parts shared by the LightningModule, the bench's reference rows and tune's probes.

The stages' Adam (:func:`adam`), the whole step that a CUDA graph captures (:func:`whole_training_step`), one
optimizer step per batch of a group (:func:`optimizer_steps`), and the stage's step outside Lightning's loop
(:class:`StandaloneStep`).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from typing import cast

import torch
import torch.nn.functional as F
from lightning import LightningModule
from lightning.fabric.utilities.data import AttributeDict
from lightning.pytorch.core.optimizer import LightningOptimizer

from mnistperf.data.pipelines.base import step_batches
from mnistperf.graphed_step import GraphedAdam, StepGraphs, step_state
from mnistperf.sums import EpochSums

FUSED_ADAM_DEVICES = ("cpu", "cuda")


def optimizer_steps(optimizer, batch: dict[str, torch.Tensor], run: Callable[[dict[str, torch.Tensor]], None]) -> None:
    """Under manual optimization, one step of Lightning's optimizer wrapper per training batch the loader yielded.

    A loader yields one batch, or the k of a group (``data.batches_per_step``); each step runs ``run(batch)`` as its
    closure. Lightning counts every one, so ``global_step`` is the number of optimizer steps whatever the grouping.
    """
    for step_batch in step_batches(batch):
        optimizer.step(closure=lambda b=step_batch: run(b))


def whole_training_step(
    forward: Callable[[torch.Tensor], torch.Tensor],
    optimizer: GraphedAdam,
    batch: dict[str, torch.Tensor],
    sums: EpochSums | None = None,
    backward: Callable[[torch.Tensor], None] = torch.Tensor.backward,
) -> None:
    """One optimizer step of cross-entropy training that changes everything in place and returns nothing.

    So :class:`~mnistperf.graphed_step.StepGraphs` can capture and replay it: the gradients are zeroed inside
    (a graph replays the zeroing; nothing runs between replays), Adam's update is the graph's
    (:meth:`GraphedAdam.update`), and loss and correct predictions go to ``sums`` on the device.
    """
    optimizer.zero_grad(set_to_none=False)
    logits = forward(batch["image"])
    loss = F.cross_entropy(logits, batch["label"])
    backward(loss)
    optimizer.update()
    if sums is not None:
        sums.add(loss, logits, batch["label"])


class StandaloneStep:
    """The stage's training step outside Lightning's loop.

    The stage's Adam and precision (bf16 autocast where fit runs ``bf16-mixed``); for a graphed stage
    (``cuda_graph``) the whole step replayed as one CUDA graph per batch shape (eagerly off CUDA), otherwise
    the reference's eager step. Loss and correct predictions go to ``sums`` when given.
    """

    def __init__(self, model: LightningModule, precision: str = "32-true", sums: EpochSums | None = None):
        hp = cast(AttributeDict, model.hparams)
        device = next(model.parameters()).device
        self.model, self.sums = model, sums
        bf16 = str(precision).startswith("bf16")
        self.autocast = torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else nullcontext()
        self.optimizer = adam(model.parameters(), hp.lr, hp.fused_adam, device, graphed=hp.cuda_graph)
        extra = [sums.totals] if sums is not None else []
        self.graphs: StepGraphs | None = None
        if hp.cuda_graph:
            graphed = self.optimizer
            assert isinstance(graphed, GraphedAdam)  # adam(graphed=True) makes one
            self.graphs = StepGraphs(
                lambda batch: whole_training_step(model, graphed, batch, sums),
                lambda: step_state(model, graphed, *extra),
            )

    def __call__(self, batch: dict[str, torch.Tensor]) -> None:
        """One training step on a batch: the graph's replay for a graphed stage, else the eager step."""
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


def graphed_adam(module: LightningModule) -> GraphedAdam:
    """The whole step's optimizer of a graphed stage's module, unwrapped from Lightning's optimizer wrapper."""
    wrapper = module.optimizers()
    assert isinstance(wrapper, LightningOptimizer) and isinstance(wrapper.optimizer, GraphedAdam)
    return wrapper.optimizer
