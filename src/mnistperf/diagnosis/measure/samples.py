"""What a batch's samples are, read one way for both callbacks: how many, and the rows that hold each one."""

from __future__ import annotations

import math
from collections.abc import Mapping
from enum import Enum
from typing import Any, NamedTuple

import numpy as np
import torch
from torch.nn.utils.rnn import PackedSequence

from mnistperf.diagnosis.measure.bags import Bags, bags_in
from mnistperf.diagnosis.measure.batch_fields import LEAVES, fields_of, first_found, rows_beside, tensors_of
from mnistperf.diagnosis.measure.graph_batches import INDEX_KEYS, Graphs, graphs_in, stated_count
from mnistperf.diagnosis.measure.packed_sequences import packed_in, sequences


class Rule(Enum):
    """What counted a batch's samples (record/epoch_text says each in words)."""

    FIRST_LENGTH = "first_length"  # the first tensor's length, where nothing else counts them
    ZERO_DIM = "zero_dim"  # 0-dim tensors alone: one sample
    NO_TENSOR = "no_tensor"  # no tensor with the sample dimensions
    LEADING = "leading"  # the first tensor's leading sample dimensions
    GRAPHS = "graphs"  # a graph batch's graphs
    PACKED = "packed"  # a packed sequence's sequences
    STATED = "stated"  # the batch's own batch_size
    STATED_FIRST = "stated_first"  # the first of the batch's own batch_size of several dimensions ([T, B]: which?)
    RECORDS = "records"  # its items, a record a sample
    SEQUENCES = "sequences"  # the items of its sequences, one a sample
    BAGS = "bags"  # the bags its offsets mark, as nn.EmbeddingBag takes them


class Counted(NamedTuple):
    """What counted a batch's samples: the rule, and what it counted in (the batch's kind, or sample dimensions)."""

    rule: Rule
    of: str | int | None = None


BY_FIRST_LENGTH = Counted(Rule.FIRST_LENGTH)  # made once: read every step


class Reading(NamedTuple):
    """A batch as both callbacks read it: its samples and what says so, the rows that hold them, any graphs."""

    samples: int | None  # None: no tensor gives them
    counted_by: Counted  # what gave the count
    rows: list[torch.Tensor]  # the tensors whose leading dimension(s) are the samples, each as it is in the batch
    graphs: Graphs | None = None
    lengths: tuple[int, ...] = ()  # where the count is the first tensor's: the distinct leading lengths, in order
    items: list[list[torch.Tensor]] | None = None  # a batch of one item a sample: each sample's own tensors
    texts: list[list[str | bytes]] | None = None  # each sample's strings (and numbers, of one item a sample)
    packed: PackedSequence | None = None  # a packed batch's sequences, made graphs only where hashed (as_graphs)
    bags: Bags | None = None  # bags its offsets mark, made rows only where hashed


def rank(item: Any) -> int | None:
    """A tensor's dimensions; None for anything else."""
    return item.ndim if isinstance(item, torch.Tensor) else None


def common_lead(tensors: list[torch.Tensor]) -> int | None:
    """The one length every tensor leads with, where they all have a dimension and lead alike; else None."""
    lengths = {t.size(0) if t.ndim else None for t in tensors}
    return lengths.pop() if len(lengths) == 1 else None


def strings_of(item: Any) -> list[str | bytes]:
    """An item's strings and its numbers' reprs, in order, in any nest :func:`fields_of` reads (not its tensors)."""
    if isinstance(item, (str, bytes)):
        return [item]
    if isinstance(item, (int, float)):
        return [repr(item)]
    return [
        text for field in fields_of(item) or () if not isinstance(field, torch.Tensor) for text in strings_of(field)
    ]


def with_texts(reading: Reading, batch: Any) -> Reading:
    """``reading`` with each sample's strings, where the batch has text columns (a string a sample, as collated).

    So the audit hashes them beside the rows; without them, texts sharing a label would read as one sample.
    """
    columns = text_columns(batch, reading.samples)
    return reading._replace(texts=[list(texts) for texts in zip(*columns, strict=True)]) if columns else reading


def text_columns(item: Any, samples: int | None, depth: int = 3) -> list[Any]:
    """The sequences of ``samples`` plain values (numbers as reprs) in ``item``'s fields, and theirs, ``depth`` down."""
    found = []
    for field in fields_of(item) or ():
        if isinstance(field, np.ndarray) and field.dtype.kind in "USO":  # NumPy's strings (pandas' are objects)
            field = field.tolist()
        if isinstance(field, (tuple, list)) and field and len(field) == samples and all(map(plain, field)):
            found.append([x if isinstance(x, (str, bytes)) else repr(x) for x in field])
        elif depth and not isinstance(field, LEAVES):
            found += text_columns(field, samples, depth - 1)
    return found


def plain(value: Any) -> bool:
    """Whether ``value`` is a string or a number, or a list or tuple of them (or of such lists), no tensor inside."""
    return isinstance(value, (str, bytes, int, float)) or isinstance(value, (list, tuple)) and all(map(plain, value))


def sample_items(batch: Any) -> Reading | None:
    """The reading of ``batch`` where it holds its samples one item each: their tensors and strings; else None.

    As columns or as records; where both read it, the one that counts more samples (columns where alike), or no guess.
    """
    fields, kind = fields_of(batch) or [], type(batch).__name__
    if all(isinstance(field, LEAVES) for field in fields):  # tensors and such alone, as most batches: read so
        return None
    columns, records = _columns(fields), _records(fields)
    if records is not None and (columns is None or len(records[0]) > len(columns[0]) or columns[1] and not records[1]):
        (items, lengths), how = records, Counted(Rule.RECORDS, kind)
        texts = [strings_of(record) for record in fields]
    elif columns is not None:
        (items, lengths), how = columns, Counted(Rule.SEQUENCES, kind)
        sequences = [field for field in fields if isinstance(field, (tuple, list))]
        texts = [[text for field in sequences for text in strings_of(field[at])] for at in range(len(items))]
    else:
        return None
    return Reading(len(items), how, [], lengths=lengths, items=items, texts=texts if any(texts) else None)


def _columns(fields: list[Any]) -> tuple[list[list[torch.Tensor]], tuple[int, ...]] | None:
    """A detection collate's ``(images, targets)``, ``tuple(zip(*samples))``: each sample's tensors; guessed lengths.

    A guess gives the lengths (the count first) for a line to say so.
    """
    sequences = [field for field in fields if isinstance(field, (tuple, list))]
    if not sequences or not len(sequences[0]) or any(len(field) != len(sequences[0]) for field in sequences):
        return None
    if any(len({(type(item), rank(item)) for item in field}) > 1 for field in sequences):
        return None  # a column's items are alike: of one type, and tensors of one rank
    count = len(sequences[0])
    tensors = [field for field in fields if isinstance(field, torch.Tensor)]
    if any(not tensor.ndim or tensor.size(0) != count for tensor in tensors):
        return None
    holding = [field for field in sequences if tensors_of(field[0])]  # its items alike: the first tells
    if not holding:
        return None
    items = [[t for field in (*holding, *tensors) for t in tensors_of(field[at])] for at in range(count)]
    if not all(items):
        return None
    numbers = any(isinstance(field[0], (int, float)) for field in sequences)  # a label a sample, not yet a tensor
    if not all(isinstance(item, torch.Tensor) for field in holding for item in field):
        if _batched_records(fields, count):
            return None
        return items, ()  # an item that is not a tensor: a sample's record
    common = common_lead([item for field in holding for item in field])
    if common == count or (common is not None and not (tensors or numbers)):
        return None  # crops or a pyramid's levels, each leading with the batch: read as before, by sample
    if tensors or numbers:  # beside labels; said where they lead alike (images of 3 channels, crops of a batch)
        return items, () if common is None else (count, common)
    leading = dict.fromkeys(item.size(0) for field in holding for item in field if item.ndim)
    if len(leading) < 2 and all(item.ndim for field in holding for item in field):
        return None
    return items, tuple(dict.fromkeys((count, *leading)))


def _batched_records(fields: list[Any], count: int) -> bool:
    """Whether a sequence of ``count`` records is batched views (a query and its documents), not ``count`` samples.

    So where a mapping or object beside the sequences holds tensors of two dimensions or more (a tokenizer's
    ``[B, T]``), and they and every tensor of the sequences' records lead with one length above ``count``: the batch's,
    each record a batch of its own. (A detection collate's targets beside their images hold none, or lead with fewer.)
    """
    apart = (tuple, list, np.ndarray, *LEAVES)
    beside = [t for field in fields if not isinstance(field, apart) for t in tensors_of(field)]
    lead = common_lead(beside) if beside and all(t.ndim > 1 for t in beside) else None
    if lead is None or lead <= count:
        return False
    inside = [t for field in fields if isinstance(field, (tuple, list)) for item in field for t in tensors_of(item)]
    return common_lead(inside) == lead


def _records(fields: list[Any]) -> tuple[list[list[torch.Tensor]], tuple[int, ...]] | None:
    """Samples handed on as the dataset gave them (``collate_fn=lambda samples: samples``): each one's tensors."""
    if not fields or any(isinstance(field, torch.Tensor) for field in fields):
        return None
    structures = {_structure(field) for field in fields}
    structure = structures.pop() if len(structures) == 1 else None
    if structure is None:
        return None
    items = [tensors_of(field) for field in fields]
    if not all(items):
        return None
    shaped = [[t for t in item if t.ndim] for item in items]
    common = common_lead([t for item in shaped for t in item])
    named = any(kind in (int, float, str, bytes) for kind, _ in structure[2])  # a label no view of a batch holds
    if common is not None and all(len(item) > 1 for item in shaped) and not named:  # views of a batch, leading with it
        return None
    labelled = named or any(dims == 0 for _, dims in structure[2]) or any(t.shape == (1,) for t in items[0])
    if not labelled and (len(fields) == 1 or len({tuple(t.shape for t in item) for item in items}) == 1):
        return None
    return items, (len(items), common) if common is not None and common != len(items) else ()


def _structure(record: Any) -> tuple[Any, ...] | None:
    """A record's type and its fields' types and ranks (a mapping's keys too); None for what holds no fields."""
    found = fields_of(record)
    if found is None:
        return None
    keys = tuple(record) if isinstance(record, Mapping) else ()
    return type(record), keys, tuple((type(item), rank(item)) for item in found)


def read(batch: Any, sample_dims: int = 1) -> Reading:
    """How many samples ``batch`` (one loader's) holds and the rows that hold them, by the first rule that applies.

    The rules, in order: docs/diagnose.md, "Your batches"; with ``sample_dims`` > 1, the product of the first tensor's
    leading dimensions. The rows are every tensor that leads with that many samples.
    """
    if isinstance(batch, torch.Tensor):  # the common batches, read directly: this runs every step
        return _by_first([batch], sample_dims)
    plain_dict = type(batch) is dict and not any(key in batch for key in INDEX_KEYS)  # (a graph batch's tensors, maybe)
    if plain_dict or (isinstance(batch, (tuple, list)) and not isinstance(batch, PackedSequence)):
        tensors = list(batch.values() if plain_dict else batch)
        for t in tensors:  # (a loop, not all(): this runs every step)
            if not isinstance(t, torch.Tensor):
                return _read_nested(batch, sample_dims)
        if not tensors:  # an empty list or dict (a filtering collate's that kept no sample): none
            return Reading(0, BY_FIRST_LENGTH, [])
        return _by_first(tensors, sample_dims)
    return _read_nested(batch, sample_dims)


def _by_first(tensors: list[torch.Tensor], sample_dims: int) -> Reading:
    if sample_dims == 1:
        first, rows = -1, []
        lengths: dict[int, None] | None = None  # in one pass, each length kept only where they differ: every step
        for t in tensors:
            if t.ndim:
                length = t.size(0)
                if first < 0 or length == first:
                    first = length
                    rows.append(t)
                elif lengths is None:
                    lengths = {first: None, length: None}
                else:
                    lengths[length] = None
        bags = bags_in(tensors) if lengths is not None else None
        if bags is not None:
            count = len(bags.starts)
            rows = [t for at, t in enumerate(tensors) if at != bags.offsets and t.ndim and t.size(0) == count]
            return Reading(count, Counted(Rule.BAGS, bags.offsets), rows, bags=bags)
        if rows:
            return Reading(first, BY_FIRST_LENGTH, rows, lengths=tuple(lengths or (first,)))
        return Reading(1 if tensors else None, Counted(Rule.ZERO_DIM), [])
    shaped = [t for t in tensors if t.ndim >= sample_dims]
    if not shaped:
        return Reading(None, Counted(Rule.NO_TENSOR, sample_dims), [])
    lead = shaped[0].shape[:sample_dims]
    rows = [t for t in shaped if t.shape[:sample_dims] == lead]
    return Reading(math.prod(lead), Counted(Rule.LEADING, sample_dims), rows)


def _read_nested(batch: Any, sample_dims: int) -> Reading:
    """:func:`read` of a batch that is not a plain tensor, tuple or dict of tensors."""
    if sample_dims > 1:
        return _by_first(tensors_of(batch), sample_dims)
    graphs, holder = first_found(batch, graphs_in)
    if graphs is not None:
        apart = [t for index, nodes in graphs.sets for t in (index, *nodes)] + list(graphs.apart)
        rows = rows_beside(batch, graphs.total, apart)
        return Reading(graphs.total, Counted(Rule.GRAPHS, type(holder).__name__), rows, graphs)
    packed, _ = first_found(batch, packed_in)
    if packed is not None:  # its sequences, each hashed from its own steps and length
        count = sequences(packed)
        rows = rows_beside(batch, count, tensors_of(packed))
        return Reading(count, Counted(Rule.PACKED, type(packed).__name__), rows, packed=packed)
    tensors, dims = tensors_of(batch), stated_size(batch)  # the samples the batch says it holds:
    size = stated_count(dims[0] if isinstance(dims, torch.Size) and len(dims) else dims)  # an int, or a Size's first
    rows = [t for t in tensors if t.ndim and t.size(0) == size] if size is not None else []
    if size is not None and size >= 0 and (rows or not tensors):  # a size no tensor leads with (a setting): not read
        if isinstance(dims, torch.Size) and len(dims) > 1:  # of several dimensions: its first counted, all said
            rule, lengths = Rule.STATED_FIRST, tuple(dims)
        else:  # the lengths other tensors lead with, whose rows are not read
            rule, lengths = Rule.STATED, tuple(dict.fromkeys((size, *(t.size(0) for t in tensors if t.ndim))))
            lengths = lengths[len(lengths) < 2 :]
        return with_texts(Reading(size, Counted(rule, type(batch).__name__), rows, lengths=lengths), batch)
    return sample_items(batch) or with_texts(_by_first(tensors, sample_dims), batch)


def stated_size(batch: Any) -> Any:
    """The batch's own ``batch_size``, where it has one that reads (a property may raise: then none)."""
    try:
        return getattr(batch, "batch_size", None)
    except Exception:
        return None
