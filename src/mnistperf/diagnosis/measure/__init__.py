"""What one process measures of an epoch: busy time, the wait for data, the step's phases and times, memory, FLOPs."""
