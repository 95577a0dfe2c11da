"""What a change bought: two runs' figures side by side within their noise, B's gain against A's stated ceiling.

Each run is named by its folder; a pair that cannot show what a change bought (one run, or different work) is said.
The noise is how far a figure moved across a run's steady epochs; what is compared, the noise's rule and how to read
them: docs/diagnose.md, "Compare two runs".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from statistics import mean
from typing import Any

from mnistperf.diagnosis import figures
from mnistperf.diagnosis.record.epoch_text import figures_cover, how_stopped
from mnistperf.diagnosis.record.run import SUMMARY_FILE, RunSummary, load, number
from mnistperf.diagnosis.record.units import seconds
from mnistperf.errors import ConfigError

CEILING_SLACK = 0.05  # a gain this much over the ceiling still counts as within it (the two runs' own noise)
DEFAULT_LOGGER_NAME = "lightning_logs"  # Lightning's loggers' name for a run that gave none: it tells no run apart


def run_labels(paths: Sequence[Path], configs: Sequence[str | None]) -> list[str]:
    """Each run as a comparison names it: its folder (``version_1``), after its logger's name (``v2_pinned/version_1``).

    Where two come out alike, the folders above theirs until they differ.
    """
    folders = [path.resolve().parent.parts for path in paths]
    labels = [
        f"{config}/{parts[-1]}" if config and config not in (DEFAULT_LOGGER_NAME, parts[-1]) else parts[-1]
        for parts, config in zip(folders, configs, strict=True)
    ]
    depth = 2
    while len(set(labels)) < len(labels) and depth <= max(len(parts) for parts in folders):
        labels = ["/".join(parts[-depth:]) for parts in folders]
        depth += 1
    return labels


def load_two(run_a: Path, run_b: Path) -> tuple[tuple[Path, RunSummary], tuple[Path, RunSummary]]:
    """Both runs' timing.json and summary; one line where they are one run, which would show a change of nothing.

    One run: both paths lead to one timing.json (a folder stands for the newest under it), or to a copy of it.
    """
    (a_path, a_summary), (b_path, b_summary) = load(run_a), load(run_b)
    if a_path.resolve() == b_path.resolve():
        folder = ", a folder standing for the newest run under it" if run_a.is_dir() or run_b.is_dir() else ""
        why = f"both lead to {a_path}{folder}"
    elif a_summary == b_summary:
        why = f"{b_path} holds the very figures of {a_path}, a copy"
    else:
        return (a_path, a_summary), (b_path, b_summary)
    others = [p for p in a_path.parent.parent.glob(f"*/{SUMMARY_FILE}") if p.resolve() != a_path.resolve()]
    newest = max(others, key=lambda path: path.stat().st_mtime_ns, default=None)
    pair = [p.parent for p in sorted((newest, a_path), key=lambda path: path.stat().st_mtime_ns)] if newest else []
    fix = f"e.g. {pair[0]} {pair[1]} (the older first)" if pair else "a second run's timing.json or its log folder"
    raise ConfigError(
        f"{run_a} and {run_b} are the same run ({why}), so nothing changed between them; give two runs, {fix}"
    )


def mismatch(a: RunSummary, b: RunSummary) -> str | None:
    """A line where A and B trained different datasets or models, so their figures differ by more than a change.

    The dataset is the DataModule's ``dataset`` setting; a model is told apart by the names of the arguments it saved:
    the same module with other values is a change to compare, other names are another model.
    """
    said = []
    datasets = [(run.data or {}).get("dataset") for run in (a, b)]
    if all(datasets) and datasets[0] != datasets[1]:
        said.append(f"A trained on {datasets[0]} and B on {datasets[1]}")
    # (what a run records of its settings taking effect, NAME_applied, is no argument; older runs lack it)
    keys = [
        {k for k in run.model if not k.endswith(APPLIED)} if isinstance(run.model, dict) else set() for run in (a, b)
    ]
    if all(keys) and keys[0] != keys[1]:
        only_a, only_b = (", ".join(sorted(mine - theirs)) for mine, theirs in (keys, keys[::-1]))
        sides = [f"A's model has {only_a}" if only_a else "", f"B's has {only_b}" if only_b else ""]
        said.append(" and ".join(side for side in sides if side) + " (other models)")
    if not said:
        return None
    return f"{'; '.join(said)}: the figures compare different work, not what a change to one run bought"


def steady_values(run: RunSummary, figure: figures.Figure) -> list[float]:
    """The figure's values in the run's steady epochs (those an epoch measured), from its epoch figure."""
    if figure.per_epoch is None or run.steady_epochs is None:
        return []
    first, last = run.steady_epochs
    values = [number(row.get(figure.per_epoch)) for row in run.epochs if first <= row.get("epoch", 0) <= last]
    return [v for v in values if v is not None and math.isfinite(v)]


def spread(values: list[float]) -> float | None:
    """(largest - smallest) / mean of the values; None for fewer than two (a fit of 3 epochs has two) or a mean of 0."""
    if len(values) < 2 or mean(values) <= 0:
        return None
    return (max(values) - min(values)) / mean(values)


def noise(a: RunSummary, b: RunSummary, figure: figures.Figure) -> float | None:
    """The larger of the two runs' spreads of a figure (one run's where only it has one; None where neither has)."""
    return max((s for run in (a, b) if (s := spread(steady_values(run, figure))) is not None), default=None)


def unknown_noise(a: RunSummary, b: RunSummary, figure: figures.Figure) -> str | None:
    """Why a figure's noise is not known (None where it is): one reading a run, or too few steady epochs."""
    if figure.per_epoch is None:
        return "one reading a run"
    counts = [len(steady_values(run, figure)) for run in (a, b)]
    if max(counts) >= 2:
        return None
    if counts[0] == counts[1]:
        return f"each run has {counts[0]} steady epoch{'s' if counts[0] != 1 else ''} measuring it"
    return f"A has {counts[0]} steady epoch(s) measuring it, B {counts[1]}"


# What a run records of what ran it, by where its summary keeps it: compare lists those that differ.
RECORDED = (
    "config", "data", "loader", "model", "module", "trainer", "fit", "device", "precision", "world_size", "num_nodes",
    "cpu_affinity", "versions",
)  # fmt: skip
APPLIED = "_applied"  # a recorded setting's twin that says whether it took effect (data.pin_memory_applied)
# Records a summary older than them lacks: no change where one run has none
LATER = ("loader", "module", "trainer", "fit", "num_nodes")


def flattened(value: Any, prefix: str) -> dict[str, Any]:
    """A recorded value as dotted keys (``data.num_workers``) to each setting."""
    if isinstance(value, Mapping):
        return {k: v for key, item in value.items() for k, v in flattened(item, f"{prefix}.{key}").items()}
    return {prefix: value}


def changes(a: RunSummary, b: RunSummary) -> list[str] | None:
    """What differs between the two runs' records of what ran them: each setting, ``A's -> B's``.

    None where neither records any (a summary older than these records).
    """
    if not any(key in run.content for run in (a, b) for key in RECORDED):
        return None
    found = []
    for key in RECORDED:
        if key in LATER and not all(key in run.content for run in (a, b)):
            continue
        first, second = flattened(a.content.get(key), key), flattened(b.content.get(key), key)
        for name in sorted(set(first) | set(second)):
            if name.endswith(APPLIED) and not (name in first and name in second):  # a run older than the record
                continue
            if first.get(name) != second.get(name):
                found.append(
                    f"{name} {first.get(name, '-')} -> {second.get(name, '-')}{unapplied(name, first, second)}"
                )
    return found


def unapplied(name: str, first: dict[str, Any], second: dict[str, Any]) -> str:
    """Where a run asked for setting ``name`` and records it as not applied (``NAME_applied``): which run, said."""
    runs = [
        run
        for run, record in (("A", first), ("B", second))
        if record.get(name) and record.get(f"{name}{APPLIED}") is False
    ]
    return f" (not applied in {' and '.join(runs)}: skipped where it ran)" if runs else ""


# The figures that compare runs whose epochs differ in size: per sample, not per epoch.
PER_SAMPLE = (figures.SAMPLES_PER_S.where, figures.STEP_MEDIAN_S.where)


def other_sizes(a: RunSummary, b: RunSummary) -> tuple[float, float] | None:
    """The two runs' samples per steady epoch, where they differ by more than 1 %; else None."""
    first, second = epoch_samples(a), epoch_samples(b)
    return (first, second) if first and second and not math.isclose(first, second, rel_tol=0.01) else None


def warnings_of(a: RunSummary, b: RunSummary) -> list[str]:
    """What makes the pair compare more than a change: epochs of other sizes, an interrupted or warm-up-only run."""
    said = []
    sizes = other_sizes(a, b)
    if sizes is not None:
        first, second = sizes
        said.append(
            f"A's steady epochs train {first:,.0f} samples and B's {second:,.0f}: compare per sample "
            "(throughput, median step), not per epoch"
        )
    for name, run in (("A", a), ("B", b)):
        if run.content.get("interrupted"):  # what its figures cover: the epoch it stopped inside too
            said.append(f"{name} was {how_stopped(run.content.get('stopped_by'))}: {figures_cover(run.epochs)}")
        if len(run.epochs) == 1:
            said.append(f"{name} ran one epoch, its warm-up: its figures hold the first epoch's one-off costs")
    return said


def beyond(ratio: float | None, band: float | None) -> bool | None:
    """Whether B over A (``ratio``) is further from 1 than the noise ``band``; None where either is unknown."""
    if ratio is None or band is None or ratio <= 0:
        return None
    return max(ratio, 1 / ratio) - 1 > band  # the same call for a figure and its reciprocal (time, throughput)


def noise_word(ratio: float | None, band: float | None, why: str | None = None) -> str:
    """The word for a difference: within or beyond the runs' noise (with it), or the noise not known (and ``why``)."""
    verdict = beyond(ratio, band)
    if verdict is None or band is None:  # (a verdict is made of a band)
        return ("noise not known" + (f": {why}" if why else "")) if ratio is not None else "-"
    return f"{'beyond' if verdict else 'within'} noise ({band_said(band)})"


def band_said(band: float) -> str:
    """A noise band as a percentage, ``±5%`` (:func:`percent`)."""
    return f"±{percent(band)}"


def percent(share: float) -> str:
    """A share as a whole percentage, ``5%``; under a point with a decimal (``0.3%``), where it would read ``0%``."""
    return f"{share:.1%}" if abs(share) < 0.01 else f"{share:.0%}"


def epoch_samples(run: RunSummary) -> float | None:
    """Samples per steady epoch: throughput times train time (None where samples were not counted)."""
    rate, train = run.figure(figures.SAMPLES_PER_S), run.figure(figures.AVG_TRAIN_S)
    return rate * train if rate and train else None


def gain_over(a: RunSummary, b: RunSummary) -> dict[str, Any]:
    """B's gain over A per epoch of A's samples, and whether it stayed within A's ceiling (``at_most_s_less``).

    ``saved_s`` is negative where B is slower, ``slower`` is B's time over A's less 1, ``scaled`` says B's time was
    scaled to A's samples; ``ceiling_s`` and ``within`` are None where A's advice gave no ceiling.
    """
    a_time, b_time = (run.content[figures.AVG_TRAIN_S] for run in (a, b))  # a summary's own (shape.SUMMARY)
    a_samples, b_samples = epoch_samples(a), epoch_samples(b)
    scaled = False
    if a_samples and b_samples and not math.isclose(a_samples, b_samples, rel_tol=1e-3):
        scaled, b_time = True, a_samples * b_time / b_samples  # B's time for A's samples
    saved = a_time - b_time
    ceiling = a.advice.at_most_s_less if a.advice else None
    named = a.advice.culprit if a.advice else None
    kept = named is not None and b.advice is not None and (b.advice.culprit or {}).get("part") == named["part"]
    return {
        "saved_s": saved,
        "speed_up": a_time / b_time if b_time > 0 else None,
        "slower": b_time / a_time - 1 if a_time > 0 else None,
        "noise": noise(a, b, figures.AVG_TRAIN_S),
        "scaled": scaled,
        "bound": a.verdict,
        "ceiling_s": ceiling,
        "within": None if ceiling is None else saved <= ceiling * (1 + CEILING_SLACK),
        "removed": b.verdict != a.verdict,
        # A's culprit around the step and what it said a step without it could be, where it named one
        "culprit": (named["part"], named["speed_up_at_most"])
        if named and named.get("per") == "step" and not kept
        else None,
        "cores": [run.figure(figures.CORE_WAIT_SHARE) for run in (a, b)],  # the training thread's wait for a core
    }


def compare(a: RunSummary | Mapping[str, Any], b: RunSummary | Mapping[str, Any]) -> dict[str, Any]:
    """The two runs' figures side by side with B's over A's, their verdicts, and what B bought (:func:`gain_over`)."""
    a, b = RunSummary.of(a), RunSummary.of(b)
    rows = []
    for figure in figures.FIGURES:
        first, second = a.figure(figure), b.figure(figure)
        if figure.label is None or (first is None and second is None):
            continue
        row: dict[str, Any] = {
            "figure": figure.label.strip(),
            "key": figure.where,
            "unit": figure.shown,
            "a": None if first is None else first * figure.scale,
            "b": None if second is None else second * figure.scale,
            "ratio": second / first if first and second is not None else None,
            "noise": noise(a, b, figure),
            "noise_unknown": unknown_noise(a, b, figure),
        }
        rows.append({**row, "beyond_noise": beyond(row["ratio"], row["noise"])})
    if other_sizes(a, b):  # per-epoch figures compare different work: the per-sample ones lead
        rows.sort(key=lambda row: row["key"] not in PER_SAMPLE)
    return {
        "rows": rows,
        "verdicts": [a.verdict, b.verdict],
        "names": [a.config, b.config],
        "mismatch": mismatch(a, b),
        "warnings": warnings_of(a, b),
        "changed": changes(a, b),
        "bought": {**gain_over(a, b), "noise_unknown": unknown_noise(a, b, figures.AVG_TRAIN_S)},
    }


WHOLE = ("samples/s", "MB", "steps")  # units shown without decimals
COLUMNS = ["A", "B", "B/A", "the runs' noise"]  # the comparison's table, after its figures


def shown(value: Any, unit: str, scale: float = 1.0) -> str:
    """A figure's value times ``scale``, as compare and the report show it in ``unit`` ('-' where there is none)."""
    found = number(value)
    if found is None:
        return "-"
    return f"{found * scale:.0f}%" if unit == "%" else f"{found * scale:,.{0 if unit in WHOLE else 2}f}"


def comparison_rows(found: dict[str, Any]) -> list[list[str]]:
    """The comparison's table: each figure (its unit), A's and B's values, B over A and the noise; the verdicts last."""
    rows = [
        [
            f"{row['figure']} ({row['unit']})",
            shown(row["a"], row["unit"]),
            shown(row["b"], row["unit"]),
            "-" if row["ratio"] is None else f"{row['ratio']:.2f}x",
            noise_word(row["ratio"], row["noise"], row.get("noise_unknown")),
        ]
        for row in found["rows"]
    ]
    return [*rows, ["verdict", *(str(verdict or "-") for verdict in found["verdicts"]), "", ""]]


def format_comparison(found: dict[str, Any], a_path: Path, b_path: Path) -> str:
    """The comparison as printed: the runs, what B bought against A's ceiling, then a table of the figures."""
    names = run_labels((a_path, b_path), found["names"])
    bought = format_bought(found["bought"], found.get("changed"))
    lines = [f"A: {a_path} ({names[0]})", f"B: {b_path} ({names[1]})", bought, *comparison_notes(found), ""]
    table = [["", *COLUMNS], *comparison_rows(found)]
    wide = max(12, *(len(cell) for row in table for cell in row[1:3]))  # a verdict may be wider than a figure
    for label, a, b, ratio, noise_said in table:
        lines.append(f"{label:30} {a:>{wide}} {b:>{wide}} {ratio:>7}  {noise_said}".rstrip())
    return "\n".join(lines)


def comparison_notes(found: dict[str, Any]) -> list[str]:
    """What the comparison says before its table: why the runs compare more than a change, and what changed."""
    notes = [f"note: {line}" for line in [found["mismatch"], *found.get("warnings", [])] if line]
    changed = found.get("changed")
    if changed is not None:
        notes.append(f"changed: {'; '.join(changed)}" if changed else "changed: nothing the runs record")
    return notes


LOAD_MOVED = 0.1  # the training thread's wait for a core moving this share of train time between two runs is said


def format_bought(gain: dict[str, Any], changed: list[str] | None = None) -> str:
    """What B bought, in one line: its gain per epoch, and A's ceiling for its bound where A's advice gave one.

    Beyond the ceiling, the gain is set down to what ``changed`` between the runs, where their records say.
    """
    saved = gain["saved_s"]
    speed = "-" if gain["speed_up"] is None else f"{gain['speed_up']:.2f}"
    per = " of A's samples" if gain["scaled"] else ""
    noise_said = noise_word(
        None if gain["slower"] is None else 1 + gain["slower"], gain["noise"], gain.get("noise_unknown")
    )
    head = (f"B saves {seconds(saved)}" if saved >= 0 else f"B takes {seconds(-saved)} more") + f" per epoch{per}"
    head += f" ({speed}x, {noise_said})"
    cores = gain.get("cores") or [None, None]
    if None not in cores and abs(cores[0] - cores[1]) >= LOAD_MOVED:  # what no setting of the runs records
        head += (
            f"; the training thread waited for a core {cores[0]:.0%} of A's train time and {cores[1]:.0%} of B's: "
            "the machine's load moved between them too"
        )
    if gain["ceiling_s"] is None:
        stated = f"; A's summary stated no ceiling for its bound ({gain['bound'] or 'no verdict'})"
        after = f"; B is slower after what changed ({'; '.join(changed)})" if saved < 0 and changed else ""
        return head + stated + after
    removed = "B's verdict is no longer A's" if gain["removed"] else f"B is still {gain['bound']}"
    ceiling = seconds(gain["ceiling_s"])
    if saved < 0:  # a ceiling bounds a gain, not a loss
        verdict = f"where A's summary said fixing its {gain['bound']} bound could buy up to {ceiling}"
    else:
        side = "within" if gain["within"] else "beyond"
        verdict = f"{side} the {ceiling} that A's summary said fixing its {gain['bound']} bound could buy"
    if saved < 0 and changed:
        verdict += f" ({'; '.join(changed)})"
    elif not gain["within"]:
        if changed:
            verdict += f": more changed than that bound ({'; '.join(changed)})"
        elif changed is not None:
            verdict += ": nothing the runs record changed but the bound, so the machine's load or the data moved it"
        else:
            verdict += ": more changed than that bound (the machine, the model, the epoch)"
    culprit = gain.get("culprit")  # a part's gain, said beside the ceiling, where B no longer names the part
    if culprit is not None and saved >= 0 and gain["speed_up"] is not None:
        part, said = culprit
        short = gain["speed_up"] < 1 + (said - 1) * (1 - CEILING_SLACK)
        verdict += (
            f"; {'short of' if short else 'as much as'} the {said:.2f}x that A said a step without {part} could be"
        )
    return f"{head}, {verdict}; {removed}"
