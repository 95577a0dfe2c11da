"""A DataModule's own names for the DataLoader's settings among its arguments: what tune changes, advice names."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any

from torch.utils.data import DataLoader

# The DataLoader's settings, each with the other names a project's DataModule commonly gives it.
ALIASES: dict[str, tuple[str, ...]] = {
    "num_workers": ("workers", "n_workers", "loader_workers", "num_loader_workers", "dataloader_workers"),
    "persistent_workers": ("persistent", "keep_workers", "persist_workers"),
    "pin_memory": ("pin", "pinned", "pin_batches"),
    "prefetch_factor": ("prefetch", "prefetch_batches"),
    "batch_size": ("batch", "bs", "train_batch_size"),
}
LOADER_SETTINGS = tuple(ALIASES)
KINDS = {"persistent_workers": bool, "pin_memory": bool}  # what each takes; the others, whole numbers
# Those that change only the speed: the batch size changes the training too.
SPEED_SETTINGS = tuple(setting for setting in LOADER_SETTINGS if setting != "batch_size")


def loader_settings(loader: Any) -> dict[str, Any] | None:
    """A DataLoader's settings, as it holds them (None for anything but one DataLoader)."""
    return {name: getattr(loader, name, None) for name in LOADER_SETTINGS} if isinstance(loader, DataLoader) else None


def unlike(setting: str | None, values: Iterable[Any]) -> str | None:
    """Why ``values`` cannot be the DataLoader's ``setting`` (None: they can, or it is none of its settings)."""
    kind = KINDS.get(setting or "", int)
    wrong = [v for v in values if type(v) is not kind and not (v is None and setting == "prefetch_factor")]
    if setting not in LOADER_SETTINGS or not wrong:
        return None
    return f"{setting} takes {'true or false' if kind is bool else 'whole numbers'}, not {wrong[0]!r}"


def matches(name: str, setting: str) -> int | None:
    """How well an argument's name stands for a DataLoader setting: 0 its own name, 1 an alias, 2 a prefixed one."""
    if name == setting:
        return 0
    if name in ALIASES[setting]:
        return 1
    if name.endswith("_" + setting) or any(name == f"train_{alias}" for alias in ALIASES[setting]):
        return 2
    return None


def best_names(names: Iterable[str], setting: str) -> list[str]:
    """The arguments that stand best for a setting: none, one, or several equally (then which one is not known)."""
    ranked = sorted((rank, name) for name in names if (rank := matches(name, setting)) is not None)
    return [name for rank, name in ranked if rank == ranked[0][0]]


def own_names(names: Iterable[str]) -> dict[str, str]:
    """Each DataLoader setting that one of these arguments stands for best (not two), with that argument's name."""
    names = list(names)
    return {setting: best[0] for setting in LOADER_SETTINGS if len(best := best_names(names, setting)) == 1}


def arguments(target: Callable, given: dict[str, Any]) -> dict[str, Any]:
    """A class's (its ``__init__``'s) or a function's named arguments, each given, else its default, else None."""
    parameters = inspect.signature(target).parameters.values()
    kept = [p for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name != "self"]
    return {p.name: given.get(p.name, None if p.default is p.empty else p.default) for p in kept}
