"""A bench row over its repeats and every column of it, each defined once in ``COLUMNS``.

Each row is one configuration (a stage, possibly with sweep overrides) over its repeats: medians with min-max,
speed-up of steady-state epoch time against the first row (per sample, where their epochs differ), and the published
figures beside it where the stage has them. A column holds its results.csv key, its table header, its value and how
the table shows it: the table, results.csv and the chart all read it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import median
from typing import Any, NamedTuple

from mnistperf.bench import published
from mnistperf.diagnosis.figures import (
    AVG_EVAL_S,
    AVG_TRAIN_S,
    BUSY,
    INPUT_WAIT_SHARE,
    PEAK_RSS_MB,
    SAMPLES,
    SAMPLES_PER_S,
    TOTAL_EVAL_S,
    TOTAL_TRAIN_S,
    TRAIN_S,
)
from mnistperf.diagnosis.record.units import samples_rate
from mnistperf.tables import markdown_table

REFERENCE_RUNNERS = ("plain", "bare")  # the runners of a stage's reference rows: a plain loop, bare Lightning


@dataclass
class Row:
    """One configuration's results over its repeats (or the error that stopped it)."""

    label: str  # the row's name: its stage, and the swept values or the reference row it is
    stage: str  # the name of the stage config it ran
    overrides: dict[str, str] = field(default_factory=dict)
    runner: str = "lightning"
    summaries: list[dict[str, Any]] = field(default_factory=list)  # the timing.json of every repeat
    error: str | None = None

    def values(self, key: str) -> list[float]:
        """The repeats' values of summary field ``key``, from the repeats that have one."""
        return [s[key] for s in self.summaries if s.get(key) is not None]

    def med(self, key: str) -> float | None:
        """Median of summary field ``key`` over the repeats; None when no repeat has it."""
        values = self.values(key)
        return median(values) if values else None

    @property
    def epoch_s(self) -> float | None:
        """Median steady-state seconds per epoch (train + test, epochs 2..N): what speed-ups compare."""
        per_epoch = [s[AVG_TRAIN_S.name] + s[AVG_EVAL_S.name] for s in self.summaries]
        return median(per_epoch) if per_epoch else None

    @property
    def warmup_s(self) -> float | None:
        """Median train seconds of epoch 1, the warm-up epoch (None for single-epoch runs)."""
        values = [s["warmup"][TRAIN_S] for s in self.summaries if s.get("warmup")]
        return median(values) if values else None

    @property
    def samples_per_epoch(self) -> float | None:
        """Median training samples of a steady-state epoch (epochs 2..N, or the only one) over the repeats."""
        epochs = [e for s in self.summaries for e in s.get("epochs", [])[1:] or s.get("epochs", [])]
        counts = [e[SAMPLES] for e in epochs if e.get(SAMPLES) is not None]
        return median(counts) if counts else None

    @property
    def total_s(self) -> float | None:
        """Median seconds of the whole run (train + test, every epoch) over the repeats."""
        totals = [s[TOTAL_TRAIN_S] + s[TOTAL_EVAL_S] for s in self.summaries]
        return median(totals) if totals else None

    def train_s(self) -> float:
        """Median train seconds per steady-state epoch, for a row known to have one."""
        value = self.med(AVG_TRAIN_S.name)
        assert value is not None, f"{self.label} has no train time"
        return value

    def peak_memory_mb(self, kind: str) -> float | None:
        """Largest peak over the repeats: 'main_process' RSS, or the sampled 'tree_pss' / 'tree_rss'."""
        values = [s[PEAK_RSS_MB].get(kind) for s in self.summaries if PEAK_RSS_MB in s]
        values = [v for v in values if v is not None]
        return max(values) if values else None


def _fmt(value: float | None, digits: int = 2, none: str = "-") -> str:
    return none if value is None else f"{value:.{digits}f}"


def _rate(value: float | None) -> str:
    return "-" if value is None else samples_rate(value)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


def _times(value: float | None, none: str = "-") -> str:
    return none if value is None else f"{value:.1f}x"


class Spread(NamedTuple):
    """A figure over the repeats: results.csv holds its median, min and max, the table its median and range."""

    median: float | None
    low: float | None
    high: float | None
    repeats: int

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        """The spread of the repeats' values."""
        low, high = min(values, default=None), max(values, default=None)
        return cls(median(values) if values else None, low, high, len(values))

    def text(self) -> str:
        """The median, then [min-max] where two repeats or more have the figure."""
        return _fmt(self.median) + (f" [{self.low:.2f}-{self.high:.2f}]" if self.repeats >= 2 else "")


@dataclass
class Bench:
    """What a column reads beside its own row: every row, and the settings the bench ran with."""

    rows: list[Row]
    settings: dict[str, Any] = field(default_factory=dict)

    @functools.cached_property
    def first(self) -> Row | None:
        """The first row with steady-state seconds per epoch, validation in them: what every speed-up is against."""
        return next((r for r in self.rows if r.epoch_s and r.runner != "bare"), None)

    @property
    def whole_epochs(self) -> bool:
        """Whether its rows trained whole epochs (not bounded to K batches each)."""
        return self.settings.get("limit_train_batches") is None

    @functools.cached_property
    def swept(self) -> list[str]:
        """Every option a sweep varied, sorted."""
        return sorted({key for r in self.rows for key in r.overrides})

    def speedup(self, row: Row) -> float | None:
        """The first row's seconds per epoch (train + test) over this row's.

        Where their epochs train different numbers of samples (epochs bounded to K batches of different sizes), their
        train seconds per training sample instead: their validations are alike or bounded otherwise. None for a
        bare-Lightning row, which validates nothing (its note sets its train time against its stage's), and where the
        samples are not known.
        """
        first = self.first
        if first is None or first.epoch_s is None or not row.epoch_s or row.runner == "bare":
            return None
        theirs, mine = first.samples_per_epoch, row.samples_per_epoch
        if theirs == mine:
            return first.epoch_s / row.epoch_s
        if not (theirs and mine):
            return None
        return (first.train_s() / theirs) / (row.train_s() / mine)

    def note(self, row: Row) -> str:
        """A row's error; for a reference row, the train time of each row of its stage over its own."""
        same_stage = [
            r for r in self.rows if r.runner == "lightning" and r.stage == row.stage and r.med(AVG_TRAIN_S.name)
        ]
        if row.runner not in REFERENCE_RUNNERS or not same_stage or not row.med(AVG_TRAIN_S.name):
            return row.error or ""
        ratios = [(r, r.train_s() / row.train_s()) for r in same_stage]
        what = "stage/plain" if row.runner == "plain" else "stage/bare Lightning"
        if len(ratios) == 1:
            return f"{what} train time: {ratios[0][1]:.3f}x"
        return f"{what} train time: " + ", ".join(f"{x:.3f}x ({r.label})" for r, x in ratios)


def _share_pct(row: Row, key: str) -> float | None:
    share = row.med(key)
    return None if share is None else 100 * share


def _data(row: Row, key: str) -> Any:
    return ((row.summaries[0] if row.summaries else {}).get("data") or {}).get(key)


def _verdicts(row: Row) -> str | None:
    return "/".join(sorted({s["verdict"] for s in row.summaries})) or None


def _published(row: Row, index: int, bench: Bench) -> float | None:
    """Published figure ``index`` (train s/epoch, test s/epoch, total s, speed-up) of an unmodified stage row.

    None where the bench bounded its epochs to fewer batches: the published are whole epochs'.
    """
    unmodified = not row.overrides and row.runner == "lightning" and bench.whole_epochs
    figures = published.STAGES.get(row.stage) if unmodified else None
    return figures[index] if figures else None


@dataclass(frozen=True)
class Column:
    """One column of the bench's results, read by the table (results.md and the printed one), results.csv and the chart.

    Args:
        key: its name in results.csv (None: the table only); a Spread fills ``KEY_median``, ``KEY_min`` and
            ``KEY_max``, a dict one column per key.
        header: its header in the table (None: results.csv only).
        value: its value for a row, as results.csv holds it.
        text: how the table shows the value.
    """

    key: str | None
    header: str | None
    value: Callable[[Row, Bench], Any]
    text: Callable[[Any], str] = str

    def cells(self, row: Row, bench: Bench) -> dict[str, Any]:
        """The results.csv cells of a row."""
        assert self.key is not None, f"{self.header} is the table's only"
        value = self.value(row, bench)
        if isinstance(value, Spread):
            return {f"{self.key}_median": value.median, f"{self.key}_min": value.low, f"{self.key}_max": value.high}
        return value if isinstance(value, dict) else {self.key: value}


COLUMNS = [
    Column("label", "label", lambda r, b: r.label),
    Column("stage", None, lambda r, b: r.stage),
    Column("runner", None, lambda r, b: r.runner),
    Column("sweep", None, lambda r, b: {f"sweep:{key}": r.overrides.get(key) for key in b.swept}),
    Column("device", None, lambda r, b: r.summaries[0]["device"] if r.summaries else None),
    Column("epochs", None, lambda r, b: b.settings.get("epochs")),
    Column("full_epochs", None, lambda r, b: b.whole_epochs),
    # batches asked; a grouped stage ran whole groups covering them
    Column("train_batches_limit", None, lambda r, b: b.settings.get("limit_train_batches")),
    Column("batch_size", None, lambda r, b: _data(r, "batch_size")),
    Column("batches_per_step", None, lambda r, b: _data(r, "batches_per_step")),
    Column("train_samples_per_epoch", None, lambda r, b: r.samples_per_epoch),
    Column("repeats", None, lambda r, b: len(r.summaries)),
    Column(TRAIN_S, "train s/epoch", lambda r, b: Spread.of(r.values(AVG_TRAIN_S.name)), Spread.text),
    Column("test_s", "test s/epoch", lambda r, b: Spread.of(r.values(AVG_EVAL_S.name)), Spread.text),
    Column("warmup_train_s", "warm-up train s", lambda r, b: r.warmup_s, _fmt),
    Column("total_s_median", "total s", lambda r, b: r.total_s, _fmt),
    Column("speedup_x", "speed-up", lambda r, b: b.speedup(r), _times),
    Column("samples_per_s_median", "samples/s", lambda r, b: r.med(SAMPLES_PER_S.name), _rate),
    Column("input_wait_pct", "input wait", lambda r, b: _share_pct(r, INPUT_WAIT_SHARE.name), _pct),
    Column("gpu_busy_pct", "GPU busy", lambda r, b: _share_pct(r, BUSY["cuda"].name), _pct),
    Column("verdict", "verdict", lambda r, b: _verdicts(r), lambda v: v or "-"),
    Column("val_acc_median", "val acc", lambda r, b: r.med("final_metric"), lambda v: _fmt(v, 4)),
    Column(
        "peak",
        "peak MB (main RSS / tree PSS)",
        lambda r, b: {
            "peak_main_rss_mb": r.peak_memory_mb("main_process"),
            "peak_tree_pss_mb": r.peak_memory_mb("tree_pss"),
        },
        lambda v: f"{_fmt(v['peak_main_rss_mb'], 0)} / {_fmt(v['peak_tree_pss_mb'], 0)}",
    ),
    Column(
        "published_train_s", "published train s/epoch", lambda r, b: _published(r, 0, b), lambda v: _fmt(v, none="")
    ),
    Column("published_speedup_x", "published speed-up", lambda r, b: _published(r, 3, b), lambda v: _times(v, "")),
    Column(None, "note", lambda r, b: b.note(r)),
    Column("error", None, lambda r, b: r.error),
]
COLUMN = {column.key or column.header: column for column in COLUMNS}


def shown(key: str, row: Row, bench: Bench) -> str:
    """Column ``key`` of a row as the table shows it."""
    column = COLUMN[key]
    return column.text(column.value(row, bench))


def table_rows(rows: list[Row], settings: dict[str, Any] | None = None) -> list[dict[str, str]]:
    """The table's columns of every row, by header; ``settings``: those the bench ran with."""
    bench = Bench(rows, settings or {})
    return [{c.header: c.text(c.value(r, bench)) for c in COLUMNS if c.header is not None} for r in rows]


def csv_rows(rows: list[Row], settings: dict[str, Any]) -> list[dict[str, Any]]:
    """One value per cell, for tools: statistics in their own columns, units in the names.

    The settings that shape a row (epochs, bounded or full epochs, repeats, swept values, device) stand beside its
    figures.
    """
    bench = Bench(rows, settings)
    return [{k: v for c in COLUMNS if c.key is not None for k, v in c.cells(r, bench).items()} for r in rows]


# What the speed-up column and the chart's bar labels compare, beside columns and bars of train time alone
SPEED_UP_SAID = (
    "speed-up: steady (train + test) s/epoch of the first row over each row's (train s/epoch: training alone); "
    "train s per training sample where their epochs train different numbers (bounded to K batches of different "
    "sizes); none for a bare-Lightning row, which validates nothing (its note compares train time)"
)

# Beside them where every run had one epoch: no figure leaves the warm-up out
ONE_EPOCH_SAID = "one epoch a run: every figure is that epoch's, warm-up included (--epochs 2 or more leaves it out)"


def bench_table(rows: list[Row], settings: dict[str, Any] | None = None) -> str:
    """The printable columns of every row as a Markdown table ('(no rows)' when there are none)."""
    printable = table_rows(rows, settings)
    if not printable:
        return "(no rows)"
    return markdown_table(list(printable[0]), [list(row.values()) for row in printable])
