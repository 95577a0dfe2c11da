"""EpochTimer and SampleAudit as callbacks of both packages, for a ``pytorch_lightning`` Trainer before 2.6.

That Trainer refuses ``lightning.pytorch``'s callbacks ("Expected a parent"): docs/diagnose.md, "Published libraries".
"""

import pytorch_lightning

from mnistperf.diagnosis.callbacks import epoch_timer, sample_audit
from mnistperf.diagnosis.callbacks.sample_audit import SampleAuditError


class EpochTimer(epoch_timer.EpochTimer, pytorch_lightning.Callback):  # type: ignore[misc]  # the same hooks, typed apart
    """:class:`mnistperf.diagnosis.EpochTimer`, for a ``pytorch_lightning`` Trainer."""


class SampleAudit(sample_audit.SampleAudit, pytorch_lightning.Callback):  # type: ignore[misc]
    """:class:`mnistperf.diagnosis.SampleAudit`, for a ``pytorch_lightning`` Trainer."""


__all__ = ["EpochTimer", "SampleAudit", "SampleAuditError"]
