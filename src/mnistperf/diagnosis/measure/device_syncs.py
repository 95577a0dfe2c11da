"""The device synchronizations a timed step's code forces, as torch's sync debug mode reports them (CUDA only)."""

from __future__ import annotations

import warnings
from typing import Any

import torch

SYNC_WARNING = "called a synchronizing CUDA operation"  # what torch says of each, its sync debug mode on "warn"


class DeviceSyncs:
    """Counts the synchronizations torch reports between :meth:`start` and :meth:`stop`; other warnings pass on."""

    def __init__(self) -> None:
        self._caught: list[warnings.WarningMessage] | None = None
        self._catching: Any = None
        self._mode = 0
        self._read = self._syncs = 0  # the warnings caught so far that count has read, and the syncs among them

    def start(self) -> None:
        """Have torch warn of each synchronization, and catch those warnings."""
        self._catching = warnings.catch_warnings(record=True)
        self._caught = self._catching.__enter__()
        self._read = self._syncs = 0
        warnings.filterwarnings("always", message=f".*{SYNC_WARNING}")
        self._mode = self.debug_mode()
        self.set_debug_mode(1)  # "warn"

    def count(self) -> int:
        """The synchronizations reported since :meth:`start` (0 where it is not started), each warning read once.

        Called as every action of a timed step begins and ends: only the warnings caught since the last call are read.
        """
        caught = self._caught or []
        self._syncs += sum(SYNC_WARNING in str(warning.message) for warning in caught[self._read :])
        self._read = len(caught)
        return self._syncs if self._caught is not None else 0

    def stop(self) -> None:
        """Torch's sync debug mode as it was; the other warnings caught meanwhile shown as they would have been."""
        if self._catching is None:
            return
        self.set_debug_mode(self._mode)
        caught, self._caught = self._caught or [], None
        self._catching.__exit__(None, None, None)
        self._catching = None
        for other in caught:
            if SYNC_WARNING not in str(other.message):
                warnings.warn_explicit(other.message, other.category, other.filename, other.lineno)

    def debug_mode(self) -> int:
        """Torch's sync debug mode now."""
        return torch.cuda.get_sync_debug_mode()

    def set_debug_mode(self, mode: int) -> None:
        """Set torch's sync debug mode (0: off, 1: warn)."""
        torch.cuda.set_sync_debug_mode(mode)


def syncs_for(device: torch.device) -> DeviceSyncs | None:
    """A counter of the device's synchronizations where torch reports them (CUDA); None elsewhere."""
    return DeviceSyncs() if device.type == "cuda" else None
