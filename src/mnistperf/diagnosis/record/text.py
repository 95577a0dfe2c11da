"""A run's summary as printed at its fit's end and by ``mnistperf report RUN``: one line per finding."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mnistperf.diagnosis import figures
from mnistperf.diagnosis.figures import ACHIEVED_FLOPS_PER_S, MFU, SPIKES
from mnistperf.diagnosis.measure.stalls import SLOW_FIRST_FACTOR, SPIKE_FACTOR, SPIKES_WORTH, slow_first_steps
from mnistperf.diagnosis.measure.step_parts import FETCH
from mnistperf.diagnosis.measure.window_reading import WindowReading
from mnistperf.diagnosis.record.advice import CULPRIT_SHARE, epoch_s, format_advice
from mnistperf.diagnosis.record.epoch_text import batches_cut, eval_said, interrupted_line
from mnistperf.diagnosis.record.run import RunSummary
from mnistperf.diagnosis.record.summary import IN_WARMUP, RANKS_APART, not_measured, split_epochs
from mnistperf.diagnosis.record.units import seconds, throughput
from mnistperf.diagnosis.record.verdict import BUSY_SAID

COMM_EXPOSED = 0.2  # ranks in collectives with no work beside them this share of the window: say what it bounds
DOUBT_IN_POINTS = 0.1  # a busy share's margin up to this is said in points; past it, as the range it leaves


def format_split(run: RunSummary, epochs: str) -> str | None:
    """The steady epochs' train time split in one line (None where the run has none); unsampled, the last reason."""
    wait = run.figure(figures.INPUT_WAIT_S)
    if wait is None:
        return None
    largest = max((run.figure(figure) or 0.0 for figure in figures.SPLIT), default=0.0)
    rows = steady_rows(run)
    split = split_epochs(rows)
    if split and len(split) < len(rows):  # the others' sampled steps were profiled, or none was sampled
        named = ", ".join(str(e["epoch"]) for e in split)
        epochs = f"epoch{'s' if len(split) > 1 else ''} {named} of {epochs}, the others' steps split by none"
    head = f"Train time per epoch ({epochs}): waiting for data {seconds(wait, largest)}"
    if run.figure(figures.REST_S) is None:
        reasons = [e["split_reason"] for e in run.epochs if e.get("split_reason")]
        why = reasons[-1] if reasons else "no sampled step reached Lightning's hooks"
        return head + f"; forward, backward and optimizer not measured ({why})"
    parts = ", ".join(
        f"{figure.removesuffix('_s')} {seconds(run.figure(figure), largest)}" for figure in figures.SPLIT[1:]
    )
    return head + f", {parts} (the rest: hooks, logging, Python between them)"


RANK_SAID = {figures.TRAIN_S: "train", figures.INPUT_WAIT_S: "waiting for data", figures.COMM_SHARE: "in collectives"}


def rank_figure(figure: figures.Figure, value: float) -> str:
    """One of a rank's figures as its line says it: named, in the unit it is shown in."""
    name = RANK_SAID.get(figure) or (figure.label or figure.name).strip()
    number = f"{value * figure.scale:.0f}%" if figure.shown == "%" else f"{value * figure.scale:,.2f} {figure.shown}"
    return f"{name} {number}"


STEP_PARTS_SHOWN = 6  # the parts of a step its line names, the largest first


@dataclass(frozen=True)
class PartsSaid:
    """How a kind of cycle timed by its parts is said: the summary's keys of its count and seconds, and words."""

    head: str  # what the summary's line and the report's section begin with
    count: str  # the key of how many were timed
    seconds: str  # the key of their mean seconds
    timed: tuple[str, str]  # what was timed, after its count: after one, after more
    detail: str  # after that: how it was timed
    each: str  # a part's time, a cycle's
    share: str  # a part's share, of what
    untimed: str  # what the report says where none was timed

    def counted(self, found: dict) -> str:
        """How many were timed, and how: "4 steps timed by their parts"."""
        count = found[self.count]
        return f"{count} {self.timed[count != 1]}{self.detail}"


PARTS_SAID = {  # by the summary's key
    "step_parts": PartsSaid(
        "Where a step goes",
        "steps",
        "step_s",
        ("step timed by its parts", "steps timed by their parts"),
        "",
        "a step",
        "of the step",
        "No step was timed by its parts (epochs that ended before the step drawn among their first 16, or a run "
        "before they were).",
    ),
    "between_epochs": PartsSaid(
        "Between epochs",
        "epochs",
        "epoch_s",
        ("time timed", "times timed"),
        ", from an epoch's last step to the next one's start, validation apart",
        "each time",
        "of the time between",
        "The time between epochs was not timed (a run before it was).",
    ),
}


def format_parts(run: RunSummary, key: str) -> str | None:
    """Where a timed step's time goes, or the time between epochs (``key``), largest parts first; None if untimed."""
    found, said = run.content.get(key), PARTS_SAID[key]
    if not found:
        return None
    whole_s = found[said.seconds]
    parts = ", ".join(f"{part} {s / whole_s:.0%}" for part, s in list(found["parts"].items())[:STEP_PARTS_SHOWN])
    syncs = found.get("syncs")  # where counted (CUDA)
    counted = ", ".join(f"{part} {n:g}" for part, n in (syncs or {}).items()) or "none"
    forced = f"; device synchronizations {said.each}: {counted}" if syncs is not None else ""
    return f"{said.head} ({said.counted(found)}, {whole_s * 1e3:.2f} ms each): {parts}{forced}"


def format_ranks(run: RunSummary, epochs: str) -> str:
    """Each rank's own figures; the slowest where they are apart, and the ranks' talk."""
    each = "; ".join(
        f"rank {r['rank']} "
        + ", ".join(rank_figure(f, r[f]) for f in figures.FIGURES if f.per_rank and r.get(f) is not None)
        for r in run.ranks or []
    )
    slowest = run.slowest_rank
    verdict = (
        f"slowest: rank {slowest['rank']}, held by {'the data' if slowest['held_by'] == 'data' else 'its step'} "
        f"({slowest['behind_s']:.2f} s behind)"
        if slowest
        else f"within {RANKS_APART:.0%} of each other"
    )
    line = f"Ranks ({epochs}, per epoch): {each}; {verdict}"
    talked = run.busy_window.communication if run.busy_window is not None else None
    if talked is None:
        return line
    exposed = talked.exposed_share
    line += (
        f"; {talked.backend} collectives {talked.share:.0%} of the profiled window, "
        f"{exposed:.0%} with no work beside them"
    )
    if not COMM_EXPOSED <= exposed < 1:
        return line
    return line + (
        f" (a step up to {1 / (1 - exposed):.1f}x faster without that wait: fewer all-reduces with a larger batch "
        "per rank or accumulate_grad_batches, smaller ones with DDPStrategy(ddp_comm_hook=...), or the slowest "
        "rank's own work evened out)"
    )


def format_window(window: WindowReading) -> str:
    """The busy window's line: its share, where it was profiled and its trace, or why there is none."""
    label = BUSY_SAID[window.device]
    if window.share is None:
        return f"{label}: not measured ({not_measured(window, ended=True)}); no trace written"
    trace = f"; trace {window.trace}" if window.trace else "; no trace written"
    if window.trace_skipped:
        trace += f": {window.trace_skipped}"
    where = "the warm-up epoch, the run's only" if window.in_warmup else "a steady epoch, kept out of its timing"
    waited = window.waited_for_a_core
    crowd = f", the training thread waiting for a core {waited:.0%} of it" if waited is not None else ""
    how = f"{window.kernels or 0:,} {'kernels' if window.device == 'cuda' else 'operators'}, profiled"
    if window.operator_clock:  # the profiler cost more than the fit could spend (docs/timing.md)
        least, most = window.operator_clock
        how = f"{window.kernels or 0:,} torch calls timed, which bound it between {least:.0%} and {most:.0%}"
        trace = "; no trace: the profiler did not run, the fit being too short to pay for it"
    first, last = window.first_step or 0, window.last_step or 0
    steps = f"step {first}" if first == last else f"steps {first}-{last}"
    return (
        f"{label}: {window.share:.0%} of the time ({reading_doubt(window.share, window.margin or 0.0)}) "
        f"over training {steps} of epoch {window.epoch or 0} "
        f"({how} in {where}{crowd}{trace})"
    )


def reading_doubt(share: float, margin: float) -> str:
    """How far a share read may be from the truth, in words: a few points, or the range it may lie anywhere in."""
    if margin <= DOUBT_IN_POINTS:
        return f"give or take {margin * 100:.0f} points"
    return f"a doubtful reading: anywhere from {max(0.0, share - margin):.0%} to {min(1.0, share + margin):.0%}"


def steady_rows(run: RunSummary) -> list[dict[str, Any]]:
    """The rows of the run's steady epochs (none where its summary holds no rows)."""
    first, last = run.steady_epochs or (0, 0)
    rows = run.epochs if isinstance(run.epochs, list) else []
    return [e for e in rows if isinstance(e, Mapping) and first <= e.get("epoch", 0) <= last]


def steady_said(run: RunSummary) -> str:
    """The run's steady epochs as its summary names them: ``epoch 2``, ``epochs 2-3``, ``epoch 2, cut short``.

    Cut short: where the only epochs past the warm-up were partial (a stop, max_steps), their figures stand; where
    they trained whole, their validation was interrupted.
    """
    first, last = run.steady_epochs or (0, 0)
    said = f"epoch {first}" if first == last else f"epochs {first}-{last}"
    steady = steady_rows(run)
    if not steady or not all("partial" in e for e in steady):
        return said
    trained = all(batches_cut(e["partial"]) is None for e in steady)  # its validation alone cut
    return f"{said}, {'its validation interrupted' if trained else 'cut short'}"


def format_summary(summary: RunSummary | Mapping[str, Any]) -> str:
    """The run's times, throughput, device and verdict, then each finding it has, one line each.

    First, where it was interrupted, the line saying so: it says what the figures cover.
    """
    run = RunSummary.of(summary)
    steady = steady_said(run)
    train = f"; epoch {run.warmup['epoch']} (warm-up): {seconds(run.warmup[figures.TRAIN_S])}" if run.warmup else ""
    warmup_eval = run.warmup[figures.EVAL_S] if run.warmup else None
    evaluation = (
        f"; epoch {run.warmup['epoch']}: {seconds(warmup_eval) if warmup_eval else 'none'}" if run.warmup else ""
    )
    validated = bool(run.figure(figures.TOTAL_EVAL_S))  # (no validation: none, not 0.00 ms an epoch)
    rows = steady_rows(run)
    ran = sum(bool(e.get(figures.EVAL_S)) for e in rows)
    if validated and 0 < ran < len(rows):  # (check_val_every_n_epoch: the average counts those without at 0)
        evaluation = f", {ran} of {len(rows)} validated{evaluation}"
    lines = [
        interrupted_line(run.epochs, run.content.get("stopped_by")) if run.content.get("interrupted") else None,
        f"Average Train Time per Epoch: {seconds(run.figure(figures.AVG_TRAIN_S))} ({steady}{train})",
        "Average Validation Time per Epoch: "
        + (f"{seconds(run.figure(figures.AVG_EVAL_S))} ({steady}{evaluation})" if validated else "none ran"),
        f"Total Train Time: {seconds(run.figure(figures.TOTAL_TRAIN_S))}",
        f"Total Validation Time: {seconds(run.figure(figures.TOTAL_EVAL_S)) if validated else 'none ran'}",
        f"Train throughput: {throughput(run.figure(figures.SAMPLES_PER_S))} ({steady})",
        f"Device: {run.device or 'not known'}, precision {run.precision or '32-true'}",
        f"Verdict: {run.verdict} ({run.verdict_reason})",
        format_split(run, steady),
        *(format_parts(run, key) for key in PARTS_SAID),
        format_stalls(run.stalls, run.figure(figures.STEP_MEDIAN_S), run.epochs) if run.stalls else None,
        format_utilization(run.content),
        format_growth(run.memory["growth"]) if run.memory else None,
        format_ranks(run, steady) if run.ranks else None,
        format_window(run.busy_window) if run.busy_window else None,
        format_advice(run.advice.ceiling, run.advice.hints) if run.advice else None,
        f"Final {run.metric}: {run.final_metric:.4f}" if run.final_metric is not None else None,
    ]
    return "\n".join(line for line in lines if line)


# The clauses of a verdict's reason that say why, beyond its deciding figure, each up to its first colon.
CAUSES = (
    "its own ",  # DataLoader workers held the cores, or N ranks (and any other work) took them
    "other work on this machine",
    "in doubt",
    "a close call",
    "near the line",
    IN_WARMUP,  # the verdict of a run of one epoch, or of one whole one
)
ELSEWHERE = "the split, stalls, memory, the profiled window"  # what the headline leaves to the report


def headline_cause(reason: str) -> str | None:
    """Why the verdict is what it is, beyond its figure: who held the cores, a doubt, a close call; None if none."""
    found = [part.strip() for part in reason.split("; ") if part.strip().startswith(CAUSES)]
    return "; ".join(part.split(": ")[0] for part in found) or None


def format_headline(
    summary: RunSummary | Mapping[str, Any], folder: str | None = None, unwritten: str | None = None, rest: bool = True
) -> str:
    """The fit's end at a glance: the verdict and the figure that decided it, then at most three short lines.

    Why (a cause beyond the figure), the fix in the project's terms, what it could buy; then the figures per epoch,
    and where the rest is (``folder``: the run's, for ``mnistperf report``), or why it was not written (``unwritten``);
    not said where ``rest`` is False (the report, which goes on with it).
    """
    run = RunSummary.of(summary)
    steady = steady_said(run)
    lines = [f"Verdict: {run.verdict} ({run.verdict_figure or run.verdict_reason})"]
    cause = headline_cause(run.verdict_reason)
    window = run.busy_window
    if run.verdict == "undetermined" and window is not None and window.reason:  # why the deciding figure is missing
        cause = "; ".join(filter(None, (window.reason, cause)))
    named = run.advice.culprit if run.advice is not None else None
    if named:
        whole_s, per = named["s"] / named["share"], named.get("per", "step")
        took = f"{named['part']} took {seconds(named['s'], whole_s)}"
        cause = {
            "step": f"{named['part']} took {named['s'] * 1e3:.2f} ms of each {whole_s * 1e3:.2f} ms step"
            + (" (every step's wait for its batch, as the epochs measured it)" if named["part"] == FETCH else ""),
            "epoch": f"{took} between epochs, of each {seconds(whole_s)} epoch",
            "rank": f"{took} more than the quickest rank's, of each {seconds(whole_s)} epoch: the other ranks wait "
            "for it",
        }[per]
    if cause:
        lines.append(f"  why: {cause}")
    if run.advice is not None:
        fixes = run.advice.hints[:2]
        if named and named.get("fix") and named["fix"] not in fixes:  # the culprit "why:" names: its fix, in two
            fixes = [*fixes[:1], named["fix"]]
        if fixes:
            lines.append(f"  fix: {'; '.join(fixes)}")
        ceiling = run.advice.ceiling.split("; " if named else ": ")[0]
        lines.append(f"  could buy: {ceiling}" + (" (the report says why)" if ceiling != run.advice.ceiling else ""))
    between = run.content.get("between_epochs")  # said where it takes a share of the epoch a culprit would
    gap = between["epoch_s"] if between else 0.0
    train, evaluation = run.figure(figures.AVG_TRAIN_S), run.figure(figures.AVG_EVAL_S)
    largest = max(train or 0.0, evaluation or 0.0, gap, run.warmup[figures.TRAIN_S] if run.warmup else 0.0)
    warmup = (
        f"; warm-up epoch {run.warmup['epoch']}: {seconds(run.warmup[figures.TRAIN_S], largest)}" if run.warmup else ""
    )
    metric = f"; final {run.metric} {run.final_metric:.4f}" if run.final_metric is not None else ""
    said = f", between epochs {seconds(gap, largest)}" if gap >= CULPRIT_SHARE * epoch_s(run.content) > 0 else ""
    lines.append(
        f"Per epoch ({steady}{warmup}): train {seconds(train, largest)}{eval_said(evaluation, largest)}{said}, "
        f"{throughput(run.figure(figures.SAMPLES_PER_S))}; "
        f"{run.device or 'device not known'}, {run.precision or '32-true'}{metric}"
    )
    if rest:
        lines.append(
            f"The rest ({ELSEWHERE}): not written ({unwritten})"
            if unwritten
            else f"The rest ({ELSEWHERE}): `mnistperf report {shlex.quote(folder) if folder else 'RUN'}` prints it, "
            "timing.html shows it"
        )
    return "\n".join(lines)


def format_stalls(found: dict[str, Any], median: float | None, epochs: list[dict[str, Any]]) -> str | None:
    """The stalls' line, starting with the steady epochs' ``median`` step, where something cost enough to act on.

    ``epochs``: the run's rows, which give what slow first steps cost where ``found`` is older than that figure.
    """
    if "slow_first_share" not in found:
        found = {**found, **slow_first_steps(epochs)}
    parts = []
    share = found.get("spikes_share")
    if share is not None and share >= SPIKES_WORTH:
        worst = ", ".join(f"epoch {w['epoch']} step {w['step']} {w['s'] * 1e3:,.0f} ms" for w in found["worst_spikes"])
        parts.append(
            f"{found[SPIKES]} steps over {SPIKE_FACTOR:.0f}x their epoch's median took {share:.0%} of train time "
            f"past it (the longest: {worst}); such spikes usually come from a loader whose workers fall behind in "
            "bursts (slow items, workers restarting each epoch), periodic work in the loop (logging, checkpoints), or "
            "other work on this machine"
        )
    first_share = found.get("slow_first_share")
    if first_share is not None and first_share >= SPIKES_WORTH:
        epochs_named = ", ".join(map(str, found["slow_first_step"]))
        longest = found.get("slowest_first_s")  # a file edited by hand may hold the share alone
        parts.append(
            f"the first steps of epoch(s) {epochs_named} (over {SLOW_FIRST_FACTOR:.0f}x their epoch's median"
            f"{'' if longest is None else f', the longest {longest * 1e3:,.0f} ms'}) took {first_share:.0%} of train "
            "time beyond the median step; "
            "a slow first step is usually the loader starting its epoch: its workers starting, unless they persist "
            "between epochs, and making their first batches before any is ready"
        )
    moved = found.get("drift")
    if moved:
        parts.append(
            f"step time drifts {moved['per_epoch_share']:+.0%} per epoch ({moved['from_s'] * 1e3:.1f} ms to "
            f"{moved['to_s'] * 1e3:.1f} ms, epochs {moved['epochs'][0]}-{moved['epochs'][1]})"
        )
    if not parts:
        return None
    whose = "the steady epochs'" if len(epochs) > 1 else "its one epoch's"  # (a one-epoch run's is its warm-up)
    head = f"Stalls ({whose} median step {median * 1e3:.1f} ms): " if median is not None else "Stalls: "
    return head + "; ".join(parts)


def format_utilization(summary: Mapping[str, Any]) -> str | None:
    """The utilization line where the MFU is known (the achieved figure alone decides nothing); else None."""
    flops, achieved, mfu = summary.get("flops_per_step"), summary.get(ACHIEVED_FLOPS_PER_S), summary.get(MFU)
    if not flops or achieved is None or mfu is None:
        return None
    return (
        f"Utilization: {with_si_prefix(flops, 'FLOP')} a step, {with_si_prefix(achieved, 'FLOP/s')} achieved, "
        f"MFU {mfu:.1%} of the {summary['peak']}"
    )


GROWING_NAMES = {  # what the memory line calls each figure growth is read on
    figures.RSS_MB: "the training process",
    figures.WORKERS_PSS_MB: "its DataLoader workers",
    figures.DEVICE_ALLOCATED_MB: "GPU memory allocated",
    figures.DEVICE_RESERVED_MB: "GPU memory reserved",
}


def format_growth(grown: list[dict[str, Any]]) -> str | None:
    """The memory line where memory grows epoch after epoch; None where none does."""
    parts = [
        f"{GROWING_NAMES.get(g['figure'], g['figure'])} +{g['per_epoch_mb']:,.0f} MB per epoch "
        f"({g['from_mb']:,.0f} MB to {g['to_mb']:,.0f} MB, "
        f"epochs {g['epochs'][0]}-{g['epochs'][1]})"
        for g in grown
    ]
    return "Memory grows: " + "; ".join(parts) if parts else None


def with_si_prefix(value: float, unit: str) -> str:
    """``value`` with an SI prefix (k, M, G, T, P) before ``unit``, to three figures."""
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"
