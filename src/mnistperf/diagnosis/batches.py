"""What a training batch holds, read the way both callbacks read it: its tensors.

A batch is a tensor or any nest of dicts, tuples, lists (named tuples too) and dataclasses around
tensors; :func:`tensors_of` walks it, a dataclass's every field included (fields set in
``__post_init__``, such as a batched graph's node features, too). Samples are counted as the leading
length of the first tensor, as Lightning's ``extract_batch_size`` counts them; where the batch's
tensors lead with different lengths (a graph batch's atoms and its molecules), that count is a guess,
and :func:`leading_lengths` lets a callback say so once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch


def tensors_of(batch: Any) -> list[torch.Tensor]:
    """Every tensor of a batch, in order (a tensor, or the tensors of any nest of containers and dataclasses)."""
    if isinstance(batch, torch.Tensor):
        return [batch]
    if type(batch) is dict or isinstance(batch, Mapping):  # a plain dict skips the abstract class's slower check
        items: Any = batch.values()
    elif isinstance(batch, (tuple, list)):
        items = batch
    elif dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        items = [getattr(batch, field.name, None) for field in dataclasses.fields(batch)]
    else:
        return []
    found = list(items)
    if all(isinstance(item, torch.Tensor) for item in found):
        return found  # the common batch, read without recursion: this runs every step
    return [tensor for item in found for tensor in tensors_of(item)]


def leading_lengths(batch: Any) -> list[int]:
    """The distinct leading lengths of a batch's tensors (0-dim ones left out), in the order first met."""
    return list(dict.fromkeys(t.shape[0] for t in tensors_of(batch) if t.ndim))
