"""Packed sequences, as a recurrent model's batches hold them: each sample a sequence, its steps interleaved."""

from __future__ import annotations

from typing import Any

import torch
from torch.nn.utils.rnn import PackedSequence

from mnistperf.diagnosis.measure.batch_fields import LEAVES, fields_of
from mnistperf.diagnosis.measure.graph_batches import Graphs, NodeSet


def find_packed(batch: Any, depth: int = 3) -> PackedSequence | None:
    """The first PackedSequence in ``batch`` (itself, or nested up to ``depth`` containers down); else None."""
    if isinstance(batch, PackedSequence):
        return batch
    if depth and not isinstance(batch, LEAVES):
        for item in fields_of(batch) or []:
            found = find_packed(item, depth - 1)
            if found is not None:
                return found
    return None


def as_graphs(packed: PackedSequence) -> tuple[Graphs, torch.Tensor]:
    """The sequences as a graph batch's graphs, each one's steps a segment in order; and their lengths [sequences].

    A step is a node at its place in its sequence: a sequence is fingerprinted from its own steps, whatever the others
    in its batch; with its length as a row of its own, it differs from the same steps with a step of zeros after them.
    """
    sizes = packed.batch_sizes  # sequences still running at each step: on the CPU, whatever the data's device
    slot = torch.cat([torch.arange(int(size)) for size in sizes])  # each packed step's sequence, as sorted
    of_step = slot if packed.sorted_indices is None else packed.sorted_indices.cpu().index_select(0, slot)
    order = torch.argsort(of_step, stable=True)  # each sequence's steps together, in their order
    lengths = torch.bincount(of_step, minlength=int(sizes[0]) if len(sizes) else 0)
    device = packed.data.device
    steps = packed.data.index_select(0, order.to(device))
    return Graphs(len(lengths), [NodeSet(of_step.index_select(0, order).to(device), [steps])]), lengths.to(device)


def packed_tensors(packed: PackedSequence) -> list[torch.Tensor]:
    """The tensors a PackedSequence is made of: none of them a sample's rows."""
    return [t for t in packed if isinstance(t, torch.Tensor)]
