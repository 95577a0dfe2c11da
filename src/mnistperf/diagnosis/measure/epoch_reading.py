"""What one process read of an epoch: each measured figure's own value (NaN: not measured), from one clock."""

from __future__ import annotations

import math
from types import SimpleNamespace


class EpochReading(SimpleNamespace):
    """What one process read of an epoch, the profiled window's steps left out (NaN: not measured).

    Its ``device`` type, training ``steps``, the profiled window's ``busy_share`` on that device, and each measured
    figure's value by its key, which the figure reads (:attr:`.Figure.read`; by default that attribute): the clock
    names them, the registry says what they are.
    """

    def busy(self, device: str) -> float:
        """The profiled window's busy share where it profiled ``device``, else NaN."""
        return self.busy_share if device == self.device else math.nan
