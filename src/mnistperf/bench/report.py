"""Turn bench rows into the table, CSV, JSON and chart the bench writes.

Each row is one configuration (a stage, possibly with sweep overrides) over its repeats:
medians with min-max, speed-up of total time against the first row, and the published
figures beside it where the stage has them.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

from mnistperf.atomic import atomic_write
from mnistperf.bench import published
from mnistperf.errors import ConfigError


@dataclass
class Row:
    """One configuration's results over its repeats (or the error that stopped it)."""

    label: str
    stage: str
    overrides: dict[str, str] = field(default_factory=dict)
    runner: str = "lightning"
    summaries: list[dict[str, Any]] = field(default_factory=list)
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
        per_epoch = [s["avg_train_s"] + s["avg_eval_s"] for s in self.summaries]
        return median(per_epoch) if per_epoch else None

    @property
    def warmup_s(self) -> float | None:
        """Median train seconds of epoch 1, the warm-up epoch (None for single-epoch runs)."""
        values = [s["warmup"]["train_s"] for s in self.summaries if s.get("warmup")]
        return median(values) if values else None

    @property
    def samples_per_epoch(self) -> float | None:
        """Median training samples of a steady-state epoch (epochs 2..N, or the only one) over the repeats."""
        counts = [e["samples"] for s in self.summaries for e in s.get("epochs", [])[1:] or s.get("epochs", [])]
        return median(counts) if counts else None

    @property
    def total_s(self) -> float | None:
        """Median seconds of the whole run (train + test, every epoch) over the repeats."""
        totals = [s["total_train_s"] + s["total_eval_s"] for s in self.summaries]
        return median(totals) if totals else None

    def train_s(self) -> float:
        """Median train seconds per steady-state epoch, for a row known to have one."""
        value = self.med("avg_train_s")
        assert value is not None, f"{self.label} has no train time"
        return value

    def peak_memory_mb(self, kind: str) -> float | None:
        """Largest peak over the repeats: 'main_process' RSS, or the sampled 'tree_pss' / 'tree_rss'."""
        values = [s["peak_rss_mb"].get(kind) for s in self.summaries if "peak_rss_mb" in s]
        values = [v for v in values if v is not None]
        return max(values) if values else None


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{share:.0%}"


def _spread(row: Row, key: str) -> str:
    values = row.values(key)
    if len(values) < 2:
        return ""
    return f" [{min(values):.2f}-{max(values):.2f}]"


def table_rows(rows: list[Row]) -> list[dict[str, str]]:
    """The printable columns of every row."""
    base = next((r.epoch_s for r in rows if r.epoch_s), None)
    lightning_rows = [r for r in rows if r.runner == "lightning" and r.summaries and r.med("avg_train_s")]
    out = []
    for r in rows:
        ref = published_figures(r)
        epoch = r.epoch_s
        note = r.error or ""
        same_stage = [lr for lr in lightning_rows if lr.stage == r.stage]
        if r.runner in ("plain", "bare") and same_stage and r.med("avg_train_s"):
            ratios = [(lr, lr.train_s() / r.train_s()) for lr in same_stage]
            what = "stage/plain" if r.runner == "plain" else "stage/bare Lightning"
            if len(ratios) == 1:
                note = f"{what} train time: {ratios[0][1]:.3f}x"
            else:
                note = f"{what} train time: " + ", ".join(f"{x:.3f}x ({lr.label})" for lr, x in ratios)
        out.append(
            {
                "stage": r.label,
                "train s/epoch": _fmt(r.med("avg_train_s")) + _spread(r, "avg_train_s"),
                "test s/epoch": _fmt(r.med("avg_eval_s")) + _spread(r, "avg_eval_s"),
                "warm-up train s": _fmt(r.warmup_s),
                "total s": _fmt(r.total_s),
                "speed-up": f"{base / epoch:.1f}x" if base and epoch else "-",
                "samples/s": _fmt(r.med("samples_per_s"), 0),
                "input wait": _pct(r.med("input_wait_share")),
                "GPU busy": _pct(r.med("device_busy_share")),
                "verdict": "/".join(sorted({s["verdict"] for s in r.summaries})) or "-",
                "val acc": _fmt(r.med("final_val_acc"), 4),
                "peak MB (main RSS / tree PSS)": f"{_fmt(r.peak_memory_mb('main_process'), 0)} / "
                f"{_fmt(r.peak_memory_mb('tree_pss'), 0)}",
                "published train s/epoch": _fmt(ref[0]) if ref else "",
                "published speed-up": f"{ref[3]:.1f}x" if ref else "",
                "note": note,
            }
        )
    return out


def _stat(row: Row, key: str, name: str) -> dict[str, float | None]:
    values = row.values(key)
    return {
        f"{name}_median": median(values) if values else None,
        f"{name}_min": min(values, default=None),
        f"{name}_max": max(values, default=None),
    }


def csv_rows(rows: list[Row], settings: dict[str, Any]) -> list[dict[str, Any]]:
    """One value per cell, for tools: statistics in their own columns, units in the names.

    The settings that shape a row (epochs, bounded or full epochs, repeats, swept values, device) stand beside its
    figures.
    """
    base = next((r.epoch_s for r in rows if r.epoch_s), None)
    swept = sorted({key for r in rows for key in r.overrides})
    limit = settings.get("limit_train_batches")
    out = []
    for r in rows:
        ref = published_figures(r)
        wait = r.med("input_wait_share")
        busy = r.med("device_busy_share")
        first = r.summaries[0] if r.summaries else {}
        data = first.get("data") or {}
        out.append(
            {
                "label": r.label,
                "stage": r.stage,
                "runner": r.runner,
                **{f"sweep:{key}": r.overrides.get(key) for key in swept},
                "device": r.summaries[0]["device"] if r.summaries else None,
                "epochs": settings.get("epochs"),
                "full_epochs": limit is None,
                "train_batches_limit": limit,  # batches asked; a grouped stage ran whole groups covering them
                "batch_size": data.get("batch_size"),
                "batches_per_step": data.get("batches_per_step"),
                "train_samples_per_epoch": r.samples_per_epoch,
                "repeats": len(r.summaries),
                **_stat(r, "avg_train_s", "train_s"),
                **_stat(r, "avg_eval_s", "test_s"),
                "warmup_train_s": r.warmup_s,
                "total_s_median": r.total_s,
                "speedup_x": base / r.epoch_s if base and r.epoch_s else None,
                "samples_per_s_median": r.med("samples_per_s"),
                "input_wait_pct": 100 * wait if wait is not None else None,
                "gpu_busy_pct": 100 * busy if busy is not None else None,
                "verdict": "/".join(sorted({s["verdict"] for s in r.summaries})) or None,
                "val_acc_median": r.med("final_val_acc"),
                "peak_main_rss_mb": r.peak_memory_mb("main_process"),
                "peak_tree_pss_mb": r.peak_memory_mb("tree_pss"),
                "published_train_s": ref[0] if ref else None,
                "published_speedup_x": ref[3] if ref else None,
                "error": r.error,
            }
        )
    return out


def per_step(rows: list[Row]) -> list[dict[str, Any]]:
    """Where a step's time goes, in ms, for every stage run beside its `plain PyTorch` and `bare Lightning` rows.

    Per stage: the plain step, what Lightning's loop adds to it, and what the lab adds on top (its logging, sums,
    timing callback, logger, checkpoints and validation hooks; the bench runs with the progress bar off).
    """
    out = []
    for row in rows:
        if row.runner != "lightning" or row.overrides or not row.med("avg_train_s"):
            continue
        plain, bare = (
            next((r for r in rows if r.runner == kind and r.stage == row.stage and r.med("avg_train_s")), None)
            for kind in ("plain", "bare")
        )
        if plain is None or bare is None or not row.samples_per_epoch:
            continue
        steps = math.ceil(row.samples_per_epoch / row.summaries[0]["data"]["batch_size"])

        def ms(r: Row, steps: int = steps) -> float:
            return 1000 * r.train_s() / steps

        out.append(
            {
                "stage": row.label,
                "steps_per_epoch": steps,
                "plain_step_ms": ms(plain),
                "lightning_loop_adds_ms": ms(bare) - ms(plain),
                "lab_adds_ms": ms(row) - ms(bare),
                "stage_over_bare_x": ms(row) / ms(bare),
            }
        )
    return out


def per_step_table(rows: list[Row]) -> str:
    """The per-step decomposition as a Markdown table ('' when no stage has both reference rows)."""
    found = per_step(rows)
    if not found:
        return ""
    lines = [
        "| stage | steps/epoch | plain PyTorch step ms | Lightning's loop adds ms | the lab adds ms | "
        "stage / bare Lightning |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {d['stage']} | {d['steps_per_epoch']} | {d['plain_step_ms']:.2f} | {d['lightning_loop_adds_ms']:+.2f} | "
        f"{d['lab_adds_ms']:+.2f} | {d['stage_over_bare_x']:.3f}x |"
        for d in found
    ]
    return "\n".join(lines)


def markdown_table(rows: list[Row]) -> str:
    """The printable columns of every row as a Markdown table ('(no rows)' when there are none)."""
    printable = table_rows(rows)
    if not printable:
        return "(no rows)"
    headers = list(printable[0])
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(row[h] for h in headers) + " |" for row in printable]
    return "\n".join(lines)


def environment_of(rows: list[Row]) -> dict[str, Any]:
    """The device, CPU count and versions the first finished repeat ran with ({} when none finished)."""
    for r in rows:
        for s in r.summaries:
            return {k: s[k] for k in ("device", "cpu_count", "versions")}
    return {}


def write_all(rows: list[Row], out: Path, settings: dict[str, Any], log_scale: bool = False) -> list[Path]:
    """Write results.md/.csv/.json (and chart.png when matplotlib is there); return what was written."""
    out.mkdir(parents=True, exist_ok=True)
    env = environment_of(rows)
    written = []

    unfinished = [r.label for r in rows if not r.summaries]
    md = [
        "# mnistperf bench" + (" (incomplete)" if unfinished else ""),
        "",
        *([f"- **incomplete**: no result for {', '.join(unfinished)} (see each row's note)", ""] if unfinished else []),
        f"- device: {env.get('device', 'unknown')}; CPU count: {env.get('cpu_count', '?')}",
        f"- versions: {env.get('versions', {})}",
        f"- settings: {json.dumps(settings)}",
        *(
            [f"- **bounded epochs**: {settings['limit_train_batches']} training batches per epoch, not whole epochs"]
            if settings.get("limit_train_batches")
            else []
        ),
        f"- published figures: {published.HARDWARE}",
        "- train s/epoch, test s/epoch, samples/s, input wait and verdict: steady-state epochs (2..N), medians "
        "over repeats; epoch 1 is shown apart as warm-up; total s covers every epoch",
        "- speed-up: steady-state seconds per epoch (train + test) of the first row over this row's",
        "- input wait: share of train time the host waited for the next batch (timed around the fetch); "
        ">= 50 %: input-bound",
        "- GPU busy (CUDA): share of the time the GPU executed kernels or copies, profiled over 20 steps of the "
        "warm-up epoch; >= 80 %: compute-bound, below: overhead-bound",
        "",
        markdown_table(rows),
        "",
    ]
    steps = per_step_table(rows)
    if steps:
        md += [
            "Per training step (steady-state train time over the epoch's steps; `bare Lightning`: the same network, "
            "optimizer, precision and data path in Lightning's loop with no logger, bar, checkpoints, metrics, "
            "validation or `self.log`; `plain PyTorch`: the same in a plain loop):",
            "",
            steps,
            "",
        ]
    targets = {"results.md": "\n".join(md)}

    buffer = io.StringIO()
    records = csv_rows(rows, settings)
    if records:
        writer = csv.DictWriter(buffer, fieldnames=list(records[0]))
        writer.writeheader()
        writer.writerows(records)
    targets["results.csv"] = buffer.getvalue()
    targets["results.json"] = json.dumps(
        {"settings": settings, "environment": env, "per_step": per_step(rows), "rows": [asdict(r) for r in rows]},
        indent=2,
    )
    for name, text in targets.items():
        atomic_write(out / name, functools.partial(Path.write_text, data=text))
        written.append(out / name)
    chart = write_chart(rows, out / "chart.png", env.get("device", ""), log_scale)
    if chart:
        written.append(chart)
    return written


LOG_SCALE_RANGE = 20  # bars further apart than this (largest / smallest) are drawn on a log axis


def published_figures(row: Row) -> tuple[float, float, float, float] | None:
    """The published (train s/epoch, test s/epoch, total s, speed-up) of a row's stage, for unmodified stage rows."""
    return published.STAGES.get(row.stage) if not row.overrides and row.runner == "lightning" else None


def chart_figure(rows: list[Row], device: str, log_scale: bool = False):
    """The ladder as bars: per row, its measured train s/epoch and the published figure where the stage has one.

    Each bar is labelled with its speed-up; the axis is logarithmic when asked or when the bars span more than
    ``LOG_SCALE_RANGE``. None when no row has a result.

    Args:
        rows: the bench's rows; those without a result are left out.
        device: what the measured bars ran on, for the legend.
        log_scale: a log axis whatever the range.
    """
    import matplotlib.pyplot as plt

    done = [r for r in rows if r.med("avg_train_s")]
    if not done:
        return None
    base = next((r.epoch_s for r in rows if r.epoch_s), None)
    shown = [(i, ref) for i, r in enumerate(done) if (ref := published_figures(r))]
    width = 0.4 if shown else 0.6
    heights = [r.train_s() for r in done]
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(done)), 4.5))
    measured = ax.bar(
        [i - width / 2 if shown else i for i in range(len(done))],
        heights,
        width,
        color="#4C72B0",
        label=f"{device} (measured)",
    )
    ax.bar_label(measured, labels=[f"{base / r.epoch_s:.1f}x" if base and r.epoch_s else "" for r in done], fontsize=8)
    if shown:
        figures = ax.bar(
            [i + width / 2 for i, _ in shown],
            [ref[0] for _, ref in shown],
            width,
            color="#C8C8C8",
            label=published.HARDWARE,
        )
        ax.bar_label(figures, labels=[f"{ref[3]:.1f}x" for _, ref in shown], fontsize=8)
        heights += [ref[0] for _, ref in shown]
    ax.set_xticks(range(len(done)), [r.label for r in done], rotation=30, ha="right")
    ax.set_ylabel("train s/epoch (median); bar labels: speed-up")
    ax.set_title(f"mnistperf ladder on {device}", fontsize=10)
    if log_scale or max(heights) / min(heights) > LOG_SCALE_RANGE:
        ax.set_yscale("log")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def write_chart(rows: list[Row], path: Path, device: str, log_scale: bool) -> Path | None:
    """Draw :func:`chart_figure` into a PNG; None when matplotlib is not installed or no row has a result."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig = chart_figure(rows, device, log_scale)
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
    return write_chart(rows, folder / "chart.png", results.get("environment", {}).get("device", ""), log_scale)
