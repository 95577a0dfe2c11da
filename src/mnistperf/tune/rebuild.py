"""A project's training DataLoader made again with other settings, where its DataModule takes no argument for them.

The loader the DataModule's (else the module's) ``train_dataloader`` returns is made again as Lightning makes
loaders for distributed samplers (:func:`mnistperf.upstream.rebuilt_dataloader`), with the candidate's settings.
"""

from __future__ import annotations

import functools
from typing import Any

from torch.utils.data import DataLoader

from mnistperf.diagnosis.measure.loader_options import LOADER_SETTINGS
from mnistperf.errors import ConfigError
from mnistperf.tune.policy import without_workers
from mnistperf.upstream import rebuilt_dataloader


def loader_settings(loader: Any) -> dict[str, Any] | None:
    """A DataLoader's settings that tune may change, as it holds them (None for anything but one DataLoader)."""
    if not isinstance(loader, DataLoader):
        return None
    return {name: getattr(loader, name, None) for name in LOADER_SETTINGS}


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
        current = loader_settings(loader)
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
