"""ImageClassifier: the LightningModule every stage trains, SimpleCNN under the stages' one training step.

A step adds its summed loss, correct predictions and sample count to :class:`~mnistperf.model.sums.EpochSums` on
the device; loss and accuracy are logged once per epoch from them, and nothing in a step logs or syncs. With
``cuda_graph`` the module optimizes manually, one graphed step (:mod:`mnistperf.model.graphs`) per batch of the
group it is handed (``data.batches_per_step``). Why: docs/timing.md#why-nothing-in-a-step-logs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, cast

import torch
from lightning import LightningModule
from lightning.fabric.utilities.data import AttributeDict
from lightning.pytorch.utilities import rank_zero_info

from mnistperf.errors import ConfigError
from mnistperf.model.checkpoint import carry_step_count, differences, differences_line, follow_the_run
from mnistperf.model.network import SimpleCNN
from mnistperf.model.step import TrainingStep, adam, optimizer_steps

PRECISION_KEY = "mnistperf_precision"  # the trainer precision a checkpoint was trained in
CompileMode = Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]
GRAPHING_MODES = ("reduce-overhead", "max-autotune")  # modes that capture CUDA graphs themselves
MatmulPrecision = Literal["highest", "high", "medium"]


class ImageClassifier(LightningModule):
    """SimpleCNN trained with cross-entropy and Adam.

    Args:
        lr: Adam learning rate.
        compile: compile the network in place (``nn.Module.compile``; on CUDA, and on other devices only with
            ``compile_on_cpu``, since compiling there costs more than it saves on runs this short).
        compile_on_cpu: allow ``compile`` off CUDA too.
        compile_mode: ``torch.compile``'s mode (``default``, ``reduce-overhead``: CUDA graphs of the
            network, ``max-autotune``, ``max-autotune-no-cudagraphs``); None is torch's default.
        channels_last: keep images and conv weights in NHWC layout.
        fused_adam: use the fused Adam kernel (on CPU and CUDA, where torch has one; ignored elsewhere).
        cuda_graph: run the whole training step as one CUDA graph per batch shape, replayed (on a
            single CUDA device; elsewhere the same step runs eagerly, and the run says so). With ``compile``
            the network is compiled in the warm-up before capture, so the graph holds its fused kernels.
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
        if not lr > 0:  # (NaN too)
            raise ConfigError(f"model.lr must be above 0 (got {lr}); the stages train with --model.lr 0.001.")
        if compile_mode is not None and not compile:
            raise ConfigError(
                f"model.compile_mode {compile_mode!r} applies only with model.compile true; set it, "
                "or compile_mode null."
            )
        if cuda_graph and compile and compile_mode in GRAPHING_MODES:
            raise ConfigError(
                f"model.compile_mode {compile_mode!r} captures CUDA graphs of its own, and model.cuda_graph captures "
                "the whole step: with cuda_graph, pass --model.compile_mode null (compiled, then captured)."
            )
        self.save_hyperparameters()
        self.net = SimpleCNN()
        self.step = TrainingStep(self.net, channels_last)
        self.automatic_optimization = not cuda_graph
        self._graphing = False  # decided in configure_model, once the device and the process count are known
        self._compiled = False

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
            self.net.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        if hp.compile and not self._compiled:
            if on_cuda or hp.compile_on_cpu:
                self.net.compile(mode=hp.compile_mode)  # in place: the module and its state_dict keys stay
                self._compiled = True
            else:
                rank_zero_info(f"model.compile: skipped on {device.type} (set model.compile_on_cpu true to force it).")

    def applied_settings(self) -> dict[str, bool]:
        """Whether ``compile`` and ``cuda_graph`` took effect (skipped off CUDA), for timing summaries and reports."""
        return {"compile_applied": self._compiled, "cuda_graph_applied": self._graphing}

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """The network's logits for a batch of images (in NHWC layout with ``channels_last``)."""
        return self.step.forward(images)

    def standalone_step(self, precision: str = "32-true", summed: bool = False) -> TrainingStep:
        """This stage's training step outside Lightning's loop, with its own Adam and precision.

        bf16 autocast where fit runs ``bf16-mixed``; for a graphed stage the whole step replayed as one CUDA graph
        per batch shape (eagerly off CUDA). ``summed``: loss and correct predictions go to its ``"train"`` sums.
        """
        hp = cast(AttributeDict, self.hparams)
        device = next(self.parameters()).device
        step = TrainingStep(self.net, hp.channels_last, summed)
        if str(precision).startswith("bf16"):
            step.autocast = torch.autocast(device.type, dtype=torch.bfloat16)
        step.use(adam(self.parameters(), hp.lr, hp.fused_adam, device, graphed=hp.cuda_graph), graphed=hp.cuda_graph)
        return step

    def _log_epoch(self, stage: str) -> None:
        """Loss and accuracy of the epoch, logged once.

        Every process takes part (the sums are gathered), also one that had no batch.
        """
        sums = self.step.stage_sums(stage, self.device)
        # all_gather of a tensor is a tensor (its annotation covers collections too)
        gather = cast(Callable[[torch.Tensor], torch.Tensor], self.all_gather)
        means = sums.means(gather)  # new tensors: the reset below does not touch them
        self.log_dict({f"{stage}/{name}": value for name, value in means.items()}, prog_bar=stage != "train")
        sums.reset()

    def on_fit_start(self) -> None:
        """Forget the step's CUDA graphs."""
        self.step.graphs.reset()  # a fit builds a new optimizer, and may have moved the module since the last one

    def on_fit_end(self) -> None:
        """Forget the step's CUDA graphs."""
        self.step.graphs.reset()  # Lightning's teardown has just moved the module and Adam's state to the CPU

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """Record the precision the run trained in."""
        if self._trainer is not None:
            checkpoint[PRECISION_KEY] = str(self._trainer.precision)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        """Carry the checkpoint's step count into this run's loop; its settings that differ named in one line.

        The run's settings win over the checkpoint's.
        """
        carry_step_count(checkpoint, self.automatic_optimization)
        changed = differences(checkpoint.get("hyper_parameters", {}), self.hparams, "model.")
        stage = None
        if self._trainer is not None:
            saved = {"precision": checkpoint[PRECISION_KEY]} if PRECISION_KEY in checkpoint else {}
            changed = differences(saved, {"precision": str(self._trainer.precision)}, "trainer.") + changed
            data = getattr(getattr(self._trainer, "datamodule", None), "hparams", {})  # what it learned from
            if "dataset" in data:  # the lab's DataModule (another, or loaders alone, names none)
                kept = checkpoint.get("datamodule_hyper_parameters", {})
                trained_on = {k: v for k, v in kept.items() if k == "dataset"}
                changed += differences(trained_on, {"dataset": data["dataset"]}, "data.")
            stage = self._trainer.logger.name if self._trainer.logger is not None else None
        line = differences_line(changed, stage)
        if line is not None:
            rank_zero_info(line)
        self.step.graphs.reset()  # the optimizer's state is about to be new tensors: capture again

    def training_step(self, batch, batch_idx):
        """Add the batch's loss and correct predictions to the epoch's sums; under cuda_graph, step by hand."""
        if self.automatic_optimization:
            return self.step.loss(batch, "train")
        optimizer_steps(self.optimizers(), batch, self.step)

    def validation_step(self, batch, batch_idx):
        """Add the batch's loss and correct predictions to the validation sums."""
        self.step.loss(batch, "val")

    def test_step(self, batch, batch_idx):
        """Add the batch's loss and correct predictions to the test sums."""
        self.step.loss(batch, "test")

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
        backward = torch.Tensor.backward if self._graphing else self.manual_backward
        self.step.use(optimizer, graphed=self._graphing, backward=backward)
        return follow_the_run(optimizer)
