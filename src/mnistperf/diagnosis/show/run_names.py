"""Which runs a comparison holds: each named by its folder, and a pair that cannot show what a change bought said."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from mnistperf.diagnosis.record.run import SUMMARY_FILE, RunSummary, load
from mnistperf.errors import ConfigError

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
    keys = [set(run.model) if isinstance(run.model, dict) else set() for run in (a, b)]
    if all(keys) and keys[0] != keys[1]:
        only_a, only_b = (", ".join(sorted(mine - theirs)) for mine, theirs in (keys, keys[::-1]))
        sides = [f"A's model has {only_a}" if only_a else "", f"B's has {only_b}" if only_b else ""]
        said.append(" and ".join(side for side in sides if side) + " (other models)")
    if not said:
        return None
    return f"{'; '.join(said)}: the figures compare different work, not what a change to one run bought"
