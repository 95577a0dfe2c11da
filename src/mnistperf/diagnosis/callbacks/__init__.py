"""The Lightning callbacks, EpochTimer and SampleAudit, over the measures and the record; their arguments checked."""
