"""A run's own noise: how far a figure moved across its steady epochs, and whether two runs differ beyond it.

The rule: docs/diagnose.md, "Compare two runs".
"""

from __future__ import annotations

import math
from statistics import mean

from mnistperf.diagnosis.figures import Figure
from mnistperf.diagnosis.record.run import RunSummary, number


def steady_values(run: RunSummary, figure: Figure) -> list[float]:
    """The figure's values in the run's steady epochs (those an epoch measured), from its epoch figure."""
    if figure.per_epoch is None or run.steady_epochs is None:
        return []
    first, last = run.steady_epochs
    values = [number(row.get(figure.per_epoch)) for row in run.epochs if first <= row.get("epoch", 0) <= last]
    return [v for v in values if v is not None and math.isfinite(v)]


def spread(values: list[float]) -> float | None:
    """(largest - smallest) / mean of the values; None for fewer than two (a fit of 3 epochs has two) or a mean of 0."""
    if len(values) < 2 or mean(values) <= 0:
        return None
    return (max(values) - min(values)) / mean(values)


def noise(a: RunSummary, b: RunSummary, figure: Figure) -> float | None:
    """The larger of the two runs' spreads of a figure (one run's where only it has one; None where neither has)."""
    found = [s for s in (spread(steady_values(a, figure)), spread(steady_values(b, figure))) if s is not None]
    return max(found) if found else None


def beyond(ratio: float | None, band: float | None) -> bool | None:
    """Whether B over A (``ratio``) is further from 1 than the noise ``band``; None where either is unknown."""
    if ratio is None or band is None or ratio <= 0:
        return None
    return max(ratio, 1 / ratio) - 1 > band  # the same call for a figure and its reciprocal (time, throughput)


def said(ratio: float | None, band: float | None) -> str:
    """The comparison's word for a difference: within or beyond the runs' noise (with it), or the noise not known."""
    verdict = beyond(ratio, band)
    if verdict is None:
        return "noise not known" if ratio is not None else "-"
    return f"{'beyond' if verdict else 'within'} noise (±{band:.0%})"
