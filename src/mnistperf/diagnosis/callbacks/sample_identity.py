"""What identifies a batch's samples for SampleAudit: the user's fingerprint, an index field, or their rows' content.

Whether it keeps a step's rows as read, not copied, until hashed, and the check that they still do: :class:`KeptRows`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeGuard

import torch
from lightning.pytorch import Trainer

from mnistperf.diagnosis.callbacks.project_reader import transfers_batches
from mnistperf.diagnosis.measure.batches import READINGS, collated_anew
from mnistperf.diagnosis.measure.fingerprint import Fingerprinter, text_digests, to_device
from mnistperf.diagnosis.measure.graph_batches import Graphs
from mnistperf.diagnosis.measure.held_steps import Rows, bag_rows, graph_rows
from mnistperf.diagnosis.measure.packed_sequences import as_graphs
from mnistperf.diagnosis.measure.sparse_rows import sparse_kinds
from mnistperf.diagnosis.record import audit_text
from mnistperf.errors import MnistperfError

Watched = tuple[list[torch.Tensor], list[int]]  # a held step's rows as read, and their versions then


class SampleAuditError(MnistperfError):
    """An epoch saw a sample twice or missed one, with ``strict`` set; or a batch has no samples to identify."""


def integers(value: Any) -> TypeGuard[torch.Tensor]:
    """Whether ``value`` is a tensor of integers (or bools): what samples can be told apart by."""
    return isinstance(value, torch.Tensor) and not (value.is_floating_point() or value.is_complex())


def one_a_sample(value: Any, dims: int = 1) -> TypeGuard[torch.Tensor]:
    """Whether ``value`` is integers, one a sample of ``dims`` leading dimensions: [N] or [N, 1], [k, B] for two."""
    return integers(value) and (value.ndim <= dims or value.ndim == dims + 1 and value.shape[-1] == 1)


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
            given = self.fingerprint(batch)
            if not one_a_sample(given):
                raise SampleAuditError(audit_text.not_fingerprints(given))
            return given.reshape(-1).to(torch.int64)
        if self.sample_id is not None:
            try:
                ids = batch[self.sample_id]
            except (KeyError, IndexError, TypeError):
                ids = getattr(batch, str(self.sample_id), None)  # a namedtuple's or a dataclass's field, by its name
                if ids is None or callable(ids):  # (not a method: a tuple's index)
                    raise SampleAuditError(audit_text.missing_sample_field(self.sample_id, batch)) from None
            if not one_a_sample(ids, self.sample_dims) or ids.dtype == torch.bool:  # (a mask tells two apart at most)
                raise SampleAuditError(audit_text.not_sample_indices(self.sample_id, ids))
            return ids.reshape(-1).to(torch.int64)
        found = self.rows(batch)
        return found if isinstance(found, torch.Tensor) else self.hash.fingerprints([found])

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


class KeptRows:
    """A step's rows, copied or kept as they are, and their versions where watched.

    Copied (the loader may reuse its buffers, the step may change them in place) unless :meth:`watch` found that
    neither happens; then kept as they are, each with its version, which :meth:`check` checks.
    """

    def __init__(self) -> None:
        self.as_they_are = self.watching = False  # whether steps' rows are kept uncopied; their versions checked
        self.changes_in_place = False  # whether a step of the fit changed its batch in place (then all are copied)
        self.watched: list[Watched] = []  # the held steps' rows as read, each with its versions then

    @property
    def deciding(self) -> bool:
        """Whether a step trained whose check decides if later steps' rows are kept as they are (the epoch's first)."""
        return bool(self.watched) and not self.as_they_are

    def trained(self, watched: Watched | None) -> None:
        """A held step trained: its rows, where watched, are checked from now on (:meth:`check`)."""
        if watched is not None:
            self.watched.append(watched)

    def forget(self) -> None:
        """A new epoch: no step's rows watched."""
        self.watched = []

    def watch(self, trainer: Trainer) -> None:
        """Keep a step's rows as they are, not copied, where nothing hands out the same tensors again.

        That holds where every training loader collates each batch anew and neither the module nor the DataModule
        transfers batches its own way; each epoch's first step is still copied, and where a step of the fit changed its
        batch in place, or the rows came from a loader's worker in shared memory, or reading the loaders fails, every
        step is.
        """
        self.as_they_are = self.watching = False  # (reading the loaders may fail: then so it stays)
        owners = (trainer.lightning_module, getattr(trainer, "datamodule", None))
        transfers = any(transfers_batches(owner) for owner in owners)
        self.watching = collated_anew(trainer.train_dataloader) and not transfers and not self.changes_in_place

    def keep(self, found: Rows) -> tuple[Rows, Watched | None]:
        """A step's rows as held until it trained (copied, or as they are), and what :meth:`check` reads of them."""
        rows = found.tensors
        watched = (rows, [t._version for t in rows]) if self.watching else None
        if self.as_they_are:
            return found, watched
        return found._replace(tensors=[t.detach().clone() if t.requires_grad else t.clone() for t in rows]), watched

    def check(self) -> bool:
        """Whether the watched steps' rows still hold what they trained on, as their versions tell (torch's writes).

        The epoch's first step, copied, decides at the next step's start (after every hook of its own) whether the
        next ones are kept as they are: not where it changed its batch in place. False where a step kept as it was
        changed since its start.
        """
        watched, self.watched = self.watched, []
        if not watched:  # no step trained since the last check: nothing to decide on
            return True
        if [t._version for rows, _ in watched for t in rows] == [v for _, versions in watched for v in versions]:
            if not self.as_they_are:  # the epoch's first step: not a loader worker's batch, whose shared memory
                # keeps a file descriptor open for each tensor held (checked on this step alone: it is not cheap)
                shared = any(t.is_cpu and t.untyped_storage().is_shared() for rows, _ in watched for t in rows)
                self.as_they_are = self.watching = self.watching and not shared
            return True
        kept = self.as_they_are
        self.as_they_are = self.watching = False
        self.changes_in_place = True
        return not kept
