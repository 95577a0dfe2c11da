"""The bench: every stage in a fresh process, the reference rows (plain PyTorch, bare Lightning), and the report."""
