"""On a test's PYTHONPATH: every process of the fit, each DDP rank's too, adds the test's figures to the registry."""

import added_figures

added_figures.add()
