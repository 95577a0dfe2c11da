"""The 95 % interval of a median of ratios, by the bootstrap: the cost scripts' statistic where the machine drifts.

Each ratio compares two runs taken close together (an arm's epoch to the plain one of the same round, or a fit
with the callbacks to the one beside it without), so the machine's drift cancels inside it; their median, resampled
with replacement, gives the interval. cpu-2core-diagnosis-cost/measure.py and cpu-2core-compat-cost/measure.py
import it.
"""

from __future__ import annotations

import random
import statistics


def median_interval(ratios: list[float], draws: int = 2000) -> tuple[float, float]:
    """2.5th and 97.5th percentiles of the median of ``ratios``, resampled with replacement (seeded: repeatable)."""
    draw = random.Random(0)
    medians = [statistics.median(draw.choices(ratios, k=len(ratios))) for _ in range(draws)]
    cuts = statistics.quantiles(medians, n=40)
    return cuts[0], cuts[-1]
