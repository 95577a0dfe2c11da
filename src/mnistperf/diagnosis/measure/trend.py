"""A figure's trend over epochs: the least-squares slope of its value per epoch."""

from __future__ import annotations

from statistics import mean


def slope(points: list[tuple[int, float]]) -> float:
    """The least-squares slope of (epoch, value) points, in the value's unit per epoch (two points at least)."""
    x_mean, y_mean = mean(n for n, _ in points), mean(v for _, v in points)
    return sum((n - x_mean) * (v - y_mean) for n, v in points) / sum((n - x_mean) ** 2 for n, _ in points)
