"""SampleAudit's words: each epoch's audit line, what explains its duplicates and missing, why one is not audited."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from mnistperf.diagnosis.measure.sample_counts import cycled_loaders, padded_by_design, unexplained

GUESSED = (
    "what a sample is was a guess (the batch's tensors lead with different lengths, as said at the fit's start), and "
    "so are these counts: pass sample_id= or fingerprint="
)
STRICT_ON_A_GUESS = "strict=True stops no fit on counts of a guess; pass sample_id= or fingerprint= to audit them"


# Where the training sampler draws an index again in an epoch (:func:`.draws_again`): its duplicates are by design
DRAWS_AGAIN = "its sampler draws some indices again (with replacement, or listed twice), repeating some by design"


def format_audit(row: dict[str, Any], by_content: bool, fields: Sequence[str] = (), draws: bool | None = None) -> str:
    """SampleAudit's line of an epoch: its counts and what explains its duplicates where it knows, or why not audited.

    ``by_content``: samples were identified by their content, so identical ones count as duplicates; ``fields``: the
    named fields whose content a sample is; ``draws``: whether the sampler draws a sample again by design (None: not
    known).
    """
    if "why" in row:
        return f"sample audit, epoch {row['epoch']}: not audited ({row['why']})"
    ranks, size, duplicates = len(row["per_rank"]), row["dataset_size"], row["duplicates"]
    where = f" ({' + '.join(f'{n:,}' for n in row['per_rank'])} on {ranks} ranks)" if ranks > 1 else ""
    seen = f"{plural(row['seen'], 'sample')} seen"
    line = f"sample audit, epoch {row['epoch']}: {seen}{where}, {row['distinct']:,} distinct"
    if size is None:
        line += f": {plural(duplicates, 'duplicate')} (dataset size unknown: pass dataset_size to count missing)"
    else:
        missing = "missing not counted" if row["missing"] is None else f"{row['missing']:,} missing"
        line += f" of {size:,}: {plural(duplicates, 'duplicate')}, {missing}"
    if row.get("limited"):
        line += f" ({row['limited']})"
    if row.get("guessed"):
        line += f"; {GUESSED}"
    if row.get("dropped_last"):
        order = "each rank's share of the epoch's order" if ranks > 1 else "each epoch's order"
        line += f"; drop_last=True leaves {row['dropped_last']:,} samples out, the last of {order}, by design"
    if row.get("batch_sampler"):
        line += (
            f"; the loader's batch_sampler ({row['batch_sampler']}) is the project's own and drew no index of these "
            "(does it leave a short last batch or bucket out?)"
        )
    if size is not None and row["distinct"] > size:
        line += (
            f"; {row['distinct'] - size:,} more distinct than the dataset holds (a random augmentation before the "
            "step, several samples made of each item, or a dataset_size that does not count samples?)"
        )
    loaders = row.get("loaders") or {}
    for name, counts in loaders.items():
        of = "" if counts["dataset_size"] is None else f" of {counts['dataset_size']:,}"
        missing = "" if counts["missing"] is None else f", {counts['missing']:,} missing"
        line += (
            f"; loader {name}: {counts['seen']:,} seen, {counts['distinct']:,} distinct{of}, "
            f"{plural(counts['duplicates'], 'duplicate')}{missing}"
        )
    padded = padded_by_design(row)  # a distributed sampler's padding explains them
    if padded:
        line += (
            f"; a distributed sampler pads {size:,} samples to a multiple of {ranks} ranks by repeating "
            f"{padded}, by design (a DistributedSampler(drop_last=True) of your own leaves them out instead)"
        )
    cycled = cycled_loaders(loaders)
    if cycled:
        line += (
            f"; loader{'s' if len(cycled) > 1 else ''} {', '.join(cycled)} gave more samples than "
            f"{'they hold' if len(cycled) > 1 else 'it holds'}: a shorter loader is cycled to the longest one's "
            "length (CombinedLoader's max_size_cycle mode, Lightning's default for several training loaders)"
        )
    short = row.get("stopped_short") or {}
    if short:
        line += (
            f"; loader{'s' if len(short) > 1 else ''} {', '.join(short)} left {sum(short.values()):,} samples out: the "
            "epoch ends at its shortest loader's end (CombinedLoader's min_size mode), by design"
        )
    replayed = row.get("replayed") or 0
    if replayed:
        line += (
            f"; {replayed:,} of the duplicates were seen again after the fit resumed from a checkpoint saved "
            "inside this epoch: the loader started the epoch over (a DataLoader that cannot resume mid-epoch draws "
            "the epoch's last batches afresh, its first ones again where it does not shuffle, so some samples repeat "
            "and others are left out; torchdata's StatefulDataLoader resumes where the checkpoint left it)"
        )
    streams = row.get("read_whole")
    if streams:
        line += "; " + read_whole(streams["workers"], streams["ranks"], streams["stream"])
    guessed = bool(row.get("guessed"))  # then the guess is what a cause would be said of: none is
    if unexplained(row) and not by_content and draws and not guessed:
        line += f"; {DRAWS_AGAIN}"  # samples the user identifies (by content: :func:`content_note`)
    if row["same_order_ranks"] and not guessed:
        line += (
            f"; same order as epoch {row['epoch'] - 1} on {row['same_order_ranks']} of {ranks} "
            f"rank{'s' if ranks > 1 else ''}: is the sampler (or the stream) reshuffled every epoch?"
        )
    return line


def plural(count: int, noun: str) -> str:
    """``count`` and ``noun``, in the plural but for one: "1 duplicate", "2,048 samples"."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def content_note(
    row: dict[str, Any], by_content: bool, fields: Sequence[str] = (), draws: bool | None = None
) -> str | None:
    """What duplicates mean where samples are identified by their content (said once a fit); None where none is owed.

    Arguments as :func:`format_audit`'s.
    """
    if "why" in row or not by_content or row.get("guessed") or not unexplained(row):
        return None
    sampler = {
        True: f", and {DRAWS_AGAIN}",
        None: ", and a sampler other than torch's may repeat some by design",
        False: ", and its sampler draws each index once: these are copies in the data, each of an index drawn",
    }
    return (
        "samples identified by content"
        + (f" (all of {', '.join(map(repr, fields))})" if len(fields) > 1 else "")
        + ": identical samples in the data count as duplicates"
        + (" (each copy leaving one as missing)" if row.get("missing") and draws is not False else "")
        + sampler[draws]
        + (", and a field drawn afresh each step may hide others" if len(fields) > 1 else "")
        + " (sample_id= names an index field, fingerprint= what identifies a sample)"
    )


def read_whole(workers: int, ranks: int, stream: bool) -> str:
    """Why each sample came once per reader (``workers`` on each of ``ranks``) of a dataset, and the fix.

    ``stream``: an IterableDataset, which its ``__iter__`` splits; else a map-style dataset, which a sampler splits.
    """
    if not stream:
        return (
            f"each of the {ranks} ranks reads the whole dataset, so every sample came {ranks} times: its sampler does "
            "not split it among the ranks (Lightning's use_distributed_sampler=False? give the DataLoader a "
            "DistributedSampler)"
        )
    worker = "info = torch.utils.data.get_worker_info()"
    rank = "rank, ranks = torch.distributed.get_rank(), get_world_size()"
    if ranks == 1:
        who, share = f"the loader's {workers} workers", f"index % info.num_workers == info.id, with {worker}"
    elif workers == 1:
        who, share = f"the {ranks} ranks", f"index % ranks == rank, with {rank}"
    else:
        who = f"the {ranks} ranks' {workers} workers"
        share = f"index % (ranks * info.num_workers) == rank * info.num_workers + info.id, with {rank} and {worker}"
    return (
        f"each of {who} iterates the whole IterableDataset, so every sample came {workers * ranks} times: its __iter__ "
        f"should yield only its own share (the items where {share})"
    )


# Why SampleAudit leaves an epoch not audited where a kept step's rows changed under it.
CHANGED_IN_PLACE = (
    "SampleAudit: a training step changed its batch's tensors in place, after the epoch's first step had left its own "
    "as they were, so that step's samples are known only as changed; from the next epoch on each step's rows are copied"
)


def sampled_words(widest: int, max_words: int) -> str:
    """What an epoch's line adds where it found duplicates among rows hashed at ``max_words`` of their words."""
    return (
        f"rows of up to {widest:,} words were hashed at {max_words:,} of them: samples differing only elsewhere "
        f"(sparse rows) count as duplicates; SampleAudit(max_words={widest}) reads every word"
    )


def widths_vary(widths: list[int], max_words: int) -> str:
    """SampleAudit's word where a tensor of the samples' rows came in several widths past ``max_words``."""
    shown = ", ".join(f"{width:,}" for width in widths[:4]) + (", ..." if len(widths) > 4 else "")
    return (
        f"a tensor of the samples' rows comes in several widths past max_words={max_words:,} ({shown} words: "
        "padded to each batch's longest?), and each width is hashed at positions of its own: a sample seen again in a "
        f"batch of another width is not found as a duplicate; SampleAudit(max_words={widths[-1]:,}) reads every word, "
        "or sample_id= names an index field"
    )


def unfingerprinted(ranks: list[int], warned: bool) -> str:
    """Why an epoch is not audited where ``ranks`` could not fingerprint a batch (``warned``: each said so itself)."""
    why = f"rank {', '.join(map(str, ranks))} could not fingerprint a batch"
    return f"{why}; its own warning says why" if warned else why


# Why an epoch of no step has no missing counted: an empty loader's, or one a restored loop state had done
NO_STEP = "no step of it ran (its loader gave no batch, or the checkpoint the fit resumed from had its steps done)"


def resumed_unseen(first: int) -> str:
    """Why a resumed epoch's missing are not counted: its first ``first`` batches ran before, unseen by the audit."""
    return (
        f"the fit resumed after {first:,} of the epoch's batches, from a checkpoint saved without SampleAudit, which "
        "holds no fingerprints of them"
    )


def missing_sample_field(sample_id: str | int, batch: Any) -> str:
    """SampleAudit's error where its ``sample_id`` names no field of the batch."""
    return (
        f"SampleAudit sample_id {sample_id!r}: the batch has no such field (it is a {type(batch).__name__}); "
        "name a key of a dict batch, a position of a tuple batch or an attribute of another"
    )


def not_sample_indices(sample_id: str | int, ids: Any) -> str:
    """SampleAudit's error where the field its ``sample_id`` names holds no integer tensor [N] of one index a sample."""
    held = (
        f"{ids.dtype} [{', '.join(map(str, ids.shape))}]"
        if isinstance(ids, torch.Tensor)
        else getattr(ids, "dtype", type(ids).__name__)
    )
    return (
        f"SampleAudit sample_id {sample_id!r}: holds {held}, not an integer tensor [N] of one index a sample; pass "
        "fingerprint= to identify samples another way"
    )


def not_fingerprints(found: Any) -> str:
    """SampleAudit's error where its ``fingerprint`` returned no 1-dim integer tensor."""
    what = (
        f"{found.dtype} [{', '.join(map(str, found.shape))}]"
        if isinstance(found, torch.Tensor)
        else type(found).__name__
    )
    return (
        f"SampleAudit fingerprint=: returned {what}, not an integer tensor [N] of one identity per sample of the batch"
    )


def no_sample_rows(batch: Any, sample_dims: int, meta: bool = False) -> str:
    """SampleAudit's error where no tensor of the batch has ``sample_dims`` sample dimensions (``meta``: and values)."""
    held = "values (its tensors are on the meta device)" if meta else f"{sample_dims} sample dimension(s)"
    kind = type(batch).__name__
    return f"SampleAudit: the batch ({kind}) holds no tensor with {held}; pass sample_id= or fingerprint="
