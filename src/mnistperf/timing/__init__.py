"""Timing: where an epoch's time goes, and whether the run waits for data.

``callback`` holds :class:`EpochTimer`, the Lightning callback every stage config uses;
``device_clock`` the CUDA-event timeline of the training steps; ``summary`` the verdict,
the warm-up/steady-state split and ``timing.json``.
"""

from mnistperf.timing.callback import EpochTimer, synchronize
from mnistperf.timing.summary import SUMMARY_FILE

__all__ = ["EpochTimer", "SUMMARY_FILE", "synchronize"]
