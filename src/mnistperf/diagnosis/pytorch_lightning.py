"""EpochTimer and SampleAudit for a Trainer of the ``pytorch_lightning`` package, which takes its own callbacks only.

``pytorch_lightning`` is Lightning's code under its older package name; libraries built on it (darts, pytorch-tabular
and others) make its Trainer, which refuses ``lightning.pytorch``'s callbacks ("Expected a parent"). These are the same
callbacks, callbacks of both packages. docs/diagnose.md, "Published libraries".
"""

import pytorch_lightning

from mnistperf.diagnosis.callbacks import epoch_timer, sample_audit
from mnistperf.diagnosis.callbacks.sample_audit import SampleAuditError


class EpochTimer(epoch_timer.EpochTimer, pytorch_lightning.Callback):  # type: ignore[misc]  # the same hooks, typed apart
    """:class:`mnistperf.diagnosis.EpochTimer`, for a ``pytorch_lightning`` Trainer."""


class SampleAudit(sample_audit.SampleAudit, pytorch_lightning.Callback):  # type: ignore[misc]
    """:class:`mnistperf.diagnosis.SampleAudit`, for a ``pytorch_lightning`` Trainer."""


__all__ = ["EpochTimer", "SampleAudit", "SampleAuditError"]
