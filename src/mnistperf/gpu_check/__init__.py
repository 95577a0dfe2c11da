"""The GPU check as one device call: its plan, its carry (pack), its parts within a budget (run) and its probes."""
