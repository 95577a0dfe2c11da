"""The verdict of an epoch's or a run's figures: input-, overhead- or compute-bound, or undetermined with why."""

from __future__ import annotations

from typing import Any

from mnistperf.diagnosis.figures import (
    BUSY,
    CORE_WAIT_SHARE,
    DEVICE_BUSY_SHARE,
    INPUT_WAIT_SHARE,
    SPLIT,
    WORKERS_CPU_SHARE,
)
from mnistperf.diagnosis.measure.busy_window import CROWDED
from mnistperf.diagnosis.measure.cores import cores_held_by

# What keeps a DDP fit's ranks on one machine from taking each other's cores: torch's threads shared out among them
RANK_THREADS = "give each rank torch.set_num_threads(usable cores // ranks on this machine)"
# Why freeing the cores may buy more than the training thread's wait: said wherever that wait is priced
UNREAD = "the step's other threads' waits are not read"

INPUT_BOUND_SHARE = 0.5  # the host waiting for data this share of train time or more: the input sets the pace
NEAR_INPUT_LINE = 0.05  # a wait for data this close to that line is a close call: the run is as much the other bound
COMPUTE_BOUND_BUSY = 0.8  # the device busy this share of the time or more: its arithmetic sets the pace
NOT_MEASURED = "too few steps for the profiled window"
# Why the warm-up epoch has no busy share yet; where the fit ends there, the summary says so instead.
WINDOW_PENDING = "read in the first steady epoch, after the warm-up"
FIT_ENDED = "the fit ended before its first steady epoch, where the window is read"
# On a CPU, an epoch of one step is profiled whole, an earlier steady epoch's figures standing in for its step.
ONE_STEP_PENDING = "epochs of one step have the busy share read in the fit's third, the second's standing in for it"
ONE_STEP_ENDED = "the fit ended before its third epoch, where epochs of one step have the busy share read"
# What a verdict reads of the profiled window beside its share: how far the share may be off, the wait for a core.
BUSY_MARGIN, WAITED_FOR_A_CORE = "busy_margin", "waited_for_a_core"
BUSY_SAID = {"cuda": "GPU busy", "cpu": "CPU inside tensor operations"}  # the profiled window's share, by device


def classify(figures: dict[str, Any], threshold: float, not_measured: str = NOT_MEASURED) -> tuple[str, str]:
    """(verdict, reason) of an epoch's or a run's figures: the bound, a close call's other bound, who held the cores."""
    verdict, reason = bound(figures, threshold, not_measured)
    other = close_call(figures, threshold, verdict)
    if other is not None:
        reason += (
            f"; a close call: waiting for data {figures[INPUT_WAIT_SHARE]:.0%} is within {NEAR_INPUT_LINE * 100:.0f} "
            f"points of the {threshold:.0%} that makes a run input-bound, so it is as much {other}"
        )
    return verdict, reason + clause(cores_held_by(figures))


def close_call(figures: dict[str, Any], threshold: float, verdict: str) -> str | None:
    """The other bound a run is as much as, where its wait for data lies within NEAR_INPUT_LINE of the line."""
    wait = figures[INPUT_WAIT_SHARE]
    if abs(wait - threshold) >= NEAR_INPUT_LINE:
        return None
    other = bound(figures, wait + 1.0 if verdict == "input-bound" else wait)[0]
    return None if other in (verdict, "undetermined") else other


def bound(figures: dict[str, Any], threshold: float, not_measured: str = NOT_MEASURED) -> tuple[str, str]:
    """(verdict, reason) from the wait for data, the busy share or the step's phases (docs/timing.md, "The verdict")."""
    wait = figures[INPUT_WAIT_SHARE]
    waited = f"host waited for the next batch {wait:.0%} of train time"
    on_cuda = DEVICE_BUSY_SHARE in figures
    device = "cuda" if on_cuda else "cpu"
    if wait >= threshold and not on_cuda:
        return "input-bound", waited
    if BUSY[device] not in figures:
        return "undetermined", f"{waited}; time inside tensor operations not measured on this device"
    busy = figures[BUSY[device]]
    if busy is None:
        unread = f"{waited}; {BUSY_SAID[device]} not measured ({not_measured})"
        most = None if on_cuda or wait >= threshold else step_share(figures)
        if most is not None and most < COMPUTE_BOUND_BUSY:
            return "overhead-bound", (
                f"{waited}; the step's forward, backward and update took {most:.0%} of the rest, so at most that was "
                f"inside tensor operations, the remainder being Lightning's loop, hooks and logging (the profiled "
                f"window did not run: {not_measured})"
            )
        return ("input-bound" if wait >= threshold else "undetermined"), unread
    detail = f"{BUSY_SAID[device]} {busy:.0%} of the time, {waited}"
    if wait >= threshold:
        return "input-bound", detail
    verdict = "compute-bound" if busy >= COMPUTE_BOUND_BUSY else "overhead-bound"
    if verdict == "overhead-bound":
        detail += (
            " (the GPU waits for the host to launch work)"
            if on_cuda
            else " (the rest is Python, the framework and dispatch around them"
            + (", the wait for data among it)" if round(wait, 2) > 0 else ")")
        )
    return verdict, detail + doubt(figures, busy)


def step_share(figures: dict[str, Any]) -> float | None:
    """Of train time not spent waiting for data, the share in forward, backward and update (None: not timed)."""
    split = figures.get("split", figures)
    parts = [split.get(figure) for figure in SPLIT]
    if any(part is None for part in parts) or sum(parts[1:]) <= 0:
        return None
    _, forward, backward, update, rest = parts
    return (forward + backward + update) / (forward + backward + update + rest)


def doubt(figures: dict[str, Any], busy: float) -> str:
    """What the reason adds where the share is near the line or the machine was crowded ('' if neither)."""
    margin = figures.get(BUSY_MARGIN)
    crowded = figures.get(WAITED_FOR_A_CORE)
    if crowded is not None and crowded >= CROWDED:
        doubted = f"; in doubt: the training thread waited for a core {crowded:.0%} of the profiled window"
        if cores_held_by(figures) is not None:
            return doubted + ", which moved the share"
        return doubted + ", so other work on this machine moved the share; measure again on a quieter machine"
    if margin is None or abs(busy - COMPUTE_BOUND_BUSY) >= margin:
        return ""
    return (
        f"; near the line, {busy:.0%} within {margin:.0%} of {COMPUTE_BOUND_BUSY:.0%}: the step may be "
        "either compute-bound (its own arithmetic sets the pace) or overhead-bound (the launches and the loop "
        "around it do)"
    )


def deciding(figures: dict[str, Any], verdict: str, threshold: float = INPUT_BOUND_SHARE) -> str:
    """The one figure that decided ``verdict``, as an epoch's line says it, with its doubt in a word if any.

    A close call names the other bound instead.
    """
    wait = figures[INPUT_WAIT_SHARE]
    other = close_call(figures, threshold, verdict)
    if other is not None:
        return f"waiting for data {wait:.0%}, a close call: as much {other}"
    if verdict == "input-bound":
        return f"waiting for data {wait:.0%}"
    device = "cuda" if DEVICE_BUSY_SHARE in figures else "cpu"
    busy = figures.get(BUSY[device])
    if busy is not None:
        return f"{BUSY_SAID[device]} {busy:.0%}" + (", in doubt" if doubt(figures, busy) else "")
    most = step_share(figures)
    if verdict == "overhead-bound" and most is not None:
        return f"at most {most:.0%} in tensor operations"
    return f"waiting for data {wait:.0%}, busy share not measured"


def clause(found: dict[str, Any] | None) -> str:
    """The verdict's clause on who held the cores (:func:`cores_held_by`), '' where nobody did."""
    if found is None:
        return ""
    wait, used = found[CORE_WAIT_SHARE], found[WORKERS_CPU_SHARE]
    if found["by"] == "workers":
        return (
            f"; its own DataLoader workers held the cores (the training thread waited for one {wait:.0%} of train "
            f"time, the workers using {used:.0%} of them): cheaper batches, such as a pre-tensorized dataset, or fewer "
            f"workers where the loader still keeps pace, could make training up to {found['speed_up_at_most']:.1f}x "
            f"faster, what the training thread's wait costs ({UNREAD})"
        )
    workers_used = f", its loader's workers using {used:.0%} of them" if used is not None else ""
    if found["by"] == "its ranks":
        return (
            f"; its own {found['ranks']} ranks (and any other work) took the cores: the training thread waited for one "
            f"{wait:.0%} of train time{workers_used}; {RANK_THREADS}"
        )
    return (
        "; other work on this machine took the cores: the "
        f"training thread waited for one {wait:.0%} of train time{workers_used}; measure again on a quieter machine"
    )
