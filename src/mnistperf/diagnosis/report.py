"""A run's report to look at: one self-contained HTML file (inline SVG charts, no script, nothing fetched).

It shows the verdict and what a fix could buy, the step times across the run (each epoch's median, 90th
percentile and longest step), the split of train time per epoch, memory per epoch and, for two runs, their
comparison (:mod:`mnistperf.diagnosis.compare`). EpochTimer writes it beside ``timing.json`` at the fit's end;
``mnistperf report RUN --html`` writes it for any run.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

from mnistperf.atomic import atomic_write
from mnistperf.diagnosis.compare import format_bought
from mnistperf.diagnosis.summary import SPLIT_KEYS

REPORT_FILE = "timing.html"
WIDTH, HEIGHT, PAD = 560, 200, 40
COLOURS = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948")
STYLE = (
    "body{font-family:sans-serif;margin:24px;max-width:1100px;color:#222}"
    "h1{font-size:22px}h2{font-size:17px;margin-top:28px}"
    "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
    "th:first-child,td:first-child{text-align:left}.verdict{font-size:18px;font-weight:bold}"
    ".legend span{margin-right:14px}.none{color:#888}"
)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _legend(names: list[str]) -> str:
    items = "".join(
        f'<span><svg width="12" height="12"><rect width="12" height="12" fill="{COLOURS[i % len(COLOURS)]}"/></svg> '
        f"{escape(name)}</span>"
        for i, name in enumerate(names)
    )
    return f'<div class="legend">{items}</div>'


def _frame(top: float, unit: str, epochs: list[int], body: str, label: str) -> str:
    """An SVG chart's frame: its axes, the top value and the epochs under them, around ``body``."""
    ticks = "".join(
        f'<text x="{_x(i, len(epochs)):.1f}" y="{HEIGHT - PAD + 16}" font-size="11" text-anchor="middle">{n}</text>'
        for i, n in enumerate(epochs)
    )
    return (
        f'<svg role="img" aria-label="{escape(label)}" width="{WIDTH}" height="{HEIGHT}" '
        f'xmlns="http://www.w3.org/2000/svg">'
        f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - 10}" y2="{HEIGHT - PAD}" stroke="#888"/>'
        f'<line x1="{PAD}" y1="10" x2="{PAD}" y2="{HEIGHT - PAD}" stroke="#888"/>'
        f'<text x="2" y="16" font-size="11">{top:,.3g} {escape(unit)}</text>'
        f'<text x="{WIDTH // 2}" y="{HEIGHT - 4}" font-size="11" text-anchor="middle">epoch</text>'
        f"{ticks}{body}</svg>"
    )


def _x(index: int, count: int) -> float:
    """The middle of epoch ``index``'s slot of ``count`` along the horizontal axis."""
    return PAD + (WIDTH - PAD - 10) * (index + 0.5) / max(count, 1)


def _y(value: float, top: float) -> float:
    return HEIGHT - PAD - (HEIGHT - PAD - 10) * (value / top if top > 0 else 0)


def line_chart(epochs: list[dict[str, Any]], series: dict[str, str], unit: str, scale: float, label: str) -> str:
    """Lines over the epochs, one per ``series`` (row key: name), or a note where none was measured."""
    numbers = [e["epoch"] for e in epochs]
    values = {name: [_number(e.get(key)) for e in epochs] for key, name in series.items()}
    values = {name: v for name, v in values.items() if any(x is not None for x in v)}
    if not values:
        return f'<p class="none">{escape(label)}: not measured in this run.</p>'
    top = max(x for v in values.values() for x in v if x is not None) * scale
    body = ""
    for i, (name, points) in enumerate(values.items()):
        colour = COLOURS[i % len(COLOURS)]
        xy = [(_x(j, len(points)), _y(p * scale, top)) for j, p in enumerate(points) if p is not None]
        line = " ".join(f"{x:.1f},{y:.1f}" for x, y in xy)
        body += f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{line}"/>'
        body += "".join(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"><title>{escape(name)}</title></circle>'
            for x, y in xy
        )
    return _legend(list(values)) + _frame(top, unit, numbers, body, label)


def split_chart(epochs: list[dict[str, Any]]) -> str:
    """Each epoch's train time as stacked bars of its split (train time alone where the steps were not split)."""
    numbers = [e["epoch"] for e in epochs]
    top = max((_number(e.get("train_s")) or 0.0) for e in epochs) or 1.0
    width = (WIDTH - PAD - 10) / max(len(epochs), 1) * 0.6
    body = ""
    for j, e in enumerate(epochs):
        parts = [(key, _number(e.get(key))) for key in SPLIT_KEYS]
        if any(value is None for _, value in parts):
            parts = [("train_s", _number(e.get("train_s")) or 0.0)]
        base = 0.0
        for key, value in parts:
            colour = COLOURS[SPLIT_KEYS.index(key) % len(COLOURS)] if key in SPLIT_KEYS else "#999"
            low, high = _y(base, top), _y(base + (value or 0.0), top)
            body += (
                f'<rect x="{_x(j, len(epochs)) - width / 2:.1f}" y="{high:.1f}" width="{width:.1f}" '
                f'height="{max(low - high, 0):.1f}" fill="{colour}"><title>epoch {e["epoch"]} {key} '
                f"{value or 0:.3f} s</title></rect>"
            )
            base += value or 0.0
    names = [key.removesuffix("_s").replace("_", " ") for key in SPLIT_KEYS]
    return _legend(names) + _frame(top, "s", numbers, body, "train time split per epoch")


def _table(head: list[str], rows: list[list[str]]) -> str:
    cells = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{cells}</tr>{body}</table>"


def _fmt(value: Any, digits: int = 2) -> str:
    number = _number(value)
    return "-" if number is None else f"{number:,.{digits}f}"


def run_section(summary: dict[str, Any], title: str) -> str:
    """One run's part of the report: verdict, advice, step times, split and memory per epoch, the epochs' table."""
    epochs = summary.get("epochs", [])
    advice = summary.get("advice") or {}
    rows = [
        [
            str(e["epoch"]),
            _fmt(e.get("train_s")),
            _fmt(e.get("samples_per_s"), 0),
            _fmt((e.get("step_median_s") or 0) * 1e3 if e.get("step_median_s") is not None else None, 1),
            str(e.get("spikes", "-")),
            _fmt(e.get("rss_mb"), 0),
            str(e.get("verdict", "-")),
        ]
        for e in epochs
    ]
    parts = [
        f"<h2>{escape(title)}</h2>",
        f'<p class="verdict" id="verdict">Verdict: {escape(str(summary.get("verdict")))}</p>',
        f"<p>{escape(str(summary.get('verdict_reason', '')))}</p>",
        f"<p>Steady train time per epoch {_fmt(summary.get('avg_train_s'))} s, "
        f"{_fmt(summary.get('samples_per_s'), 0)} samples/s; device {escape(str(summary.get('device', '-')))}.</p>",
    ]
    if advice.get("ceiling"):
        parts.append(f"<p>What a fix could buy (a measured ceiling, not a promise): {escape(advice['ceiling'])}.</p>")
    parts += [
        "<h3>Step times across the run</h3>",
        line_chart(
            epochs,
            {
                "step_median_s": "median",
                "step_p90_s": "90th percentile",
                "step_max_s": "longest",
                "first_step_s": "first step",
            },
            "ms",
            1e3,
            "step times per epoch",
        ),
        "<h3>Train time split per epoch</h3>",
        split_chart(epochs) if epochs else "",
        "<h3>Memory per epoch</h3>",
        line_chart(
            epochs,
            {
                "rss_mb": "training process",
                "workers_rss_mb": "workers",
                "device_allocated_mb": "GPU allocated",
                "device_reserved_mb": "GPU reserved",
            },
            "MB",
            1.0,
            "memory per epoch",
        ),
        "<h3>Epochs</h3>",
        _table(["epoch", "train s", "samples/s", "median step ms", "spikes", "resident MB", "verdict"], rows),
    ]
    return "\n".join(parts)


def comparison_section(found: dict[str, Any]) -> str:
    """Two runs' comparison (:func:`~mnistperf.diagnosis.compare.compare`) as a table and what B bought."""
    rows = [
        [
            f"{row['figure']} ({row['unit']})",
            _fmt(row["a"]),
            _fmt(row["b"]),
            "-" if row["ratio"] is None else f"{row['ratio']:.2f}x",
        ]
        for row in found["rows"]
    ]
    rows.append(["verdict", *(str(v or "-") for v in found["verdicts"]), ""])
    note = f'<p id="mismatch">Note: {escape(found["mismatch"])}</p>' if found.get("mismatch") else ""
    return (
        '<h2 id="comparison">What B bought over A</h2>'
        + note
        + _table(["figure", "A", "B", "B/A"], rows)
        + f'<p id="bought">{escape(format_bought(found["bought"]))}</p>'
    )


def html_report(runs: list[tuple[str, dict[str, Any]]], comparison: dict[str, Any] | None = None) -> str:
    """The report of one run, or of two with their ``comparison`` first: a whole HTML document."""
    title = " against ".join(name for name, _ in runs)
    sections = [comparison_section(comparison)] if comparison is not None else []
    labels = ("A: ", "B: ") if len(runs) > 1 else ("",)
    sections += [run_section(summary, label + name) for label, (name, summary) in zip(labels, runs, strict=False)]
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Timing: {escape(title)}</title>'
        f"<style>{STYLE}</style></head><body><h1>Timing: {escape(title)}</h1>\n"
        + "\n".join(sections)
        + "</body></html>\n"
    )


def write_report(text: str, path: Path) -> None:
    """Write the report to ``path`` atomically."""
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
