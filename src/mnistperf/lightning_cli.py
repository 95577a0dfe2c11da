"""How a ``fit`` configuration is read, the same way by every command that reads one.

LightningCLI with the project's model and DataModule, errors in one line, bf16 only where the GPU has it,
and ``--set KEY=VALUE`` overrides checked against the options a stage config has. It lives below the
commands so that none of them imports another.
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import sys
import textwrap
import warnings
from argparse import RawDescriptionHelpFormatter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import torch
import yaml
from jsonargparse import DefaultHelpFormatter
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import RichProgressBar, TQDMProgressBar
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities import rank_zero_only

from mnistperf.close_names import closest, did_you_mean, with_options_meant
from mnistperf.console import device_line, matmul_precision_note
from mnistperf.data.datamodule import MNISTDataModule
from mnistperf.data.ingest import prepare
from mnistperf.data.ingest.sources import DATASETS
from mnistperf.data.options import fit_help_lines, is_uri
from mnistperf.data.pipelines import registry
from mnistperf.diagnosis.callbacks.epoch_timer import TrainerAttributes
from mnistperf.diagnosis.record.run import SUMMARY_FILE
from mnistperf.errors import DEBUG_ENV, ConfigError, MnistperfError
from mnistperf.machine import run_device
from mnistperf.model import ImageClassifier
from mnistperf.upstream import (
    CHECKPOINT_FOLDER_CHANGED,
    CLI_ARGS_BESIDE_ARGV,
    MISSING_CONFIG,
    SUBCOMMAND,
    SUBTYPE,
    UNKNOWN_KEY,
    WRONG_TYPE,
    WRONG_UNION,
    KeepRunHyperparameters,
    PlainHelpFormatter,
    long_options,
    parser_message,
    raised_inside,
    subcommand_parser,
)


class OneLineErrorParser(LightningArgumentParser):
    """LightningCLI's parser, answering a wrong option or value in one line instead of the whole usage.

    The line names the command whose ``--help`` lists the options, the valid option nearest to an
    unknown one (on the command line or in a config file), what a value of the wrong type should be,
    and, for a config file that does not exist, the configs that do. An option is spelt whole: a prefix
    of one (``--trainer.max_epoch``) is unknown, and answered with the option meant.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **{"allow_abbrev": False, **kwargs})

    def error(self, message: str, ex: Exception | None = None):
        """Print the error in one line, pointing to ``--help``, and exit with status 2 (the full usage under debug)."""
        if os.environ.get(DEBUG_ENV):
            super().error(message, ex)
        text = parser_message(message)
        command = self._command(text)
        text = explain_parser_error(text, option_names(self._command_parser(command)))
        help_command = " ".join(["python -m mnistperf", *([command] if command else []), "--help"])
        print(f"mnistperf: error: {text} (`{help_command}` lists the options)", file=sys.stderr)
        raise SystemExit(2)

    def _command(self, text: str) -> str | None:
        """The subcommand the error is about: named in the message (a config key), else this parser's own."""
        named = SUBCOMMAND.search(text)
        command = named.group(1) if named else self.prog.split()[-1]
        return command if command in ("fit", *EVAL_COMMANDS) else None

    def _command_parser(self, command: str | None) -> LightningArgumentParser:
        """The parser holding the subcommand's options: this one, or the subcommand's below the root."""
        return self if command is None else subcommand_parser(self, command)


def option_names(parser) -> set[str]:
    """Every option of a parser without its dashes (``data.batch_size``), and each section (``data``)."""
    names = set(long_options(parser))
    return names | {name.rsplit(".", depth)[0] for name in names for depth in range(1, name.count(".") + 1)}


def explain_parser_error(text: str, options: set[str]) -> str:
    """The parser's message, with the option meant, the configs that exist, or what a value should be."""
    missing = MISSING_CONFIG.search(text)
    if missing:
        return missing_config(Path(missing.group(1)))
    unknown = UNKNOWN_KEY.search(text)
    if unknown:
        return text + did_you_mean(unknown.group(1), options)
    return wrong_type(text) or with_options_meant(text, options)


_TYPE_WORDS = {"int": ["a whole number"], "float": ["a number"], "bool": ["true", "false"], "NoneType": ["null"]}


def wrong_type(text: str) -> str | None:
    """``data.num_workers takes a whole number, not 'abc'`` for a value of the wrong type, else None.

    None too where a type has no plain words (a class path, a path type): the parser's message stays.
    """
    match = WRONG_TYPE.match(text) or WRONG_UNION.match(text)
    if not match:
        return None
    key, subtypes, value = match.groups()
    words: list[str] = []
    literals: list[str] = []
    for subtype in SUBTYPE.finditer(subtypes):
        name, choices, other = subtype.groups()
        if other or (name and name not in _TYPE_WORDS):
            return None
        try:
            said = _TYPE_WORDS[name] if name else [str(choice) for choice in ast.literal_eval(f"[{choices}]")]
        except (ValueError, SyntaxError):  # choices that are not plain values (enum members)
            return None
        for word in said:
            if word not in words:
                words.append(word)
                literals += [] if name else [word]
    if "a number" in words and "a whole number" in words:
        words.remove("a whole number")
    either = words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"
    return f"{key} takes {either}, not {value!r}{did_you_mean(value, literals)}"


def missing_config(path: Path) -> str:
    """The line for a ``--config`` that does not exist: the file meant and the YAML files where the user looks.

    Those are the YAML files of the path's own folder (the current one for a bare name), so that a user in a project
    of their own is shown theirs; a name like a stage's is answered with the stage's config in ``configs/`` (of
    the working folder, else of the checkout), as are folders that hold no YAML file.
    """
    shown = os.path.relpath(path) if path.is_absolute() and not os.path.relpath(path).startswith("..") else str(path)
    own_folder = Path(os.path.relpath(path.parent)) if path.is_absolute() else path.parent
    own = yaml_files(path.parent)
    stages_folder = Path("configs") if config_names(Path("configs")) else CHECKOUT_CONFIGS
    stages = [f"{name}.yaml" for name in config_names(stages_folder)]
    meant = file_meant(path, own)
    folder, names = (own_folder, own) if own else (stages_folder, stages)
    if meant is None and file_meant(path, stages):
        meant, folder, names = file_meant(path, stages), stages_folder, stages
    if not own and meant is None:
        stages_said = f", or one of the lab's stages in {stages_folder}/: {', '.join(stages)}" if stages else ""
        return (
            f"--config {shown}: no such file, and no YAML file in {own_folder}/; give your config's path{stages_said}"
        )
    suggestion = f"; did you mean {folder / meant}?" if meant else "."
    return f"--config {shown}: no such file{suggestion} The YAML files in {folder}/ are {', '.join(names)}"


def file_meant(path: Path, names: list[str]) -> str | None:
    """The file of ``names`` whose name is closest to the path's, by their stems: every one ends in .yaml alike."""
    stems = {Path(name).stem: name for name in names}
    meant = closest(path.stem, stems)
    return None if meant is None else stems[meant]


def yaml_files(folder: Path) -> list[str]:
    """The YAML files a user keeps in a folder, by name, ordered as :func:`config_names` orders them.

    Hidden ones are left out: they are a tool's own (.pre-commit-config.yaml).
    """
    found = [path.name for pattern in ("*.yaml", "*.yml") for path in folder.glob(pattern)]
    return sorted(
        (name for name in found if not name.startswith(".")), key=lambda name: (not name.startswith("v"), name)
    )


def native_bf16(accelerator) -> bool:
    """Whether the accelerator a run asks for resolves to a GPU with native bf16 (not emulated) here."""
    wants_gpu = str(accelerator) in ("auto", "gpu", "cuda")
    return wants_gpu and torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False)


# fit --help's lines for the trainer's options a user of this lab changes, after the DataModule's (fit_help_lines).
TRAINER_OPTIONS = """\
  --trainer.max_epochs N            epochs to train
  --trainer.accelerator cpu|cuda    where to train (auto: CUDA when present)
  --ckpt_path last                  resume the newest run of this config
"""
# The stage configs of a checkout, for when fit runs from elsewhere than its root.
CHECKOUT_CONFIGS = Path(__file__).resolve().parents[2] / "configs"
# Lightning's own progress bar is redrawn every this many steps, not every step: drawn every step it was the largest
# per-step cost the lab added to Lightning's loop (docs/results/cpu-2core-bar-cost). A config that names a progress
# bar of its own keeps it.
BAR_REFRESH = 10


def config_names(folder: Path) -> list[str]:
    """The configs in a folder by name (no ``.yaml``), the ladder's ``v*`` first."""
    names = [path.stem for path in folder.glob("*.yaml")]
    return sorted(names, key=lambda name: (not name.startswith("v"), name))


def stage_names() -> list[str]:
    """The stages in ``configs/`` (of the working folder, else of the checkout), the ladder's ``v*`` first."""
    return config_names(Path("configs")) or config_names(CHECKOUT_CONFIGS)


def fit_description() -> str:
    """``fit --help``'s description: the options a user of this lab changes, the stages and the pipelines."""
    stages = textwrap.fill(
        "the stage: " + (", ".join(stage_names()) or "none found in configs/"),
        width=100,
        initial_indent="  --config configs/STAGE.yaml       ",
        subsequent_indent=" " * 36,
    )
    options = "\n".join([stages, *fit_help_lines(), TRAINER_OPTIONS])
    return (
        f"Train one stage of the ladder. The options a user of this lab changes:\n\n{options}\n"
        "Input pipelines (--data.pipeline):\n" + "\n".join(registry.help_lines()) + "\n\n"
        "Every other option of Lightning's Trainer, the model and the data module follows.\n"
    )


EVAL_COMMANDS = ("validate", "test", "predict")
FIT_USAGE = "mnistperf fit --config configs/STAGE.yaml [--KEY VALUE ...]"


class KeepDescriptionLines(PlainHelpFormatter, RawDescriptionHelpFormatter, DefaultHelpFormatter):
    """jsonargparse's help as plain text, with the description's lines kept as written (the table above)."""


class MnistperfCLI(KeepRunHyperparameters, LightningCLI):
    """LightningCLI with the project's model and data module fixed.

    Before anything else it prints the device line (``mnistperf: fit on cuda:0 (...), precision
    bf16-mixed, float32 matmuls highest``). A ``bf16`` trainer precision runs only where the GPU has native bf16:
    elsewhere (a CPU, an older GPU) it would be emulated and slower, so the run falls back to ``32-true``
    and says so on that line; timing.json records the precision that actually ran. ``validate``,
    ``test`` and ``predict`` without ``--ckpt_path`` use the newest checkpoint of the config's runs
    and name it, or refuse: they never score an untrained model in silence. A run whose official dataset is not
    prepared and cannot be made here (offline, no source folder) stops before anything is built, naming the
    ``prepare`` command for its data folder. A checkpoint brings weights,
    optimizer state and the loop's position; the model's settings stay the config's and the command line's
    (:class:`~mnistperf.upstream.KeepRunHyperparameters`), and the module names those that differ
    (:meth:`ImageClassifier.on_load_checkpoint`).

    Args:
        announce: the command named on the device line; by default the subcommand that runs,
            nothing when ``run`` is false.
    """

    def __init__(self, args: list[str] | None = None, run: bool = True, announce: str | None = None):
        self._announce = announce
        self._announce_subcommand = run
        given = sys.argv[1:] if args is None else args
        self._asked = given[0] if run and given and given[0] in LightningCLI.subcommands() else None
        super().__init__(
            ImageClassifier,
            MNISTDataModule,
            save_config_kwargs={"overwrite": True},
            args=args,
            run=run,
            parser_class=OneLineErrorParser,
            parser_kwargs={
                "prog": "mnistperf",
                "formatter_class": KeepDescriptionLines,
                **(
                    {"fit": {"usage": FIT_USAGE, "description": fit_description()}}
                    if "fit" in self.subcommands()
                    else {}
                ),
            },
        )

    def subcommands(self) -> dict[str, set[str]]:  # type: ignore[override]
        """Lightning's subcommands; where the command line names one, that one alone, whose parser alone is built."""
        every = LightningCLI.subcommands()
        return {self._asked: every[self._asked]} if self._asked else every

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """The trainer, with Lightning's own progress bar (where the config names none) redrawn every few steps."""
        # a copy: building the trainer adds Lightning's own callbacks to the config's list
        given = self._get(self.config_init, "trainer", default={}).get("callbacks")
        configured = list(given) if isinstance(given, list) else [given] if given is not None else []
        trainer = super().instantiate_trainer(**kwargs)
        bar = trainer.progress_bar_callback
        if isinstance(bar, (TQDMProgressBar, RichProgressBar)) and not any(bar is c for c in configured):
            callbacks = cast(TrainerAttributes, trainer).callbacks
            callbacks[callbacks.index(bar)] = TQDMProgressBar(refresh_rate=BAR_REFRESH)
        return trainer

    def instantiate_classes(self) -> None:
        """Build the model, data and trainer; a mistake of the user's in a callback's arguments stays one line."""
        try:
            super().instantiate_classes()
        except ValueError as error:
            ours = raised_inside(error, MnistperfError)
            if ours is None:
                raise
            raise ours from None

    def before_fit(self) -> None:
        """Refuse a fit that would train nothing, or group batches without the whole-step module."""
        for name in ("limit_train_batches", "max_epochs", "max_steps"):
            if getattr(self.trainer, name) == 0:
                raise ConfigError(f"trainer.{name} is 0, so fit would train nothing; raise it or remove the option.")
        group = self.datamodule.options.batches_per_step
        if group > 1 and not self.model.hparams.cuda_graph:
            raise ConfigError(
                f"data.batches_per_step {group} needs model.cuda_graph true: only the whole-step "
                "module runs several optimizer steps per Lightning step; or set batches_per_step 1."
            )

    def after_fit(self) -> None:
        """Refuse, after the fact, a fit that trained no batch (and was not interrupted)."""
        if self.trainer.global_step == 0 and not self.trainer.interrupted:
            raise ConfigError(
                "fit trained no batch (the training split gave no batches with these options); "
                "check data.batch_size, data.drop_last and trainer.limit_train_batches."
            )

    def parse_arguments(self, parser, args) -> None:
        """Parse, then settle the precision, print the device line and pick the checkpoint an evaluation uses."""
        super().parse_arguments(parser, args)
        # Here, before Lightning seeds and builds anything, so the device line is the run's first.
        subcommand = self.config.get("subcommand")
        config = self.config[subcommand] if subcommand else self.config
        precision_note = self._resolve_precision(config)
        announce = self._announce or (subcommand if self._announce_subcommand else None)
        if announce and rank_zero_only.rank == 0:  # type: ignore[attr-defined]
            device = run_device(config.trainer.accelerator)
            matmuls = matmul_precision_note(device, config.trainer.precision, config.model.float32_matmul_precision)
            print(
                device_line(announce, device, f"precision {config.trainer.precision}{precision_note}, {matmuls}"),
                flush=True,
            )
        if subcommand:
            check_checkpoint(config.get("ckpt_path"))  # one line, before Lightning loads it
            if config.data.dataset in DATASETS and not is_uri(config.data.data_dir):  # before Lightning says more
                prepare.require_preparable(config.data.dataset, config.data.data_dir, config.data.source_root)
        if subcommand in EVAL_COMMANDS:
            # Evaluating restores the checkpoint callback's state too, and Lightning warns that the new run's
            # folder differs from the training run's: true, and nothing to act on when only evaluating.
            warnings.filterwarnings("ignore", message=CHECKPOINT_FOLDER_CHANGED)
            if config.get("ckpt_path") is None:
                config.ckpt_path = str(newest_checkpoint(subcommand, config))

    @staticmethod
    def _resolve_precision(config) -> str:
        precision = str(config.trainer.precision)
        if precision.startswith("bf16") and not native_bf16(config.trainer.accelerator):
            config.trainer.precision = "32-true"
            return f" ({precision} asked for: no GPU with native bf16 here)"
        return ""


def check_checkpoint(path) -> None:
    """An explicit checkpoint path must be a readable Lightning checkpoint (not 'last', 'best', ...)."""
    if path is None or str(path) in ("last", "best", "hpc", "registry"):
        return
    if not Path(path).is_file():
        raise ConfigError(
            f"--ckpt_path {path}: no such file; give a checkpoint written by fit "
            "(lightning_logs/<config>/version_N/checkpoints/*.ckpt), or 'last'."
        )
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # truncated zip, pickle garbage, ...: torch raises many kinds
        raise ConfigError(
            f"--ckpt_path {path} is not a readable checkpoint ({type(exc).__name__}); "
            "it may be truncated or not a checkpoint: use another one."
        ) from None
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise ConfigError(f"--ckpt_path {path} holds no model state_dict; give a checkpoint written by fit.")


def runs_folder(config) -> Path:
    """Where fit with this config writes its runs: the logger's save_dir/name, as in the stage configs."""
    logger = config.trainer.get("logger")
    init = logger.get("init_args") if hasattr(logger, "get") else None
    if init is not None and init.get("save_dir") is not None:
        return Path(init.save_dir) / str(init.get("name") or "lightning_logs")
    return Path(config.trainer.get("default_root_dir") or ".") / "lightning_logs"


def newest_checkpoint(command: str, config) -> Path:
    """The most recent checkpoint fit wrote with this config, announced; a ConfigError naming the fix if none."""
    folder = runs_folder(config)
    found = sorted(folder.glob("version_*/checkpoints/*.ckpt"), key=lambda p: p.stat().st_mtime)
    if not found:
        config_args = " ".join(f"--config {c}" for c in (config.get("config") or [])) or "--config configs/STAGE.yaml"
        raise ConfigError(
            f"{command}: no trained model to evaluate: no checkpoint in {folder}/version_*/checkpoints/. "
            f"Train one with `python -m mnistperf fit {config_args}`, or pass --ckpt_path FILE."
        )
    if rank_zero_only.rank == 0:  # type: ignore[attr-defined]
        print(
            f"mnistperf: {command} with {found[-1]} (the newest checkpoint in {folder}"
            f"{how_its_fit_ended(found[-1].parent.parent)}; --ckpt_path FILE picks another)",
            flush=True,
        )
    return found[-1]


def how_its_fit_ended(run: Path) -> str:
    """A clause where a run's fit did not finish: interrupted (its timing.json says so), or no timing.json at all."""
    summary = run / SUMMARY_FILE
    try:
        found = json.loads(summary.read_text())
    except OSError:
        return f", from a fit that wrote no {SUMMARY_FILE}: it may have stopped before its end"
    except ValueError:
        return ""
    if isinstance(found, dict) and found.get("interrupted"):
        epochs = len(found.get("epochs") or [])
        return f", from a fit interrupted after {epochs} finished epoch{'s' if epochs != 1 else ''}"
    return ""


def parse_fit_config(args: Sequence[str], announce: str | None = None) -> MnistperfCLI:
    """The trainer, model and DataModule a ``fit`` with these arguments would build, without running it.

    Args:
        args: the arguments after ``fit``.
        announce: the command named on the device line it prints first (none when not given).
    """
    with warnings.catch_warnings():  # LightningCLI warns that args were given beside the process's own argv
        warnings.filterwarnings("ignore", message=CLI_ARGS_BESIDE_ARGV)
        return MnistperfCLI(args=list(args), run=False, announce=announce)


def load_config(path: Path, settings: list[tuple[str, str]]) -> dict:
    """The config as a dict with the --set overrides applied (values parsed as YAML, as the CLI does)."""
    config = yaml.safe_load(path.read_text()) or {}
    for key, value in settings:
        section, _, name = key.partition(".")
        target = config if not name else config.setdefault(section, {})
        target[name or section] = yaml.safe_load(value)
    return config


def parse_setting(text: str) -> tuple[str, str]:
    """--set KEY=VALUE; the value is kept whole (it may hold commas, e.g. a list)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip() or not value.strip():
        raise ConfigError(f"--set {text!r}: expected KEY=VALUE such as data.num_workers=2.")
    return key.strip(), value.strip()


def check_key(key: str, option: str) -> None:
    """A --set or --sweep key must name an option a stage config has: data.X, model.X, trainer.X or seed_everything."""
    section, _, name = key.partition(".")
    known: dict[str, Callable[..., None]] = {
        "data": MNISTDataModule.__init__,
        "model": ImageClassifier.__init__,
        "trainer": Trainer.__init__,
    }
    if key == "seed_everything":
        return
    if section not in known or name.split(".")[0] not in inspect.signature(known[section]).parameters:
        raise ConfigError(
            f"{option} {key}: no stage config has this option; use data.NAME, model.NAME or "
            "trainer.NAME (`python -m mnistperf fit --help` lists them)."
        )
