"""``python -m mnistperf tune --config CONFIG [--set KEY=VALUE ...] [--budget MINUTES] [--out tuned.yaml]``.

Reads the config as ``fit`` would, measures (:mod:`mnistperf.tune.stages`), and writes a config that ``fit`` runs
as is, with comments stating what was measured, and the table of every probe beside it (``<out>.probes.md``).
"""

from __future__ import annotations

import argparse
import copy
import inspect
import time
from collections.abc import Sequence
from pathlib import Path

import yaml

from mnistperf.atomic import atomic_write_text
from mnistperf.close_names import closest
from mnistperf.data.datamodule import MNISTDataModule
from mnistperf.data.pipelines.registry import PIPELINES
from mnistperf.errors import ConfigError
from mnistperf.lightning_cli.configs import missing_config, read_config
from mnistperf.lightning_cli.mnistperf_cli import parse_fit_config, refuse_training_nothing
from mnistperf.lightning_cli.settings import as_settings, check_key, load_config, parse_setting
from mnistperf.machine import describe_device, usable_cpus
from mnistperf.model import ImageClassifier
from mnistperf.tables import markdown_table
from mnistperf.tune import stages
from mnistperf.tune.any_project import tune_project_command
from mnistperf.tune.options import budget_s, check_out, tune_parser
from mnistperf.tune.probes import Probes
from mnistperf.tune.project import FIXED_CLASSES, SECTIONS, fit_section
from mnistperf.tune.search import Outcome, describe

DESCRIPTION = (
    "Find the fastest input settings for this machine by measuring them, starting from a stage config: "
    f"{', '.join('data.' + key for key in stages.LOADER_KEYS)} (and data.batch_size with --tune-batch-size). It "
    "times the training step alone, then each input pipeline with 0, 1, 2, 4, ... workers, cheapest first, until "
    "input is no longer the bound; then the best settings and the config's own train side by side. Writes a config "
    "that fit runs as is (--out), saying what was measured, and a table of every probe beside it "
    "(<out>.probes.md). Another project's LightningCLI config, naming its classes (model.class_path, "
    "data.class_path), is tuned by whole trial fits of its own model and data instead: `python -m mnistperf tune "
    "--config their.yaml --help` lists the options for it."
)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Tune's options, checked; ``budget_s`` in seconds."""
    parser = tune_parser(
        DESCRIPTION, "the stage config to start from, e.g. configs/v1_bs512.yaml", "data.batch_size=256", "optimization"
    )
    opts = parser.parse_args(argv)
    opts.budget_s = budget_s(opts, "the step alone and one loader take")
    check_out(opts.out, opts.config)
    return opts


def tuned_config(config: dict, outcome: Outcome, source: Path, out: Path, device: str, spent_s: float) -> str:
    """The tuned config's YAML: the input config with the chosen data settings, under comments saying what was found."""
    chosen, step = outcome.chosen, stages.step_probes(outcome)[0]
    lines = [
        f"# mnistperf tune: tuned from {source} on {device} in {spent_s:.0f} s ({time.strftime('%Y-%m-%d')}).",
        f"# Step alone: {step.rate:,.0f} samples/s at batch {step.settings['batch_size']}.",
    ]
    if chosen is not None:
        lines.append(
            f"# These data settings with the step, measured together: {chosen.rate:,.0f} samples/s, "
            f"host waiting for data {chosen.wait:.0%} of the time."
        )
    if outcome.baseline is not None:
        lines.append(f"# The input config's settings, measured the same way: {outcome.baseline.rate:,.0f} samples/s.")
    lines.append(f"# Stopped: {outcome.stopped}.")
    sentences = [s for s in (stages.batch_projection(outcome), stages.noise_warning(outcome)) if s]
    lines += [f"# {sentence[0].upper()}{sentence[1:]}." for sentence in sentences]
    lines.append(f"# Every probe, with its settings, rate, spread and seconds: {probes_path(out).name}.")
    data = {**config.get("data", {}), **outcome.best}
    if not PIPELINES[data["pipeline"]].groups_batches and data.get("batches_per_step", 1) != 1:
        lines.append(
            f"# data.batches_per_step {data['batches_per_step']} -> 1: the {data['pipeline']} pipeline hands out "
            "one batch per step."
        )
        data["batches_per_step"] = 1
    config = {**copy.deepcopy(config), "data": data}  # the caller's config stays as it was
    logger = config.get("trainer", {}).get("logger")
    if isinstance(logger, dict) and isinstance(logger.get("init_args"), dict):  # runs land beside the stages'
        logger["init_args"]["name"] = out.stem
    return "\n".join(lines) + "\n" + yaml.safe_dump(config, sort_keys=False)


def probes_path(out: Path) -> Path:
    """Where the table of every probe goes, beside the tuned config."""
    return out.with_suffix(".probes.md")


def probes_table(outcome: Outcome) -> str:
    """Every probe as a Markdown table row: settings, rate, spread, input wait, seconds, note."""
    header = ["#", "probe", "settings", "samples/s", "spread", "input wait", "seconds", "note"]
    rows = [
        [index, probe.kind, describe(probe.settings), *stages.rate_said(probe)]
        + ["-" if probe.wait is None else f"{probe.wait:.0%}", f"{probe.seconds:.1f}", stages.probe_note(probe)]
        for index, probe in enumerate(outcome.trials, 1)
    ]
    return markdown_table(header, rows)


def names_its_classes(argv: Sequence[str]) -> bool:
    """Whether ``--config`` is another project's LightningCLI config, naming its classes or read by its ``--cli``.

    A config whose ``data`` or ``model`` (under ``fit:`` where it is nested) holds plain keys of which the lab's
    has none, or one the lab's has nothing like, is another project's that names no classes: one line says how to
    name them.
    """
    peek = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    peek.add_argument("--config", type=Path)
    for option in ("--cli", "--model", "--data"):
        peek.add_argument(option)
    peek.add_argument("-h", "--help", action="store_true")
    known = peek.parse_known_args(argv)[0]
    path = known.config
    if path is not None and not path.exists() and not known.help:  # said before any option it does not decide
        raise ConfigError(missing_config(path))
    if (known.cli, known.model, known.data) != (None, None, None):  # only another project has classes of its own
        return True
    if path is None or not path.exists():
        return False
    if path.suffix == ".py":  # a script that calls Trainer.fit itself: read as YAML, it would be said to be broken
        raise ConfigError(
            f"{path}: a Python file, not a config; give the YAML config your project's `fit --config` takes, or tune "
            "a script's Trainer.fit from Python: from mnistperf.tune import tune_loaders (docs/tune.md#two-ways-in)"
        )
    whole = read_config(path, "tune")
    config = fit_section(whole)  # a config nested under fit: too, its sections named as such
    if any(isinstance(config.get(k), dict) and "class_path" in config[k] for k in SECTIONS):
        return True
    at = "fit." if config is not whole else ""
    for section, lab_class in (("data", MNISTDataModule), ("model", ImageClassifier)):
        given = config.get(section)
        if not isinstance(given, dict):
            continue
        lab = set(inspect.signature(lab_class).parameters)
        # keys the lab's class does not take, beside none it takes, or not one misspelt (those fit's parser names)
        foreign = [k for k in given if k not in lab and not (lab & set(given) and closest(str(k), lab))]
        if foreign:
            key = foreign[0]
            raise ConfigError(
                f"{path}: {at}{section}.{key} is no option of this lab's stages, and {at}{section} names no class; "
                f"for your own project's config, name its classes as LightningCLI does where any class may be given "
                f"({section}: {{class_path: myproj.{section}.My{section.title()}, init_args: {{{key}: ...}}}})"
                f"{FIXED_CLASSES}"
            )
    return False


def tune_command(argv: Sequence[str], log=print) -> Outcome:
    """``mnistperf tune``: search for the fastest data settings here and write them as a config.

    A stage config is tuned by probes of the loader and the step; another project's by whole trial fits.
    """
    if names_its_classes(argv):
        return tune_project_command(argv, log)
    opts = parse_args(argv)
    settings = [parse_setting(s) for s in opts.set]
    for key, _ in settings:
        check_key(key, "--set")
    began = time.perf_counter()
    cli_args = ["--config", str(opts.config)] + [a for k, v in settings for a in (f"--{k}", v)]
    try:  # as fit reads it: a config that cannot run fails here, its fix given in --set's form
        cli = parse_fit_config(cli_args, announce="tune")
    except ConfigError as error:
        raise ConfigError(as_settings(str(error))) from None
    refuse_training_nothing(cli.trainer)  # before measuring: the tuned config would keep it
    device = cli.trainer.strategy.root_device
    model = cli.model.to(device)
    model.configure_model()
    # Probes time one batch per step; groups of batches (v4_graphed) only shape Lightning's loop around a graph.
    options = {**{k: v for k, v in cli.datamodule.hparams.items() if not k.startswith("_")}, "batches_per_step": 1}
    log(f"tuning {opts.config}: {usable_cpus()} usable CPUs, budget {opts.budget_s:g} s")
    cli.datamodule.prepare_data()  # as fit does: the official files made into Parquet where they are missing
    probes = Probes(options, model, device, str(cli.trainer.precision))
    pipelines = stages.pipelines_to_try(options, device, log)
    epoch_samples = stages.split_rows(cli.datamodule)
    outcome = stages.outcome(probes, opts.budget_s, log, epoch_samples, pipelines, usable_cpus(), opts.tune_batch_size)
    spent = time.perf_counter() - began
    config = load_config(opts.config, settings)
    atomic_write_text(opts.out, tuned_config(config, outcome, opts.config, opts.out, describe_device(device), spent))
    table = probes_table(outcome)
    page = f"# mnistperf tune: {opts.config} on {describe_device(device)}\n\n{table}\n\nStopped: {outcome.stopped}.\n"
    atomic_write_text(probes_path(opts.out), page)
    log(f"\n{table}\n\nchosen: {describe(outcome.best)}\nstopped: {outcome.stopped}")
    if warning := stages.noise_warning(outcome):
        log(f"warning: {warning}")
    log(f"written: {opts.out} (run it: python -m mnistperf fit --config {opts.out}), {probes_path(opts.out)}")
    return outcome
