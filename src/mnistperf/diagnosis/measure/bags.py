"""Bags marked by offsets, as ``nn.EmbeddingBag`` takes them: each sample a segment of a flat tensor's rows."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterator
from typing import NamedTuple

import torch

from mnistperf.diagnosis.measure.graph_batches import NodeSet


class Bags(NamedTuple):
    """A batch's bags: where each begins in the flat tensors' rows, and those tensors."""

    starts: torch.Tensor  # [bags] each bag's first row, rising from 0
    flat: list[torch.Tensor]  # the tensors with a row per token: the token ids, and any others of their length
    offsets: int  # where the offsets stand among the batch's tensors (-1: steps joined)


def is_ids(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is a 1-dim integer tensor on a CPU (elsewhere, reading it would wait for the device)."""
    return tensor.ndim == 1 and tensor.dtype in INTEGERS and tensor.is_cpu


INTEGERS = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def bag_count(tokens: torch.Tensor, offsets: torch.Tensor) -> int | None:
    """How many bags ``offsets`` marks in ``tokens``, as ``nn.EmbeddingBag`` takes them; None where it is no such pair.

    Not 0, 1, 2, ...: a column of sample ids from 0 (an unshuffled loader's first batch), or bags of one token each.
    """
    if not (is_ids(tokens) and is_ids(offsets)) or not 0 < len(offsets) <= len(tokens) + 1:  # (not a 0-dim's len)
        return None
    values = offsets.tolist()  # one read, in Python: a number a bag
    if values[0] != 0 or any(map(operator.ge, values, values[1:])) or len(values) > 1 and values[-1] == len(values) - 1:
        return None
    if values[-1] < len(tokens):
        return len(values)
    return len(values) - 1 if values[-1] == len(tokens) and len(values) > 1 else None


def bags_in(tensors: list[torch.Tensor]) -> Bags | None:
    """The bags of a batch whose tensors lead with different lengths, where its offsets follow its tokens; else None."""
    for at in range(1, len(tensors)):
        count = bag_count(tensors[at - 1], tensors[at])
        if count is not None:
            length = len(tensors[at - 1])
            flat = [t for i, t in enumerate(tensors) if i != at and t.ndim and t.shape[0] == length]
            starts = tensors[at] if count == len(tensors[at]) else tensors[at][:count]
            return Bags(starts if starts.dtype == torch.int64 else starts.long(), flat, at)
    return None


def sizes(bags: Bags) -> torch.Tensor:
    """Each bag's rows [bags]."""
    return torch.diff(bags.starts, append=bags.starts.new_tensor([len(bags.flat[0])]))


def of_rows(bags: Bags) -> torch.Tensor:
    """Each flat row's bag [rows]: a bag's first row adds one."""
    return torch.zeros(len(bags.flat[0]), dtype=torch.int64).index_fill_(0, bags.starts[1:], 1).cumsum_(0)


def by_width(bags: Bags, lengths: torch.Tensor, widest: int) -> Iterator[tuple[int, torch.Tensor, list[torch.Tensor]]]:
    """The bags by the width their rows are hashed at: each width, its bags [picked], their flat tensors padded.

    A bag's width is its ``lengths`` rounded up to a power of two, its tensors [picked, width, ...] padded with zeros;
    or 0, past ``widest`` rows (as :func:`segments`, unpadded). Either way a bag's own rows decide it, in any batch.
    """
    count, rows = len(bags.starts), len(bags.flat[0])
    width = torch.pow(2, torch.log2(lengths.double()).ceil()).long()
    width = torch.where(width > widest, 0, width)
    widths = width.unique().tolist()
    picked = {found: (width == found).nonzero().flatten() for found in widths}
    spans = [len(picked[found]) * found for found in widths]  # each width's rows, its bags back to back
    begins = list(itertools.accumulate(spans, initial=0))
    at = begins.pop()  # past the buckets
    first = torch.empty(count, dtype=torch.int64)  # where each bag's first row goes
    for found, begin, span in zip(widths, begins, spans, strict=True):
        if found:
            first[picked[found]] = torch.arange(begin, begin + span, found)
        else:  # a long bag's rows go past the buckets, each to a place of its own
            first[picked[0]] = at + bags.starts.index_select(0, picked[0])
    of_row = of_rows(bags)
    place = torch.arange(rows).sub_(bags.starts.index_select(0, of_row)).add_(first.index_select(0, of_row))
    placed = [t.new_zeros((at + rows if 0 in picked else at, *t.shape[1:])).index_copy_(0, place, t) for t in bags.flat]
    for found, begin, span in zip(widths, begins, spans, strict=True):
        dense = [t[begin : begin + span].view(len(picked[found]), found, *t.shape[1:]) for t in placed] if found else []
        yield found, picked[found], dense


def segments(bags: Bags, picked: torch.Tensor) -> NodeSet:
    """The ``picked`` bags as a graph batch's nodes: each flat row's bag among them, and their rows in order."""
    of_row = of_rows(bags)
    slot = torch.full((len(bags.starts),), -1, dtype=torch.int64)
    slot[picked] = torch.arange(len(picked))
    bag = slot.index_select(0, of_row)
    rows = (bag >= 0).nonzero().flatten()
    return NodeSet(bag.index_select(0, rows), [tensor.index_select(0, rows) for tensor in bags.flat])
