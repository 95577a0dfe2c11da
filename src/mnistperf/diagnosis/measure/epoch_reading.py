"""What one process read of an epoch: each measured figure's own value (NaN: not measured), from one clock."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class EpochReading:
    """What one process read of an epoch, the profiled window's steps left out (NaN: not measured).

    Each measured figure is read from it (:attr:`.Figure.read`; by default the attribute of the figure's key).
    """

    device: str  # the device type the epoch ran on
    steps: int  # training steps
    train_s: float
    eval_s: float
    input_wait_s: float
    host_wait_s: float
    samples: float
    busy_share: float  # this process's profiled window's, on its device
    forward_s: float
    backward_s: float
    optimizer_s: float
    step_median_s: float
    step_p90_s: float
    step_max_s: float
    first_step_s: float
    spikes: float
    spikes_s: float
    rss_mb: float
    workers_pss_mb: float
    device_allocated_mb: float
    device_reserved_mb: float
    flops: float
    comm_share: float
    comm_exposed_share: float
    core_wait_share: float
    workers_cpu_share: float

    def busy(self, device: str) -> float:
        """The profiled window's busy share where it profiled ``device``, else NaN."""
        return self.busy_share if device == self.device else math.nan
