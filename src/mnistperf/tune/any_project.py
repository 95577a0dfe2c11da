"""``python -m mnistperf tune --config their.yaml``: tune the input pipeline of another project's LightningCLI config.

The best settings are written into a copy of the config under the project's own keys, which its own LightningCLI
runs as is, with comments stating what was measured, and the table of trials beside it.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from mnistperf.atomic import atomic_write_text
from mnistperf.diagnosis.measure.loader_options import SPEED_SETTINGS
from mnistperf.errors import ConfigError
from mnistperf.tune import end_to_end
from mnistperf.tune.knobs import ARG, Knobs, parse_knob
from mnistperf.tune.options import budget_s, check_out, tune_parser
from mnistperf.tune.project import Project, load
from mnistperf.tune.search import Outcome
from mnistperf.tune.trial import TrialSpec

# Where the untouched settings do not train and no --cli was given: a project's own CLI may be what they need.
OWN_CLI_HINT = (
    " (a project that trains through a LightningCLI subclass of its own, for its links or arguments, gives it: "
    "--cli myproj.cli.MyCLI)"
)

DESCRIPTION = (
    "Find the DataLoader settings that train another project fastest on this machine, by measuring them. The config "
    "is your project's LightningCLI config, naming its classes (model.class_path, data.class_path), importable from "
    "here (run from the project's folder, set PYTHONPATH, or give --import-path). The knobs are "
    f"{', '.join(SPEED_SETTINGS[:-1])} and {SPEED_SETTINGS[-1]} (and the batch size with --tune-batch-size), found "
    "among the DataModule's arguments under its own names, or named with --knob; where it has none, its DataLoader is "
    "rebuilt with them. A project training through a LightningCLI subclass of its own names it with --cli. Each "
    "setting trains a short fit of your model and data in a fresh process; the best is "
    "written into a copy of the config (--out) that your CLI runs as is, with the table of every trial beside it."
)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Tune's options for another project's config, checked."""
    parser = tune_parser(DESCRIPTION, "your project's LightningCLI config", "trainer.precision=bf16-mixed", "training")
    parser.add_repeated(
        "--knob",
        "KEY=V1,V2,...",
        "a setting to try with these values, e.g. data.init_args.workers=0,2,4, or a DataLoader setting "
        "(num_workers=0,2) to rebuild the loader with; given, only the knobs named are tried",
        "the loader's settings found among the DataModule's arguments",
    )
    parser.add_argument(
        "--cli",
        metavar="MODULE.CLASS",
        help="your project's LightningCLI subclass, which reads the config in every trial, so that its own "
        "arguments and links apply, e.g. myproj.cli.MyCLI (default: Lightning's LightningCLI)",
    )
    for section in ("model", "data"):  # LightningCLI(MyModel, MyData)'s
        help_ = f"the {section} class your script gives LightningCLI, its arguments plain keys in the config"
        parser.add_argument(f"--{section}", metavar="MODULE.CLASS", help=help_)
    said = "a folder your project's modules are imported from"
    parser.add_repeated("--import-path", "DIR", said, "the current folder and PYTHONPATH")
    for option, default, said in (
        ("--steps", 20, "training steps per epoch of a trial"),
        ("--epochs", 3, "epochs of each trial, the first a warm-up left out of its figures"),
        ("--repeats", end_to_end.REPEATS, "runs of the untouched settings, whose spread is the noise"),
    ):
        parser.add_argument(option, type=int, default=default, metavar="N", help=f"{said} (default: %(default)s)")
    opts = parser.parse_args(argv)
    opts.budget_s = budget_s(opts, "the untouched settings' trial alone takes")
    check_out(opts.out, opts.config)
    for folder in opts.import_path:
        if not Path(folder).is_dir():
            raise ConfigError(
                f"--import-path {folder}: no such folder; give the folder your project's packages are in."
            )
    for name, least in (("steps", 1), ("epochs", 2), ("repeats", 1)):
        if getattr(opts, name) < least:
            raise ConfigError(f"--{name} {getattr(opts, name)}: give at least {least}.")
    return opts


def trials_path(out: Path) -> Path:
    """Where the table of every trial goes, beside the tuned config."""
    return out.with_suffix(".trials.md")


def tuned_yaml(project: Project, outcome: Outcome, knobs: Knobs, opts: argparse.Namespace, device: str) -> str:
    """The tuned config: the project's own with the chosen settings under its keys, under comments of the findings."""
    lines = [
        f"# mnistperf tune: tuned from {project.path} on {device} in {outcome.spent_s:.0f} s "
        f"({time.strftime('%Y-%m-%d')}).",
        f"# Each setting trained {opts.epochs} epochs of at most {opts.steps} steps in a fresh process, seed "
        f"{project.seed()}; figures are the epochs after the first (the warm-up).",
    ]
    lines += [f"# {line[0].upper()}{line[1:]}." for line in end_to_end.findings(outcome, knobs, project.where)]
    lines.append(f"# Every trial: {trials_path(opts.out).name}.")
    config = project.as_written(project.with_settings(outcome.changes(knobs.keys(ARG)), knobs))
    return "\n".join(lines) + "\n" + yaml.safe_dump(config, sort_keys=False)


def tune_project_command(argv: Sequence[str], log: Callable[[str], None] = print) -> Outcome:
    """Tune another project's config: measure, print the table and the findings, write the tuned config."""
    opts = parse_args(argv)
    sys.path[:0] = [str(Path(folder).resolve()) for folder in opts.import_path]
    project = load(opts.config, opts.set, opts.cli, {"model": opts.model, "data": opts.data})
    knobs = project.knobs([parse_knob(k) for k in opts.knob], opts.tune_batch_size)
    modules = [c.__module__ for c in (project.model_class, project.data_class) if c is not None]
    modules += [project.cli.rpartition(".")[0]] if project.cli else []

    def made(settings: dict[str, Any], root: Path) -> dict[str, Any]:
        config = project.trial_config(settings, knobs, opts.epochs, opts.steps, str(root))
        (root / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        return {"config": str(root / "config.yaml")}

    spec = TrialSpec("", opts.epochs, opts.steps, project.seed(), cli=project.cli)
    hint = "" if project.cli else OWN_CLI_HINT
    where = str(opts.config)
    outcome = end_to_end.project_outcome(
        knobs, spec, made, where, where, opts.import_path, modules, opts.budget_s, opts.repeats, log, hint
    )
    device = next((r.device for r in outcome.trials[0].runs if r.device), None) or "this machine"
    table = end_to_end.trials_table(outcome)
    atomic_write_text(opts.out, tuned_yaml(project, outcome, knobs, opts, device))
    atomic_write_text(trials_path(opts.out), f"# mnistperf tune: {opts.config} on {device}\n\n{table}\n")
    log("\n".join(["", table, "", *end_to_end.findings(outcome, knobs, project.where)]))
    nested = project.fit is not project.config  # read before the subcommand: LightningCLI's --config FILE fit
    runs = f"--config {opts.out} fit" if nested else f"fit --config {opts.out}"
    log(f"written: {opts.out} (your project's `{runs}` runs it), {trials_path(opts.out)}")
    return outcome
