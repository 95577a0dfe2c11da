"""Timing: where an epoch's time goes, and whether the run waits for data.

``clock`` holds :class:`~mnistperf.timing.clock.EpochClock`, the one object that turns a loop's
host timestamps and the GPU's profiled window into an epoch's figures and verdict; ``callback``
holds :class:`EpochTimer`, the Lightning callback over it that every stage config uses;
``fetch_clock`` times the host's wait for each training batch; ``kernel_busy`` the GPU's busy
share from its kernels over a profiled window; ``summary`` the verdict, the warm-up/steady-state
split and ``timing.json``.
"""

from mnistperf.timing.callback import EpochTimer
from mnistperf.timing.clock import EpochClock
from mnistperf.timing.summary import SUMMARY_FILE

__all__ = ["SUMMARY_FILE", "EpochClock", "EpochTimer"]
