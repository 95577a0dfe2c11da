"""``mnistperf tune``: find the fastest input pipeline for this machine by measuring.

``probes`` times the loader alone, the step alone and both together; ``search`` decides
what to try and when to stop; ``command`` is the command line, the tuned config and the table.
"""
