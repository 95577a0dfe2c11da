"""What the ranks send each other at an epoch's end: one row of numbers each, gathered in rank order."""

from __future__ import annotations

from typing import Any

import torch


def every_rank(strategy: Any, row: torch.Tensor) -> torch.Tensor:
    """``row`` [n] of every rank as [ranks, n] (one rank: [1, n]); a collective, which every rank must join.

    ``strategy``: the trainer's, whose ``all_gather`` stacks the ranks' tensors (and returns the tensor itself on one
    process). Every rank's row has the same length.
    """
    return strategy.all_gather(row).reshape(-1, row.numel())
