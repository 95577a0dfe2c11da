"""Bags marked by offsets, as ``nn.EmbeddingBag`` takes them: each sample a segment of a flat tensor's rows."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import NamedTuple

import torch


class Bags(NamedTuple):
    """A batch's bags: where each begins in the flat tensors' rows, and those tensors."""

    starts: torch.Tensor  # [bags] each bag's first row, rising from 0
    flat: list[torch.Tensor]  # the tensors with a row per token (the token ids, their weights)
    offsets: int  # where the offsets stand among the batch's tensors (-1: steps joined)


def starts(candidate: torch.Tensor, rows: int) -> list[int] | None:
    """The starts of the bags ``candidate`` marks in ``rows`` rows, each to the next's start; None where it marks none.

    As ``nn.EmbeddingBag`` takes offsets: from 0, rising, within the rows; the last may be the rows' end
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
    as :func:`starts` says; each bag is a sample, and the tensors that lead with the bag count are its rows (its
    label). Where several could mark bags (a first batch's sample ids, 0 on), the one reaching furthest into the rows.
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
    return Bags(tensors[at][: len(bag_starts)].long(), flat, at)


Step = tuple[torch.Tensor, Sequence[torch.Tensor], Sequence[torch.Tensor]]  # a step's bag starts, flat tensors, rows


def dense(steps: Sequence[Step]) -> tuple[list[torch.Tensor], int]:
    """Steps' bags as one step's tensors, its rows then :func:`padded`'s, and its samples.

    Each step's starts are moved past the flat rows of the steps before.
    """
    moved = itertools.accumulate((len(flat[0]) for _, flat, _ in steps[:-1]), initial=0)
    starts = torch.cat([bag_starts + by for (bag_starts, _, _), by in zip(steps, moved, strict=True)])
    flat = [torch.cat(column) for column in zip(*(flat for _, flat, _ in steps), strict=True)]
    rows = [torch.cat(column) for column in zip(*(rows for _, _, rows in steps), strict=True)]
    return [*rows, *padded(Bags(starts, flat, -1))], len(starts)


def padded(bags: Bags) -> list[torch.Tensor]:
    """Each bag's length [bags], and each flat tensor's rows as [bags, width, ...]: a bag's from the first, zeros after.

    ``width``: the longest bag's rows, rounded up to a power of two. A fingerprint weighs a sample's words by their
    places from the first, so the zeros past a bag's rows weigh nothing and it is the same whatever the width, up to
    the words a sample has hashed in full (``max_words``); past them, at positions drawn for each width, as for any
    batch padded to its longest (SampleAudit says so once).
    """
    sizes = torch.diff(bags.starts, append=bags.starts.new_tensor([len(bags.flat[0])]))
    width = 1 << max(0, int(sizes.max()) - 1).bit_length()
    # each row's place in the dense rows: one past the row before's, a bag's first row at its bag's row's first
    step = torch.ones(len(bags.flat[0]), dtype=torch.int64)
    step.index_copy_(0, bags.starts[1:], (width + 1) - sizes[:-1])
    place = step.cumsum_(0).sub_(1)
    dense = []
    for tensor in bags.flat:
        made = tensor.new_zeros((len(bags.starts), width, *tensor.shape[1:]))
        made.view(-1, *tensor.shape[1:]).index_copy_(0, place, tensor)
        dense.append(made)
    return [sizes, *dense]
