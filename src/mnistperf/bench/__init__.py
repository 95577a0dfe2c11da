"""The bench: every stage in a fresh process, a plain-PyTorch baseline, and the report."""
