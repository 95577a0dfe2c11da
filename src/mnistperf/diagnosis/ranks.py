"""What the ranks send each other at an epoch's end: one row of numbers each, gathered in rank order."""

from __future__ import annotations

from typing import Any

import torch


def every_rank(strategy: Any, row: torch.Tensor) -> torch.Tensor:
    """Every rank's ``row`` [n], of one length, as [ranks, n] by the trainer's ``strategy``: a collective all join."""
    return strategy.all_gather(row).reshape(-1, row.numel())
