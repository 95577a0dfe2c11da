"""``python -m mnistperf tune --config their.yaml``: tune the input pipeline of another project's LightningCLI config.

Its own model and data classes, its own option names: the loader's knobs are found among the DataModule's
arguments (or named with ``--knob``), or the DataLoader is rebuilt where it has none. Every setting trains a
short, seeded fit of the project's own model and data in a fresh process (:mod:`mnistperf.tune.end_to_end`
decides what to try); the best is written into a copy of the config under the project's own keys, which its
own LightningCLI runs as is, with comments stating what was measured, and the table of trials beside it.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from mnistperf.atomic import atomic_write
from mnistperf.close_names import OneLineArgumentParser
from mnistperf.errors import ConfigError
from mnistperf.machine import usable_cpus
from mnistperf.tune import end_to_end
from mnistperf.tune.knobs import ARG, parse_knob, rebuilt_with
from mnistperf.tune.launcher import Launcher
from mnistperf.tune.project import Project, load, write_yaml
from mnistperf.tune.report import findings, trials_table
from mnistperf.tune.trial import TrialSpec

MIN_BUDGET_S = 15.0
# Where the untouched settings do not train and no --cli was given: a project's own CLI may be what they need.
OWN_CLI_FIX = (
    " (a project that trains through a LightningCLI subclass of its own, for its links or arguments, gives it: "
    "--cli myproj.cli.MyCLI)"
)
DEFAULT_BUDGET_MIN = 5.0

DESCRIPTION = (
    "Find the DataLoader settings that train another project fastest on this machine, by measuring them. The config "
    "is your project's LightningCLI config, naming its classes (model.class_path, data.class_path), importable from "
    "here (run from the project's folder, set PYTHONPATH, or give --import-path). The knobs are num_workers, "
    "persistent_workers, pin_memory and prefetch_factor (and the batch size with --tune-batch-size), found among "
    "the DataModule's arguments under its own names, or named with --knob; where it has none, its DataLoader is "
    "rebuilt with them. A project training through a LightningCLI subclass of its own names it with --cli. Each "
    "setting trains a short fit of your model and data in a fresh process; the best is "
    "written into a copy of the config (--out) that your CLI runs as is, with the table of every trial beside it."
)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Tune's options for another project's config, checked."""
    parser = OneLineArgumentParser(prog="mnistperf tune", description=DESCRIPTION)
    parser.add_argument(
        "--config", type=Path, required=True, metavar="FILE", help="your project's LightningCLI config (required)"
    )
    parser.add_argument(
        "--knob",
        action="append",
        default=[],
        metavar="KEY=V1,V2,...",
        help="a setting to try with these values, e.g. data.init_args.workers=0,2,4, or a DataLoader setting "
        "(num_workers=0,2) to rebuild the loader with; given, only the knobs named are tried; may be repeated "
        "(default: the loader's settings found among the DataModule's arguments)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an override of the config before measuring, e.g. trainer.precision=bf16-mixed; may be repeated "
        "(default: none)",
    )
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument(
        "--budget",
        type=float,
        default=None,
        metavar="MINUTES",
        help=f"minutes of measuring at most; then the best found so far is written (default: {DEFAULT_BUDGET_MIN:g})",
    )
    budget.add_argument(
        "--budget-s", type=float, default=None, metavar="SECONDS", help="the same budget in seconds (default: none)"
    )
    parser.add_argument(
        "--out", type=Path, default=Path("tuned.yaml"), metavar="FILE", help="the tuned config (default: %(default)s)"
    )
    parser.add_argument(
        "--tune-batch-size",
        action="store_true",
        help="also try 2x and 4x the batch size, which changes the training (default: off)",
    )
    parser.add_argument(
        "--cli",
        default=None,
        metavar="MODULE.CLASS",
        help="your project's LightningCLI subclass, which reads the config in every trial, so that its own "
        "arguments and links apply, e.g. myproj.cli.MyCLI (default: Lightning's LightningCLI)",
    )
    parser.add_argument(
        "--import-path",
        action="append",
        default=[],
        metavar="DIR",
        help="a folder your project's modules are imported from; may be repeated (default: the current folder "
        "and PYTHONPATH)",
    )
    parser.add_argument(
        "--steps", type=int, default=20, metavar="N", help="training steps per epoch of a trial (default: %(default)s)"
    )
    parser.add_argument(
        "--epochs",
        type=int,
        default=3,
        metavar="N",
        help="epochs of each trial, the first a warm-up left out of its figures (default: %(default)s)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=end_to_end.REPEATS,
        metavar="N",
        help="runs of the untouched settings, whose spread is the noise (default: %(default)s)",
    )
    opts = parser.parse_args(argv)
    given_s = opts.budget_s is not None
    opts.budget_s = opts.budget_s if given_s else 60 * (opts.budget or DEFAULT_BUDGET_MIN)
    if opts.budget_s < MIN_BUDGET_S:
        # Said as the user gave it: --budget in minutes, --budget-s in seconds
        given, at_least = (
            (f"--budget-s {opts.budget_s:g}", f"{MIN_BUDGET_S:g} seconds")
            if given_s
            else (f"--budget {opts.budget:g}", f"{MIN_BUDGET_S / 60:g} minutes")
        )
        raise ConfigError(
            f"{given}: too small to measure anything; give at least {at_least} "
            "(the untouched settings' trial alone takes that long)."
        )
    for name, least in (("steps", 1), ("epochs", 2), ("repeats", 1)):
        if getattr(opts, name) < least:
            raise ConfigError(f"--{name} {getattr(opts, name)}: give at least {least}.")
    return opts


def trials_path(out: Path) -> Path:
    """Where the table of every trial goes, beside the tuned config."""
    return out.with_suffix(".trials.md")


def tuned_yaml(project: Project, outcome: end_to_end.Outcome, opts: argparse.Namespace, device: str) -> str:
    """The tuned config: the project's own with the chosen settings under its keys, under comments of the findings."""
    lines = [
        f"# mnistperf tune: tuned from {project.path} on {device} in {outcome.spent_s:.0f} s "
        f"({time.strftime('%Y-%m-%d')}).",
        f"# Each setting trained {opts.epochs} epochs of at most {opts.steps} steps in a fresh process, seed "
        f"{project.seed()}; figures are the epochs after the first (the warm-up).",
    ]
    lines += [f"# {line[0].upper()}{line[1:]}." for line in findings(outcome, project.where)]
    lines.append(f"# Every trial: {trials_path(opts.out).name}.")
    config = project.with_settings(outcome.changes(ARG), outcome.knobs)
    return "\n".join(lines) + "\n" + yaml.safe_dump(config, sort_keys=False)


def tune_project_command(argv: Sequence[str], log: Callable[[str], None] = print) -> end_to_end.Outcome:
    """Tune another project's config: measure, print the table and the findings, write the tuned config."""
    opts = parse_args(argv)
    for folder in reversed(opts.import_path):
        sys.path.insert(0, str(Path(folder).resolve()))
    project = load(opts.config, opts.set, opts.cli)
    knobs = project.knobs([parse_knob(k) for k in opts.knob], opts.tune_batch_size)
    modules = [c.__module__ for c in (project.model_class, project.data_class) if c is not None]
    modules += [project.cli.rpartition(".")[0]] if project.cli else []
    with Launcher(opts.import_path, modules) as launcher:
        log(
            f"tuning {opts.config}: {', '.join(k.key for k in knobs.knobs)}; {usable_cpus()} usable CPUs, budget "
            f"{opts.budget_s:g} s, each trial {opts.epochs} epochs of at most {opts.steps} steps in a fresh process"
        )
        with tempfile.TemporaryDirectory(prefix="mnistperf-tune-") as work:
            numbers = itertools.count(1)

            def measure(settings: dict[str, Any], timeout_s: float) -> end_to_end.Run:
                root = Path(work) / f"trial-{next(numbers)}"
                root.mkdir()
                config = project.trial_config(settings, knobs, opts.epochs, opts.steps, str(root))
                spec = TrialSpec(
                    str(root),
                    opts.epochs,
                    opts.steps,
                    project.seed(),
                    config=str(write_yaml(config, root / "config.yaml")),
                    cli=project.cli,
                    rebuild=rebuilt_with(knobs, settings),
                )
                return launcher.measure(spec, timeout_s)

            outcome = end_to_end.run(
                knobs,
                measure,
                opts.budget_s,
                log,
                usable_cpus(),
                str(opts.config),
                opts.repeats,
                opts.tune_batch_size,
                fix=end_to_end.UNTOUCHED_FIX + ("" if project.cli else OWN_CLI_FIX),
            )
    device = next((r.device for r in outcome.baseline.runs if r.device), None) or "this machine"
    table = trials_table(outcome)
    atomic_write(opts.out, lambda tmp: tmp.write_text(tuned_yaml(project, outcome, opts, device)))
    atomic_write(
        trials_path(opts.out),
        lambda tmp: tmp.write_text(f"# mnistperf tune: {opts.config} on {device}\n\n{table}\n"),
    )
    log("")
    log(table)
    log("")
    for line in findings(outcome, project.where):
        log(line)
    log(f"written: {opts.out} (your project's `fit --config {opts.out}` runs it), {trials_path(opts.out)}")
    return outcome
