"""``--set KEY=VALUE``: parsed, its key checked against the options a stage config has, applied to a config."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from pathlib import Path

import yaml
from lightning.pytorch import Trainer

from mnistperf.close_names import closest
from mnistperf.data.datamodule import MNISTDataModule
from mnistperf.errors import ConfigError
from mnistperf.model import ImageClassifier


def load_config(path: Path, settings: list[tuple[str, str]]) -> dict:
    """The config as a dict with the --set overrides applied (values parsed as YAML, as the CLI does)."""
    config = yaml.safe_load(path.read_text()) or {}
    for key, value in settings:
        set_key(config, key, yaml.safe_load(value))
    return config


def set_key(config: dict, key: str, value: object) -> None:
    """Set ``a.b.c`` in nested mappings, making the missing ones."""
    *parents, last = key.split(".")
    for part in parents:
        if not isinstance(config.get(part), dict):
            config[part] = {}
        config = config[part]
    config[last] = value


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
        options = [f"{part}.{p}" for part, init in known.items() for p in inspect.signature(init).parameters]
        meant = closest(key, [*options, "seed_everything"])
        raise ConfigError(
            f"{option} {key}: no stage config has this option{f' (did you mean {meant}?)' if meant else ''}; use "
            "data.NAME, model.NAME or trainer.NAME (`python -m mnistperf fit --help` lists them)."
        )


FIT_OPTION = re.compile(r"--((?:trainer|model|data)\.[\w.]+)[ =](\S+?)(?=[),;]|\.?(?:\s|$))")  # fit's --KEY VALUE


def as_settings(message: str) -> str:
    """A fit command's error, each fix it gives as ``--KEY VALUE`` in the ``--set KEY=VALUE`` form tune takes."""
    return FIT_OPTION.sub(r"--set \1=\2", message)
