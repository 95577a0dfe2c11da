"""Packed sequences, as a recurrent model's batches hold them: each sample a sequence, its steps interleaved."""

from __future__ import annotations

from typing import Any

import torch
from torch.nn.utils.rnn import PackedSequence

from mnistperf.diagnosis.measure.fingerprint import to_device
from mnistperf.diagnosis.measure.graph_batches import Graphs, NodeSet


def packed_in(item: Any) -> PackedSequence | None:
    """``item`` where it is a PackedSequence (for :func:`~mnistperf.diagnosis.measure.batch_fields.first_found`)."""
    return item if isinstance(item, PackedSequence) else None


def sequences(packed: PackedSequence) -> int:
    """How many sequences a PackedSequence holds: those running at its first step."""
    return int(packed.batch_sizes[0]) if len(packed.batch_sizes) else 0


def as_graphs(packed: PackedSequence) -> tuple[Graphs, torch.Tensor]:
    """The sequences as a graph batch's graphs, each one's steps a segment in order; and their lengths [sequences].

    Hashed with its length, a sequence differs from the same steps with a step of zeros after them. The indices are
    made on the CPU from the step sizes (on it already): nothing waits for a GPU.
    """
    sizes, device, count = packed.batch_sizes, packed.data.device, sequences(packed)  # the sizes are on the CPU
    lengths = (sizes[None, :] > torch.arange(count)[:, None]).sum(1)  # each sequence's steps, longest first
    sequence = torch.repeat_interleave(torch.arange(count), lengths)  # each sequence's steps together, in order:
    step = torch.arange(len(sequence)) - torch.repeat_interleave(lengths.cumsum(0) - lengths, lengths)  # its time,
    order = (sizes.cumsum(0) - sizes).index_select(0, step) + sequence  # and where the data holds it
    order, sequence, lengths = (to_device(made, device) for made in (order, sequence, lengths))
    if packed.sorted_indices is not None and packed.unsorted_indices is not None:  # the batch's own order
        sequence = packed.sorted_indices.index_select(0, sequence)
        lengths = lengths.index_select(0, packed.unsorted_indices)
    return Graphs(count, [NodeSet(sequence, [packed.data.index_select(0, order)])]), lengths
