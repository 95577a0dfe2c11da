"""A LightningCLI config of a project that is not the lab's: read, its classes imported, its trial configs made.

Such a config names its classes (``model:`` and ``data:`` each with a ``class_path`` and ``init_args``), or holds
plain keys where its script fixes them (``--model``, ``--data``); otherwise, plain keys are the lab's. The classes are
imported as Python finds them (the folder tune runs in, ``PYTHONPATH``, ``--import-path DIR``). A config nested under
``fit:`` is read and written back nested.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import pkgutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mnistperf.close_names import closest, did_you_mean
from mnistperf.diagnosis.measure.loader_options import arguments
from mnistperf.errors import ConfigError
from mnistperf.lightning_cli.configs import read_config
from mnistperf.lightning_cli.settings import set_key
from mnistperf.tune.knobs import ARG, Knobs, parse_value, project_knobs
from mnistperf.tune.trial import left_out, trial_trainer

SECTIONS = ("model", "data")
# Where a config names no class: the scripts whose config cannot name one, and how tune is told their classes
FIXED_CLASSES = (
    "; or, where your script runs LightningCLI(MyModel, MyData) with the config as it is, give those classes: "
    "--model myproj.main.MyModel --data myproj.main.MyData"
)
DEFAULT_SEED = 0  # where the config draws a seed at random (or none), every trial takes this one


def fit_section(config: dict[str, Any]) -> dict[str, Any]:
    """The part of a config that ``fit`` reads: the config itself, or its ``fit:`` mapping."""
    nested = config.get("fit")
    return nested if isinstance(nested, dict) and not any(k in config for k in SECTIONS) else config


def import_class(path: Path, section: str, class_path: Any, base: type | None = None) -> type:
    """The class a config section (or a command-line option, ``section`` as ``--cli``) names; else one line.

    The line names the file and the section (or the option) and gives the fix; a class that is not a ``base``
    (where given) is one line too.
    """
    where = f"{section} {class_path}" if section.startswith("--") else f"{path}: {section}.class_path {class_path!r}"
    if not isinstance(class_path, str) or "." not in class_path:
        raise ConfigError(
            f"{where} is not a full import path; give it as module.Class (e.g. myproj.data.MyData), as tune imports it"
        )
    module, _, name = class_path.rpartition(".")
    try:
        imported = importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(f"{where} cannot be imported ({exc}); {module_fix(module, exc, path)}") from exc
    except Exception as exc:  # the module fails as it runs: a syntax error, an error raised at its import
        raise ConfigError(f"{where} cannot be imported ({type(exc).__name__}: {exc}); {fails_inside(module)}") from exc
    found = getattr(imported, name, None)
    if found is None:
        classes = {key: value for key, value in vars(imported).items() if isinstance(value, type) and key[0] != "_"}
        meant = closest(name, classes)
        # those it or its modules define (a package's), not those it imports from elsewhere
        own = [key for key, value in classes.items() if f"{value.__module__}.".startswith(f"{module}.")]
        fix = f"did you mean {module}.{meant}?" if meant else f"the classes it defines are {', '.join(own) or 'none'}."
        raise ConfigError(f"{where} cannot be imported: {module} has no {name}; {fix}")
    if not isinstance(found, type):
        raise ConfigError(f"{where} is not a class; name the class itself")
    if base is not None and not issubclass(found, base):
        raise ConfigError(f"{where} is not a {base.__name__}")
    return found


def module_fix(module: str, exc: ImportError, path: Path) -> str:
    """The fix for a module that does not import: the module meant where its package imports, else the path to it.

    A package that imports but lacks the module is a typo (``slowmlp.modle``); one that Python does not find is
    not on its path; a module that is found but fails inside (a name it imports is missing) is the module's to fix.
    """
    missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
    if missing is None or not (module == missing or module.startswith(f"{missing}.")):
        return fails_inside(module)
    package, _, last = missing.rpartition(".")
    if package:
        found = importlib.import_module(package)  # imported on the way to the missing module
        names = [info.name for info in pkgutil.iter_modules(getattr(found, "__path__", []))]
        meant = closest(last, names)
        return f"did you mean {package}.{meant}?" if meant else f"its modules are {', '.join(names) or 'none'}."
    meant = closest(last, [info.name for info in pkgutil.iter_modules(["."])])
    if meant:
        return f"did you mean {meant}{module[len(missing) :]}, in this folder?"
    return (
        "run from the project's folder or add it: "
        f"PYTHONPATH=/path/to/project python -m mnistperf tune --config {path} (or --import-path /path/to/project)"
    )


def fails_inside(module: str) -> str:
    """The fix for a module Python finds but cannot run to its end: the module's own, shown by importing it alone."""
    return f"{module} is found but fails to import; fix it until `python -c 'import {module}'` works here"


def cli_class(path: Path, class_path: str) -> type:
    """The project's LightningCLI subclass ``--cli`` names; one line with the fix where it is not one."""
    from lightning.pytorch.cli import LightningCLI

    found = import_class(path, "--cli", class_path)
    if not issubclass(found, LightningCLI):
        raise ConfigError(
            f"--cli {class_path}: {found.__qualname__} is not a LightningCLI subclass; name the class your project's "
            "entry point makes (class MyCLI(LightningCLI)), or leave --cli out for Lightning's own"
        )
    given = ("args", "run", "save_config_callback", "trainer_defaults", "parser_kwargs")  # by trial.fit
    try:
        inspect.signature(found).bind_partial(**dict.fromkeys(given))
    except TypeError:
        raise ConfigError(
            f"--cli {class_path}: {found.__qualname__}'s __init__ does not take LightningCLI's arguments "
            f"({', '.join(given)}), which every trial gives it; let it take them and pass them on (def __init__(self, "
            "*args, **kwargs): super().__init__(*args, **kwargs)), or leave --cli out"
        ) from None
    return found


@dataclass
class Project:
    """A LightningCLI config of another project, read and checked."""

    path: Path
    config: dict[str, Any]  # the whole file, with --set applied
    model_class: type
    data_class: type | None  # None where the model makes its own loaders
    cli: str | None = None  # the project's LightningCLI subclass (module.Class), else Lightning's own
    plain: tuple[str, ...] = ()  # the sections whose class the script fixes: plain keys in the file, named here

    def as_written(self, config: dict[str, Any]) -> dict[str, Any]:
        """``config`` as the project's file holds it: the sections whose class the script fixes as plain keys."""
        section = fit_section(config)
        for name in self.plain:
            section[name] = section[name]["init_args"]
        return config

    @property
    def fit(self) -> dict[str, Any]:
        """The part ``fit`` reads."""
        return fit_section(self.config)

    @property
    def where(self) -> str:
        """The DataModule as an error names it."""
        name = self.data_class.__qualname__ if self.data_class is not None else "none (the model's own loaders)"
        return f"{self.path}'s data ({name})"

    def seed(self) -> int:
        """The seed every trial takes: the config's, else DEFAULT_SEED."""
        seed = self.fit.get("seed_everything")
        return seed if isinstance(seed, int) and not isinstance(seed, bool) else DEFAULT_SEED

    def knobs(self, named: list[tuple[str, list[Any]]], batch_size: bool) -> Knobs:
        """The knobs: those named with --knob, else those found among the DataModule's arguments."""
        currents = arguments(self.data_class, self.fit["data"].get("init_args") or {}) if self.data_class else {}
        return project_knobs(currents, "data.init_args", named, self.where, batch_size)

    def with_settings(self, settings: dict[str, Any], knobs: Knobs) -> dict[str, Any]:
        """The whole config with the knobs applied through the DataModule's arguments set to these values."""
        config = copy.deepcopy(self.config)
        section = fit_section(config)
        for knob in knobs.knobs:
            if knob.via == ARG and knob.key in settings:
                set_key(section, knob.key, settings[knob.key])
        return config

    def trial_config(self, settings: dict[str, Any], knobs: Knobs, epochs: int, steps: int, root: str) -> dict:
        """The config one trial fit reads: these settings, short and quiet, the same seed, nothing saved."""
        section = fit_section(self.with_settings(settings, knobs))
        section.pop("ckpt_path", None)  # a trial starts from scratch
        trainer = dict(section.get("trainer") or {})
        callbacks = trainer.get("callbacks") or []
        trainer["callbacks"] = [c for c in (callbacks if isinstance(callbacks, list) else [callbacks]) if kept(c)]
        section["trainer"] = {**trainer, **trial_trainer(epochs, steps, root)}
        section["seed_everything"] = self.seed()
        return section


def kept(callback: Any) -> bool:
    """Whether a trial keeps a callback of the config (not one it leaves out, nor one it cannot import)."""
    class_path = callback.get("class_path") if isinstance(callback, dict) else callback
    if not isinstance(class_path, str) or "." not in class_path:
        return True
    module, _, name = class_path.rpartition(".")
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return True
    return not (isinstance(found, type) and left_out(found))


def parse_set(text: str) -> tuple[str, Any]:
    """``--set KEY=VALUE`` as (KEY, the value as YAML reads it).

    ``model.lr`` is ``model.init_args.lr``, as LightningCLI's ``--model.lr`` is (``data.`` alike).
    """
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set {text}: give KEY=VALUE, e.g. --set trainer.precision=bf16-mixed")
    key = key.strip()
    section, _, rest = key.partition(".")
    if section in SECTIONS and rest and rest.split(".")[0] not in ("class_path", "init_args", "dict_kwargs"):
        key = f"{section}.init_args.{rest}"
    return key, parse_value(value)


def check_set(text: str, prefix: str, name: str, where: str, target: type, listed: bool = True) -> None:
    """One line where ``--set`` gives ``target`` (named ``where``) an argument it does not take, with the one meant.

    ``prefix``: where its arguments are in the config; ``listed``: whether the line lists them all.
    """
    parameters = inspect.signature(target).parameters
    if name in parameters or any(p.kind == p.VAR_KEYWORD for p in parameters.values()):
        return
    options = [f"{prefix}.{argument}" for argument in arguments(target, {})]
    meant = did_you_mean(f"{prefix}.{name}", options) or "."
    listing = f" Its arguments are {', '.join(options) or 'none'}." if listed else ""
    raise ConfigError(f"--set {text}: {where} takes no such argument{meant}{listing}")


def check_trains(path: Path, trainer: Any, keys: list[str]) -> None:
    """One line where the trainer's limit_train_batches, max_epochs or max_steps is 0 (from --set's ``keys`` or not)."""
    for name in ("limit_train_batches", "max_epochs", "max_steps"):
        if isinstance(trainer, dict) and trainer.get(name) == 0:
            raise ConfigError(
                f"{'--set' if f'trainer.{name}' in keys else path}: trainer.{name} is 0, so your project's fit would "
                "train nothing, nor would the tuned config's; raise it or remove the option."
            )


def load(path: Path, sets: list[str], cli: str | None = None, fixed: dict[str, str | None] | None = None) -> Project:
    """Read another project's config, apply ``--set``, and import its classes (checking they are their kinds).

    ``cli``: the project's LightningCLI subclass that reads the config (module.Class), checked too; ``fixed``: by
    section, the class the project's script gives LightningCLI, whose arguments the config holds as plain keys.
    """
    from lightning.pytorch import LightningDataModule, LightningModule, Trainer

    if cli is not None:
        cli_class(path, cli)
    config = read_config(path, "tune")
    section = fit_section(config)
    if section is not config:  # under fit:, --set's keys are those inside it, given with fit. or without
        sets = [text.removeprefix("fit.") for text in sets]
    plain = tuple(name for name, class_path in (fixed or {}).items() if class_path)
    for name in plain:  # named as a config of any class names it, for the trials; written back plain
        given = section.get(name) or {}
        if cli is not None or (isinstance(given, dict) and "class_path" in given):
            said = "--cli reads the config" if cli is not None else f"{path} names {name}'s class_path"
            raise ConfigError(f"--{name}: {said}, so the class is not the script's to fix; leave --{name} out")
        if not isinstance(given, dict):
            raise ConfigError(f"{path}: {name} is {given!r}, not the arguments of --{name}'s class as plain keys")
        section[name] = {"class_path": fixed[name], "init_args": given}  # type: ignore[index]
    overrides = [(text, *parse_set(text)) for text in sets]
    for _, key, value in overrides:
        set_key(section, key, value)
    classes: dict[str, Any] = {"data": None}  # None: the model makes its own loaders
    for name, base in (("model", LightningModule), ("data", LightningDataModule)):
        given = section.get(name)
        if given is None and name == "data":
            continue
        if not isinstance(given, dict) or "class_path" not in given:
            raise ConfigError(
                f"{path}: no {name}.class_path; a LightningCLI config of your project names its {base.__name__} "
                f"there ({name}: {{class_path: myproj.{name}.My{name.title()}, init_args: {{...}}}}){FIXED_CLASSES}"
            )
        classes[name] = import_class(path, f"--{name}" if name in plain else name, given["class_path"], base)
    for text, key, _ in overrides:  # an argument misspelt is said here, not by a trial's parser
        part, _, rest = key.partition(".")
        target = classes.get(part)
        if target is not None and rest.startswith("init_args."):
            where = f"{path}'s {part} ({target.__qualname__})"
            check_set(text, f"{part}.init_args", rest.split(".")[1], where, target)
        elif part == "trainer" and rest and cli is None:
            check_set(text, part, rest.split(".")[0], "Lightning's Trainer", Trainer, listed=False)
    check_trains(path, section.get("trainer"), [key for _, key, _ in overrides])
    return Project(path, config, classes["model"], classes["data"], cli, plain)
