"""Graph batches, as graph libraries make them: each sample a graph, a segment of the batch's node rows."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple, TypeGuard

import torch
from lightning.fabric.utilities.data import sized_len

from mnistperf.diagnosis.measure.batch_fields import LEAVES, named_fields, rows_beside, tensors_of

# Where a graph batch keeps each node's graph, its graph count and the first node of each graph (PyG's names).
GRAPH_INDEX, GRAPH_COUNT, GRAPH_POINTER = "batch", "num_graphs", "ptr"
# A dict of a graph batch's tensors: each node's graph (PyG's and nequip's key, schnetpack's), and each graph's nodes.
INDEX_KEYS = (GRAPH_INDEX, "_idx_m")
SIZE_KEYS = ("num_atoms", "_n_atoms", "n_atoms", "num_nodes", "n_node")


class NodeSet(NamedTuple):
    """One kind of a graph batch's nodes: each node's graph, and the tensors with a row per node (the index apart)."""

    of_node: torch.Tensor  # [nodes]
    nodes: list[torch.Tensor]


class Graphs(NamedTuple):
    """A graph batch's nodes: each sample is a graph, a segment of the rows of each kind of node."""

    total: int  # graphs in the batch
    sets: list[NodeSet]  # one kind of node; a heterogeneous batch's several, each with an index of its own
    apart: tuple[Any, ...] = ()  # its fields that are neither a node's nor a graph's rows: the pointers, the edges'


def is_index(value: Any) -> TypeGuard[torch.Tensor]:
    """Whether ``value`` can be a per-node graph index: a 1-dim integer tensor."""
    return isinstance(value, torch.Tensor) and value.ndim == 1 and not value.is_floating_point()


def stated_count(count: Any) -> int | None:
    """A count a batch states (its ``num_graphs``, its ``batch_size``), where it is an int (not a bool); else None."""
    return count if isinstance(count, int) and not isinstance(count, bool) else None


def graph_count(item: Any, index: torch.Tensor, pointer: Any) -> int | None:
    """The graphs of a graph batch: its ``num_graphs``, its pointer's length less one, counted, or its length.

    Counted from the index on a CPU only (elsewhere that waits for the device), before a length that may be in nodes.
    """
    count = stated_count(getattr(item, GRAPH_COUNT, None))
    if count is not None:
        return count
    if isinstance(pointer, torch.Tensor) and pointer.ndim == 1 and len(pointer):
        return len(pointer) - 1
    if index.device.type == "cpu":
        return int(index.max()) + 1 if index.numel() else 0
    return sized_len(item)


def graphs_in(item: Any) -> Graphs | None:
    """``item`` as a graph batch (a per-node graph index, a graph count), a heterogeneous one, or a dict; else None."""
    if isinstance(item, Mapping):
        return mapped_graphs(item)
    if isinstance(item, (torch.Tensor, tuple, list)):
        return None
    index = getattr(item, GRAPH_INDEX, None)
    if not is_index(index):
        return kinds_of_nodes(item)
    pointer = getattr(item, GRAPH_POINTER, None)
    count = graph_count(item, index, pointer)
    if count is None:
        return None
    return one_kind(item, named_fields(item) or {}, index, count, pointer)


def one_kind(item: Any, fields: Mapping[Any, Any], index: torch.Tensor, count: int, pointer: Any) -> Graphs:
    """``count`` graphs of one kind of node: ``item``'s tensors with a row per node (not the pointer's, the edges')."""
    apart = (pointer, *(value for name, value in fields.items() if str(name).startswith("edge")))
    return Graphs(count, [NodeSet(index, rows_beside(item, len(index), (index, *apart)))], apart)


def kinds_of_nodes(item: Any) -> Graphs | None:
    """A heterogeneous graph batch's kinds of node, each a store with its own index; None where it is not one."""
    count = stated_count(getattr(item, GRAPH_COUNT, None))
    if count is None:
        return None
    sets: list[NodeSet] = []
    apart: list[Any] = []
    for store in (named_fields(item) or {}).values():
        fields = store if isinstance(store, Mapping) else None if isinstance(store, LEAVES) else named_fields(store)
        if fields is None:
            continue
        index = fields.get(GRAPH_INDEX)
        if is_index(index):
            pointer = fields.get(GRAPH_POINTER)
            kept = {id(index), id(pointer)}
            nodes = [t for t in tensors_of(list(fields.values())) if id(t) not in kept and t.ndim]
            sets.append(NodeSet(index, [t for t in nodes if t.shape[0] == len(index)]))
            apart += [pointer, *(t for t in nodes if t.shape[0] != len(index))]
        elif any(str(name).startswith("edge") for name in fields):
            apart += tensors_of(list(fields.values()))
    return Graphs(count, sets, tuple(apart)) if sets else None


def mapped_graphs(item: Mapping[Any, Any]) -> Graphs | None:
    """A dict of a graph batch's tensors, with a per-node graph index and a count of graphs; else None."""
    index = next((item[key] for key in INDEX_KEYS if is_index(item.get(key))), None)
    if index is None:
        return None
    count, pointer = stated_count(item.get(GRAPH_COUNT)), item.get(GRAPH_POINTER)
    sizes = next((item[key] for key in SIZE_KEYS if is_index(item.get(key))), None)
    if is_index(pointer) and len(pointer):
        count = len(pointer) - 1
    elif sizes is not None and (sizes.device.type != "cpu" or int(sizes.sum()) == len(index)):
        count = len(sizes)
    return None if count is None else one_kind(item, item, index, count, pointer)
