"""What identifies a batch's samples for SampleAudit: the user's fingerprint, an index field, or their rows' content."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from mnistperf.diagnosis.measure.batches import READINGS
from mnistperf.diagnosis.measure.fingerprint import Fingerprinter, text_digests, to_device
from mnistperf.diagnosis.measure.graph_batches import Graphs
from mnistperf.diagnosis.measure.held_steps import Rows, bag_rows, graph_rows
from mnistperf.diagnosis.measure.packed_sequences import as_graphs
from mnistperf.diagnosis.measure.sparse_rows import sparse_kinds
from mnistperf.diagnosis.record import audit_text
from mnistperf.errors import MnistperfError


class SampleAuditError(MnistperfError):
    """An epoch saw a sample twice or missed one, with ``strict`` set; or a batch has no samples to identify."""


class SampleIdentity:
    """Each sample's identity: ``fingerprint(batch)``, else the ``sample_id`` field, else the content's ``hash``."""

    def __init__(
        self,
        sample_id: str | int | None,
        fingerprint: Callable[[Any], torch.Tensor] | None,
        sample_dims: int,
        hash: Fingerprinter,
    ):
        self.sample_id, self.fingerprint, self.sample_dims, self.hash = sample_id, fingerprint, sample_dims, hash
        self.by_content = fingerprint is None and sample_id is None

    def fingerprints(self, batch: Any) -> torch.Tensor:
        """The fingerprints [N] of a batch's samples (one loader's batch), on the batch's device."""
        if self.fingerprint is not None:
            return self.fingerprint(batch).reshape(-1).to(torch.int64)
        if self.sample_id is not None:
            try:
                ids = batch[self.sample_id]
            except (KeyError, IndexError, TypeError):
                ids = getattr(batch, str(self.sample_id), None)  # a namedtuple's or a dataclass's field, by its name
                if ids is None or callable(ids):  # (not a method: a tuple's index)
                    raise SampleAuditError(audit_text.missing_sample_field(self.sample_id, batch)) from None
            if not isinstance(ids, torch.Tensor) or ids.is_floating_point() or ids.is_complex():
                raise SampleAuditError(audit_text.not_sample_indices(self.sample_id, ids))
            return ids.reshape(-1).to(torch.int64)
        found = self.rows(batch)
        return found if isinstance(found, torch.Tensor) else self.hash.held([found])

    def rows(self, batch: Any) -> Rows | torch.Tensor:
        """The batch's rows that hold its samples and how many; or, made at once, its samples' fingerprints.

        As :func:`~mnistperf.diagnosis.measure.samples.read` finds them: a graph's rows are a segment of its nodes'
        (each kind of node's graph index and node rows first), and a batch of one item a sample, or with a nested
        tensor's samples of their own lengths, item by item.
        """
        reading = READINGS.read(batch, self.sample_dims)
        if reading.graphs is not None:
            return graph_rows(reading.graphs, reading.rows)
        if reading.packed is not None:  # its sequences as graphs of their steps, their lengths a row of their own
            sequences, lengths = as_graphs(reading.packed)
            return graph_rows(sequences, [lengths, *reading.rows])
        if reading.items is not None:
            return self.hash.items(reading.items, reading.texts)
        if reading.samples == 0 and not reading.rows:  # an empty batch (a filtering collate's): no sample
            return torch.empty(0, dtype=torch.int64)
        rows, samples = [t for t in reading.rows if not t.is_meta], reading.samples or 0  # meta: no values to hash
        if reading.bags is None and (not rows or reading.samples is None):
            raise SampleAuditError(audit_text.no_sample_rows(batch, self.sample_dims, meta=bool(reading.rows)))
        if reading.texts:  # strings hold no tensor: their digests are rows too, or texts of one label are one sample
            digests = text_digests(reading.texts)
            rows = [*rows, to_device(digests, rows[0].device) if rows else digests]
        if reading.bags is not None:  # its bags' rows made rows of their own where hashed (bags are on a CPU)
            return bag_rows(reading.bags, rows)
        if self.sample_dims == 1 and any(t.is_nested for t in rows):  # rows that cannot be stacked with others
            return self.hash.items([list(sample) for sample in zip(*(t.unbind() for t in rows), strict=True)])
        sparse = sparse_kinds(rows) if self.sample_dims == 1 else None
        if sparse is not None:  # each sample's nonzeros, as a graph's nodes
            return graph_rows(Graphs(samples, sparse[0]), sparse[1])
        return Rows(rows if self.sample_dims == 1 else [t.reshape(samples, -1) for t in rows], samples)
