"""The bench's chart: each row's train s/epoch beside the published figure, drawn into chart.png."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mnistperf.atomic import atomic_write
from mnistperf.bench import published
from mnistperf.bench.columns import COLUMN, Bench, Row, shown
from mnistperf.diagnosis.figures import AVG_TRAIN_S, TRAIN_S
from mnistperf.errors import ConfigError

LOG_SCALE_RANGE = 20  # bars further apart than this (largest / smallest) are drawn on a log axis


def chart_figure(rows: list[Row], device: str, log_scale: bool = False, settings: dict[str, Any] | None = None):
    """The ladder as bars: per row, its measured train s/epoch and the published figure where the stage has one.

    Each bar is labelled with its speed-up; the axis is logarithmic when asked or when the bars span more than
    ``LOG_SCALE_RANGE``. None when no row has a result.

    Args:
        rows: the bench's rows; those without a result are left out.
        device: what the measured bars ran on, for the legend.
        log_scale: a log axis whatever the range.
        settings: those the bench ran with (bounded epochs are not set beside the published whole ones).
    """
    import matplotlib.pyplot as plt

    bench = Bench(rows, settings or {})
    done = [r for r in rows if r.med(AVG_TRAIN_S.name)]
    if not done:
        return None
    published_bars = [(i, r) for i, r in enumerate(done) if COLUMN["published_train_s"].value(r, bench) is not None]
    width = 0.4 if published_bars else 0.6
    heights = [COLUMN[TRAIN_S].value(r, bench).median for r in done]
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(done)), 4.5))
    measured = ax.bar(
        [i - width / 2 if published_bars else i for i in range(len(done))],
        heights,
        width,
        color="#4C72B0",
        label=f"{device} (measured)",
    )
    speedups = [shown("speedup_x", r, bench) if bench.speedup(r) is not None else "" for r in done]
    ax.bar_label(measured, labels=speedups, fontsize=8)
    if published_bars:
        published_heights = [COLUMN["published_train_s"].value(r, bench) for _, r in published_bars]
        figures = ax.bar(
            [i + width / 2 for i, _ in published_bars],
            published_heights,
            width,
            color="#C8C8C8",
            label=published.HARDWARE,
        )
        ax.bar_label(figures, labels=[shown("published_speedup_x", r, bench) for _, r in published_bars], fontsize=8)
        heights += published_heights
    ax.set_xticks(range(len(done)), [COLUMN["label"].value(r, bench) for r in done], rotation=30, ha="right")
    ax.set_ylabel("train s/epoch (median); bar labels: speed-up of (train + test) s/epoch")
    ax.set_title(f"mnistperf ladder on {device}", fontsize=10)
    if log_scale or max(heights) / min(heights) > LOG_SCALE_RANGE:
        ax.set_yscale("log")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def write_chart(
    rows: list[Row], path: Path, device: str, log_scale: bool, settings: dict[str, Any] | None = None
) -> Path | None:
    """Draw :func:`chart_figure` into a PNG; None when matplotlib is not installed or no row has a result."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig = chart_figure(rows, device, log_scale, settings)
    if fig is None:
        return None
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=120))
    plt.close(fig)
    return path


def redraw_chart(folder: Path, log_scale: bool = False) -> Path | None:
    """Draw ``chart.png`` again from a bench folder's ``results.json``; None when matplotlib is not installed.

    Args:
        folder: a folder the bench wrote.
        log_scale: a log axis whatever the range.
    """
    try:
        results = json.loads((folder / "results.json").read_text())
        rows = [Row(**row) for row in results["rows"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"--redraw {folder}: no bench results.json readable there ({exc}); give a folder the bench wrote."
        ) from None
    device = results.get("environment", {}).get("device", "")
    return write_chart(rows, folder / "chart.png", device, log_scale, results.get("settings"))
