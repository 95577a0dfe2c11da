"""Bags marked by offsets, as ``nn.EmbeddingBag`` takes them: each sample a segment of a flat tensor's rows."""

from __future__ import annotations

from typing import NamedTuple

import torch

from mnistperf.diagnosis.measure.graph_batches import Graphs, NodeSet


class Bags(NamedTuple):
    """A batch's bags: each sample's segment of the flat tensors, and the tensors with a row per sample."""

    graphs: Graphs  # each bag a graph: its segment of the flat tensors' rows, in order
    rows: list[torch.Tensor]  # the tensors with a row per bag (its label), the offsets left out
    offsets: int  # where the offsets stand among the batch's tensors


def starts(candidate: torch.Tensor, rows: int) -> list[int] | None:
    """The bag starts ``candidate`` gives where it marks bags of ``rows`` rows, each to the next's start; else None.

    As ``nn.EmbeddingBag`` takes offsets: from 0, rising, within the rows; the last start may be the rows' end
    (``include_last_offset``), which marks no bag of its own. Strictly rising, so that a label column sorted from 0
    (its repeats) is not taken for offsets: a batch with an empty bag is read as before. Never off a CPU, where
    reading its values would wait for the device every step.
    """
    if candidate.ndim != 1 or candidate.is_floating_point() or candidate.is_complex() or candidate.dtype == torch.bool:
        return None
    if candidate.device.type != "cpu" or not 0 < len(candidate) <= rows:
        return None
    values = candidate.tolist()  # one read, in Python: a number a bag
    if values[0] != 0 or values[-1] > rows or any(map(int.__ge__, values, values[1:])):
        return None
    return values[:-1] if values[-1] == rows and len(values) > 1 else values


def bags_in(tensors: list[torch.Tensor]) -> Bags | None:
    """The bags of a batch whose tensors lead with different lengths, where one of them marks bags; else None.

    A 1-dim integer tensor marks bags of the longer tensors of one other length (the flat token ids, their weights),
    as :func:`starts` says; each bag is a sample, fingerprinted by its own segment and its own rows (the tensors that
    lead with the bag count). Where several could mark bags (a first batch's sample ids, 0 on), the one reaching
    furthest into the rows.
    """
    found = []
    lengths = [t.shape[0] if t.ndim else -1 for t in tensors]
    for at, candidate in enumerate(tensors):
        if candidate.ndim != 1 or candidate.is_floating_point():
            continue
        for length in dict.fromkeys(n for n in lengths if n > len(candidate)):
            bag_starts = starts(candidate, length)
            if bag_starts is not None:
                found.append((bag_starts[-1], at, length, bag_starts))
    if not found:
        return None
    _, at, length, bag_starts = max(found, key=lambda each: each[0])
    flat = [t for i, t in enumerate(tensors) if i != at and t.ndim and t.shape[0] == length]
    rows = [t for i, t in enumerate(tensors) if i != at and t.ndim and t.shape[0] == len(bag_starts)]
    of_row = torch.zeros(length, dtype=torch.int64)
    of_row.index_fill_(0, tensors[at][1 : len(bag_starts)].long(), 1)  # each bag's first row, the first bag's apart
    return Bags(Graphs(len(bag_starts), [NodeSet(of_row.cumsum(0), flat)]), rows, at)
