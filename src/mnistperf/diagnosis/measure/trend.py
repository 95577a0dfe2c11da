"""A figure's trend over epochs: moving one way every epoch, and its least-squares slope per epoch."""

from __future__ import annotations

import math
from itertools import pairwise
from statistics import linear_regression
from typing import Any

FEWEST_EPOCHS = 3


def trend(epochs: list[dict[str, Any]], key: str, unit: str) -> dict[str, Any] | None:
    """The row figure ``key`` rising every epoch, or falling every epoch, over ``FEWEST_EPOCHS`` or more; else None."""
    points = [(e["epoch"], e[key]) for e in epochs if e.get(key) is not None and not math.isnan(e[key])]
    steps = [b - a for (_, a), (_, b) in pairwise(points)]
    if len(points) < FEWEST_EPOCHS or not (all(s > 0 for s in steps) or all(s < 0 for s in steps)):
        return None
    slope = linear_regression([n for n, _ in points], [v for _, v in points]).slope
    first, last = points[0], points[-1]
    return {f"per_epoch_{unit}": slope, f"from_{unit}": first[1], f"to_{unit}": last[1], "epochs": [first[0], last[0]]}
