"""The GPU's own view of an epoch: CUDA events around every training step, read once per epoch.

Why host clocks are not enough on CUDA: kernels run asynchronously, so the host may be many
steps ahead of the device (the device is the bottleneck) or exactly in step with it (the
device finishes every kernel as soon as it is launched, and waits for the next). The host
clock alone cannot tell the two apart, and time the host spends fetching a batch is not
necessarily time the device waits.

:class:`StepEvents` records one CUDA event where each training step starts and one where it
ends (``Event.record`` only enqueues a marker: no synchronization), and the host time at which
each marker was enqueued. After the epoch's single synchronize, :func:`device_figures` turns
the two timelines into:

* ``device_step_s``: device time from the start marker to the end marker of each step, summed;
* ``device_gap_s``: device time between one step's end marker and the next step's start marker
  (the batch's copy to the device, plus any time the device sat idle because the host had not
  yet handed it the next step), counted from the epoch's start;
* ``device_lag_steps``: how far the device trails the host, in steps: the median, over steps,
  of (device time at which the step's end marker ran minus host time at which it was
  enqueued) divided by the median device step. The clocks are aligned at the epoch start,
  where both are idle after a synchronize. Near 0, the device keeps pace with the host: it
  runs each kernel as soon as it is launched, so the host's launching sets the speed
  (overhead-bound). Well above 0, work queues up on the device (compute-bound).
"""

from __future__ import annotations

import time
from statistics import median
from typing import Optional

import torch

# The device trailing the host by less than this many steps means the host sets the pace.
HOST_PACED_LAG_STEPS = 0.25


class StepEvents:
    """CUDA events at the start and end of every training step of one epoch, with host enqueue times."""

    def __init__(self, device: torch.device):
        self.device = device
        self._pool: list[torch.cuda.Event] = []
        self.reset()

    def reset(self) -> None:
        self._used = 0
        self.origin: Optional[tuple[torch.cuda.Event, float]] = None
        self.starts: list[tuple[torch.cuda.Event, float]] = []
        self.ends: list[tuple[torch.cuda.Event, float]] = []

    def _record(self) -> tuple[torch.cuda.Event, float]:
        if self._used == len(self._pool):  # events are reused from epoch to epoch
            self._pool.append(torch.cuda.Event(enable_timing=True))
        event = self._pool[self._used]
        self._used += 1
        event.record(torch.cuda.current_stream(self.device))
        return event, time.perf_counter()

    def mark_origin(self) -> None:
        """Call right after a synchronize: host and device are both idle here, so their clocks align."""
        self.origin = self._record()

    def step_start(self) -> None:
        self.starts.append(self._record())

    def step_end(self) -> None:
        self.ends.append(self._record())

    def read(self) -> Optional[dict[str, float]]:
        """The epoch's device figures; call only after the device was synchronized. None without steps."""
        if self.origin is None or not self.ends:
            return None
        origin_event, origin_host = self.origin
        steps = min(len(self.starts), len(self.ends))
        to_s = 1e-3  # Event.elapsed_time is in milliseconds

        def device_s(event):
            return origin_event.elapsed_time(event) * to_s

        return device_figures(
            device_starts=[device_s(e) for e, _ in self.starts[:steps]],
            device_ends=[device_s(e) for e, _ in self.ends[:steps]],
            host_ends=[h - origin_host for _, h in self.ends[:steps]],
        )


def device_figures(device_starts: list[float], device_ends: list[float], host_ends: list[float]) -> dict[str, float]:
    """Device busy time, idle gaps and lag from per-step timelines, in seconds since the epoch's origin.

    ``device_starts[i]`` / ``device_ends[i]``: when the device reached step i's start / end marker;
    ``host_ends[i]``: when the host enqueued step i's end marker.
    """
    spans = [end - start for start, end in zip(device_starts, device_ends)]
    previous_ends = [0.0] + device_ends[:-1]
    gaps = [max(start - before, 0.0) for start, before in zip(device_starts, previous_ends)]
    lags = [max(device - host, 0.0) for device, host in zip(device_ends, host_ends)]
    typical_step = median(spans) if spans else 0.0
    return {
        "device_step_s": sum(spans),
        "device_gap_s": sum(gaps),
        "device_lag_steps": median(lags) / typical_step if typical_step > 0 else 0.0,
    }
