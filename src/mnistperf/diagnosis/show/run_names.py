"""Which runs a comparison holds: each named by its own folder, and a pair that cannot show what a change bought said.

A run is named by its folder (``version_1``) after its logger's name where the run gave one
(``v2_pinned/version_1``); Lightning's default name, ``lightning_logs``, tells no run apart, so it is left out. Two
runs are the same run where both paths lead to one ``timing.json`` (a folder stands for the newest run under it) or
where the two files hold the same figures (a copy): comparing it with itself would show a change of nothing. Two
runs of different datasets, or of models whose arguments differ, are compared as asked, under a line saying so.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from mnistperf.diagnosis.record.run import SUMMARY_FILE, RunSummary
from mnistperf.errors import ConfigError

# The name Lightning's loggers give every run where the run gave none
DEFAULT_LOGGER_NAME = "lightning_logs"


def run_label(path: Path, config: str | None) -> str:
    """A run as a comparison names it: its folder, after its logger's name where the run gave one."""
    folder = path.resolve().parent.name
    if not config or config in (DEFAULT_LOGGER_NAME, folder):
        return folder
    return f"{config}/{folder}"


def run_labels(paths: Sequence[Path], configs: Sequence[str | None]) -> list[str]:
    """Each run's :func:`run_label`; where two come out alike, the folders above theirs until they differ."""
    labels = [run_label(path, config) for path, config in zip(paths, configs, strict=True)]
    folders = [path.resolve().parent.parts for path in paths]
    depth = 2
    while len(set(labels)) < len(labels) and depth <= max(len(parts) for parts in folders):
        labels = ["/".join(parts[-depth:]) for parts in folders]
        depth += 1
    return labels


def refuse_the_same_run(run_a: Path, run_b: Path, a: tuple[Path, RunSummary], b: tuple[Path, RunSummary]) -> None:
    """One line where A and B are one run (one file, or a copy of it), with two runs to give instead.

    Args:
        run_a: A's path as the user gave it.
        run_b: B's path as the user gave it.
        a: A's timing.json and its summary.
        b: B's timing.json and its summary.
    """
    (a_path, a_summary), (b_path, b_summary) = a, b
    if a_path.resolve() == b_path.resolve():
        why = f"both lead to {a_path}" + (
            ", a folder standing for the newest run under it" if run_a.is_dir() or run_b.is_dir() else ""
        )
    elif a_summary == b_summary:
        why = f"{b_path} holds the very figures of {a_path}, a copy"
    else:
        return
    others = [p.parent for p in a_path.parent.parent.glob(f"*/{SUMMARY_FILE}") if p.resolve() != a_path.resolve()]
    newest = max(others, key=lambda folder: (folder / SUMMARY_FILE).stat().st_mtime_ns, default=None)
    pair = (
        sorted((newest, a_path.parent), key=lambda folder: (folder / SUMMARY_FILE).stat().st_mtime_ns) if newest else []
    )
    fix = f"e.g. {pair[0]} {pair[1]} (the older first)" if pair else "a second run's timing.json or its log folder"
    raise ConfigError(
        f"{run_a} and {run_b} are the same run ({why}), so nothing changed between them; give two runs, {fix}"
    )


def mismatch(a: RunSummary, b: RunSummary) -> str | None:
    """A line where A and B trained different datasets or models, so their figures differ by more than a change.

    The dataset is the DataModule's ``dataset`` setting where both summaries record one; a model is told apart by
    the names of the arguments it saved (its hyperparameters): the same module with other values is a change to
    compare, other names are another model.
    """
    said = []
    datasets = [(run.data or {}).get("dataset") for run in (a, b)]
    if all(datasets) and datasets[0] != datasets[1]:
        said.append(f"A trained on {datasets[0]} and B on {datasets[1]}")
    keys = [set(run.model) if isinstance(run.model, dict) else set() for run in (a, b)]
    if all(keys) and keys[0] != keys[1]:
        only_a, only_b = sorted(keys[0] - keys[1]), sorted(keys[1] - keys[0])
        sides = [
            f"A's model has {', '.join(only_a)}" if only_a else "",
            f"B's has {', '.join(only_b)}" if only_b else "",
        ]
        said.append(" and ".join(side for side in sides if side) + " (other models)")
    if not said:
        return None
    return f"{'; '.join(said)}: the figures compare different work, not what a change to one run bought"
