"""What a fit prints as it runs: each epoch's line, the callbacks' words on its batches, its files."""

from __future__ import annotations

from typing import Any

from mnistperf.close_names import did_you_mean
from mnistperf.diagnosis.figures import EVAL_S, SAMPLES_PER_S, TRAIN_S
from mnistperf.diagnosis.measure import flops
from mnistperf.diagnosis.measure.batches import FirstBatch
from mnistperf.diagnosis.measure.drawn_steps import EVERY
from mnistperf.diagnosis.measure.flops import Peak
from mnistperf.diagnosis.measure.samples import Counted, Rule
from mnistperf.diagnosis.record.audit_text import NO_STEP
from mnistperf.diagnosis.record.units import seconds, throughput


def loader_samples_text(samples: dict[str, int | None] | None) -> str:
    """An epoch's samples per training loader as its line says them: each loader's, or how many each where alike."""
    if not samples or None in samples.values():
        return ""
    if len(set(samples.values())) == 1:
        return f" ({len(samples)} loaders of {next(iter(samples.values())):,} samples each)"
    return " (" + " + ".join(f"{name} {count:,}" for name, count in samples.items()) + " samples)"


def eval_said(eval_s: float | None, largest: float) -> str:
    """``, eval 1.20 s``; nothing where no validation ran (none is timed at exactly zero)."""
    return "" if eval_s == 0 else f", eval {seconds(eval_s, largest)}"


def batches_cut(part: dict[str, Any] | None) -> str | None:
    """How many of its batches an epoch cut short trained (``7 of 10 batches``); None where it trained them all."""
    if not part or part["steps"] >= part["batches"]:
        return None
    return f"{part['steps']:,} of {part['batches']:,} batches"


def format_epoch(row: dict[str, Any], bar_epoch: int | None = None) -> str:
    """EpochTimer's line of an epoch: its times, throughput, verdict and the figure that decided it.

    ``bar_epoch``: what a progress bar calls the epoch, where it counts otherwise (``epoch 1 (bar: Epoch 0)``).
    """
    bar = "" if bar_epoch is None else f" (bar: Epoch {bar_epoch})"
    largest = max(row[TRAIN_S], row[EVAL_S])
    part = row.get("partial") or {}
    cut = batches_cut(part)
    train = seconds(row[TRAIN_S], largest) + (f" ({cut})" if cut else "")
    evaluation = eval_said(row[EVAL_S], largest) + (
        f" (validation {part['validation']})" if "validation" in part else ""
    )
    return (
        f"epoch {row['epoch']}{bar}: train {train}{evaluation}, "
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


IN_WINDOW = "its sampled steps lay in the profiled window, whose profiler would have slowed their phases"


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


TWICE = (
    "listed twice among the trainer's callbacks, so this one stays out of the fit and the first times it alone; "
    "remove one of them from the callbacks"
)


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
        said.append(
            f"Lightning reads {counts['lightning']:,} a batch where {counts['batch']:,} {are} counted, and self.log "
            "weighs its epoch means by Lightning's reading unless given batch_size="
        )
    return f"; samples disagree: {'; '.join(said)}"


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
    Rule.STATED_FIRST: "its batch_size's first dimension ({of})",
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
        if reading.counted_by.rule is Rule.STATED_FIRST:
            said = (
                f"a training batch{where} ({kind}) states a batch_size of {len(reading.lengths)} dimensions ({lengths})"
            )
        lines.append(f"{said}: {guessed}")
    return lines


def not_a_count(given: Any) -> str:
    """The timer's word where the user's ``samples_in_batch`` returned no count of a batch's samples."""
    return f"samples_in_batch returned {given!r}, not the batch's samples (an int, 0 or more)"


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


# Where a fit's timing.json takes the place of an earlier fit's (the same Trainer fitted again, or logger=False's
# root), and what keeps each fit's there: with a logger, and without one
REPLACED = " (in place of an earlier fit's there; {keeps} keeps each fit's)"
# What keeps each fit's files: by the log folder's kind (a logger's version_N, a logger's folder of its own, none)
KEEPS = {
    "versioned": "a new Trainer, or a logger version of its own,",
    "fixed": "a logger folder (save_dir, name or version) of each fit's own, as its logger gives every fit this one,",
    "no logger": "another default_root_dir",
}


def written_line(what: str, path: Any, replaced: bool = False, folder: str = "versioned") -> str:
    """The line that says the timer wrote ``what`` (a key of :data:`WRITTEN`) to ``path``.

    ``replaced``: in place of another's, in a log folder of ``folder``'s kind (a key of :data:`KEEPS`).
    """
    return WRITTEN[what].format(path=path) + (REPLACED.format(keeps=KEEPS[folder]) if replaced else "")


def no_step(epoch: int) -> str:
    """The line of an epoch Lightning ran without a step (:data:`.NO_STEP` says when that happens)."""
    return f"epoch {epoch}: {NO_STEP}; not timed"


# Where a fit stops before its first epoch closed (under DDP an epoch it stops inside is not closed: ranks may be gone)
NOTHING_TIMED = (
    "EpochTimer: the fit stopped before its first epoch ended, and no epoch could be closed as far as it trained "
    "(under DDP the other ranks may be gone): no summary, timing.json or report is written"
)


# What stops a fit from outside it, not an error of its own: Ctrl-C, Lightning's SIGTERM (a kill, a preemption), an exit
STOPPED_FROM_OUTSIDE = ("SIGTERMException", "SystemExit")


def how_stopped(stopped_by: str | None) -> str:
    """How a fit stopped early, by the exception's type: interrupted, stopped from outside, or by an error.

    Interrupted: Ctrl-C, or a summary older than the type's record; from outside: a signal, an exit.
    """
    if stopped_by in (None, "KeyboardInterrupt"):
        return "interrupted"
    return f"stopped ({stopped_by})" if stopped_by in STOPPED_FROM_OUTSIDE else f"stopped by an error ({stopped_by})"


def interrupted_line(epochs: list[dict[str, Any]], stopped_by: str | None = None) -> str:
    """The line after an interrupted fit's summary: how it stopped (:func:`how_stopped`), what its figures cover."""
    how = how_stopped(stopped_by)
    return f"{how[0].upper()}{how[1:]}: {figures_cover(epochs)}"


def figures_cover(epochs: list[dict[str, Any]]) -> str:
    """What an interrupted fit's figures cover: its finished epochs, and as far as it ran the epoch it stopped in."""
    part = epochs[-1].get("partial") if epochs else None
    whole = len(epochs) - bool(part)
    inside = f" and {part['steps']:,} of epoch {epochs[-1]['epoch']}'s {part['batches']:,} batches" if part else ""
    if part and part.get("validation"):  # its training whole, or as far as a validation inside it
        trained = batches_cut(part) or "training"
        inside = f" and epoch {epochs[-1]['epoch']}'s {trained}, its validation {part['validation']}"
    return f"the figures cover the {whole} finished epoch(s){inside}"
