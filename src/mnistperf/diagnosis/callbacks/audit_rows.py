"""The row of an epoch SampleAudit gathered: why it is not audited, or its counts, limits and the loaders' causes."""

from __future__ import annotations

from typing import Any, cast

from lightning.pytorch import Trainer

from mnistperf.diagnosis.callbacks.project_reader import TrainerAttributes, limited_epoch
from mnistperf.diagnosis.guard import Reporter
from mnistperf.diagnosis.measure.sample_counts import (
    Order,
    Share,
    audited_row,
    dataset_sizes,
    loader_causes,
    without_copies,
)
from mnistperf.diagnosis.record import audit_text


def audit_epoch_row(
    trainer: Trainer,
    shares: list[Share],
    loaders: list[Any],
    names: list[str],
    problems: Reporter,
    failed_here: str | None,
    progress: tuple[int | None, int | None, list[int], list[int]],
    dataset_size: int | None,
    sample_dims: int,
    declined: bool = False,
    copies_drawn_once: bool = False,
) -> dict[str, Any]:
    """The epoch's row from every rank's ``shares`` of it, each training loader (``names``) counted apart.

    ``failed_here``: why this rank could not fingerprint the epoch; ``progress``: the epoch's steps begun, its first
    step's index, each loader's fingerprints a checkpoint carried and their sightings replayed after earlier resumes
    (:func:`.replayed`); ``dataset_size`` and ``sample_dims`` as
    SampleAudit's; ``declined``: the module declined the epoch's last step begun; ``copies_drawn_once``: samples are
    identified by content, and each index drawn once, so duplicates no design explains are copies in the data
    (:func:`.without_copies`). Each read that fails leaves its part out.
    """
    epoch = trainer.current_epoch + 1
    failed = [rank for rank, share in enumerate(shares) if share.order == Order.FAILED]
    if failed:  # why: this rank's own problem, else the ranks that had one
        why = failed_here or audit_text.unfingerprinted(failed, warned=True)
        return {"epoch": epoch, "audited": False, "why": why.removeprefix("SampleAudit: ")}
    begun, first, carried, earlier = progress
    sizes: list[int | None] = [None] * len(names)
    with problems.guard("reading the training set's size"):
        sizes = dataset_sizes(loaders, sample_dims)
    row = audited_row(epoch, shares, sizes, dataset_size, names, earlier)
    with problems.guard("reading whether the trainer limits the epoch's batches"):
        limited = limited_epoch(trainer, begun, declined)
        if limited is None and first and not any(carried):  # resumed inside it, none of its start carried
            limited = audit_text.resumed_unseen(first)
        if limited is None and not begun and not any(carried):  # no step began (nor a checkpoint carried one)
            limited = audit_text.NO_STEP
        if limited is not None:  # the loader's other batches are not due this epoch: none of them is missing
            row.update(missing=None, limited=limited)
            if cast(TrainerAttributes, trainer).overfit_batches:  # Lightning turns its shuffling off
                row["same_order_ranks"] = None
    if copies_drawn_once:  # before the loaders' causes, which read the missing
        without_copies(row)
    with problems.guard("reading what the training loaders' own options explain of the counts"):
        row.update(loader_causes(row, loaders, names, begun or 0, trainer.world_size))
    return row
