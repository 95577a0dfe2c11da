"""``mnistperf tune``: find the fastest input pipeline for this machine by measuring.

For the lab's stage configs, ``probes`` times the loader alone, the step alone and both together; ``search``
decides what to try and when to stop; ``command`` is the command line, the tuned config and the table. For any
other Lightning project, ``any_project`` (a LightningCLI config) and ``python_api`` (:func:`tune_loaders`) measure
whole trial fits in fresh processes (``trial``, ``launcher``), decided by ``end_to_end`` over the loader's
``knobs`` (``rebuild`` where the DataModule has none), and say what they found (``report``; ``project`` reads and
writes the config).
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    """``tune_loaders`` and ``TuneResult``, imported on first use (they bring Lightning)."""
    if name in ("tune_loaders", "TuneResult"):
        from mnistperf.tune import python_api

        return getattr(python_api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
