"""The profiled window's reading: its busy share (or why there is none), where and over what."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from enum import Enum
from typing import Any


class Unread(Enum):
    """Why a profiled window read no share (record/window_keeper says each in words)."""

    GRAPH_CAPTURED = "graph_captured"  # a CUDA graph was captured inside it
    PROFILER_RUNNING = "profiler_running"  # another torch profiler ran, and only one can
    MODE_CROSSED = "mode_crossed"  # another torch function mode was entered or left across its steps
    NO_CALLS = "no_calls"  # the operator clock timed no torch call
    NO_KERNELS = "no_kernels"  # the profiler saw no kernel on the device
    FEW_KERNELS = "few_kernels"  # fewer kernels than its steps launch: part of the device's work missed
    IDLE = "idle"  # nothing ran on the device


@dataclass
class Talk:
    """Under DDP, this rank's collectives in the window: the backend, the world, and their shares of its span."""

    backend: str
    world_size: int
    collectives: int
    share: float  # inside a collective
    exposed_share: float  # inside one with no other work beside it


@dataclass
class WindowReading:
    """One run's profiled window on its ``device``: None of a reading until it is read, ``reason`` where it is not."""

    device: str
    share: float | None = None
    reason: str | None = None
    epoch: int | None = None  # the epoch it was read in, and its first and last training step (from 1)
    first_step: int | None = None
    last_step: int | None = None
    kernels: int | None = None  # the kernels (CUDA) or operators (CPU) it recorded, or the torch calls it timed
    margin: float | None = None  # how far the share may be from the truth
    waited_for_a_core: float | None = None  # the share of it the training thread waited for a core (Linux)
    communication: Talk | None = None
    operator_clock: tuple[float, float] | None = None  # the least and most share, where torch calls were timed
    in_warmup: bool = False  # read in the warm-up epoch, the run's only
    cost_s: float | None = None  # what it added to its epoch
    trace: str | None = None  # its trace, relative to the run's log folder
    trace_skipped: str | None = None  # why no trace was written

    def as_json(self) -> dict[str, Any]:
        """As timing.json's ``busy_window``: its device and share, and each other field that holds something."""
        found = {key: value for key, value in asdict(self).items() if value is not None and value is not False}
        return {"device": self.device, "share": self.share, **found}

    @classmethod
    def of(cls, found: Mapping[str, Any]) -> WindowReading:
        """The reading a timing.json's ``busy_window`` holds (its unknown keys left out)."""
        kept = {f.name: found[f.name] for f in fields(cls) if f.name in found}
        talk = kept.get("communication")
        if talk is not None:
            kept["communication"] = Talk(**{f.name: talk[f.name] for f in fields(Talk)})
        if kept.get("operator_clock") is not None:
            kept["operator_clock"] = tuple(kept["operator_clock"])
        return cls(**kept)
