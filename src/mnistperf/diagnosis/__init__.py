"""The diagnosis of any Lightning run: where an epoch's time goes, and whether every sample was trained on.

Two callbacks for any ``Trainer``, ``EpochTimer`` and ``SampleAudit``; how to read them: docs/diagnose.md.
"""

from mnistperf.diagnosis.callbacks.epoch_timer import EpochTimer
from mnistperf.diagnosis.callbacks.sample_audit import SampleAudit, SampleAuditError

__all__ = ["EpochTimer", "SampleAudit", "SampleAuditError"]
