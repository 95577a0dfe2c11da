"""The bench's files: results.md (the table, what its columns mean, the per-step decomposition), .csv and .json."""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mnistperf.atomic import atomic_write_text
from mnistperf.bench import published
from mnistperf.bench.chart import write_chart
from mnistperf.bench.columns import ONE_EPOCH_SAID, REFERENCE_RUNNERS, SPEED_UP_SAID, Row, bench_table, csv_rows
from mnistperf.diagnosis.figures import AVG_TRAIN_S, BUSY
from mnistperf.diagnosis.record.run import RunSummary
from mnistperf.diagnosis.record.verdict import COMPUTE_BOUND_BUSY
from mnistperf.tables import markdown_table


def per_step(rows: list[Row]) -> list[dict[str, Any]]:
    """Where a step's time goes, in ms, for every stage run beside its `plain PyTorch` and `bare Lightning` rows.

    Per stage: the plain step, what Lightning's loop adds to it, and what the lab adds on top (its logging, sums,
    timing callback, logger, checkpoints and validation hooks; the bench runs with the progress bar off).
    """
    out = []
    for row in rows:
        if row.runner != "lightning" or row.overrides or not row.med(AVG_TRAIN_S.name):
            continue
        plain, bare = (
            next((r for r in rows if r.runner == kind and r.stage == row.stage and r.med(AVG_TRAIN_S.name)), None)
            for kind in REFERENCE_RUNNERS
        )
        if plain is None or bare is None or not row.samples_per_epoch:
            continue
        steps = math.ceil(row.samples_per_epoch / row.summaries[0]["data"]["batch_size"])

        def ms(r: Row, steps: int = steps) -> float:
            return 1000 * r.train_s() / steps

        out.append(
            {
                "stage": row.stage,  # a stage's own row: no sweep, so its label is its stage's name
                "steps_per_epoch": steps,
                "plain_step_ms": ms(plain),
                "lightning_loop_adds_ms": ms(bare) - ms(plain),
                "lab_adds_ms": ms(row) - ms(bare),
                "stage_over_bare_x": ms(row) / ms(bare),
                "stage_over_bare_per_repeat": per_repeat(row, bare),
            }
        )
    return out


def per_repeat(row: Row, reference: Row) -> list[float]:
    """The row's train time over the reference row's, repeat by repeat (each pair ran side by side: ``run_order``).

    Empty for one repeat, or where a repeat of either failed, which leaves the pairs unknown.
    """
    mine, theirs = row.values(AVG_TRAIN_S.name), reference.values(AVG_TRAIN_S.name)
    paired = len(mine) == len(theirs) == len(row.summaries) == len(reference.summaries) > 1
    return [a / b for a, b in zip(mine, theirs, strict=True)] if paired else []


def per_step_table(rows: list[Row]) -> str:
    """The per-step decomposition as a Markdown table ('' when no stage has both reference rows)."""
    found = per_step(rows)
    if not found:
        return ""
    header = ["stage", "steps/epoch", "plain PyTorch step ms", "Lightning's loop adds ms", "the lab adds ms"]
    header += ["stage / bare Lightning", "per repeat"]
    cells = [
        [d["stage"], d["steps_per_epoch"], f"{d['plain_step_ms']:.2f}", f"{d['lightning_loop_adds_ms']:+.2f}"]
        + [f"{d['lab_adds_ms']:+.2f}", f"{d['stage_over_bare_x']:.3f}x"]
        + [", ".join(f"{x:.3f}x" for x in d["stage_over_bare_per_repeat"])]
        for d in found
    ]
    return markdown_table(header, cells, right=range(1, 6))


def environment_of(rows: list[Row]) -> dict[str, Any]:
    """The device, CPU count and versions the first finished repeat ran with ({} when none finished)."""
    for r in rows:
        for s in r.summaries:
            return {k: s[k] for k in ("device", "cpu_count", "versions")}
    return {}


def thresholds(rows: list[Row]) -> list[str]:
    """What the input wait and GPU busy columns mean, with the thresholds and window the runs themselves used."""
    summaries = [summary for row in rows for summary in row.summaries]
    shares = sorted({f"{s['input_bound_share']:.0%}" for s in summaries if s.get("input_bound_share") is not None})
    read = [RunSummary.of(s).busy_window for s in summaries]
    windows = sorted(
        {
            f"steps {w.first_step}-{w.last_step} of epoch {w.epoch}"
            for w in read
            if w is not None and w.first_step is not None and w.device == "cuda"
        }
    )
    where = f"profiled over training {', '.join(windows)}" if windows else "not profiled in these runs"
    return [
        f"- input wait: share of train time the host waited for the next batch (timed around the fetch); "
        f">= {' or '.join(shares) or 'the run threshold'}: input-bound",
        f"- GPU busy (CUDA): {BUSY['cuda'].meaning}, {where}; >= {COMPUTE_BOUND_BUSY:.0%}: compute-bound, "
        "below: overhead-bound",
    ]


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
        f"- {SPEED_UP_SAID}",
        *([f"- **{ONE_EPOCH_SAID}**"] if settings.get("epochs") == 1 else []),
        *thresholds(rows),
        "",
        bench_table(rows, settings),
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
        atomic_write_text(out / name, text)
        written.append(out / name)
    chart = write_chart(rows, out / "chart.png", env.get("device", ""), log_scale, settings)
    if chart:
        written.append(chart)
    return written
