"""What a bench runs: each stage (and sweep value) its options ask for, then the reference rows, as command lines.

See docs/timing.md#the-bench.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import math
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml
from jsonargparse.typing import import_object
from lightning.pytorch.utilities.exceptions import MisconfigurationException

from mnistperf.bench import published
from mnistperf.bench.columns import Row
from mnistperf.close_names import did_you_mean
from mnistperf.console import lightning_info_dropped
from mnistperf.data.ingest.prepare import is_builtin, require_prepared
from mnistperf.data.options import is_uri
from mnistperf.diagnosis import EpochTimer
from mnistperf.diagnosis.record.run import SUMMARY_FILE
from mnistperf.errors import ConfigError, MnistperfError
from mnistperf.lightning_cli.configs import CHECKOUT_CONFIGS
from mnistperf.lightning_cli.mnistperf_cli import parse_fit_config
from mnistperf.lightning_cli.settings import as_settings, check_key, load_config, parse_setting


def parse_sweep(text: str) -> tuple[str, list[str]]:
    """--sweep KEY=V1,V2,...: the key and its values."""
    key, sep, values = text.partition("=")
    if not sep or not key or not values:
        raise ConfigError(f"--sweep {text!r}: expected KEY=V1,V2,... such as data.batch_size=16,32,64.")
    return key.strip(), [v.strip() for v in values.split(",") if v.strip()]


def resolve_stages(text: str, config_dir: Path, option: str = "--stages") -> list[tuple[str, Path]]:
    """(name, config path) of every stage ``option`` names ('all': the ladder and the stages beyond it)."""
    names = published.LADDER + published.BEYOND if text == "all" else [s.strip() for s in text.split(",") if s.strip()]
    if not names:
        raise ConfigError(f"{option} {text!r} names no stage; give one or more, e.g. {option} v2_pinned.")
    stages = []
    for name in names:
        path = Path(name) if name.endswith(".yaml") else config_dir / f"{name}.yaml"
        if not path.is_file() and path.parent == config_dir and not config_dir.is_dir():
            checkout = f", e.g. --config-dir {CHECKOUT_CONFIGS}" if CHECKOUT_CONFIGS.is_dir() else ""
            raise ConfigError(
                f"--config-dir {config_dir}: no such folder; give the folder of the stage configs{checkout}."
            )
        if not path.is_file():
            stems = sorted(p.stem for p in config_dir.glob("*.yaml"))
            meant = did_you_mean(path.stem, stems) or "."
            raise ConfigError(
                f"{option}: no config {path} (stages in {config_dir}: {', '.join(stems) or 'none'}){meant}"
            )
        stages.append((path.stem, path))
    each_once(names, [path.resolve() for _, path in stages], option)
    return stages


def each_once(names: list[str], stages: Sequence[object], option: str) -> None:
    """Refuse ``option`` naming a stage (``stages``: what each name is) twice, with the names given once."""
    twice = next((name for name, stage in zip(names, stages, strict=True) if stages.count(stage) > 1), None)
    if twice is not None:  # one row per stage: the same stage again is a repeat
        once = ",".join(name for at, name in enumerate(names) if stages.index(stages[at]) == at)
        again = "; --repeats N runs each stage N times" if option == "--stages" else ""
        raise ConfigError(f"{option} names {twice} twice; give each stage once: {option} {once}{again}.")


@dataclass
class Plan:
    """One configuration to run: its row in the report, and the command for a given run name."""

    row: Row
    config: Path
    args: list[str]
    flags: Sequence[str] = ()  # a reference row's own (``--bare-lightning``), after the fit's arguments

    def command(self, runs_dir: Path, run_name: str) -> tuple[list[str], Callable[[], Path]]:
        """The command line of one run, and a function that finds the timing.json it wrote."""
        config = ["--config", str(self.config), *self.args]
        if self.row.runner in ("plain", "loader", "bare"):
            target = runs_dir / run_name / SUMMARY_FILE
            command = [sys.executable, "-m", "mnistperf.bench.reference_rows", "--out", str(target), *config]
            command += self.flags
            return command, lambda: target
        logger = ["--trainer.logger.init_args.save_dir", str(runs_dir), "--trainer.logger.init_args.name", run_name]

        def find() -> Path:
            found = sorted((runs_dir / run_name).glob(f"version_*/{SUMMARY_FILE}"))
            return found[-1] if found else runs_dir / run_name / "missing" / SUMMARY_FILE

        return [sys.executable, "-m", "mnistperf", "fit", *config, *logger], find


def plan_runs(opts: argparse.Namespace) -> list[Plan]:
    """Every configuration the options ask for, in order: stages x sweep values, then the reference rows."""
    stages = resolve_stages(opts.stages, opts.config_dir)
    sweeps = [parse_sweep(s) for s in opts.sweep]
    fixed = [parse_setting(s) for s in opts.set]
    for key, _ in sweeps:
        check_key(key, "--sweep")
    for key, _ in fixed:
        check_key(key, "--set")
    if opts.dataset:
        fixed.append(("data.dataset", opts.dataset))
    quiet = [("trainer.enable_progress_bar", "false"), ("trainer.enable_model_summary", "false")]
    common = as_options([("trainer.max_epochs", str(opts.epochs)), *quiet, *fixed])

    def plan(row: Row, path: Path, settings: Sequence[tuple[str, str]] = (), flags: Sequence[str] = ()) -> Plan:
        limit = train_batch_limit(opts.limit_train_batches, path, {**dict(fixed), **dict(settings)})
        return Plan(row, path, [*common, *limit, *as_options(settings)], flags)

    if opts.loader_only:
        return [
            plan(Row(f"{stage} (loader only)", stage, runner="loader"), path, flags=["--loader-only"])
            for stage, path in stages
        ]
    plans = []
    for stage, path in stages:
        for combo in itertools.product(*[[(k, v) for v in values] for k, values in sweeps]):
            overrides = dict(combo)
            label = stage + "".join(f" {k.split('.')[-1]}={v}" for k, v in overrides.items())
            plans.append(plan(Row(label, stage, overrides), path, combo))
    for stage in reference_row_stages(opts.reference_rows, [name for name, _ in stages]):
        path = dict(stages).get(stage) or resolve_stages(stage, opts.config_dir, "--reference-rows")[0][1]
        # Both take the fit command line itself, so every override applies to them too.
        plans.append(plan(Row(f"bare Lightning ({stage})", stage, runner="bare"), path, flags=["--bare-lightning"]))
        plans.append(plan(Row(f"plain PyTorch ({stage})", stage, runner="plain"), path))
    return plans


def check_fit_arguments(plans: Sequence[Plan]) -> None:
    """Refuse, before any run, the fit arguments that every run would fail on alike.

    Each plan's arguments are parsed as its run parses them: a value of the wrong type (``--set data.batch_size=abc``,
    a ``--sweep`` value, a config's own) is the parser's one line, status 2. Then the plans are built until one builds;
    where none does (``--set data.pipeline=vv``), the first one's error is raised; so are those of each swept value
    (``--sweep data.num_workers=-1,2``: -1). A plan that alone fails (its stage needs a package not installed) fails
    its row, as it would have.
    """
    distinct = list(dict.fromkeys((plan.config, tuple(plan.args)) for plan in plans))
    fits = {plan.config for plan in plans if plan.row.runner not in ("plain", "loader", "bare")}
    for config, args in distinct:
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed):  # the config it prints, having parsed it
                parse_fit_config(["--config", str(config), *args, "--print_config"])
        except SystemExit as stop:
            if stop.code:  # the parser's refusal, said in its line
                raise
        parsed = yaml.safe_load(printed.getvalue()) or {}
        data = parsed.get("data") or {}
        data = data.get("init_args", data)  # (a DataModule named by its class_path)
        dataset, data_dir = data.get("dataset"), data.get("data_dir")
        if isinstance(dataset, str) and not is_builtin(dataset) and data_dir and not is_uri(data_dir):
            require_prepared(dataset, data_dir, "train")  # a dataset of one's own no run can read: said once, now
        if config in fits:
            check_timed(config, parsed)
    swept = dict.fromkeys(setting for plan in plans for setting in plan.row.overrides.items())
    groups = [[p for p in plans if setting in p.row.overrides.items()] for setting in swept] or [list(plans)]
    for group in groups:  # those of each swept value (every plan where nothing is swept)
        refused = first_refusal(list(dict.fromkeys((p.config, tuple(p.args)) for p in group)))
        if isinstance(refused, ConfigError):  # its fix in the bench's own --set form
            raise ConfigError(as_settings(str(refused))) from refused
        if refused is not None:
            raise refused


def first_refusal(candidates: Sequence[tuple[Path, tuple[str, ...]]]) -> Exception | None:
    """The first one's error where none of these configs and fit arguments builds a run; None once one does."""
    refused: list[Exception] = []
    for config, args in candidates:
        try:
            with lightning_info_dropped():  # (the bench's first line is its device line, as every command's)
                parse_fit_config(["--config", str(config), *args, "--seed_everything", "false"])  # (seeding nothing)
        except (MnistperfError, MisconfigurationException) as error:
            refused.append(error)
        else:
            return None
    return refused[0] if refused else None


def check_timed(config: Path, parsed: dict) -> None:
    """Refuse a config whose fit would not write a timing.json where the bench finds it, as the stages' configs do.

    The bench names each run's folder through the config's ``trainer.logger`` class, and its row reads the
    timing.json the config's EpochTimer (or a subclass of it) writes there. ``parsed``: as the parser printed it, each
    class path whole and importable.
    """
    trainer = parsed.get("trainer") or {}
    logger, callbacks = trainer.get("logger"), trainer.get("callbacks") or []
    callbacks = [callbacks] if isinstance(callbacks, dict) else callbacks  # one callback, as Lightning takes one too
    timed = any(isinstance(c, dict) and issubclass(import_object(c["class_path"]), EpochTimer) for c in callbacks)
    if isinstance(logger, dict) and timed:
        return
    lacks = " nor ".join(
        what for what, held in (("trainer.logger class", isinstance(logger, dict)), ("EpochTimer", timed)) if not held
    )
    stage = CHECKOUT_CONFIGS / f"{PRE_TENSORIZED_STAGE}.yaml"
    raise ConfigError(
        f"{config}: the bench reads each run's timing.json, which the config's EpochTimer writes under its "
        f"trainer.logger's folder, and it names no {lacks}; start from a stage's config, which names both: "
        f"cp {stage if stage.is_file() else 'configs/v2_pinned.yaml'} my_stage.yaml"
    )


def as_options(settings: Iterable[tuple[str, str]]) -> list[str]:
    """Settings (``data.batch_size``, ``64``) as the fit's command line takes them: ``--data.batch_size 64``."""
    return [part for key, value in settings for part in (f"--{key}", value)]


def train_batch_limit(batches, config: Path, overrides: dict[str, str]) -> list[str]:
    """The fit options that train ``batches`` batches per epoch (none for whole epochs).

    Lightning's ``limit_train_batches`` counts what the loader yields; a stage with ``data.batches_per_step`` k
    yields groups of k batches, so it gets ``ceil(batches / k)`` of them. Every row of a bounded bench then trains
    (at least) the same batches, and the speed-up column compares them per sample where their batch sizes differ;
    ``train_samples_per_epoch`` in results.csv says what each row trained.
    """
    if not batches:
        return []
    try:
        per_step = max(int(load_config(config, list(overrides.items()))["data"].get("batches_per_step", 1)), 1)
    except (OSError, yaml.YAMLError, LookupError, TypeError, AttributeError, ValueError):
        per_step = 1  # the run itself reports what is wrong with its config or value, in its own words
    return ["--trainer.limit_train_batches", str(math.ceil(batches / per_step))]


PRE_TENSORIZED_STAGE = "v2_pinned"
RESIDENT_RUNGS = ("v4_graphed", "v3_resident")  # highest first: the fastest resident stage on a GPU


def reference_row_stages(text: str, run: list[str]) -> list[str]:
    """The stages that get the reference rows, `bare Lightning` and `plain PyTorch`."""
    if text == "none":
        return []
    if text == "auto":
        resident = [name for name in RESIDENT_RUNGS if name in run][:1]
        return [name for name in (PRE_TENSORIZED_STAGE, *resident) if name in run] or run[-1:]
    names = [name.strip() for name in text.split(",") if name.strip()]
    each_once(names, names, "--reference-rows")
    return names
