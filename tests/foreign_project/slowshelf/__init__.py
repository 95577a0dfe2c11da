"""A small Lightning project that is not the lab's: its own model, data and option names, for tune's tests."""
