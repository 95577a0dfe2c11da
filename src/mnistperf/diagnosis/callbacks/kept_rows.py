"""Whether SampleAudit keeps a step's sample rows as read, not copied, and the check that they still hold them."""

from __future__ import annotations

import torch
from lightning.pytorch import Trainer

from mnistperf.diagnosis.callbacks.project_reader import transfers_batches
from mnistperf.diagnosis.measure.batches import collated_anew
from mnistperf.diagnosis.measure.held_steps import Rows

Watched = tuple[list[torch.Tensor], list[int]]  # a held step's rows as read, and their versions then


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
