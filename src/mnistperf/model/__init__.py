"""The model every stage trains: the network, its one training step, and the LightningModule over them.

``network`` holds SimpleCNN; ``step`` the training step (forward in the stage's layout, the loss, the
epoch's sums, the update; eager or replayed as a CUDA graph by ``graphs``) that the LightningModule
(``classifier``), the bench's reference rows and tune's probes all run; ``checkpoint`` what a checkpoint
brings into a run.
"""

from mnistperf.model.classifier import ImageClassifier
from mnistperf.model.network import SimpleCNN
from mnistperf.model.step import TrainingStep

__all__ = ["ImageClassifier", "SimpleCNN", "TrainingStep"]
