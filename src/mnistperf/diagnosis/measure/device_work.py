"""What the profiler saw of the device in a window: its events, the work and the ranks' talk among them, their shares.

What counts as the device's work, and as talk: docs/timing.md, "GPU busy" and "CPU in tensor operations".
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from contextlib import suppress
from typing import Any

import torch

from mnistperf.diagnosis.figures import share
from mnistperf.diagnosis.measure.window_reading import Talk, Unread
from mnistperf.upstream import kineto_results

MIN_KERNELS_PER_STEP = 8  # a step launches about ten at the least: a window that saw fewer missed part of its work
# What the busy share counts as the device working (not user annotations, which span whole steps on the GPU).
DEVICE_WORK = {"cuda": ("kernel", "gpu_memcpy", "gpu_memset"), "cpu": ("cpu_op",)}
# By device: (the backend whose collectives it shows, their kind, their name's start); gloo's on a GPU run on the host.
COLLECTIVES = {"cuda": ("nccl", "kernel", "nccl"), "cpu": ("gloo", "user_annotation", "gloo:")}

Activity = tuple[str, float, float]  # (kind, start, end) of the device's work, as work_of reads it
Event = tuple[str, str, float, float, bool]  # (kind, name, start, end, a user annotation), as profiled_events reads it


def covered(intervals: Iterable[tuple[float, float]]) -> tuple[float, float]:
    """(time covered by at least one interval, overlaps counted once; the span from first start to last end)."""
    spans = sorted((start, end) for start, end in intervals if end > start)
    inside, reached = 0.0, -math.inf
    for start, end in spans:
        inside += max(end - max(start, reached), 0.0)  # what it covers past the intervals before it
        reached = max(reached, end)
    return (inside, reached - spans[0][0]) if spans else (0.0, 0.0)


def busy_share(intervals: Iterable[tuple[float, float]], span: float | None = None) -> float | None:
    """The share of [first start, last end], or of ``span`` (in their unit), covered by at least one interval."""
    inside, whole = covered(intervals)
    whole = whole if span is None else span
    return min(inside / whole, 1.0) if whole > 0 and inside > 0 else None


def communication(
    work: list[tuple[float, float]], collectives: list[tuple[float, float]]
) -> tuple[float, float] | None:
    """Of the span of both, the share inside a collective and inside one with no ``work`` beside it; None if empty."""
    both, span = covered([*work, *collectives])
    if span <= 0:
        return None
    (talking, _), (working, _) = covered(collectives), covered(work)
    return share(talking, span), share(both - working, span)


def world() -> tuple[str, int] | None:
    """(the process group's backend, its size) where this process is one of several ranks; None on its own."""
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None
    return str(dist.get_backend()), dist.get_world_size()


def kernel_count(activities: list[Activity]) -> int:
    """The kernels (CUDA) or operators (CPU) among a window's device activities (copies and memsets left out)."""
    return sum(1 for kind, _, _ in activities if kind in ("kernel", "cpu_op"))


def window_reading(
    activities: list[Activity], steps: int, fewest_per_step: int, span_us: float | None = None
) -> tuple[float | None, Unread | None]:
    """(busy share, None), or (None, why not) from a window's activities (:func:`work_of`) over ``steps`` steps.

    ``span_us``: the steps' own span, where the share is of it (a CPU's), not of the activities' first to last.
    """
    kernels = kernel_count(activities)
    if kernels == 0:
        return None, Unread.NO_KERNELS
    if kernels < fewest_per_step * steps:
        return None, Unread.FEW_KERNELS
    found = busy_share(((start, end) for _, start, end in activities), span_us)
    return (found, None) if found is not None else (None, Unread.IDLE)


def collectives(events: list[Event], device_type: str) -> tuple[str, int, list[tuple[float, float]]] | None:
    """Under DDP, the backend, the world's size and each collective's (start, end) in microseconds; else None."""
    with suppress(Exception):  # a reading that fails leaves the window's share, and the fit, as they are
        backend, kind, prefix = COLLECTIVES[device_type]
        ranks = world()
        if ranks is not None and backend in ranks[0]:
            seen = [
                (start, end) for what, name, start, end, _ in events if what == kind and name.lower().startswith(prefix)
            ]
            return (*ranks, seen)
    return None


def profiled_events(profiler: Any, device_type: str = "cuda") -> list[Event]:
    """Every event the profiler saw on the device: (kind, name, start, end in microseconds, a user annotation)."""
    device = torch.autograd.DeviceType.CUDA if device_type == "cuda" else torch.autograd.DeviceType.CPU
    results = kineto_results(profiler)
    if results is not None:
        with suppress(AttributeError):  # a raw event without activity_type() (torch 2.11): the processed events instead
            return [
                (e.activity_type(), e.name(), e.start_ns() / 1e3, e.end_ns() / 1e3, e.is_user_annotation())
                for e in results.events()
                if e.device_type() == device
            ]
    found = []
    for e in profiler.events():
        if e.device_type != device:
            continue
        annotation = bool(getattr(e, "is_user_annotation", False))
        kind = getattr(e, "activity_type", None) or ("user_annotation" if annotation else DEVICE_WORK[device_type][0])
        found.append((str(kind), str(getattr(e, "name", "")), e.time_range.start, e.time_range.end, annotation))
    return found


def work_of(events: list[Event], device_type: str = "cuda", apart: str | None = None) -> list[Activity]:
    """(kind, start, end) of the device's work (:data:`DEVICE_WORK`) among a window's events, ``apart``'s left out."""
    work = DEVICE_WORK[device_type]
    return [
        (kind, start, end)
        for kind, name, start, end, annotation in events
        if not annotation and kind in work and not (apart and name.lower().startswith(apart))
    ]


def device_reading(
    profiler: Any, device_type: str, steps: int, fewest_per_step: int, span_s: float | None = None
) -> tuple[int, float | None, Unread | None, Talk | None]:
    """(kernels, busy share, why there is none, under DDP the ranks' talk) of ``steps`` steps the profiler recorded.

    ``span_s``: the steps' own span in seconds, where the share is of it (:func:`window_reading`).
    """
    events = profiled_events(profiler, device_type)
    talks = collectives(events, device_type)
    activities = work_of(events, device_type, COLLECTIVES[device_type][2] if talks is not None else None)
    busy, unread = window_reading(activities, steps, fewest_per_step, None if span_s is None else span_s * 1e6)
    talk = None
    if talks is not None and busy is not None:  # a window that missed the device's work cannot say what talk left idle
        backend, size, intervals = talks
        shares = communication([(start, end) for _, start, end in activities], intervals)
        talk = Talk(backend, size, len(intervals), *shares) if shares is not None else None
    return kernel_count(activities), busy, unread, talk
