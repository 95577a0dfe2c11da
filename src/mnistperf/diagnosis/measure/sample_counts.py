"""SampleAudit's numbers: every rank's fingerprints of an epoch, gathered or taken back, and the epoch's counts."""

from __future__ import annotations

from collections.abc import Sequence, Sized
from enum import IntEnum
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import torch
from lightning.fabric.utilities.data import sized_len
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

from mnistperf.diagnosis.measure.batches import loader_samples
from mnistperf.diagnosis.measure.fingerprint import PADDING

if TYPE_CHECKING:
    from lightning.pytorch import Trainer


ORDER_SAMPLES = 8  # an epoch of fewer samples repeats a reshuffled order by chance too often (8 of them: 1 in 8!)


class Order(IntEnum):
    """What a rank sends of its epoch's order: the same as its last epoch's, another, not known, or no epoch at all."""

    FAILED = -2  # the rank could not fingerprint the epoch (it is not audited)
    UNKNOWN = -1  # no last epoch to compare with (the first, or one resumed), or too few samples to tell
    CHANGED = 0
    SAME = 1


class Share(NamedTuple):
    """One rank's fingerprints of an epoch as gathered: per training loader, and how many came from a checkpoint."""

    parts: tuple[torch.Tensor, ...]  # the fingerprints of each loader's samples, in the order seen
    order: Order  # whether the rank repeated its last epoch's order
    carried: list[int]  # per loader, how many of its first fingerprints were seen before a resume


def gathered_shares(trainer: Trainer, parts: list[torch.Tensor], order: Order, carried: list[int]) -> list[Share]:
    """Every rank's share, in rank order: two gathers, the counts, then the fingerprints padded to the longest."""
    world, count, device = trainer.world_size, len(parts), parts[0].device
    if world == 1:  # the one rank's own share: no tensor to send, no collective
        return [Share(tuple(parts), order, list(carried))]
    local = torch.cat(parts)
    meta = torch.tensor([int(order), *(len(p) for p in parts), *carried], dtype=torch.int64, device=device)
    metas = trainer.strategy.all_gather(meta).reshape(world, -1).tolist()
    lengths = [sum(m[1 : 1 + count]) for m in metas]
    longest = max(lengths)
    padded = torch.nn.functional.pad(local, (0, longest - local.numel()), value=PADDING)
    everyone = trainer.strategy.all_gather(padded).reshape(world, -1) if longest else padded.reshape(world, 0)
    return [
        Share(everyone[rank, :length].split(m[1 : 1 + count]), Order(m[0]), m[1 + count :])
        for rank, (m, length) in enumerate(zip(metas, lengths, strict=True))
    ]


def restored_parts(restored: dict[str, Any], loaders: int, world: int, rank: int) -> list[torch.Tensor]:
    """This rank's fingerprints per loader from a checkpoint's (every rank's on rank 0, where the ranks changed)."""
    shares, counts = restored["fingerprints"], restored.get("loaders")
    if counts is None or any(len(c) != loaders for c in counts):  # the fit's loaders are not the checkpoint's: a pool
        counts = [[len(share)] + [0] * (loaders - 1) for share in shares]
    parts = [share.split(c) for share, c in zip(shares, counts, strict=True)]
    if len(shares) == world:
        return list(parts[rank])
    if rank == 0:
        return [torch.cat([each[loader] for each in parts]) for loader in range(loaders)]
    return [torch.empty(0, dtype=torch.int64) for _ in range(loaders)]


def dataset_sizes(loaders: list[Any], sample_dims: int) -> list[int | None]:
    """Each loader's whole dataset's length (whatever the ranks) where it is a map-style DataLoader batching items.

    A ``SubsetRandomSampler`` draws a split of its dataset (a training share beside a validation one): its indices are
    the dataset an epoch covers, over the ranks too.
    """
    return [dataset_size(loader) if sample_dims == 1 else None for loader in loaders]


def dataset_size(loader: Any) -> int | None:
    """A map-style DataLoader's dataset's length (its sampler's indices', a subset's), where it batches items."""
    if not isinstance(loader, DataLoader) or isinstance(loader.dataset, IterableDataset):
        return None
    if loader.batch_sampler is None and not isinstance(loader.sampler, BatchSampler):
        return None
    sampler = items_sampler(loader)
    if isinstance(sampler, SubsetRandomSampler):
        return len(sampler.indices)
    return len(loader.dataset) if isinstance(loader.dataset, Sized) else None


# Packages whose batch samplers draw as torch's BatchSampler does (torchdata's StatefulDataLoader makes its own)
LIBRARY_PACKAGES = ("torch.", "torchdata.", "lightning.", "pytorch_lightning.")


def own_batch_sampler(loader: Any) -> str | None:
    """The class name of a DataLoader's batch sampler of the user's own (a subclass of BatchSampler too)."""
    batches = getattr(loader, "batch_sampler", None)
    if batches is None or type(batches).__module__.startswith(LIBRARY_PACKAGES):
        return None
    return type(batches).__name__


def items_sampler(loader: Any) -> Any:
    """The sampler that draws a loader's items: its batch sampler's (None: it draws itself), or its own, unwrapped.

    Under DDP, Lightning splits the loader's own sampler among the ranks in a ``DistributedSampler`` of its own: the
    one it splits is read (whether it draws with replacement, a subset's indices).
    """
    batches = getattr(loader, "batch_sampler", None)
    sampler = getattr(batches, "sampler", None) if batches is not None else getattr(loader, "sampler", None)
    sampler = sampler.sampler if isinstance(sampler, BatchSampler) else sampler
    return getattr(sampler.dataset, "_sampler", sampler) if isinstance(sampler, DistributedSampler) else sampler


def draws_again(loaders: list[Any]) -> bool | None:
    """Whether the training loaders' samplers may draw a sample again in an epoch (None: any is unknown, or streams)."""
    found = set()
    for loader in loaders:
        sampler = items_sampler(loader)
        if not isinstance(loader, DataLoader) or isinstance(loader.dataset, IterableDataset):
            return None
        if own_batch_sampler(loader) is not None:  # batches of the user's own making may repeat what it draws
            return None
        if isinstance(sampler, (RandomSampler, WeightedRandomSampler)):
            found.add(bool(sampler.replacement))
        elif isinstance(sampler, (SequentialSampler, SubsetRandomSampler, DistributedSampler)):
            found.add(False)
        elif isinstance(sampler, (list, tuple, range)):  # the indices themselves: listed twice or not
            found.add(len(set(sampler)) < len(sampler))
        else:
            return None
    return True in found if found else None


def sampler_of_batches(loader: Any) -> BatchSampler | None:
    """A loader's sampler of whole batches of indices, each fetched in one call (``batch_size=None``); else None."""
    sampler = getattr(loader, "sampler", None)
    return sampler if isinstance(sampler, BatchSampler) and getattr(loader, "batch_size", 0) is None else None


def dropped_last(loader: Any, ranks: int) -> int:
    """The samples a loader's ``drop_last`` leaves out of an epoch over ``ranks`` ranks (0: none or unknown)."""
    sampler = sampler_of_batches(loader)
    if sampler is not None:  # its own drop_last
        return ranks * (len(sampler.sampler) % sampler.batch_size) if sampler.drop_last else 0  # type: ignore[arg-type]
    given = loader_samples(loader) if getattr(loader, "drop_last", False) else None
    return 0 if given is None else ranks * (len(loader.sampler) - given)


def stopped_short(loaders: list[Any], names: list[str], steps: int, row: dict[str, Any]) -> dict[str, int]:
    """Per training loader of more batches than the epoch's ``steps``, its missing samples, where it gave no duplicates.

    The epoch ended at its shortest loader's end (CombinedLoader's ``min_size``): the longer ones' rest, out by design.
    """
    found: dict[str, int] = {}
    if row["missing"] is None:
        return found
    for name, loader in zip(names, loaders, strict=True):
        counts = (row.get("loaders") or {}).get(name)
        if counts and counts["missing"] and not counts["duplicates"] and (sized_len(loader) or 0) > steps:  # (no len)
            found[name] = counts["missing"]
    return found


def read_whole(loader: Any, ranks: int) -> dict[str, Any] | None:
    """Who may read a DataLoader's whole dataset (workers of a stream, ranks); None where one reader does."""
    if not isinstance(loader, DataLoader):
        return None
    stream = isinstance(loader.dataset, IterableDataset)
    if not stream and isinstance(items_sampler(loader), DistributedSampler):  # (its workers split the indices)
        return None
    workers = max(1, loader.num_workers) if stream else 1
    return {"workers": workers, "ranks": ranks, "stream": stream} if workers * ranks > 1 else None


def loader_causes(row: dict[str, Any], loaders: list[Any], names: list[str], steps: int, ranks: int) -> dict[str, Any]:
    """What the training loaders' own options explain of an audited epoch's ``row`` of ``steps`` begun, by its keys."""
    found: dict[str, Any] = {}
    single = loaders[0] if len(loaders) == 1 else None  # (drop_last, readers and batch samplers: a single loader's)
    dropped = dropped_last(single, ranks)
    padding = sampler_padding(row.get("dataset_size"), ranks)  # its repeats: the last dropped, if any
    if dropped and row["missing"] in (dropped, dropped - padding):  # by design
        found["dropped_last"] = row["missing"]
    short = stopped_short(loaders, names, steps, row)
    if short:
        found["stopped_short"] = short
    readers = read_whole(single, ranks)
    if readers and row["seen"] == readers["workers"] * readers["ranks"] * row["distinct"]:  # the data is not split
        found["read_whole"] = readers
    own = own_batch_sampler(single)
    if own is not None and row["missing"]:  # where to look, not a design: strict still raises (left_out_by_design)
        found["batch_sampler"] = own
    return found


def left_out_by_design(row: dict[str, Any]) -> int:
    """The missing samples of ``row`` its loaders' options leave out by design (:func:`loader_causes`)."""
    return row.get("dropped_last", 0) + sum(row.get("stopped_short", {}).values())


def sampler_padding(size: int | None, ranks: int) -> int:
    """The samples a distributed sampler repeats to make ``size`` (None: not known, none) a multiple of ``ranks``."""
    return -(size or 0) % ranks


def padded_by_design(row: dict[str, Any]) -> int:
    """The duplicates of ``row`` a distributed sampler's padding explains: all of them where they are its repeats."""
    padding = sampler_padding(row.get("dataset_size"), len(row.get("per_rank") or [1]))
    return padding if row.get("duplicates") == padding else 0


def unexplained(row: dict[str, Any]) -> int:
    """The duplicates of an audited epoch's ``row`` that no design explains: padding, cycling, a resume, a stream."""
    duplicates, loaders = row["duplicates"], row.get("loaders") or {}
    if row.get("read_whole"):
        return 0
    cycled = sum(cycled_loaders(loaders).values())
    return max(duplicates - padded_by_design(row) - cycled - (row.get("replayed") or 0), 0)


def cycled_loaders(loaders: dict[str, dict[str, Any]]) -> dict[str, int]:
    """Per loader that gave more samples than it holds, repeating some (cycled to a longer one's length): how many."""
    return {
        name: c["seen"] - c["dataset_size"]
        for name, c in loaders.items()
        if c["dataset_size"] is not None and c["seen"] > c["dataset_size"] and c["duplicates"]
    }


def without_copies(row: dict[str, Any]) -> None:
    """Count no missing for the copies in the data among an audited epoch's duplicates, in ``row`` and its loaders'.

    Where each index is drawn once, duplicates no design explains are copies in the data, each of an index drawn: none
    took a missing sample's place.
    """
    if row.get("missing") is not None:
        row["missing"] = max(row["missing"] - unexplained(row), 0)
    cycled = cycled_loaders(row.get("loaders") or {})
    for name, counts in (row.get("loaders") or {}).items():
        if counts["missing"] is not None and not row.get("replayed"):  # (a resume's replays: not told per loader)
            counts["missing"] = max(counts["missing"] - (counts["duplicates"] - cycled.get(name, 0)), 0)


def tally(seen: int, distinct: int, size: int | None) -> dict[str, Any]:
    """Samples seen and distinct, the duplicates, and the missing of ``size`` (None: unknown, or below distinct)."""
    missing = None if size is None or distinct > size else size - distinct
    return {"seen": seen, "distinct": distinct, "duplicates": seen - distinct, "dataset_size": size, "missing": missing}


def distinct(fingerprints: torch.Tensor) -> int:
    """How many different fingerprints there are (on a CPU in NumPy, as the hash's products: fingerprint.py).

    Sorted and compared with their neighbours: a quarter of ``np.unique``'s time, which hashes them.
    """
    if not fingerprints.is_cpu:
        return torch.unique(fingerprints).numel()
    ordered = np.sort(fingerprints.numpy())
    return int(ordered.size > 0) + int(np.count_nonzero(ordered[1:] != ordered[:-1]))


def seen_before(after: torch.Tensor, before: torch.Tensor) -> int:
    """How many of the fingerprints ``after`` are among those ``before`` (on a CPU in NumPy, as :func:`distinct`)."""
    return int(np.isin(after.numpy(), before.numpy()).sum() if after.is_cpu else torch.isin(after, before).sum())


def replayed(shares: list[Share], loader: int, earlier: int = 0) -> int | None:
    """A loader's sightings after the epoch's resumes of samples seen before them, over every rank; None: none carried.

    The last resume's are read here; ``earlier``: those after the epoch's earlier resumes, as its checkpoint kept them.
    """
    if not any(share.carried[loader] for share in shares):
        return None
    before = torch.cat([share.parts[loader][: share.carried[loader]] for share in shares])
    after = torch.cat([share.parts[loader][share.carried[loader] :] for share in shares])
    return earlier + seen_before(after, before)


def restored_replays(restored: dict[str, Any], loaders: int) -> list[int]:
    """Per loader, the sightings a checkpoint's epoch replayed after its own resumes (:func:`replayed`).

    Pooled as :func:`restored_parts` pools the fingerprints, where the loaders changed.
    """
    found = list(restored.get("replayed") or [0] * loaders)
    return found if len(found) == loaders else [sum(found)] + [0] * (loaders - 1)


def loader_counts(shares: list[Share], loader: int, size: int | None, earlier: int = 0) -> dict[str, Any]:
    """One loader's :func:`tally` over every rank, and its :func:`replayed` sightings (``earlier``: as kept)."""
    everything = torch.cat([share.parts[loader] for share in shares])
    return {**tally(everything.numel(), distinct(everything), size), "replayed": replayed(shares, loader, earlier)}


def audited_row(
    epoch: int,
    shares: list[Share],
    sizes: list[int | None],
    size: int | None,
    names: list[str],
    earlier: Sequence[int] = (),
) -> dict[str, Any]:
    """An audited epoch's counts over every loader (told apart), and each loader's by ``names`` where there are several.

    ``sizes``: each loader's dataset's length where known; ``size``: the whole training set's, by default their sum;
    ``earlier``: each loader's sightings replayed after the epoch's resumes before its last (:func:`replayed`).
    """
    each = [loader_counts(shares, at, known, earlier[at] if earlier else 0) for at, known in enumerate(sizes)]
    if size is None and None not in sizes:
        size = sum(c["dataset_size"] for c in each)
    orders = [share.order for share in shares]
    replayed = [c["replayed"] for c in each if c["replayed"] is not None]
    row = {
        "epoch": epoch,
        "audited": True,
        **tally(sum(c["seen"] for c in each), sum(c["distinct"] for c in each), size),
        "per_rank": [sum(int(part.numel()) for part in share.parts) for share in shares],
        "same_order_ranks": None if Order.UNKNOWN in orders else orders.count(Order.SAME),  # repeated their last order
        "replayed": sum(replayed) if replayed else None,
    }
    if len(names) > 1:
        row["loaders"] = {
            name: {k: v for k, v in c.items() if k != "replayed"} for name, c in zip(names, each, strict=True)
        }
    return row
