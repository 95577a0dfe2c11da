"""``mnistperf tune``: find the fastest input pipeline for this machine by measuring.

One ``search`` runs the trials of both tuners, by one ``policy``. For the lab's stage configs (``command``), a trial is
one of the ``probes`` and ``stages`` says what to try next; for any other Lightning project (``any_project``,
``python_api``), a trial is a whole fit in a fresh process (``trial``, ``launcher``) and ``end_to_end`` says what next.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    """``tune_loaders`` and ``TuneResult``, imported on first use (they bring Lightning)."""
    if name in ("tune_loaders", "TuneResult"):
        from mnistperf.tune import python_api

        return getattr(python_api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
