"""Sparse rows, as a bag of words or a recommender's features: each sample's nonzeros, a segment of the tensor's."""

from __future__ import annotations

import math

import torch

from mnistperf.diagnosis.measure.graph_batches import NodeSet


def sparse_kinds(rows: list[torch.Tensor]) -> tuple[list[NodeSet], list[torch.Tensor]] | None:
    """Each sparse tensor of ``rows`` as a kind of node of its samples, and the dense ones; None where none is sparse.

    A nonzero is a node of the sample its first index names, read by its other indices and its value, in coalesced
    order. Stored zeros are dropped (a block layout's blocks span several samples' rows): the layout does not tell.
    """
    if all(t.layout == torch.strided for t in rows):
        return None
    kinds = []
    for tensor in rows:
        if tensor.layout != torch.strided:
            coo = (tensor if tensor.layout == torch.sparse_coo else tensor.to_sparse_coo()).coalesce()
            indices, values = coo.indices(), coo.values()
            values = values.reshape(len(values), math.prod(values.shape[1:]))  # a hybrid tensor's dense part: a row
            stored = values.ne(0).any(1)
            indices, values = indices[:, stored], values[stored]
            kinds.append(NodeSet(indices[0], [indices[1:].T.contiguous(), values]))
    return kinds, [t for t in rows if t.layout == torch.strided]
