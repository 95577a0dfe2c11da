"""A run's report, or two runs' side by side: one self-contained HTML file (docs/diagnose.md, "A report to look at")."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

from mnistperf.atomic import atomic_write_text
from mnistperf.diagnosis import figures
from mnistperf.diagnosis.record.advice import FIX_BUYS
from mnistperf.diagnosis.record.epoch_text import batches_cut, interrupted_line
from mnistperf.diagnosis.record.run import RunSummary, number
from mnistperf.diagnosis.record.text import PARTS_SAID, steady_said
from mnistperf.diagnosis.show.compare import COLUMNS, comparison_notes, comparison_rows, format_bought, shown

REPORT_FILE = "timing.html"
# The page's content is 1100 px wide: one run's charts take all of it, two runs' charts of a kind sit side by side.
PAGE, GAP, HEIGHT = 1100, 20, 240
LEFT, RIGHT, TOP, BOTTOM = 76, 12, 12, 40  # the plot's margins: tick labels left, epochs and "epoch" below
MAX_EPOCH_LABELS = 20
COLOURS = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948")
STYLE = (
    "body{font-family:sans-serif;margin:24px;max-width:1100px;color:#222}"
    "h1{font-size:22px}h2{font-size:18px;margin-top:32px}h3{font-size:15px;margin:12px 0 6px}"
    "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
    "th:first-child,td:first-child,table.words td:last-child,table.words th:last-child{text-align:left}"
    ".verdict{font-size:17px;font-weight:bold}"
    ".legend span{margin-right:14px}.none{color:#888}svg.chart{max-width:100%;height:auto;display:block}"
    f".pair{{display:grid;gap:{GAP}px}}.pair>div{{min-width:0}}"  # its columns: one per run
)
STEP_SERIES: dict[str, str] = dict(
    zip(figures.STEPS[:4], ("median", "90th percentile", "longest", "first step"), strict=True)
)
MEMORY_SERIES: dict[str, str] = dict(
    zip(figures.MEMORY, ("training process", "workers (PSS)", "GPU allocated", "GPU reserved"), strict=True)
)


def ticks(peak: float) -> list[float]:
    """Round values from 0 to at least ``peak``, 4 to 7 of them: steps of 1, 2 or 5 times a power of ten."""
    peak = peak if peak > 0 else 1.0
    rough = peak / 6
    power = 10 ** math.floor(math.log10(rough))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= rough)
    count = math.ceil(peak / step - 1e-9)
    return [i * step for i in range(count + 1)]


def tick_label(value: float, step: float, unit: str) -> str:
    """``value`` in plain digits with thousands separated, as many decimals as ``step`` needs (0 none), and its unit."""
    decimals = next((d for d in range(7) if abs(step * 10**d - round(step * 10**d)) < 1e-6), 6) if value else 0
    return f"{value:,.{decimals}f} {unit}"


class Chart:
    """A chart of ``label`` over a run's ``epochs``, ``width`` px wide, its y axis in ``unit`` marked at ``marks``."""

    def __init__(self, width: int, epochs: list[dict[str, Any]], marks: list[float], unit: str, label: str) -> None:
        self.width, self.epochs, self.marks, self.unit, self.label = width, epochs, marks, unit, label

    def x(self, index: int) -> float:
        """The middle of epoch ``index``'s slot along the horizontal axis."""
        return LEFT + (self.width - LEFT - RIGHT) * (index + 0.5) / max(len(self.epochs), 1)

    def y(self, value: float) -> float:
        """The height of ``value`` on the vertical axis (SVG's y grows downwards; the top mark is above 0)."""
        return HEIGHT - BOTTOM - (HEIGHT - BOTTOM - TOP) * value / self.marks[-1]

    def svg(self, drawn: str, names: dict[int, str], missing: str, more: dict[str, str] | None = None) -> str:
        """``drawn`` in the chart's axes, a labelled line at each mark, the epochs under them; above, the legend.

        ``names``: each series' by its place, so that a series keeps its colour in every chart; ``more``: other
        entries of the legend, name by colour. Where nothing is drawn, a note instead: the chart's label and what is
        ``missing``.
        """
        if not drawn:
            return f'<p class="none">{escape(self.label)}: {missing}.</p>'
        entries = {**{COLOURS[i % len(COLOURS)]: name for i, name in names.items()}, **(more or {})}
        legend = "".join(
            f'<span><svg width="12" height="12"><rect width="12" height="12" fill="{colour}"/>'
            f"</svg> {escape(name)}</span>"
            for colour, name in entries.items()
        )
        every = math.ceil(len(self.epochs) / MAX_EPOCH_LABELS)  # long runs: every k-th epoch, the labels apart
        below = "".join(
            f'<text x="{self.x(i):.1f}" y="{HEIGHT - BOTTOM + 16}" font-size="11" text-anchor="middle">'
            f"{self.epochs[i]['epoch']}</text>"
            for i in range(0, len(self.epochs), every)
        )
        left = "".join(
            f'<line x1="{LEFT}" y1="{self.y(v):.1f}" x2="{self.width - RIGHT}" y2="{self.y(v):.1f}" stroke="#e4e4e4"/>'
            f'<text class="tick" x="{LEFT - 6}" y="{self.y(v) + 4:.1f}" font-size="11" text-anchor="end">'
            f"{escape(tick_label(v, self.marks[1], self.unit))}</text>"  # the marks: 0 and at least one step
            for v in self.marks
        )
        bottom, width = HEIGHT - BOTTOM, self.width
        return (
            f'<div class="legend">{legend}</div>'
            f'<svg class="chart" role="img" aria-label="{escape(self.label)}" width="{width}" height="{HEIGHT}" '
            f'viewBox="0 0 {width} {HEIGHT}" xmlns="http://www.w3.org/2000/svg">{left}'
            f'<line x1="{LEFT}" y1="{bottom}" x2="{width - RIGHT}" y2="{bottom}" stroke="#888"/>'
            f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{bottom}" stroke="#888"/>'
            f'<text x="{(LEFT + width - RIGHT) / 2:.0f}" y="{HEIGHT - 4}" font-size="11" text-anchor="middle">epoch'
            f"</text>{below}{drawn}</svg>"
        )


def _series(epochs: list[dict[str, Any]], series: dict[str, str]) -> dict[int, tuple[str, list[float | None]]]:
    """The measured series (by their place in ``series``): name and value per epoch."""
    found = {i: (name, [number(e.get(key)) for e in epochs]) for i, (key, name) in enumerate(series.items())}
    return {i: (name, v) for i, (name, v) in found.items() if any(x is not None for x in v)}


def line_charts(
    runs: list[list[dict[str, Any]]], width: int, series: dict[str, str], unit: str, scale: float, label: str
) -> list[str]:
    """Each run's lines over its epochs, one per ``series`` (row key: name), on one scale (a note where none is)."""
    found = [_series(epochs, series) for epochs in runs]
    marks = ticks(max((x * scale for each in found for _, v in each.values() for x in v if x is not None), default=0))
    charts = []
    for epochs, values in zip(runs, found, strict=True):
        chart = Chart(width, epochs, marks, unit, label)
        body = ""
        for i, (name, points) in values.items():
            colour = COLOURS[i % len(COLOURS)]
            xy = [(chart.x(j), chart.y(p * scale)) for j, p in enumerate(points) if p is not None]
            line = " ".join(f"{x:.1f},{y:.1f}" for x, y in xy)
            body += f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{line}"/>'
            body += "".join(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"><title>{escape(name)}</title></circle>'
                for x, y in xy
            )
        charts.append(chart.svg(body, {i: name for i, (name, _) in values.items()}, "not measured in this run"))
    return charts


WHOLE, WHOLE_COLOUR = "train time, not split into forward, backward and optimizer", "#999"


def _split(epoch: dict[str, Any]) -> list[tuple[str, float]]:
    """An epoch's train time in its split's parts, or whole where the steps were not split."""
    parts = [(key, number(epoch.get(key))) for key in figures.SPLIT]
    if any(value is None for _, value in parts):
        return [(figures.TRAIN_S, number(epoch.get(figures.TRAIN_S)) or 0.0)]
    return [(key, value or 0.0) for key, value in parts]


def split_charts(runs: list[list[dict[str, Any]]], width: int) -> list[str]:
    """Each run's train time per epoch as stacked bars of its split (whole where not split), all on one scale."""
    marks = ticks(max((sum(value for _, value in _split(e)) for epochs in runs for e in epochs), default=0.0))
    names = {i: key.removesuffix("_s").replace("_", " ") for i, key in enumerate(figures.SPLIT)}
    charts = []
    for epochs in runs:
        chart = Chart(width, epochs, marks, "s", "train time split per epoch")
        bar = min((chart.x(1) - chart.x(0)) * 0.6, 80)  # few epochs on a wide chart: bars, not walls
        body, whole = "", False
        for j, e in enumerate(epochs):
            base = 0.0
            for key, value in _split(e):
                at = figures.SPLIT.index(key) if key in figures.SPLIT else None
                colour, name = (WHOLE_COLOUR, WHOLE) if at is None else (COLOURS[at % len(COLOURS)], names[at])
                whole = whole or at is None
                low, high = chart.y(base), chart.y(base + value)
                body += (
                    f'<rect x="{chart.x(j) - bar / 2:.1f}" y="{high:.1f}" width="{bar:.1f}" '
                    f'height="{max(low - high, 0):.1f}" fill="{colour}"><title>epoch {e["epoch"]} {escape(name)} '
                    f"{value:.3f} s</title></rect>"
                )
                base += value
        charts.append(chart.svg(body, names, "no finished epoch", {WHOLE_COLOUR: WHOLE} if whole else None))
    return charts


def _table(head: list[str], rows: list[list[str]], words_last: bool = False) -> str:
    """A table of numbers, right-aligned past the first column; ``words_last``: its last column is words."""
    cells = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    kind = ' class="words"' if words_last else ""
    return f"<table{kind}><tr>{cells}</tr>{body}</table>"


def run_head(run: RunSummary) -> str:
    """A run's verdict, its reason, its steady figures and what a fix could buy, with what usually brings it."""
    advice = ""
    if run.advice:
        usually = "".join(f"<li>{escape(hint)}</li>" for hint in run.advice.hints)
        advice = f"\n<p>{FIX_BUYS}: {escape(run.advice.ceiling)}.</p>" + (
            f"\n<p>Usually:</p><ul>{usually}</ul>" if usually else ""
        )
    validated = run.figure(figures.TOTAL_EVAL_S)
    validation = f"{shown(run.figure(figures.AVG_EVAL_S), 's')} s" if validated else "none ran"
    stopped = ""
    if run.content.get("interrupted"):  # what its figures cover, first
        stopped = f'<p id="interrupted">{escape(interrupted_line(run.epochs, run.content.get("stopped_by")))}</p>\n'
    return (
        f'<p class="verdict" id="verdict">Verdict: {escape(str(run.verdict))}</p>\n{stopped}'
        f"<p>{escape(run.verdict_reason)}</p>\n"
        f"<p>Per epoch ({escape(steady_said(run))}): train {shown(run.figure(figures.AVG_TRAIN_S), 's')} s, "
        f"{shown(run.figure(figures.SAMPLES_PER_S), 'samples/s')} samples/s, validation {validation}; "
        f"device {escape(run.device or '-')}.</p>" + advice
    )


EPOCH_COLUMNS = (
    (figures.TRAIN_S, "train s"),
    (figures.EVAL_S, "eval s"),
    (figures.SAMPLES_PER_S, "samples/s"),
    (figures.STEP_MEDIAN_S, "median step ms"),
    (figures.SPIKES, "spike steps"),
    (figures.RSS_MB, "resident MB"),
)


def epoch_said(row: Mapping[str, Any]) -> str:
    """An epoch's number, with how it was cut where it was (its batches, or its validation)."""
    part = row.get("partial") or {}
    cut = f" ({batches})" if (batches := batches_cut(part)) else ""
    return f"{row['epoch']}{cut}" + (f" (validation {part['validation']})" if "validation" in part else "")


def epochs_table(run: RunSummary) -> str:
    """A run's epochs, one row each."""
    rows = [
        [epoch_said(e), *(shown(e.get(f), f.shown, f.scale) for f, _ in EPOCH_COLUMNS), str(e.get("verdict", "-"))]
        for e in run.epochs
    ]
    return _table(["epoch", *(head for _, head in EPOCH_COLUMNS), "verdict"], rows)


def figures_table(run: RunSummary) -> str:
    """Every figure the registry sets side by side that the run measured: its value as shown, and what it means."""
    rows = [
        [f"{f.label.strip()} ({f.shown})", shown(value, f.shown, f.scale), f.meaning]
        for f in figures.FIGURES
        if f.label is not None and (value := run.figure(f)) is not None
    ]
    return _table(["figure", "value", "what it is"], rows, words_last=True)


def parts_table(run: RunSummary, key: str) -> str:
    """Where a timed step's time goes, or the time between epochs (``key``): each part's ms, share and syncs (CUDA)."""
    found, said = run.content.get(key), PARTS_SAID[key]
    if not found:
        return f"<p>{said.untimed}</p>"
    whole_s, syncs = found[said.seconds], found.get("syncs")  # syncs where counted (CUDA)
    rows = [
        [part, f"{s * 1e3:.3f}", f"{s / whole_s:.0%}", *([] if syncs is None else [f"{syncs.get(part, 0):g}"])]
        for part, s in found["parts"].items()
    ]
    head = ["part", f"ms {said.each}", said.share, *([] if syncs is None else [f"device syncs {said.each}"])]
    return f"<p>{said.counted(found)}, {whole_s * 1e3:.2f} ms each.</p>" + _table(head, rows)


# A run's charts: heading, and how to draw each run's chart of that kind at a width, all on one scale.
CHARTS: tuple[tuple[str, Callable[[list[list[dict[str, Any]]], int], list[str]]], ...] = (
    ("Step times across the run", lambda runs, w: line_charts(runs, w, STEP_SERIES, "ms", 1e3, "step times per epoch")),
    ("Train time split per epoch", split_charts),
    ("Memory per epoch", lambda runs, w: line_charts(runs, w, MEMORY_SERIES, "MB", 1.0, "memory per epoch")),
)


def sections(runs: list[tuple[str, RunSummary]]) -> list[str]:
    """The runs' heads, each kind of chart with every run's on one scale, their epochs and figures.

    Several runs stand in columns, A first, each under its name; their tables one under the other (a table needs the
    page).
    """
    one, sides = len(runs) == 1, [chr(ord("A") + i) for i in range(len(runs))]
    width = (PAGE - GAP * (len(runs) - 1)) // len(runs)

    def titled(cells: list[str]) -> list[str]:
        names = [f"{side}: {name}" for side, (name, _) in zip(sides, runs, strict=True)]
        return cells if one else [f"<h3>{escape(name)}</h3>{cell}" for name, cell in zip(names, cells, strict=True)]

    def columns(cells: list[str]) -> str:
        if one:
            return cells[0]
        inner = "".join(f"<div>{cell}</div>" for cell in titled(cells))
        return f'<div class="pair" style="grid-template-columns:repeat({len(runs)},1fr)">{inner}</div>'

    scale = "" if one else f": {' and '.join(sides)} on one scale"
    charts = [f"<h2>{head}{scale}</h2>{columns(draw([r.epochs for _, r in runs], width))}" for head, draw in CHARTS]
    epochs, measured = (titled([table(run) for _, run in runs]) for table in (epochs_table, figures_table))
    parts = [
        section
        for key, said in PARTS_SAID.items()
        for section in (f"<h2>{said.head}</h2>", *titled([parts_table(run, key) for _, run in runs]))
    ]
    whose = "run's" if one else "runs'"
    heads = columns([run_head(run) for _, run in runs])
    return [heads, *charts, "<h2>Epochs</h2>", *epochs, f"<h2>The {whose} figures</h2>", *measured, *parts]


def comparison_section(found: dict[str, Any]) -> str:
    """Two runs' comparison (:func:`~mnistperf.diagnosis.show.compare.compare`) as a table and what B bought."""
    notes = "".join(f'<p class="note">{escape(note)}</p>' for note in comparison_notes(found))
    return (
        f'<h2 id="comparison">What B bought over A</h2>{notes}'
        + _table(["figure", *COLUMNS], comparison_rows(found), words_last=True)
        + f'<p id="bought">{escape(format_bought(found["bought"], found.get("changed")))}</p>'
    )


def html_report(
    runs: Sequence[tuple[str, RunSummary | Mapping[str, Any]]], comparison: dict[str, Any] | None = None
) -> str:
    """The report of one run, or of two side by side with their ``comparison`` first: a whole HTML document."""
    title = " against ".join(name for name, _ in runs)
    parts = [comparison_section(comparison)] if comparison is not None else []
    parts += sections([(name, RunSummary.of(run)) for name, run in runs])
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Timing: {escape(title)}</title>'
        f"<style>{STYLE}</style></head><body><h1>Timing: {escape(title)}</h1>\n" + "\n".join(parts) + "</body></html>\n"
    )


def write_report(text: str, path: Path) -> None:
    """Write the report to ``path`` atomically, in the UTF-8 its page declares."""
    atomic_write_text(path, text, encoding="utf-8")
