"""The loader's settings tune changes in a project that is not the lab's, found by name or named by the user.

A knob is one of the DataLoader's settings (``LOADER_SETTINGS``) and where it is applied: an argument of the project's
DataModule under the project's own name (``workers``), found as :mod:`mnistperf.diagnosis.measure.loader_options`
finds it for EpochTimer's advice, or the DataLoader itself where the DataModule exposes no such argument, rebuilt with
it in the trial's process as Lightning makes loaders for distributed samplers (``upstream.rebuilt_dataloader``). A
user may also name any argument with candidate values (``data.init_args.workers=0,2,4``): then those are tried.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml
from torch.utils.data import DataLoader

from mnistperf.close_names import did_you_mean
from mnistperf.diagnosis.measure import loader_options
from mnistperf.diagnosis.measure.loader_options import LOADER_SETTINGS, SPEED_SETTINGS, best_names, matches, own_names
from mnistperf.errors import ConfigError
from mnistperf.tune.policy import without_workers
from mnistperf.upstream import rebuilt_dataloader

ARG, REBUILD = "argument", "rebuilt loader"
LOADER = "loader"  # the key a rebuilt loader's settings go under: loader.num_workers


@dataclass
class Knob:
    """One setting tune may change: what it is, where it goes and the values to try (None: tune's own)."""

    setting: str | None  # the DataLoader setting it is, or None for an argument the user named whose meaning is theirs
    key: str  # where it is written: "data.init_args.workers" (an argument) or "loader.num_workers" (rebuilt)
    via: str  # ARG or REBUILD
    values: list[Any] | None = None  # the user's candidates; None lets the search choose
    current: Any = None  # the value the untouched run uses (for a rebuilt loader: read from it by the first trial)

    @property
    def name(self) -> str:
        """The argument's or the DataLoader setting's own name (the key's last part)."""
        return self.key.rsplit(".", 1)[-1]


@dataclass
class Knobs:
    """The knobs of one project, and how they were found."""

    knobs: list[Knob] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the finding said: ambiguous names, knobs left out

    def by_setting(self, setting: str) -> Knob | None:
        """The knob for a DataLoader setting, or None."""
        return next((k for k in self.knobs if k.setting == setting), None)

    def keys(self, via: str) -> list[str]:
        """The keys of the knobs applied one way (ARG or REBUILD)."""
        return [k.key for k in self.knobs if k.via == via]

    @property
    def rebuilt(self) -> bool:
        """Whether any knob is applied by rebuilding the DataLoader."""
        return bool(self.keys(REBUILD))


def project_knobs(
    currents: dict[str, Any], prefix: str, named: Sequence[tuple[str, list[Any]]], where: str, batch_size: bool
) -> Knobs:
    """The knobs the user ``named`` (key, values), else those found among the DataModule's arguments.

    ``currents``: its arguments, each with the value the untouched run gives it, written under ``prefix``
    (``data.init_args``; ``""`` for a Python call); ``where``: the DataModule as an error names it.
    """
    return Knobs(named_knobs(named, currents, prefix, where)) if named else found_knobs(currents, prefix, batch_size)


def found_knobs(currents: dict[str, Any], prefix: str, batch_size: bool) -> Knobs:
    """The knobs among a DataModule's arguments, by name; where none is a loader setting, the loader is rebuilt."""
    found, own = Knobs(), own_names(currents)
    for setting in (s for s in LOADER_SETTINGS if batch_size or s != "batch_size"):
        if setting in own:
            found.knobs.append(Knob(setting, join(prefix, own[setting]), ARG, current=currents[own[setting]]))
        elif len(best := best_names(currents, setting)) > 1:
            found.notes.append(
                f"{' and '.join(best)} could each be {setting}; neither is changed: name one with "
                f"{knob_option(prefix, join(prefix, best[0]), 'VALUES')}"
            )
    if all(k.setting == "batch_size" for k in found.knobs):  # no loader setting among its arguments: rebuild
        found.knobs += [Knob(s, join(LOADER, s), REBUILD) for s in SPEED_SETTINGS]
    if batch_size and found.by_setting("batch_size") is None:
        found.knobs.append(Knob("batch_size", join(LOADER, "batch_size"), REBUILD))
    return found


def rebuilt_with(knobs: Knobs, settings: dict[str, Any]) -> dict[str, Any] | None:
    """The DataLoader settings a trial's loader is rebuilt with, by setting (None where no loader is rebuilt).

    A setting whose value is not known yet (the untouched settings' first trial reads them) is left as it is.
    """
    rebuilt = {k.name: settings[k.key] for k in knobs.knobs if k.via == REBUILD and settings.get(k.key) is not None}
    return rebuilt if knobs.rebuilt else None


def dataloader_call(settings: dict[str, Any]) -> str:
    """The DataLoader arguments as code: ``DataLoader(..., num_workers=2, persistent_workers=True)``."""
    return "DataLoader(..., " + ", ".join(f"{name}={value!r}" for name, value in settings.items()) + ")"


def rebuild_train_loader(source: Any, settings: dict[str, Any]) -> None:
    """Make ``source.train_dataloader()`` return its loader made again with ``settings`` (none: as it was)."""
    own = source.train_dataloader
    where = f"{type(source).__qualname__}.train_dataloader"

    @functools.wraps(own)  # Lightning sees the project's own hook through __wrapped__
    def train_dataloader() -> DataLoader:
        loader = own()
        current = loader_options.loader_settings(loader)
        if current is None:
            raise ConfigError(
                f"{where} returns {type(loader).__name__}, not one DataLoader, so tune cannot make it again; give "
                "the DataModule arguments for the loader's settings and name them with --knob"
            )
        wanted = without_workers({**current, **settings})
        changed = {name: value for name, value in wanted.items() if name in settings or value != current[name]}
        try:
            return rebuilt_dataloader(loader, changed)
        except (TypeError, ValueError, RuntimeError) as exc:  # Lightning's MisconfigurationException among them
            reason = " ".join(str(exc).split())
            raise ConfigError(
                f"{where}'s {type(loader).__name__} cannot be made again with other settings ({reason}); give the "
                "DataModule arguments for them and name them with --knob"
            ) from exc

    source.train_dataloader = train_dataloader


def knob_option(prefix: str, key: str, values: str | None = None) -> str:
    """A knob as the user names it: ``--knob KEY=VALUES`` for a config (``prefix``), ``knobs={KEY: [VALUES]}`` else."""
    if prefix:
        return f"--knob {key}" + (f"={values}" if values else "")
    return f"knobs={{{key!r}: {f'[{values}]' if values else '...'}}}"


def join(prefix: str, name: str) -> str:
    """``prefix.name``, or ``name`` alone without a prefix."""
    return f"{prefix}.{name}" if prefix else name


def parse_value(text: str) -> Any:
    """A candidate value as YAML reads it: ``2`` an int, ``true`` a bool, ``null`` None, ``a`` a string."""
    return yaml.safe_load(text) if text.strip() else None


def parse_knob(text: str) -> tuple[str, list[Any]]:
    """``KEY=V1,V2,...`` as (KEY, [values]); one line naming the option and its form otherwise."""
    key, sep, values = text.partition("=")
    key = key.strip()
    if not sep or not key or not values.strip():
        raise ConfigError(
            f"--knob {text}: give the option and the values to try, e.g. --knob data.init_args.workers=0,2,4"
        )
    return key, [parse_value(v) for v in values.split(",")]


def named_knobs(
    given: Sequence[tuple[str, list[Any]]], currents: dict[str, Any], prefix: str, where: str
) -> list[Knob]:
    """The knobs the user named (``--knob KEY=VALUES``): where named, only these are tried, with these values.

    A key is an argument of the DataModule (``data.init_args.workers``; ``data.workers`` is taken for it) or a
    DataLoader setting (``num_workers`` or ``loader.num_workers``): the DataModule's own argument for it, else the
    loader rebuilt. A key that is neither is one line naming it, the DataModule's arguments and the fix.
    """
    knobs: list[Knob] = []
    short = prefix.rsplit(".", 1)[0] if prefix else ""
    for key, values in given:
        name = key.rsplit(".", 1)[-1]
        if name in currents and key in (join(prefix, name), join(short, name), name):
            setting = next((s for s in LOADER_SETTINGS if matches(name, s) is not None), None)
            knob = Knob(setting, join(prefix, name), ARG, values, currents[name])
        elif name in LOADER_SETTINGS and key in (name, join(LOADER, name)):
            own = own_names(currents).get(name)  # the DataModule's own argument for it, else the loader rebuilt
            where_to = (join(prefix, own), ARG) if own else (join(LOADER, name), REBUILD)
            knob = Knob(name, *where_to, values, currents.get(own or ""))
        else:
            options = [join(prefix, a) for a in currents]
            meant = did_you_mean(key, [*options, *LOADER_SETTINGS]) or "."
            raise ConfigError(
                f"{knob_option(prefix, key)}: {where} takes no such argument{meant} "
                f"Its arguments are {', '.join(options) or 'none'}; name one of them, or a DataLoader setting "
                f"({', '.join(LOADER_SETTINGS)}) to have the loader rebuilt with it."
            )
        if (wrong := loader_options.unlike(knob.setting, values)) is not None:  # said before any trial runs
            raise ConfigError(f"{knob_option(prefix, key, ','.join(map(str, values)))}: {wrong}")
        knobs = [k for k in knobs if k.key != knob.key] + [knob]
    return knobs
