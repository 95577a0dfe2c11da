"""Steps' sample rows held until they are hashed together, and graph and bag steps joined as one batch's."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import NamedTuple, Protocol

import torch

from mnistperf.diagnosis.measure.bags import Bags
from mnistperf.diagnosis.measure.graph_batches import Graphs, NodeSet

# Held steps are hashed together once they hold this many samples, or this many bytes.
HASH_SAMPLES = 4096
HASH_BYTES = 32 * 2**20


class Rows(NamedTuple):
    """A step's tensors that hold its samples (each leading with them), and how many samples it holds.

    A graph batch's begin with each kind of node's index and as many node tensors as ``graph_nodes`` says, kind by kind.
    """

    tensors: list[torch.Tensor]
    samples: int
    graph_nodes: tuple[int, ...] | None = None  # None: not a graph batch
    bags: int | None = None  # a batch of bags: its bags' starts and this many flat tensors, then its rows


def graph_rows(graphs: Graphs, rows: Sequence[torch.Tensor]) -> Rows:
    """A graph batch's :class:`Rows`: each kind's index and node tensors, then the graphs' ``rows``."""
    tensors = [t for index, nodes in graphs.sets for t in (index, *nodes)]
    return Rows([*tensors, *rows], graphs.total, tuple(len(nodes) for _, nodes in graphs.sets))


def bag_rows(bags: Bags, rows: Sequence[torch.Tensor]) -> Rows:
    """A batch of bags' :class:`Rows`: its bags' starts, its flat tensors, then its ``rows``."""
    return Rows([bags.starts, *bags.flat, *rows], len(bags.starts), bags=len(bags.flat))


def joined_columns(steps: Iterable[Sequence[torch.Tensor]]) -> list[torch.Tensor]:
    """Steps' tensors of one layout, each position's joined along the samples: one batch's tensors."""
    return [torch.cat(column) for column in zip(*steps, strict=True)]


def joined_bags(steps: Sequence[Rows]) -> tuple[Bags, list[torch.Tensor]]:
    """Bag steps as one batch's bags, each step's starts moved past the rows of the steps before; and their rows."""
    flat = [step.tensors[1 : 1 + (step.bags or 0)] for step in steps]
    rows = [step.tensors[1 + (step.bags or 0) :] for step in steps]
    moved = itertools.accumulate((len(tensors[0]) for tensors in flat[:-1]), initial=0)
    starts = torch.cat([step.tensors[0] + by for step, by in zip(steps, moved, strict=True)])
    return Bags(starts, joined_columns(flat), -1), joined_columns(rows)


def graph_parts(step: Rows) -> tuple[list[NodeSet], list[torch.Tensor]]:
    """A graph step's kinds of node (each its index and node tensors) and its graphs' rows: :func:`graph_rows` read."""
    sets, at = [], 0
    for count in step.graph_nodes or ():
        sets.append(NodeSet(step.tensors[at], step.tensors[at + 1 : at + 1 + count]))
        at += 1 + count
    return sets, step.tensors[at:]


def joined_graphs(steps: Sequence[Rows]) -> tuple[Graphs, list[torch.Tensor]]:
    """Graph steps of one layout as one graph batch, each step's graphs numbered after those of the steps before.

    The index is made int64 before it is offset (a narrower one would wrap); on a CPU, a step whose nodes name a graph
    past its count fails here as it would alone, not counted in the next step's graphs.
    """
    parts = [graph_parts(step) for step in steps]
    for step, (sets, _) in zip(steps, parts, strict=True):
        for index, _ in sets:
            if index.device.type == "cpu" and index.numel() and int(index.max()) >= step.samples:
                raise IndexError(f"a graph batch's node names graph {int(index.max())}, where it counts {step.samples}")
    if len(steps) == 1:
        return Graphs(steps[0].samples, parts[0][0]), parts[0][1]
    offsets = list(itertools.accumulate((step.samples for step in steps[:-1]), initial=0))
    sets = [
        NodeSet(
            torch.cat([sets[kind].of_node.long() + offset for (sets, _), offset in zip(parts, offsets, strict=True)]),
            joined_columns(sets[kind].nodes for sets, _ in parts),
        )
        for kind in range(len(parts[0][0]))
    ]
    return Graphs(sum(step.samples for step in steps), sets), joined_columns(rows for _, rows in parts)


class Hash(Protocol):
    """What fingerprints held steps (a :class:`~mnistperf.diagnosis.measure.fingerprint.Fingerprinter`)."""

    def fingerprints(self, steps: Sequence[Rows], loader: int = 0) -> torch.Tensor:
        """Fingerprints [samples] of steps of one layout, one after the other (``loader``: whose they are)."""
        ...


class HeldSteps:
    """Steps' sample rows, each of ``loaders`` apart, that ``hash`` fingerprints every so many samples or MB."""

    def __init__(self, hash: Hash, loaders: int = 1):
        self.hash = hash
        self._held: list[list[Rows]] = [[] for _ in range(loaders)]  # per loader: steps' rows (copies, or as read)
        self._samples = self._bytes = 0

    def hold(self, loader: int, step: Rows) -> bool:
        """Keep a step's rows; whether the held steps are now due to be hashed (:meth:`flush`)."""
        size = sum(t.nbytes for t in step.tensors)  # before the rows are kept: a tensor without a size is not held
        self._held[loader].append(step)
        self._samples += step.samples
        self._bytes += size
        return self._samples >= HASH_SAMPLES or self._bytes >= HASH_BYTES

    def flush(self) -> list[list[torch.Tensor]]:
        """Per loader, the fingerprints of its held steps' samples in order; nothing is held afterwards."""
        everything, self._held = self._held, [[] for _ in self._held]
        self._samples = self._bytes = 0
        return [self._hashed(held, loader) for loader, held in enumerate(everything)]

    def _hashed(self, held: list[Rows], loader: int) -> list[torch.Tensor]:
        """Each run of steps of one layout (graph or bag steps apart; tensors' types, shapes past the first), hashed."""
        layout = lambda step: (step.graph_nodes, step.bags, [(t.dtype, t.shape[1:]) for t in step.tensors])  # noqa: E731
        return [self.hash.fingerprints(list(run), loader) for _, run in itertools.groupby(held, key=layout)]
