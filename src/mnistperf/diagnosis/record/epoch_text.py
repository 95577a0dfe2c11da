"""What a fit prints as it runs: each epoch's line, the audit's, the callbacks' words on its batches, its files."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mnistperf.close_names import did_you_mean
from mnistperf.diagnosis.figures import EVAL_S, SAMPLES_PER_S, TRAIN_S
from mnistperf.diagnosis.measure import flops
from mnistperf.diagnosis.measure.batches import FirstBatch
from mnistperf.diagnosis.measure.drawn_steps import EVERY
from mnistperf.diagnosis.measure.flops import Peak
from mnistperf.diagnosis.measure.samples import Counted, Rule
from mnistperf.diagnosis.record.units import seconds, throughput


def loader_samples_text(samples: dict[str, int | None] | None) -> str:
    """An epoch's samples per training loader as its line says them: each loader's, or how many each where alike."""
    if not samples or None in samples.values():
        return ""
    if len(set(samples.values())) == 1:
        return f" ({len(samples)} loaders of {next(iter(samples.values())):,} samples each)"
    return " (" + " + ".join(f"{name} {count:,}" for name, count in samples.items()) + " samples)"


def format_epoch(row: dict[str, Any], bar_epoch: int | None = None) -> str:
    """EpochTimer's line of an epoch: its times, throughput, verdict and the figure that decided it.

    ``bar_epoch``: what a progress bar calls the epoch, where it counts otherwise (``epoch 1 (bar: Epoch 0)``).
    """
    bar = "" if bar_epoch is None else f" (bar: Epoch {bar_epoch})"
    largest = max(row[TRAIN_S], row[EVAL_S])
    part = row.get("partial")
    train = seconds(row[TRAIN_S], largest) + (f" ({part['steps']:,} of {part['batches']:,} batches)" if part else "")
    return (
        f"epoch {row['epoch']}{bar}: train {train}, eval {seconds(row[EVAL_S], largest)}, "
        f"{throughput(row[SAMPLES_PER_S])}{loader_samples_text(row.get('loader_samples'))}, {row['verdict']} "
        f"({row['verdict_figure']}){format_counts(row.get('sample_counts'))}"
    )


def busy_unmeasured(reason: str) -> str:
    """Why the fit has no busy share, said as it starts."""
    return f"busy share not measured: {reason}."


GIVE_FLOPS = "EpochTimer(flops_per_batch=...) gives the step's FLOPs"
COMPILED_UNCOUNTED = f"the module runs through torch.compile, whose graphs a FLOP counter would change; {GIVE_FLOPS}"


def peak_said(peak: Peak | None) -> str:
    """A device's peak as the summary names it, or why there is none."""
    if peak is None:
        return "no peak was looked up"
    if peak.name is None:
        return f"no peak is known for a {peak.device_type} device"
    if peak.flops_per_s is None:
        return f"no {peak.fmt} peak is known for {peak.name} (Lightning's table, or {flops.__name__}.OWN_PEAKS)"
    return f"{peak.name}'s {peak.fmt} peak ({peak.flops_per_s / 1e12:,.0f} TFLOP/s)"


def too_few_to_count(steps_left: float, needed: float) -> str:
    """Why a fit of ``steps_left`` training steps has its FLOPs not counted: the counter needs ``needed``."""
    return (
        f"the fit's {steps_left:,.0f} training steps are too few for the FLOP counter (about "
        f"{flops.COUNT_COST_STEPS} steps' time) to cost under {flops.COUNT_SHARE:.1%} of them "
        f"(it needs {needed:,.0f}); {GIVE_FLOPS}"
    )


def unsampled(first: int | None, last: int | None, steps: int) -> str:
    """Why an epoch that trained steps ``first``..``last`` (None: none) has no sample of ``steps`` training steps."""
    if first is None or last is None:
        trained = "no step"
    else:
        trained = f"step {first + 1} only" if first == last else f"steps {first + 1}-{last + 1} only"
    if steps == 1:
        sampled_steps = f"step 2 of an epoch, then one in each {EVERY} after it"
    else:
        sampled_steps = (
            f"steps {steps + 1}-{2 * steps} of an epoch (one optimizer step: accumulate_grad_batches={steps}), "
            f"then one optimizer step's in each {EVERY} after it"
        )
    return f"the epoch trained {trained}, and the split times {sampled_steps}"


def unsplit(reason: str) -> str:
    """Why train time has no forward, backward and optimizer split, said once a fit."""
    return f"train time is not split into forward, backward and optimizer: {reason}."


# What each count beside the timer's is, in an epoch's line.
COUNTED_BY = {"logged": "self.log's batch sizes", "audit": "SampleAudit", "loader": "the loader's length"}


def format_counts(counts: dict[str, int] | None) -> str:
    """Where an epoch's sample counts disagree, the clause that says so with each count; else nothing.

    ``counts``: the epoch's ``counted`` beside the others (:data:`COUNTED_BY`), and a first batch's ``batch`` beside
    Lightning's reading of it (``lightning``), as far as each disagrees.
    """
    if not counts:
        return ""
    said = []
    known = [(label, counts[name]) for name, label in COUNTED_BY.items() if name in counts]
    others = [f"{label} {count:,}" for label, count in known if count != counts["counted"]]
    agreeing = [label for label, count in known if count == counts["counted"]]
    if others:
        agree = f" ({' and '.join(agreeing)} {'agree' if len(agreeing) > 1 else 'agrees'})" if agreeing else ""
        said.append(f"{counts['counted']:,} counted{agree}, {', '.join(others)}")
    if "lightning" in counts:
        are = "is" if counts["batch"] == 1 else "are"
        said.append(f"Lightning reads {counts['lightning']:,} a batch where {counts['batch']:,} {are} counted")
    return f"; samples disagree: {'; '.join(said)}"


def format_audit(row: dict[str, Any], by_content: bool, fields: Sequence[str] = (), draws: bool | None = None) -> str:
    """SampleAudit's line of an epoch: its counts and what explains its duplicates where it knows, or why not audited.

    ``by_content``: samples were identified by their content, so identical ones count as duplicates; ``fields``: the
    named fields whose content a sample is; ``draws``: whether the sampler draws a sample again by design (None: not
    known).
    """
    if "why" in row:
        return f"sample audit, epoch {row['epoch']}: not audited ({row['why']})"
    ranks, size, duplicates = len(row["per_rank"]), row["dataset_size"], row["duplicates"]
    where = f" ({' + '.join(map(str, row['per_rank']))} on {ranks} ranks)" if ranks > 1 else ""
    seen = f"{row['seen']:,} sample{'' if row['seen'] == 1 else 's'} seen"
    line = f"sample audit, epoch {row['epoch']}: {seen}{where}, {row['distinct']:,} distinct"
    if size is None:
        line += f": {duplicates:,} duplicates (dataset size unknown: pass dataset_size to count missing)"
    else:
        missing = "missing not counted" if row["missing"] is None else f"{row['missing']:,} missing"
        line += f" of {size:,}: {duplicates:,} duplicates, {missing}"
    if row.get("limited"):
        line += f" ({row['limited']})"
    if row.get("dropped_last"):
        line += f"; drop_last=True leaves the last {row['dropped_last']:,} samples of each epoch's order out, by design"
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
            f"{counts['duplicates']:,} duplicates{missing}"
        )
    padding = -size % ranks if size else 0
    padded = padding if duplicates == padding else 0  # a distributed sampler's padding explains them
    if padded:
        line += (
            f"; a distributed sampler pads {size:,} samples to a multiple of {ranks} ranks by repeating "
            f"{padding} (drop_last avoids it)"
        )
    cycled = {
        name: c["seen"] - c["dataset_size"]
        for name, c in loaders.items()
        if c["dataset_size"] is not None and c["seen"] > c["dataset_size"] and c["duplicates"]
    }
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
    explained = duplicates if streams else padded + sum(cycled.values()) + replayed
    if duplicates > explained and by_content:
        sampler = {
            True: ", and its sampler draws with replacement, repeating some by design",
            None: ", and a sampler that draws at random may repeat some by design",
            False: "",
        }
        line += (
            "; samples identified by content"
            + (f" (all of {', '.join(map(repr, fields))})" if len(fields) > 1 else "")
            + ": identical samples in the data count as duplicates"
            + (" (each copy leaving one as missing)" if row.get("missing") else "")
            + sampler[draws]
            + (", and a field drawn afresh each step hides a repeat" if len(fields) > 1 else "")
            + " (sample_id= names an index field, fingerprint= what identifies a sample)"
        )
    if row["same_order_ranks"]:
        line += (
            f"; same order as epoch {row['epoch'] - 1} on {row['same_order_ranks']} of {ranks} "
            f"rank{'s' if ranks > 1 else ''}: is the sampler (or the stream) reshuffled every epoch?"
        )
    return line


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


def missing_sample_field(sample_id: str | int, batch: Any) -> str:
    """SampleAudit's error where its ``sample_id`` names no field of the batch."""
    return (
        f"SampleAudit sample_id {sample_id!r}: the batch has no such field (it is a {type(batch).__name__}); "
        "name a key of a dict batch or a position of a tuple batch"
    )


def not_sample_indices(sample_id: str | int, ids: Any) -> str:
    """SampleAudit's error where the field its ``sample_id`` names holds no integer tensor."""
    return (
        f"SampleAudit sample_id {sample_id!r}: holds {getattr(ids, 'dtype', type(ids).__name__)}, "
        "not an integer tensor of sample indices; pass fingerprint= to identify samples another way"
    )


def no_sample_rows(batch: Any, sample_dims: int) -> str:
    """SampleAudit's error where no tensor of the batch has ``sample_dims`` sample dimensions."""
    return (
        f"SampleAudit: the batch ({type(batch).__name__}) holds no tensor with {sample_dims} sample dimension(s); "
        "pass sample_id= or fingerprint="
    )


# How each callback reads a batch: where the loaders' parts are not at their keys, and where a sample is a guess.
TIMER_AS_ONE = "its samples are counted as one loader's."
AUDIT_AS_ONE = "its samples are audited as one loader's"
OWN_COUNT = "pass EpochTimer(samples_in_batch=...) or define samples_in_batch(self, batch) -> int on {module}"
TIMER_GUESS = "{count} a batch {are} counted ({how}); " + OWN_COUNT + " to count what a sample is."
AUDIT_GUESS = "{count} a batch {are} audited ({how}); pass sample_id= or fingerprint= to name what a sample is"


COUNTING = {  # what a line says counted a batch's samples, by the reader's rule (``of`` its kind or dimensions)
    Rule.FIRST_LENGTH: "the first tensor's length",
    Rule.ZERO_DIM: "a batch of 0-dim tensors",
    Rule.NO_TENSOR: "no tensor with {of} sample dimensions",
    Rule.LEADING: "the first tensor's {of} leading dimensions",
    Rule.GRAPHS: "the graphs of its {of}",
    Rule.PACKED: "the sequences of its {of}",
    Rule.STATED: "its batch_size ({of})",
    Rule.RECORDS: "its {of}'s items",
    Rule.SEQUENCES: "the items of its {of}'s sequences",
    Rule.BAGS: "the bags its tensor {of}'s offsets mark",
}


def counted_by(counted: Counted) -> str:
    """What counted a batch's samples, in words."""
    return COUNTING[counted.rule].format(of=counted.of)


def first_batch_lines(first: FirstBatch | None, as_one: str, guess: str, module: str) -> list[str]:
    """What a callback says of the fit's first batch, reading it as ``as_one`` and ``guess`` say.

    ``first``: None before that batch, and once it was said; ``module``: the LightningModule's class.
    """
    lines: list[str] = []
    if first is None:
        return lines
    if first.regrouped is not None:
        lines.append(
            f"a training batch ({first.regrouped}) does not hold the batches of the training loaders "
            f"({', '.join(first.loaders)}) at their keys (a hook of the module reshaped it?): {as_one}"
        )
    for name, kind, reading, first_key in first.uneven:
        where = f" of loader {name}" if name else ""  # named where there are several
        how = counted_by(reading.counted_by)
        if reading.counted_by.rule is Rule.FIRST_LENGTH and first_key is not None:
            how += f": {first_key!r}"
        one = reading.samples == 1
        count, are = f"{reading.samples} sample{'' if one else 's'}", "is" if one else "are"
        guessed = guess.format(samples=reading.samples, count=count, are=are, how=how, module=module)
        lengths = ", ".join(map(str, reading.lengths))
        said = f"the tensors of a training batch{where} ({kind}) lead with different lengths ({lengths})"
        if reading.graphs is not None:  # a batch of one graph, its node count beside it
            said = f"a training batch{where} ({kind}) holds one graph of {reading.lengths[1]:,} nodes"
        lines.append(f"{said}: {guessed}")
    return lines


def uncounted(kind: str, module: str) -> str:
    """The timer's word where no tensor of a ``kind`` batch gives its samples."""
    return (
        f"no tensor in a training batch ({kind}) gives its samples, so samples/s is not measured; "
        f"{OWN_COUNT.format(module=module)}."
    )


def unlogged_monitor(monitor: str, logged: Any) -> str:
    """What to say of a ``monitor`` metric no validation logged: the metrics that were, and the one likely meant."""
    names = sorted(str(name) for name in logged)
    return (
        f"monitor={monitor!r} was never logged by a validation, so the summary has no final value of it; the metrics "
        f"logged: {', '.join(names) if names else 'none'}{did_you_mean(monitor, names)}"
    )


# What each file the timer writes is, and what opens it.
WRITTEN = {
    "summary": "timing summary written to {path}",
    "report": "timing report written to {path} (open it in a browser)",
    "trace": "busy window's trace written to {path} (Perfetto; TensorBoard's profile tab)",
}


def written_line(what: str, path: Any) -> str:
    """The line that says the timer wrote ``what`` (a key of :data:`WRITTEN`) to ``path``."""
    return WRITTEN[what].format(path=path)


def interrupted_line(epochs: list[dict[str, Any]]) -> str:
    """The line after an interrupted fit's summary: what its figures cover (the epoch it stopped inside too)."""
    part = epochs[-1].get("partial") if epochs else None
    whole = len(epochs) - bool(part)
    inside = f" and {part['steps']:,} of epoch {epochs[-1]['epoch']}'s {part['batches']:,} batches" if part else ""
    return f"Interrupted: the figures cover the {whole} finished epoch(s){inside}"
