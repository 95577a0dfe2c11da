"""The stage configs and a user's YAML files: by name, a ``--config`` file read, the line for one that is not there."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from mnistperf.close_names import closest
from mnistperf.errors import ConfigError

# The stage configs of a checkout, for when fit runs from elsewhere than its root.
CHECKOUT_CONFIGS = Path(__file__).resolve().parents[3] / "configs"


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


def read_config(path: Path, command: str) -> dict[str, Any]:
    """A ``--config`` file as a mapping; one line naming the file and what is wrong where it cannot be read as one."""
    if path.is_dir():
        names = ", ".join(str(path / name) for name in yaml_files(path)) or "none"
        raise ConfigError(f"--config {path}: a folder, not a config file; give one of its YAML files ({names}).")
    try:
        config = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"--config {path}: cannot be read ({exc.strerror}); give a readable YAML file.") from exc
    except UnicodeDecodeError:
        raise ConfigError(f"--config {path}: not text, so no YAML config; give the config {command} reads.") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "not YAML"
        raise ConfigError(f"{path}: not a config {command} can read ({problem}{where}); fix the YAML there.") from exc
    if not isinstance(config, dict):
        held = "nothing" if config is None else type(config).__name__
        raise ConfigError(
            f"{path}: holds {held}, not the mapping of a LightningCLI config (trainer:, model:, data:); "
            "give the config your project's `fit --config` takes."
        )
    return config


def given_configs(args: Sequence[str]) -> list[Path]:
    """The files a command line's ``--config`` (or ``-c``) names that are there (one that is not is the parser's)."""
    named = [  # in the order given, as the parser reads them
        value if option in ("--config", "-c") else option.partition("=")[2]
        for option, value in zip(args, [*args[1:], ""], strict=True)
        if option in ("--config", "-c") or option.startswith(("--config=", "-c="))
    ]
    return [Path(name) for name in named if Path(name).exists()]


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


def config_names(folder: Path) -> list[str]:
    """The configs in a folder by name (no ``.yaml``), the ladder's ``v*`` first."""
    names = [path.stem for path in folder.glob("*.yaml")]
    return sorted(names, key=lambda name: (not name.startswith("v"), name))


def stage_names() -> list[str]:
    """The stages in ``configs/`` (of the working folder, else of the checkout), the ladder's ``v*`` first."""
    return config_names(Path("configs")) or config_names(CHECKOUT_CONFIGS)
