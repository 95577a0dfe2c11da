"""Timing: where an epoch's time goes, and whether the run waits for data.

``callback`` holds :class:`EpochTimer`, the Lightning callback every stage config uses;
``fetch_clock`` times the host's wait for each training batch; ``kernel_busy`` the GPU's busy
share from its kernels over a profiled window; ``summary`` the verdict,
the warm-up/steady-state split and ``timing.json``.
"""

from mnistperf.timing.callback import EpochTimer, synchronize
from mnistperf.timing.summary import SUMMARY_FILE

__all__ = ["EpochTimer", "SUMMARY_FILE", "synchronize"]
