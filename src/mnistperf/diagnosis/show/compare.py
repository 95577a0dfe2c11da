"""What a change bought: two runs' summaries side by side, and B's gain held against the ceiling A's advice stated.

Each run is its ``timing.json`` or a folder holding one (the newest under it). The figures compared are the steady
epochs' train time, throughput, the split of train time, the median step, the verdict, memory and, under DDP, the
time in collectives, each with B's value over A's. Where the runs' epochs hold different numbers of samples, B's
time is scaled to A's samples before its gain is taken. The gain is then checked against A's ``advice``: what
fixing A's bound could buy at most (``at_most_s_less``). A gain within it is what the advice predicted; one beyond
it means more changed than the bound (the machine, the model, the epoch).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from mnistperf.diagnosis.figures import AVG_TRAIN_S, SAMPLES_PER_S, Figure, shown_side_by_side
from mnistperf.diagnosis.record.noise import beyond, noise, said
from mnistperf.diagnosis.record.summary import SUMMARY_FILE
from mnistperf.diagnosis.show.run_names import mismatch, run_labels
from mnistperf.errors import ConfigError

# What a file that is not a summary is answered with: what one is, and how a run gets one
WHAT_A_SUMMARY_IS = (
    f"a {SUMMARY_FILE} is the summary EpochTimer writes at a fit's end, in the run's log folder "
    f"(lightning_logs/NAME/version_N/{SUMMARY_FILE}): give it or that folder, after `python -m mnistperf fit "
    "--config FILE` (or a fit of your own with EpochTimer among its callbacks, docs/diagnose.md)"
)
# A gain this much over the ceiling still counts as within it (the two runs' own noise).
CEILING_SLACK = 0.05


def find_summary(run: Path) -> Path:
    """The run's timing.json: the file given, or the newest under the folder given."""
    if run.is_file():
        return run
    if not run.is_dir():
        raise ConfigError(f"{run}: no such file or folder (give a {SUMMARY_FILE} or the run's log folder)")
    found = sorted(run.rglob(SUMMARY_FILE), key=lambda path: path.stat().st_mtime_ns)
    if not found:
        raise ConfigError(f"{run}: no {SUMMARY_FILE} under this folder (is it a run's log folder?)")
    return found[-1]


def load(run: Path) -> tuple[Path, dict[str, Any]]:
    """The run's timing.json (:func:`find_summary`) and its content."""
    path = find_summary(run)
    try:
        found = json.loads(path.read_text())
    except OSError as error:
        raise ConfigError(f"{path}: cannot be read ({error.strerror}); {WHAT_A_SUMMARY_IS}") from None
    except ValueError:
        raise ConfigError(f"{path}: not a {SUMMARY_FILE} (not JSON); {WHAT_A_SUMMARY_IS}") from None
    if not isinstance(found, dict) or AVG_TRAIN_S not in found:
        raise ConfigError(f"{path}: not a {SUMMARY_FILE} (JSON without avg_train_s); {WHAT_A_SUMMARY_IS}")
    return path, found


def read(summary: dict[str, Any], figure: Figure) -> float | None:
    """A figure of a run's summary, where the run keeps it (``figure.where``, a dotted path); None if absent."""
    value: Any = summary
    for key in figure.where.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def epoch_samples(summary: dict[str, Any]) -> float | None:
    """Samples per steady epoch: throughput times train time (None where samples were not counted)."""
    rate, train = summary.get(SAMPLES_PER_S), summary.get(AVG_TRAIN_S)
    return rate * train if rate and train else None


def bought(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """B's gain over A per epoch of A's samples, and whether it stayed within the ceiling A's advice stated.

    Returns ``saved_s`` (train seconds per epoch, negative where B is slower), ``speed_up`` (A's time over B's),
    ``slower`` (B's time over A's, less 1), ``noise`` (the runs' spread of train time, :mod:`.noise`),
    ``scaled`` (B's time was scaled to A's samples), and from A's advice ``bound``, ``ceiling_s`` and ``within``
    (None where A's advice gave no ceiling), and ``removed`` (B's verdict is no longer A's).
    """
    a_samples, b_samples = epoch_samples(a), epoch_samples(b)
    b_time = b[AVG_TRAIN_S]
    scaled = bool(a_samples and b_samples and not math.isclose(a_samples, b_samples, rel_tol=1e-3))
    if scaled:
        b_time = a_samples / b[SAMPLES_PER_S]  # both counted where scaled
    saved = a[AVG_TRAIN_S] - b_time
    band = noise(a, b, AVG_TRAIN_S)
    advice = a.get("advice") or {}
    ceiling = advice.get("at_most_s_less")
    within = None if ceiling is None else saved <= ceiling * (1 + CEILING_SLACK)
    return {
        "saved_s": saved,
        "speed_up": a[AVG_TRAIN_S] / b_time if b_time > 0 else None,
        "slower": b_time / a[AVG_TRAIN_S] - 1 if a[AVG_TRAIN_S] > 0 else None,
        "noise": band,
        "scaled": scaled,
        "bound": a.get("verdict"),
        "ceiling_s": ceiling,
        "within": within,
        "removed": b.get("verdict") != a.get("verdict"),
    }


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The two runs' figures side by side with B's over A's, their verdicts, and what B bought (:func:`bought`)."""
    rows = []
    for figure in shown_side_by_side():
        first, second = read(a, figure), read(b, figure)
        if first is None and second is None:
            continue
        ratio = second / first if first and second is not None else None
        band = noise(a, b, figure)
        rows.append(
            {
                "figure": (figure.label or figure.name).strip(),
                "key": figure.where,
                "unit": figure.shown,
                "a": None if first is None else first * figure.scale,
                "b": None if second is None else second * figure.scale,
                "ratio": ratio,
                "noise": band,
                "beyond_noise": beyond(ratio, band),
            }
        )
    return {
        "rows": rows,
        "verdicts": [a.get("verdict"), b.get("verdict")],
        "names": [a.get("config"), b.get("config")],
        "mismatch": mismatch(a, b),
        "bought": bought(a, b),
    }


def _cell(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if unit in ("samples/s", "MB") else f"{value:,.2f}" if unit != "%" else f"{value:.0f}%"


def format_comparison(found: dict[str, Any], a_path: Path, b_path: Path) -> str:
    """The comparison as printed: a table of the figures, the verdicts, then what B bought against A's ceiling."""
    names = run_labels((a_path, b_path), found["names"])
    lines = [f"A: {a_path} ({names[0]})", f"B: {b_path} ({names[1]})", ""]
    if found.get("mismatch"):
        lines[-1:] = [f"note: {found['mismatch']}", ""]
    lines.append(f"{'':30} {'A':>12} {'B':>12} {'B/A':>7}  the runs' noise")
    for row in found["rows"]:
        ratio = f"{row['ratio']:.2f}x" if row["ratio"] is not None else "-"
        label = f"{row['figure']} ({row['unit']})"
        cells = f"{_cell(row['a'], row['unit']):>12} {_cell(row['b'], row['unit']):>12} {ratio:>7}"
        lines.append(f"{label:30} {cells}  {said(row['ratio'], row['noise'])}")
    lines.append(f"{'verdict':30} {found['verdicts'][0] or '-':>12} {found['verdicts'][1] or '-':>12}")
    lines.append("")
    lines.append(format_bought(found["bought"]))
    return "\n".join(lines)


def format_bought(gain: dict[str, Any]) -> str:
    """What B bought, in one line: its gain per epoch, and A's ceiling for its bound where A's advice gave one."""
    saved = gain["saved_s"]
    speed = "-" if gain["speed_up"] is None else f"{gain['speed_up']:.2f}"
    per = " of A's samples" if gain["scaled"] else ""
    slower = gain.get("slower")
    noise_said = said(None if slower is None else 1 + slower, gain.get("noise"))
    head = (
        f"B saves {saved:.2f} s per epoch{per} ({speed}x, {noise_said})"
        if saved >= 0
        else f"B takes {-saved:.2f} s more per epoch{per} ({speed}x, {noise_said})"
    )
    if gain["ceiling_s"] is None:
        return head + f"; A's summary stated no ceiling for its bound ({gain['bound'] or 'no verdict'})"
    removed = "B's verdict is no longer A's" if gain["removed"] else f"B is still {gain['bound']}"
    if gain["within"]:
        verdict = (
            f"within the {gain['ceiling_s']:.2f} s that A's summary said fixing its {gain['bound']} bound could buy"
        )
    else:
        verdict = (
            f"beyond the {gain['ceiling_s']:.2f} s that A's summary said fixing its {gain['bound']} bound could buy: "
            "more changed than that bound (the machine, the model, the epoch)"
        )
    return f"{head}, {verdict}; {removed}"
