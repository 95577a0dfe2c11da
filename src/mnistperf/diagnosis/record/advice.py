"""What a fix could buy: a ceiling on the gain from a run's own figures, and what usually brings it (docs/timing.md)."""

from __future__ import annotations

import importlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from mnistperf.diagnosis.figures import (
    AVG_EVAL_S,
    AVG_TRAIN_S,
    CORE_WAIT_SHARE,
    CPU_BUSY_SHARE,
    DEVICE_BUSY_SHARE,
    FORWARD_S,
    INPUT_WAIT_SHARE,
)
from mnistperf.diagnosis.measure.busy_window import CROWDED
from mnistperf.diagnosis.measure.step_parts import CHECKPOINT_SAVES, FETCH, LOOP, STEP_WORK, TIMER
from mnistperf.diagnosis.record.project_terms import KEEPS_PACE, ProjectTerms, input_hints, workers_hints
from mnistperf.diagnosis.record.units import seconds
from mnistperf.diagnosis.record.verdict import RANK_THREADS, UNREAD, WAITED_FOR_A_CORE
from mnistperf.errors import ConfigError
from mnistperf.machine import usable_cpus

# Not a verdict: a step its own DataLoader workers slowed by holding the cores (docs/timing.md, "The verdict").
WORKERS = "workers holding the cores"
# For each verdict (on a CPU, the CPU's own two), what usually removes the bound, and what frees the cores from the
# run's own workers. "{threads}": the threads the run used and the cores it could.
Hints = Mapping[str, Sequence[str]]
USER_HINTS: dict[str, list[str]] = {
    # Nothing known of the project nor of its device: the DataLoader's own names, no pinning (a CPU gains nothing)
    "input-bound": input_hints(ProjectTerms(), cuda=False),
    "overhead-bound": [
        "a larger batch size (more work per launch)",
        "no per-step self.log or .item() (each waits for the device): sums kept on the device, logged once per epoch",
        "the whole step as a CUDA graph (torch.compile with mode='reduce-overhead', or torch.cuda.graphs)",
    ],
    "compute-bound": [
        "bf16 mixed precision (Trainer(precision='bf16-mixed'))",
        "channels_last memory format and torch.compile",
        "a larger GPU",
    ],
    "compute-bound on a CPU": [
        "torch's threads matched to the cores this process may use ({threads})",
        "a larger batch size (the same per-step work around more arithmetic)",
        "torch.compile, which fuses operations and their memory traffic",
        "a GPU (Trainer(accelerator='gpu')), once the model is large enough to fill one",
    ],
    "overhead-bound on a CPU": [
        "a larger batch size (the same Python and framework work per step, more arithmetic)",
        "no per-step self.log or .item(), and no callback doing work every step",
        "torch.compile, which fuses the step's many small operations",
    ],
    WORKERS: workers_hints(ProjectTerms()),
}


CULPRIT_SHARE = 0.05  # a part taking this share of each timed step, or of each epoch between epochs, is named
# ... and, around the step, this share of the step's time outside tensor operations where that was measured: a part
# smaller beside the rest is not what the overhead is (the ceiling of the whole overhead says more)
OVERHEAD_PART = 0.25


def part_fix(part: str, between_epochs: bool) -> str:
    """What takes a part (as :func:`.part_of` names it) out of most steps, or of the time between epochs."""
    kind, _, name = part.partition(" ")
    if part == FETCH:  # in the project's terms where the advice is made
        return "batches made ahead of the step: more DataLoader workers"
    if kind == "callback" and name.endswith("ProgressBar"):
        return (
            f"the progress bar redrawn less often: {name}(refresh_rate=N) among the callbacks, or "
            "Trainer(enable_progress_bar=False)"
        )
    if part == CHECKPOINT_SAVES and not between_epochs:  # saved every so many steps: that number raised
        return "fewer checkpoints saved: a larger ModelCheckpoint(every_n_train_steps=N), or train_time_interval"
    if part == CHECKPOINT_SAVES:
        return (
            "fewer checkpoints saved: ModelCheckpoint(every_n_epochs=N), or a monitored metric with save_top_k=1 "
            "(saved where it improves), without save_last=True"
        )
    if kind == "callback" and name == "SampleAudit":
        return (
            "SampleAudit(sample_id=FIELD), FIELD the batch's field holding each sample's dataset index, or "
            "SampleAudit(fingerprint=...): then no sample's bytes are hashed"
        )
    if kind == "callback":
        return f"{name} working less often (its own options), or left out of the callbacks"
    if kind == "logger" and between_epochs:
        return f"fewer values handed to {name} at each epoch's end (those logged with on_epoch=True)"
    if kind == "logger":
        return f"fewer {name} writes: a larger Trainer(log_every_n_steps=N)"
    if part == "self.log":
        return "self.log(..., on_step=False) for what need not be logged every step, and fewer values logged"
    if between_epochs:
        return "less work in the module's epoch hooks (on_train_epoch_start/end)"
    return "less work in the module's hooks that run every step (on_train_batch_start/end, on_before_/on_after_)"


def costliest(parts: Mapping[str, float], whole_s: float, fetch: bool = False) -> tuple[str, float] | None:
    """The part that takes most of ``whole_s``, and its seconds; None below CULPRIT_SHARE of it.

    Only a part around the step is named, or with ``fetch`` the wait for the next batch: neither the step's own work
    (:data:`.STEP_WORK`), nor Lightning's loop, nor the timer's own hooks (:data:`.TIMER`).
    """
    around = {
        part: s
        for part, s in parts.items()
        if (part not in STEP_WORK or fetch and part == FETCH) and part not in (LOOP, TIMER)
    }
    if not around or whole_s <= 0:
        return None
    part, seconds = max(around.items(), key=lambda item: item[1])
    return (part, seconds) if seconds >= CULPRIT_SHARE * whole_s else None


def epoch_s(summary: Mapping[str, Any]) -> float:
    """A steady epoch's whole seconds: its training, its validation and the time until the next (where timed)."""
    between = summary.get("between_epochs")
    return (
        (summary.get(AVG_TRAIN_S) or 0.0) + (summary.get(AVG_EVAL_S) or 0.0) + (between["epoch_s"] if between else 0.0)
    )


def lagging_rank(summary: Mapping[str, Any]) -> tuple[float, str, float, float, str, float] | None:
    """Under DDP, the slowest rank's own work beyond the quickest's, as a culprit per epoch: the others wait for it.

    Only where it is no draw of the sampled steps a rank's forward is read from: every whole steady epoch, two at
    least, found that rank apart and held the same way, its forward read on every rank, and the least of their lags
    is OVERHEAD_PART of an epoch or more. None on one process, or where the ranks are within RANKS_APART of each other.
    """
    slowest, an_epoch_s = summary.get("slowest_rank"), epoch_s(summary)
    first, last = summary.get("steady_epochs") or (0, 0)
    rows = [e for e in summary.get("epochs") or [] if first <= e.get("epoch", 0) <= last and "partial" not in e]
    if not slowest or an_epoch_s <= 0 or len(rows) < 2:
        return None
    apart = [e.get("slowest_rank") or {} for e in rows]
    if any((a.get("rank"), a.get("held_by")) != (slowest["rank"], slowest["held_by"]) for a in apart):
        return None
    if any(r.get(FORWARD_S) is None for e in rows for r in e.get("ranks") or [{}]):
        return None
    behind = min(a["behind_s"] for a in apart)
    if not OVERHEAD_PART * an_epoch_s <= behind < an_epoch_s:
        return None
    part = f"rank {slowest['rank']}'s {'data' if slowest['held_by'] == 'data' else 'step'}"
    return behind, part, behind, behind / an_epoch_s, "rank", an_epoch_s


def rank_fix(part: str) -> str:
    """What evens out the slowest rank (``rank N's data`` or ``rank N's step``), which every other rank waits for."""
    rank = part.partition("'")[0]
    if part.endswith("data"):
        return f"{rank}'s batches as quick to make as the others' (shards of even size, enough DataLoader workers)"
    return f"{rank}'s step as light as the others' (no work on that rank alone, batches of even size)"


def culprit(summary: Mapping[str, Any], busy: float | None) -> dict[str, Any] | None:
    """The part around the step, or between epochs, that costs an epoch most, its fix and what removing it could buy.

    ``per``: ``step`` or ``epoch``, what the part's ``s`` and ``share`` are of, or ``rank``: under DDP the slowest
    rank's own work beyond the quickest's, per epoch (:func:`lagging_rank`). None where no part takes CULPRIT_SHARE
    of its step or epoch, nor a step's part OVERHEAD_PART of its time outside tensor operations where ``busy`` (the
    share inside them; None: not measured, or in doubt) says what that is, and the ranks are not apart.
    """
    found = [lagged] if (lagged := lagging_rank(summary)) is not None else []
    steps, between = summary.get("step_parts"), summary.get("between_epochs")
    wait = summary.get(INPUT_WAIT_SHARE)
    if steps and FETCH in steps["parts"] and wait is not None:  # every step's wait, measured, not the few timed's
        steps = {**steps, "parts": {**steps["parts"], FETCH: wait * steps["step_s"]}}
    if steps and (named := costliest(steps["parts"], steps["step_s"], fetch=True)):
        part, seconds = named
        share = seconds / steps["step_s"]
        if busy is None or share >= OVERHEAD_PART * (1 - busy):
            found.append((share * summary[AVG_TRAIN_S], part, seconds, share, "step", steps["step_s"]))
    an_epoch_s = epoch_s(summary)
    if between and (named := costliest(between["parts"], an_epoch_s)):
        part, seconds = named
        found.append((seconds, part, seconds, seconds / an_epoch_s, "epoch", an_epoch_s))
    return _culprit_of(max(found)) if found else None


def _culprit_of(found: tuple[float, str, float, float, str, float] | None) -> dict[str, Any] | None:
    """A culprit's record from its (seconds per epoch, part, seconds, share, per, whole seconds); None for none."""
    if found is None:
        return None
    _, part, seconds, share, per, whole_s = found
    return {
        "part": part,
        "s": seconds,
        "share": share,
        "per": per,
        "fix": rank_fix(part) if per == "rank" else part_fix(part, between_epochs=per == "epoch"),
        "speed_up_at_most": whole_s / (whole_s - seconds),
    }


def imported_hints(hints: Hints | str | None) -> Hints | None:
    """Hints as given, or those an import path names (``package.module.HINTS``, as a YAML config can give them)."""
    if not isinstance(hints, str):
        return hints
    module, _, name = hints.rpartition(".")
    said = f"EpochTimer's hints {hints!r}"
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as error:
        raise ConfigError(f"{said}: nothing to import there ({error}); give package.module.NAME.") from None
    if not isinstance(found, Mapping):
        raise ConfigError(f"{said} is a {type(found).__name__}, not a mapping of verdicts to hints.")
    return found


def advice(summary: dict[str, Any], hints: Hints | None = None) -> dict[str, Any] | None:
    """``{"verdict", "ceiling", "hints"}`` from the run's steady figures; None where nothing bounds a gain.

    Plus ``at_most_s_less`` (train seconds per epoch) where they bound the gain, ``speed_up_at_most`` for an
    overhead-bound step. Where the run's own workers held the cores, whatever its verdict, what freeing them could buy
    (:data:`WORKERS`). ``hints``: per verdict, :data:`USER_HINTS`'s where it is None or lacks the verdict.
    """
    verdict, train_s = summary["verdict"], summary[AVG_TRAIN_S]
    on_cpu = DEVICE_BUSY_SHARE not in summary
    busy = summary.get(CPU_BUSY_SHARE if on_cpu else DEVICE_BUSY_SHARE)
    found: dict[str, Any] = {"verdict": verdict}
    crowded = summary.get(WAITED_FOR_A_CORE)
    held = summary.get("cores_held") or {}
    key = f"{verdict} on a CPU" if on_cpu and verdict != "input-bound" else verdict
    used, usable, here = torch.get_num_threads(), usable_cpus(), ranks_here(summary)
    mine = max(1, usable // here)  # the cores this rank may use
    # (an undetermined verdict has no share to doubt: a window that read none may still have timed its wait for a core)
    in_doubt = verdict not in ("input-bound", "undetermined") and crowded is not None and crowded >= CROWDED
    unstated = in_doubt or (verdict == "overhead-bound" and busy is None)  # a ceiling the figures cannot state
    if in_doubt:
        found["ceiling"] = (
            f"none stated: the training thread waited for a core {crowded:.0%} of the profiled window, so the share "
            "it would rest on is in doubt"
        )
    elif verdict == "input-bound":
        wait = summary[INPUT_WAIT_SHARE]
        less = found["at_most_s_less"] = wait * train_s
        found["ceiling"] = (
            f"with input free, an epoch's training would take at most {seconds(less, train_s)} "
            f"({wait:.0%}) less: the time the host was measured waiting for data"
        )
    elif verdict == "overhead-bound" and busy is not None:
        # the wait for data stays: the step takes at least the longer of it and the time inside tensor operations, or
        # on a CPU whose batches are made in the training process (no workers) both, one after the other
        wait = summary.get(INPUT_WAIT_SHARE) or 0.0
        kept = min(busy + wait, 1.0) if on_cpu and loads_in_process(summary) else max(busy, wait)
        less = found["at_most_s_less"] = (1 - kept) * train_s
        faster = found["speed_up_at_most"] = 1 / kept
        left = f", the wait for data ({wait:.0%}) left," if wait >= CULPRIT_SHARE else ""
        found["ceiling"] = (
            f"the CPU spent {busy:.0%} of the step inside tensor operations, so with the Python and framework work "
            f"around them gone{left} the step could be up to {faster:.1f}x faster"
            if on_cpu
            else f"the GPU was busy {busy:.0%} of the time, so fewer launches{left} could make the step up to "
            f"{faster:.1f}x faster"
        ) + f" (at most {seconds(less, train_s)} less per epoch)"
    elif verdict == "overhead-bound":
        found["ceiling"] = (
            "none stated: the time inside tensor operations was bounded from above by the step's phases, not "
            "measured, and only a measured share bounds what removing the overhead could buy"
        )
    elif verdict == "compute-bound":
        found["ceiling"] = f"what remains is the {'CPU' if on_cpu else 'GPU'}'s arithmetic"
        if on_cpu and used < mine:  # cores left idle: on them the arithmetic could go faster, at best in proportion
            found["ceiling"] += (
                f", on {used} of the {mine} cores it may use (up to {mine / used:.1f}x faster on all of them)"
            )
    keys = [key]
    if held.get("by") == "workers":  # what freeing the cores could buy, as the verdict's clause says
        freed = (
            f"with its own DataLoader workers off the cores, training could be up to {held['speed_up_at_most']:.1f}x "
            f"faster: what the training thread's wait for a core costs ({held[CORE_WAIT_SHARE]:.0%} of train time; "
            f"{UNREAD})"
        )
        if unstated or "ceiling" not in found:  # no share to rest a ceiling on: the workers' alone
            found["ceiling"], keys = freed, [WORKERS]
        else:  # a measured ceiling stands, the workers' beside it, their hints first (more workers: not for input)
            found["ceiling"] = f"{found['ceiling']}; {freed}"
            keys = [WORKERS] if verdict == "input-bound" else [WORKERS, key]
    named = (
        culprit(summary, None if in_doubt else busy)
        if verdict == "overhead-bound"
        else _culprit_of(lagging_rank(summary))
        if verdict == "input-bound" and (summary.get("slowest_rank") or {}).get("held_by") == "data"  # its data
        else None
    )
    if named is not None:
        found["culprit"] = named
        faster, part, share = f"{named['speed_up_at_most']:.2f}x faster", named["part"], named["share"]
        # On a CPU the part runs in turn with the step's work: taking it out saves about its own time, often more
        # (what it makes others do, a logger's writes); on a GPU its host time may hide behind the device's: at most.
        # A machine whose other work kept the training thread waiting for a core: other threads of it wait too, and
        # a step rid of the part competes harder for the cores: what removing it buys is then at most the part's own.
        bound = "about" if on_cpu and not in_doubt else "up to"
        clause = {
            "step": f"without {part} ({share:.0%} of each step) a step could be {bound} {faster}",
            "epoch": f"without {part} between epochs ({share:.0%} of each epoch) an epoch could be {bound} {faster}",
            "rank": f"with {part} as quick as the others' (its lag {share:.0%} of each epoch) an epoch could be about "
            f"{faster}, more where the others' waiting costs them more than its lag",
        }[named["per"]]
        rest = "for the overhead as a whole, " if unstated and "ceiling" in found else ""  # the part's own is stated
        found["ceiling"] = f"{clause}; {rest}{found['ceiling']}" if "ceiling" in found else clause
        if named["per"] == "step" and "at_most_s_less" not in found and not in_doubt:  # the one it states on train time
            found["at_most_s_less"] = share * train_s
    if "ceiling" not in found:
        return None
    shared = f", shared by {here} ranks: {mine} each" if here > 1 else ""
    threads = f"this run used {used} thread{'s' if used != 1 else ''} on {usable} usable cores{shared}"
    fetch = named is not None and named["part"] == FETCH  # the wait for the next batch: the loader's hints fix it
    own_fix = (hints or {}).get(named["part"]) if named is not None else None
    if named is not None and own_fix:  # the project's own fix for the part
        named["fix"] = own_fix[0]
    found["hints"] = [named["fix"]] if named is not None and not fetch else []
    if fetch and held.get("by") != "workers":
        keys = ["input-bound", *keys]
    found["hints"] += [
        hint.replace("{threads}", threads)
        for each in keys
        for hint in (hints if hints is not None and each in hints else USER_HINTS)[each]
        if used != mine or "{threads}" not in hint  # already matched to its cores: nothing to do
    ]
    if verdict == "input-bound":  # a loader that does not keep pace now would keep it less with fewer workers
        found["hints"] = [hint for hint in found["hints"] if KEEPS_PACE not in hint]
    if named is not None and fetch:  # its fix: the first of the hints that lead
        named["fix"] = found["hints"][0]
    validation = (summary.get(AVG_EVAL_S) or 0.0) / (epoch_s(summary) or math.inf)
    if validation >= EVAL_HEAVY:  # the verdict speaks of training: an epoch mostly its validation is said first
        found["hints"].insert(0, VALIDATE_LESS.format(share=validation))
    if in_doubt and held.get("by") == "its ranks":  # its own ranks': fewer threads each, before all else
        found["hints"].insert(0, RANK_THREADS)
    elif in_doubt and held.get("by") != "workers":  # other work's, not its own: the verdict itself first
        found["hints"].insert(0, REMEASURE)
        if on_cpu and used > 1:  # torch's threads beside other work: each operation waits for its slowest thread
            found["hints"] = [hint for hint in found["hints"] if threads not in hint]  # (not more of them, then)
            found["hints"].insert(1, SHARED_THREADS.format(used=used))
    return found


def loads_in_process(summary: Mapping[str, Any]) -> bool:
    """Whether the run's training batches were made in its training process (no DataLoader workers), as it records."""
    settings = summary.get("data") or summary.get("loader") or {}
    return isinstance(settings, Mapping) and settings.get("num_workers") == 0


def ranks_here(summary: Mapping[str, Any]) -> int:
    """The ranks sharing this machine's cores: the world over its nodes (1 outside DDP).

    A fit's own summary, read before what ran it is added, counts its ranks' figures on one node.
    """
    world = summary.get("world_size") or len(summary.get("ranks") or ()) or 1
    return max(1, int(world) // max(1, int(summary.get("num_nodes") or 1)))


REMEASURE = "measure again on a quieter machine, the verdict being in doubt"
EVAL_HEAVY = 0.5  # an epoch's validation taking this share of it or more: said before the training's fixes
VALIDATE_LESS = (
    "validation less often or shorter (Trainer(check_val_every_n_epoch=N) or limit_val_batches): it takes {share:.0%} "
    "of each epoch, and what the verdict says of training is the rest"
)
# On cores other work holds, a step's threads wait for each other: one waiting for a core holds up every operation
# (OpenMP's threads meet at the end of each operation)
SHARED_THREADS = (
    "fewer torch threads while other work holds the cores (torch.set_num_threads(1); this run used {used}): each "
    "operation waits for its slowest thread, and one waiting for a core holds up the rest"
)
FIX_BUYS = "What a fix could buy (a measured ceiling, not a promise)"  # the words above the ceiling, wherever shown


def format_advice(ceiling: str, hints: Sequence[str]) -> str:
    """The advice as printed at the end of fit: the ceiling, then what usually brings it."""
    return f"{FIX_BUYS}: {ceiling}. Usually: {'; '.join(hints)}."
