"""The diagnosis of any Lightning run: where an epoch's time goes, and whether every sample was trained on.

``from mnistperf.diagnosis import EpochTimer, SampleAudit``: two callbacks for any ``Trainer``. The
package knows nothing of the lab (its models, data, stages or commands). How to read what they
report: docs/diagnose.md.
"""

from mnistperf.diagnosis.callbacks.epoch_timer import EpochTimer
from mnistperf.diagnosis.callbacks.sample_audit import SampleAudit, SampleAuditError
from mnistperf.diagnosis.record.clock import EpochClock
from mnistperf.diagnosis.record.run import SUMMARY_FILE

__all__ = ["SUMMARY_FILE", "EpochClock", "EpochTimer", "SampleAudit", "SampleAuditError"]
