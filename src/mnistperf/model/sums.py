"""The on-device sums of a stage's epoch: summed loss, correct predictions and samples.

Why a step adds to three numbers instead of logging: docs/timing.md#why-nothing-in-a-step-logs.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


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
        """Add a batch's loss (times its samples), correct predictions and samples, on the device."""
        samples = len(labels)
        self.totals[0].add_(loss.detach(), alpha=samples)
        self.totals[1].add_((logits.argmax(dim=1) == labels).sum())
        self.totals[2].add_(samples)

    def means(self, gather: Callable[[torch.Tensor], torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        """Per-sample loss and accuracy; ``gather`` (a LightningModule's ``all_gather``) adds every process's sums."""
        totals = self.totals if gather is None else gather(self.totals).reshape(-1, 3).sum(dim=0)
        samples = totals[2].clamp(min=1)
        return {"loss": totals[0] / samples, "acc": totals[1] / samples}
