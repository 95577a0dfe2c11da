"""The model the ladder trains: the reference's SimpleCNN inside a small LightningModule.

A step adds its summed loss, correct predictions and sample count to :class:`~mnistperf.sums.EpochSums` on the device;
loss and accuracy are logged once per epoch from them, and nothing in a step logs or syncs. With
``cuda_graph`` the module optimizes manually, one graphed step (:mod:`mnistperf.graphed_step`) per batch
of the group it is handed (``data.batches_per_step``). Why: docs/timing.md#why-nothing-in-a-step-logs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, cast

import torch
import torch.nn.functional as F
from lightning import LightningModule
from lightning.fabric.utilities.data import AttributeDict
from lightning.pytorch.utilities import rank_zero_info
from torch import nn

from mnistperf.checkpoint import carry_step_count, differences, differences_line, follow_the_run, keys_for, plain_keys
from mnistperf.data.schema import NUM_CLASSES
from mnistperf.errors import ConfigError
from mnistperf.graphed_step import StepGraphs, step_state
from mnistperf.step import adam, graphed_adam, optimizer_steps, whole_training_step
from mnistperf.sums import EpochSums

PRECISION_KEY = "mnistperf_precision"  # the trainer precision a checkpoint was trained in
CompileMode = Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]
MatmulPrecision = Literal["highest", "high", "medium"]


class SimpleCNN(nn.Module):
    """Two conv blocks and two linear layers: 206,922 parameters for 28x28 grayscale input."""

    def __init__(self, num_classes: int = NUM_CLASSES):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, kernel_size=3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, kernel_size=3, padding=1)
        self.fc1 = nn.Linear(32 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits [N, num_classes] of images [N, 1, 28, 28]."""
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
        float32_matmul_precision: ``torch.set_float32_matmul_precision`` for the run: ``highest`` (torch's
            default: float32 matrix products in full fp32), ``high`` (TF32 on tensor cores) or ``medium``.
    """

    def __init__(
        self,
        lr: float = 1e-3,
        compile: bool = False,
        compile_on_cpu: bool = False,
        compile_mode: CompileMode | None = None,
        channels_last: bool = False,
        fused_adam: bool = False,
        cuda_graph: bool = False,
        float32_matmul_precision: MatmulPrecision = "highest",
    ):
        super().__init__()
        if compile_mode is not None and not compile:
            raise ConfigError(
                f"model.compile_mode {compile_mode!r} applies only with model.compile true; set it, "
                "or compile_mode null."
            )
        if cuda_graph and compile:
            raise ConfigError(
                "model.compile and model.cuda_graph both capture the step: choose one "
                "(cuda_graph captures the optimizer's update too)."
            )
        self.save_hyperparameters()
        self.net: nn.Module = SimpleCNN()  # torch.compile wraps it in configure_model
        self.sums: dict[str, EpochSums] = {}  # per stage; made by its first step, zeroed in place after each epoch
        self.automatic_optimization = not cuda_graph
        self.graphs = StepGraphs(self._whole_step, self._step_state)
        self._graphing = False  # decided in configure_model, once the device and the process count are known

    def _run_device(self) -> torch.device:
        """The device training runs on.

        configure_model is called before the module is moved there, so ask the trainer's strategy rather than
        self.device.
        """
        return self._trainer.strategy.root_device if self._trainer is not None else self.device

    def configure_model(self) -> None:
        """Set the run's matmul precision, decide whether the step is graphed, and lay out or compile the network."""
        hp = cast(AttributeDict, self.hparams)
        device = self._run_device()
        on_cuda = device.type == "cuda"
        torch.set_float32_matmul_precision(hp.float32_matmul_precision)  # set every run, the default too
        if hp.cuda_graph:
            world_size = self._trainer.world_size if self._trainer is not None else 1
            self._graphing = on_cuda and world_size == 1
            if not self._graphing:
                why = (
                    f"on {device.type} (a CUDA graph needs a CUDA device)"
                    if not on_cuda
                    else f"under {world_size} processes (the gradients' all-reduce is not captured)"
                )
                rank_zero_info(f"model.cuda_graph: skipped {why}; the same whole step runs eagerly.")
        if hp.channels_last:
            self.net = self.net.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        if hp.compile and not isinstance(self.net, torch._dynamo.eval_frame.OptimizedModule):
            if on_cuda or hp.compile_on_cpu:
                # torch.compile of a module is a module (OptimizedModule); its annotation says any callable
                self.net = cast(nn.Module, torch.compile(self.net, mode=hp.compile_mode))
            else:
                rank_zero_info(f"model.compile: skipped on {device.type} (set model.compile_on_cpu true to force it).")

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """The network's logits for a batch of images (in NHWC layout with ``channels_last``)."""
        if cast(AttributeDict, self.hparams).channels_last:
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
        """Loss and accuracy of the epoch, logged once.

        Every process takes part (the sums are gathered), also one that had no batch.
        """
        sums = self._sums(stage)
        # all_gather of a tensor is a tensor (its annotation covers collections too)
        gather = cast(Callable[[torch.Tensor], torch.Tensor], self.all_gather)
        means = sums.means(gather)  # new tensors: the reset below does not touch them
        self.log_dict({f"{stage}/{name}": value for name, value in means.items()}, prog_bar=stage != "train")
        sums.reset()

    # ------------------------------------------------------------------ the whole step (cuda_graph)
    def _whole_step(self, batch: dict[str, torch.Tensor]) -> None:
        """Everything one training step changes, in place: what :class:`StepGraphs` captures and replays.

        Graphed, the backward is autograd's own: Lightning's backward hooks run Python a replay would skip.
        """
        backward = torch.Tensor.backward if self._graphing else self.manual_backward
        whole_training_step(self, graphed_adam(self), batch, self._sums("train"), backward)

    def _step_state(self) -> list[torch.Tensor]:
        """The tensors the whole step changes: weights, buffers, Adam's state and the training sums."""
        sums = [self.sums["train"].totals] if "train" in self.sums else []
        return step_state(self, graphed_adam(self), *sums)

    def on_fit_start(self) -> None:
        """Forget the step's CUDA graphs."""
        self.graphs.reset()  # a fit builds a new optimizer, and may have moved the module since the last one

    def on_fit_end(self) -> None:
        """Forget the step's CUDA graphs."""
        self.graphs.reset()  # Lightning's teardown has just moved the module and Adam's state to the CPU

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """Plain key names (compiled or not, the network is the same) and the precision the run trained in."""
        checkpoint["state_dict"] = plain_keys(checkpoint["state_dict"])
        if self._trainer is not None:
            checkpoint[PRECISION_KEY] = str(self._trainer.precision)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        """The checkpoint's weights under this module's key names; its settings that differ named in one line.

        The run's settings win over the checkpoint's.
        """
        checkpoint["state_dict"] = keys_for(self, checkpoint["state_dict"])
        carry_step_count(checkpoint, self.automatic_optimization)
        changed = differences(checkpoint.get("hyper_parameters", {}), self.hparams, "model.")
        stage = None
        if self._trainer is not None:
            saved = {"precision": checkpoint[PRECISION_KEY]} if PRECISION_KEY in checkpoint else {}
            changed = differences(saved, {"precision": str(self._trainer.precision)}, "trainer.") + changed
            stage = self._trainer.logger.name if self._trainer.logger is not None else None
        line = differences_line(changed, stage)
        if line is not None:
            rank_zero_info(line)
        self.graphs.reset()  # the optimizer's state is about to be new tensors: capture again

    def training_step(self, batch, batch_idx):
        """Add the batch's loss and correct predictions to the epoch's sums; under cuda_graph, step by hand."""
        if self.automatic_optimization:
            return self._step(batch, "train")
        optimizer_steps(self.optimizers(), batch, self.graphs if self._graphing else self._whole_step)

    def validation_step(self, batch, batch_idx):
        """Add the batch's loss and correct predictions to the validation sums."""
        self._step(batch, "val")

    def test_step(self, batch, batch_idx):
        """Add the batch's loss and correct predictions to the test sums."""
        self._step(batch, "test")

    def on_train_epoch_end(self) -> None:
        """Log the epoch's training loss and accuracy."""
        self._log_epoch("train")

    def on_validation_epoch_end(self) -> None:
        """Log the epoch's validation loss and accuracy."""
        self._log_epoch("val")

    def on_test_epoch_end(self) -> None:
        """Log the test loss and accuracy."""
        self._log_epoch("test")

    def samples_in_batch(self, batch: dict[str, torch.Tensor]) -> int:
        """Samples in what the loader yielded, a group of k batches (data.batches_per_step) counting all k."""
        return batch["label"].numel()

    def predict_step(self, batch, batch_idx):
        """The predicted class of each image."""
        return self(batch["image"]).argmax(dim=1)

    def configure_optimizers(self):
        """The stages' Adam on the run's device, following the run's settings when a checkpoint is loaded."""
        hp = cast(AttributeDict, self.hparams)
        optimizer = adam(
            self.parameters(),
            hp.lr,
            hp.fused_adam,
            self._run_device(),
            graphed=hp.cuda_graph,
            capturable=self._graphing,
        )
        return follow_the_run(optimizer)
